#!/usr/bin/env bash
# Builds the RAID assembly fuzzer (src/blk/raid/raid_assemble_fuzz.cc: members
# with hostile superblocks and bitmaps, then assemble and read) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time
# on a copy of the committed corpus (fuzz/corpus/raid_assemble/). Exits
# non-zero on a finding; the input is left in build-fuzz/artifacts-raid-assemble/.
#
#   scripts/fuzz-raid-assemble.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
run_fuzzer raid_assemble_fuzz raid_assemble raid-assemble "${1:-60}" \
  src/blk/raid/raid_assemble_fuzz.cc src/blk/raid/raid_array.cc src/blk/raid/raid_array_state.cc \
  src/blk/raid/raid_array_io.cc src/blk/raid/raid_array_resync.cc src/blk/raid/raid_superblock.cc \
  src/blk/raid/parity_codec.cc src/blk/dev/mem_device.cc src/blk/block_device.cc \
  src/common/crc32c.cc src/common/status.cc src/common/buffer.cc \
  $(pkg-config --cflags --libs libisal) -lspdlog -lfmt -lpthread
