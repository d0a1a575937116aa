#include "common/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace kvtier {
namespace {

// Blocking tasks overlap up to the pool's size: four tasks that each wait for
// all four to have started can only finish if they run at once.
TEST(TaskPool, RunsAsManyBlockingTasksAtOnceAsItHasThreads) {
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::atomic<int> finished{0};
  {
    TaskPool pool(4);
    for (int i = 0; i < 4; ++i) {
      pool.post([&] {
        std::unique_lock lk(mu);
        ++started;
        cv.notify_all();
        const bool all = cv.wait_for(lk, std::chrono::seconds(5), [&] { return started == 4; });
        if (all) ++finished;
      });
    }
  }
  EXPECT_EQ(finished.load(), 4);
}

TEST(TaskPool, DestructorRunsEveryPostedTask) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(2);
    for (int i = 0; i < 1000; ++i) pool.post([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 1000);
}

}  // namespace
}  // namespace kvtier
