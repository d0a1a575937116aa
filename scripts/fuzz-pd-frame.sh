#!/usr/bin/env bash
# Builds the PD transfer frame fuzzer (src/serve/pd_frame_fuzz.cc) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time on
# a copy of the committed corpus (fuzz/corpus/pd_frame/). Exits non-zero on a
# finding; the input is left in build-fuzz/artifacts-pd/.
#
#   scripts/fuzz-pd-frame.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
out=build-fuzz
CXX="${CXX:-clang++}"
mkdir -p "$out/artifacts-pd"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src"
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
"$CXX" "${flags[@]}" src/serve/pd_frame_fuzz.cc src/serve/pd_frame.cc src/engine/kv_content.cc \
  src/kv/block_key.cc src/common/crc32c.cc src/common/status.cc src/common/buffer.cc \
  -lxxhash -lcrypto -o "$out/pd_frame_fuzz"
work="$out/corpus-pd"
mkdir -p "$work"
cp -n fuzz/corpus/pd_frame/* "$work/" 2>/dev/null || true
"$out/pd_frame_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts-pd/" "$work" fuzz/corpus/pd_frame 2>&1 | tail -15
