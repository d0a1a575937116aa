#!/usr/bin/env bash
# Builds the DH-HMAC-CHAP fuzzer (src/nvmf/dhchap_fuzz.cc: messages a hostile
# host or controller sends, to the decoder and to both sides' state machines)
# with clang's libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a
# bounded time on a copy of the committed corpus (fuzz/corpus/dhchap/).
# Exits non-zero on a finding; the input is left in build-fuzz/artifacts-dhchap/.
#
#   scripts/fuzz-dhchap.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
run_fuzzer dhchap_fuzz dhchap dhchap "${1:-60}" \
  src/nvmf/dhchap_fuzz.cc src/nvmf/dhchap.cc src/nvmf/dhchap_messages.cc src/nvmf/dhchap_dh.cc \
  src/nvmf/auth_target.cc src/nvmf/auth_host.cc src/common/status.cc \
  -DSPDLOG_FMT_EXTERNAL -DSPDLOG_COMPILED_LIB -lspdlog -lfmt -lcrypto -lpthread
