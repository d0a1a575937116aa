#!/usr/bin/env bash
# Builds the NVMe/TCP receive-path fuzzer (src/nvmf/pdu_fuzz.cc) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time on
# a copy of the committed corpus (fuzz/corpus/nvmf_pdu/). Exits non-zero on a
# finding; the input is left in build-fuzz/artifacts-nvmf/.
#
#   scripts/fuzz-nvmf.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
out=build-fuzz
CXX="${CXX:-clang++}"
mkdir -p "$out/artifacts-nvmf"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src"
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
"$CXX" "${flags[@]}" src/nvmf/pdu_fuzz.cc src/nvmf/pdu.cc src/nvmf/queue_connection.cc \
  src/nvmf/target_state.cc src/nvmf/admin_pages.cc \
  src/blk/mem_device.cc src/blk/block_device.cc src/common/crc32c.cc src/common/status.cc \
  src/common/buffer.cc \
  -DSPDLOG_FMT_EXTERNAL -DSPDLOG_COMPILED_LIB -lspdlog -lfmt -lpthread -o "$out/nvmf_pdu_fuzz"
work="$out/corpus-nvmf"
mkdir -p "$work"
cp -n fuzz/corpus/nvmf_pdu/* "$work/" 2>/dev/null || true
"$out/nvmf_pdu_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/artifacts-nvmf/" "$work" fuzz/corpus/nvmf_pdu 2>&1 | tail -15
