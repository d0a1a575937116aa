#include "serve/replica_worker.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include <chrono>
#include <set>
#include <thread>

namespace kvtier::serve {
namespace {

TEST(ReplicaWorker, RunsJobsInOrderOnItsOwnThread) {
  ReplicaWorker w;
  std::vector<int> order;
  std::set<std::thread::id> threads;
  std::vector<std::future<int>> results;
  for (int i = 0; i < 20; ++i) {
    results.push_back(w.submit([i, &order, &threads] {
      order.push_back(i);
      threads.insert(std::this_thread::get_id());
      return i * i;
    }));
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(results[i].get(), i * i);
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(*threads.begin(), w.thread_id());
  EXPECT_NE(w.thread_id(), std::this_thread::get_id());
  EXPECT_EQ(w.busy().size(), 20u);
}

TEST(ReplicaWorker, OverlapCountsOnlyTimeWithTwoJobsOpen) {
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  const uint64_t s = 1000000000;  // one second in ns
  V a = {{0, 2 * s}, {5 * s, 6 * s}};
  V b = {{1 * s, 3 * s}, {6 * s, 7 * s}};  // back to back with a's second: no overlap
  V c = {{10 * s, 11 * s}};
  EXPECT_DOUBLE_EQ(overlap_seconds({&a, &b, &c}), 1.0);
  V d = {{0, 4 * s}};
  EXPECT_DOUBLE_EQ(overlap_seconds({&a, &b, &d}), 3.0);  // [0,3) has two or more open
  EXPECT_DOUBLE_EQ(overlap_seconds({&a}), 0.0);
}

// Each job waits until the other has started too (bounded), so the two run
// at the same time on any machine and their recorded intervals overlap.
TEST(ReplicaWorker, TwoWorkersReallyRunAtTheSameTime) {
  ReplicaWorker w1, w2;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  auto job = [&] {
    std::unique_lock lk(mu);
    ++started;
    cv.notify_all();
    return cv.wait_for(lk, std::chrono::seconds(30), [&] { return started == 2; });
  };
  auto f1 = w1.submit(job);
  auto f2 = w2.submit(job);
  EXPECT_TRUE(f1.get()) << "the other worker's job never started";
  EXPECT_TRUE(f2.get());
  EXPECT_GT(overlap_seconds({&w1.busy(), &w2.busy()}), 0.0);
}

}  // namespace
}  // namespace kvtier::serve
