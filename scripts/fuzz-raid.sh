#!/usr/bin/env bash
# Builds the RAID member superblock / write-intent bitmap fuzzer
# (src/blk/raid_superblock_fuzz.cc) with clang's libFuzzer, ASan and UBSan into
# build-fuzz/, and runs it for a bounded time on a copy of the committed
# corpus (fuzz/corpus/raid_superblock/). Exits non-zero on a finding; the
# input is left in build-fuzz/artifacts-raid/.
#
#   scripts/fuzz-raid.sh [SECONDS]   (default 60)
#
# Needs clang++ with libFuzzer (Debian: clang-14 and libclang-rt-14-dev).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
out=build-fuzz
CXX="${CXX:-clang++}"
mkdir -p "$out/artifacts-raid"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src"
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
"$CXX" "${flags[@]}" src/blk/raid_superblock_fuzz.cc src/blk/raid_superblock.cc \
  src/common/crc32c.cc src/common/status.cc src/common/buffer.cc \
  -lfmt -lpthread -o "$out/raid_superblock_fuzz"
work="$out/corpus-raid"
mkdir -p "$work"
cp -n fuzz/corpus/raid_superblock/* "$work/" 2>/dev/null || true
"$out/raid_superblock_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts-raid/" "$work" fuzz/corpus/raid_superblock 2>&1 | tail -15
