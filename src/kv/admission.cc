#include "kv/admission.h"

#include <algorithm>

namespace kvtier::kv {

DiskAdmission::DiskAdmission(uint64_t bytes_per_second, uint64_t burst_bytes)
    : rate_(bytes_per_second),
      burst_(static_cast<double>(std::max(burst_bytes, bytes_per_second / 10))),
      tokens_(burst_) {}

bool DiskAdmission::admit(uint64_t bytes, uint64_t now_ns) {
  if (rate_ == 0) return true;
  MutexLock lock(mu_);
  if (last_ns_ != 0 && now_ns > last_ns_) {
    tokens_ = std::min(burst_, tokens_ + static_cast<double>(now_ns - last_ns_) * 1e-9 *
                                             static_cast<double>(rate_));
  }
  last_ns_ = now_ns;
  if (tokens_ < static_cast<double>(bytes)) return false;
  tokens_ -= static_cast<double>(bytes);
  return true;
}

}  // namespace kvtier::kv
