#include "serve/replica_worker.h"

#include <algorithm>

#include "common/clock.h"

namespace kvtier::serve {

ReplicaWorker::ReplicaWorker() : thread_([this] { loop(); }) {}

ReplicaWorker::~ReplicaWorker() {
  {
    MutexLock lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void ReplicaWorker::post(std::function<void()> job) {
  {
    MutexLock lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ReplicaWorker::loop() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lk(mu_);
      lk.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

uint64_t ReplicaWorker::clock_ns() { return now_ns(); }

double overlap_seconds(
    const std::vector<const std::vector<std::pair<uint64_t, uint64_t>>*>& lists) {
  // Sweep the starts (+1) and ends (-1) in time order; ends first at a tie,
  // so back-to-back jobs of two replicas do not count as overlapping.
  std::vector<std::pair<uint64_t, int>> edges;
  for (const auto* l : lists) {
    for (const auto& [s, e] : *l) {
      edges.emplace_back(s, +1);
      edges.emplace_back(e, -1);
    }
  }
  std::sort(edges.begin(), edges.end());
  int open = 0;
  uint64_t since = 0, total = 0;
  for (const auto& [t, d] : edges) {
    if (open >= 2) total += t - since;
    open += d;
    since = t;
  }
  return static_cast<double>(total) / 1e9;
}

}  // namespace kvtier::serve
