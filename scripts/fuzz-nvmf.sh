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
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
run_fuzzer nvmf_pdu_fuzz nvmf_pdu nvmf "${1:-60}" \
  src/nvmf/pdu_fuzz.cc src/nvmf/pdu.cc src/nvmf/queue_connection.cc src/nvmf/queue_send.cc \
  src/nvmf/target_state.cc src/common/task_pool.cc \
  src/nvmf/admin_pages.cc src/blk/dev/mem_device.cc src/blk/block_device.cc src/common/crc32c.cc \
  src/common/status.cc src/common/buffer.cc \
  src/nvmf/auth_target.cc src/nvmf/dhchap.cc src/nvmf/dhchap_messages.cc src/nvmf/dhchap_dh.cc \
  -DSPDLOG_FMT_EXTERNAL -DSPDLOG_COMPILED_LIB -lspdlog -lfmt -lcrypto -lpthread
