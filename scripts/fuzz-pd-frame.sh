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
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
run_fuzzer pd_frame_fuzz pd_frame pd "${1:-60}" \
  src/serve/pd_frame_fuzz.cc src/serve/pd_frame.cc src/engine/kv_content.cc \
  src/kv/block_key.cc src/common/crc32c.cc src/common/status.cc src/common/buffer.cc \
  -lxxhash -lcrypto
