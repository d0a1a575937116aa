#include "common/task_pool.h"

#include <algorithm>

namespace kvtier {

TaskPool::TaskPool(size_t threads) {
  threads_.reserve(std::max<size_t>(threads, 1));
  for (size_t i = 0; i < std::max<size_t>(threads, 1); ++i)
    threads_.emplace_back([this] { work(); });
}

TaskPool::~TaskPool() {
  {
    MutexLock lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void TaskPool::post(std::function<void()> task) {
  {
    MutexLock lk(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void TaskPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lk(mu_);
      lk.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything posted has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvtier
