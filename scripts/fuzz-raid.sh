#!/usr/bin/env bash
# Builds the RAID member superblock / write-intent bitmap fuzzer
# (src/blk/raid/raid_superblock_fuzz.cc) with clang's libFuzzer, ASan and UBSan into
# build-fuzz/, and runs it for a bounded time on a copy of the committed
# corpus (fuzz/corpus/raid_superblock/). Exits non-zero on a finding; the
# input is left in build-fuzz/artifacts-raid/.
#
#   scripts/fuzz-raid.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
run_fuzzer raid_superblock_fuzz raid_superblock raid "${1:-60}" \
  src/blk/raid/raid_superblock_fuzz.cc src/blk/raid/raid_superblock.cc src/common/crc32c.cc \
  src/common/status.cc src/common/buffer.cc -lfmt -lpthread
