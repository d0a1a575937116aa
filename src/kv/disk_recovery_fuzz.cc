// libFuzzer target: the disk tier's recovery path against hostile volume
// contents. The input format and what counts as a finding are described in
// kv/testing/disk_recovery_harness.h. Build and run: scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "kv/testing/disk_recovery_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvtier::kv::fuzzing::disk_recovery_fuzz_one(data, size);
}
