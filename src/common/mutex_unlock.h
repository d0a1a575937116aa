// MutexUnlock: the other half of common/mutex.h, for the few functions that
// must let go of a mutex around a blocking call.
#pragma once

#include "common/mutex.h"

namespace kvtier {

// Releases a Mutex that the caller holds for its scope and takes it back at
// the scope's end, even when the scope is left by an exception: for a function
// that REQUIRES the mutex and must not hold it around a blocking call.
//
// Not annotated: clang 14 cannot follow a scope that releases a capability
// and takes it back, so to the analysis the mutex stays held in the scope.
// Touch nothing guarded inside one.
class MutexUnlock {
 public:
  explicit MutexUnlock(Mutex& mu) KVTIER_NO_THREAD_SAFETY_ANALYSIS : mu_(mu) { mu_.unlock(); }
  ~MutexUnlock() KVTIER_NO_THREAD_SAFETY_ANALYSIS { mu_.lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace kvtier
