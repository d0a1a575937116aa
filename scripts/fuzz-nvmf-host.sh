#!/usr/bin/env bash
# Builds the NVMe/TCP host fuzzer (src/nvmf/host_fuzz.cc: what a broken or
# malicious target sends to NvmeTcpDevice) with clang's libFuzzer, ASan and
# UBSan into build-fuzz/, and runs it for a bounded time on a copy of the
# committed corpus (fuzz/corpus/nvmf_host/). Exits non-zero on a finding;
# the input is left in build-fuzz/artifacts-nvmf-host/.
#
#   scripts/fuzz-nvmf-host.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
# One input runs the real host's sockets and threads against a scripted
# target: on a loaded machine (ctest runs fuzzers beside other tests) an
# input that takes 11 ms alone took 4.5 s under four CPU hogs. A real hang
# (a deadlock) still shows at 60 s.
export FUZZ_INPUT_TIMEOUT=${FUZZ_INPUT_TIMEOUT:-60}
run_fuzzer nvmf_host_fuzz nvmf_host nvmf-host "${1:-60}" \
  src/nvmf/host_fuzz.cc src/nvmf/host_device.cc src/nvmf/host_queue.cc src/nvmf/pdu.cc \
  src/nvmf/socket_stream.cc src/nvmf/target_state.cc src/common/task_pool.cc src/blk/block_device.cc \
  src/common/crc32c.cc src/common/status.cc src/common/buffer.cc \
  src/nvmf/auth_host.cc src/nvmf/dhchap.cc src/nvmf/dhchap_messages.cc src/nvmf/dhchap_dh.cc \
  -DSPDLOG_FMT_EXTERNAL -DSPDLOG_COMPILED_LIB -lspdlog -lfmt -lcrypto -lpthread
