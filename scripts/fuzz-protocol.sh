#!/usr/bin/env bash
# Builds the store wire protocol fuzzer (src/net/wire/protocol_fuzz.cc) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time on
# a copy of the committed corpus (fuzz/corpus/store_protocol/). Exits non-zero
# on a finding; the input is left in build-fuzz/artifacts-protocol/.
#
#   scripts/fuzz-protocol.sh [SECONDS]   (default 60)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/fuzz-lib.sh
source scripts/fuzz-lib.sh
# The codec depends on nothing but these: the fuzzer builds in seconds.
run_fuzzer store_protocol_fuzz store_protocol protocol "${1:-60}" \
  src/net/wire/protocol_fuzz.cc src/net/wire/protocol.cc src/net/wire/message_codec.cc \
  src/net/wire/frame_decoder.cc src/common/crc32c.cc src/common/status.cc \
  src/common/buffer.cc
