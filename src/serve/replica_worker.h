// ReplicaWorker: one prefill replica's own thread in the study runner (bench/study_runner.cc). The
// runner's event loop (the gateway and the virtual clock) posts the
// replica's store calls and prefill-to-decode sends to it as jobs; the jobs
// of one replica run in order, those of different replicas at the same time,
// so the store and the loopback network see real concurrent traffic from
// several replicas, as in a deployment.
//
// Each job's wall-clock interval is recorded, so a run can say how long two
// or more replicas were really working at once (overlap_seconds).
//
// Thread-safety: submit() from one thread (the event loop); busy() only
// while no job is queued or running (every future waited for).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/task_pool.h"

namespace kvtier::serve {

class ReplicaWorker {
 public:
  ReplicaWorker() = default;
  // ~ReplicaWorker runs what is queued, then ends the thread (TaskPool's).
  ReplicaWorker(const ReplicaWorker&) = delete;
  ReplicaWorker& operator=(const ReplicaWorker&) = delete;

  // Queues `job` behind the replica's earlier jobs; its result comes back
  // through the future.
  // The job's interval is recorded before its result is handed over, so
  // whoever waited for every future may read busy().
  template <typename F>
  std::future<std::invoke_result_t<F>> submit(F job) {
    using R = std::invoke_result_t<F>;
    auto promise = std::make_shared<std::promise<R>>();
    auto result = promise->get_future();
    thread_.post([this, promise, job = std::move(job)]() mutable {
      const uint64_t t0 = clock_ns();
      try {
        if constexpr (std::is_void_v<R>) {
          job();
          record(t0);
          promise->set_value();
        } else {
          R r = job();
          record(t0);
          promise->set_value(std::move(r));
        }
      } catch (...) {
        record(t0);
        promise->set_exception(std::current_exception());
      }
    });
    return result;
  }

  // [start, end) of every job run so far, steady-clock nanoseconds.
  const std::vector<std::pair<uint64_t, uint64_t>>& busy() const { return busy_; }
  std::thread::id thread_id() const { return thread_.thread_id(0); }

 private:
  static uint64_t clock_ns();
  void record(uint64_t start_ns) { busy_.emplace_back(start_ns, clock_ns()); }

  std::vector<std::pair<uint64_t, uint64_t>> busy_;  // written by the worker thread
  // One thread, so the replica's jobs run in order. Last: it is joined
  // before busy_ goes.
  TaskPool thread_{1};
};

// Seconds during which at least two of the interval lists had an interval
// open (each list's own intervals do not overlap).
double overlap_seconds(const std::vector<const std::vector<std::pair<uint64_t, uint64_t>>*>& lists);

}  // namespace kvtier::serve
