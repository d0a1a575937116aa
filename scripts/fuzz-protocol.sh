#!/usr/bin/env bash
# Builds the store wire protocol fuzzer (src/net/protocol_fuzz.cc) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time on
# a copy of the committed corpus (fuzz/corpus/store_protocol/). Exits non-zero
# on a finding; the input is left in build-fuzz/artifacts-protocol/.
#
#   scripts/fuzz-protocol.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
out=build-fuzz
CXX="${CXX:-clang++}"
mkdir -p "$out/artifacts-protocol"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src"
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
# The codec depends on nothing but these: the fuzzer builds in seconds.
"$CXX" "${flags[@]}" src/net/protocol_fuzz.cc src/net/protocol.cc src/common/crc32c.cc \
  src/common/status.cc src/common/buffer.cc -o "$out/store_protocol_fuzz"
work="$out/corpus-protocol"
mkdir -p "$work"
cp -n fuzz/corpus/store_protocol/* "$work/" 2>/dev/null || true
"$out/store_protocol_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts-protocol/" "$work" fuzz/corpus/store_protocol 2>&1 | tail -15
