// DiskAdmission: decides whether a block may be written to the disk tier.
// Flash has a write budget (endurance); under a put storm it is better to drop
// a cold block than to wear the device out. The policy is a token bucket over
// bytes per second with a burst allowance, refilled lazily on each call (no
// thread, no sleep). A budget of 0 admits everything.
//
// Thread-safety: admit() may be called from any thread.
#pragma once

#include <cstdint>

#include "common/mutex.h"

namespace kvtier::kv {

class DiskAdmission {
 public:
  DiskAdmission(uint64_t bytes_per_second, uint64_t burst_bytes);
  // True if `bytes` may be written at time `now_ns`; consumes budget if so.
  bool admit(uint64_t bytes, uint64_t now_ns);
  bool unlimited() const { return rate_ == 0; }

 private:
  const uint64_t rate_;  // bytes per second; 0 = unlimited
  const double burst_;   // bucket size in bytes
  Mutex mu_;
  double tokens_ KVTIER_GUARDED_BY(mu_);
  uint64_t last_ns_ KVTIER_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::kv
