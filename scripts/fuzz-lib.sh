# Sourced by the scripts/fuzz-*.sh scripts (after `set -euo pipefail` and a
# cd to the repository root in "$root"): builds one libFuzzer target with
# ASan and UBSan into build-fuzz/ and runs it for a bounded time on a working
# copy of its committed corpus. Exits non-zero on a finding; the input is
# left in build-fuzz/artifacts-TAG/. Needs clang++ with libFuzzer (Debian:
# clang-14 and libclang-rt-14-dev).
#
#   run_fuzzer BINARY CORPUS TAG SECONDS SOURCES_AND_LINK_ARGS...
#     BINARY  name of the fuzzer binary under build-fuzz/
#     CORPUS  directory under fuzz/corpus/
#     TAG     suffix of build-fuzz/corpus-TAG and build-fuzz/artifacts-TAG
#   FUZZ_INPUT_TIMEOUT (seconds, default 10): one input running longer is a
#   finding (a hang).
run_fuzzer() {
  local binary=$1 corpus=$2 tag=$3 seconds=$4
  shift 4
  local out=build-fuzz
  local work="$out/corpus-$tag"
  mkdir -p "$out/artifacts-$tag" "$work"
  "${CXX:-clang++}" -std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src" -I "$root/include" \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all "$@" -o "$out/$binary"
  cp -n "fuzz/corpus/$corpus"/* "$work/" 2>/dev/null || true
  "$out/$binary" -max_total_time="$seconds" -timeout="${FUZZ_INPUT_TIMEOUT:-10}" -rss_limit_mb=2048 \
    -artifact_prefix="$out/artifacts-$tag/" "$work" "fuzz/corpus/$corpus" 2>&1 | tail -15
}
