// Mutex and MutexLock: std::mutex and std::unique_lock with clang's
// thread-safety annotations (common/thread_annotations.h), so that members
// marked KVTIER_GUARDED_BY(mu_) are checked at compile time.
//
//   Mutex mu_;
//   std::condition_variable cv_;
//   std::deque<Task> tasks_ KVTIER_GUARDED_BY(mu_);
//
//   MutexLock lock(mu_);
//   lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return !tasks_.empty(); });
//
// A wait predicate runs with the lock held, but the compiler checks a lambda
// on its own: say so with KVTIER_REQUIRES on the lambda, as above.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace kvtier {

class KVTIER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() KVTIER_ACQUIRE() { mu_.lock(); }
  void unlock() KVTIER_RELEASE() { mu_.unlock(); }
  bool try_lock() KVTIER_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Waits on `cv` with this mutex held by the caller (through a MutexLock
  // further up, or lock()), released while waiting and held again on return.
  // For a function that REQUIRES the mutex and so has no lock object of its
  // own.
  template <typename Rep, typename Period>
  std::cv_status wait_for(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout)
      KVTIER_REQUIRES(this) {
    std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
    const std::cv_status st = cv.wait_for(held, timeout);
    held.release();  // still held: the caller's to release
    return st;
  }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (or until unlock()), and waits on a
// std::condition_variable with it.
class KVTIER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVTIER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() KVTIER_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Early release and re-acquire within the scope.
  void unlock() KVTIER_RELEASE() { lock_.unlock(); }
  void lock() KVTIER_ACQUIRE() { lock_.lock(); }

  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Predicate>
  void wait(std::condition_variable& cv, Predicate ready) {
    cv.wait(lock_, std::move(ready));
  }
  template <typename Rep, typename Period, typename Predicate>
  bool wait_for(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout,
                Predicate ready) {
    return cv.wait_for(lock_, timeout, std::move(ready));
  }
  template <typename Rep, typename Period>
  std::cv_status wait_for(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout) {
    return cv.wait_for(lock_, timeout);
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool wait_until(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline,
                  Predicate ready) {
    return cv.wait_until(lock_, deadline, std::move(ready));
  }
  template <typename Clock, typename Duration>
  std::cv_status wait_until(std::condition_variable& cv,
                            std::chrono::time_point<Clock, Duration> deadline) {
    return cv.wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kvtier
