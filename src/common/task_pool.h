// TaskPool: a fixed set of threads that run posted tasks in order of posting.
//
// For turning a blocking operation into one with a completion callback: the
// caller posts the blocking call and returns; as many calls run at once as
// the pool has threads, which is how a device whose commands block their
// thread (nvmf::NvmeTcpDevice) keeps a queue depth for a single submitter.
//
// Thread-safety: post() from any thread. The destructor runs every task
// already posted, then joins; posting after destruction began is a bug.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvtier {

class TaskPool {
 public:
  explicit TaskPool(size_t threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void post(std::function<void()> task);
  size_t threads() const { return threads_.size(); }
  std::thread::id thread_id(size_t i) const { return threads_.at(i).get_id(); }

 private:
  void work();

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ KVTIER_GUARDED_BY(mu_);
  bool stopping_ KVTIER_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier
