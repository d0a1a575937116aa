#!/usr/bin/env bash
# Builds the disk recovery fuzzer (src/kv/disk_recovery_fuzz.cc) with clang's
# libFuzzer, ASan and UBSan into build-fuzz/, and runs it for a bounded time on
# a copy of the committed corpus (fuzz/corpus/disk_recovery/). Exits non-zero
# when the fuzzer finds a crash, a sanitizer report, a harness finding (see
# src/kv/testing/disk_recovery_harness.h) or a hang; the input is left in
# build-fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS]     build, then fuzz for SECONDS (default 60)
#   scripts/fuzz.sh --build       build only
#   scripts/fuzz.sh --merge       minimise build-fuzz/corpus (the working copy
#                                 grown by earlier runs) plus the committed
#                                 corpus into fuzz/corpus/disk_recovery/
#   scripts/fuzz.sh --run FILE..  replay inputs (e.g. a crash artifact)
#
# Needs clang++ with libFuzzer (Debian/Ubuntu: clang-14 and libclang-rt-14-dev)
# and the project's libraries (liburing, libxxhash, OpenSSL, fmt, spdlog).
# Environment: CXX (default clang++), JOBS (parallel compiles, default 2),
# FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out=build-fuzz
corpus=fuzz/corpus/disk_recovery
bin="$out/disk_recovery_fuzz"
CXX="${CXX:-clang++}"
JOBS="${JOBS:-2}"

mode=fuzz
seconds=60
case "${1:-}" in
  --build) mode=build ;;
  --merge) mode=merge ;;
  --run) mode=run; shift ;;
  -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
  "") ;;
  *) seconds="$1" ;;
esac

if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     "$CXX" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "fuzz.sh: $CXX cannot link -fsanitize=fuzzer (install clang and libclang-rt-14-dev)" >&2
  exit 2
fi

mkdir -p "$out/obj"
common_flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -I "$root/src" -I "$root/include"
              -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL
              -fsanitize=address,undefined -fno-sanitize-recover=all)

# The library sources, as kvtier_module() picks them: src/<module>/**/*.cc
# minus tests, fuzzers and mains, and minus common's HTTP endpoint: the store
# never uses it, and clang 14 cannot build its Asio coroutines with these
# sanitizers ("Cannot represent a difference across sections").
mapfile -t srcs < <(find src/common src/blk src/kv -name '*.cc' | sort |
                    grep -Ev '(_test|_fuzz|_main)\.cc$' | grep -v 'common/http_endpoint\.cc$')

# A small ninja file gives incremental builds with header dependencies.
{
  echo "cxx = $CXX"
  echo "cflags = ${common_flags[*]}"
  echo "rule cc"
  echo "  command = \$cxx \$cflags -fsanitize=fuzzer-no-link -MMD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "rule link"
  echo "  command = \$cxx \$cflags -fsanitize=fuzzer \$in -o \$out -luring -lxxhash -lisal -lcrypto -lfmt -lspdlog -pthread"
  objs=()
  for s in "${srcs[@]}" src/kv/disk_recovery_fuzz.cc; do
    o="obj/${s//\//_}.o"
    objs+=("$o")
    echo "build $o: cc $root/$s"
  done
  echo "build disk_recovery_fuzz: link ${objs[*]}"
} > "$out/build.ninja"
if command -v ninja >/dev/null; then
  ninja -C "$out" -j "$JOBS"
else
  echo "fuzz.sh: ninja not found" >&2
  exit 2
fi
[[ "$mode" == build ]] && exit 0

mkdir -p "$out/artifacts"
flags=(-timeout=30 -rss_limit_mb=4096 -artifact_prefix="$out/artifacts/" ${FUZZ_ARGS:-})

if [[ "$mode" == run ]]; then
  exec "$bin" "${flags[@]}" "$@"
fi

if [[ "$mode" == merge ]]; then
  # Keep the hand-written seeds (named files); add the fewest other inputs
  # (named by their SHA-1) that cover every edge the whole lot covers.
  mkdir -p "$out/corpus"
  rm -rf "$out/merged" "$out/all"
  mkdir -p "$out/merged" "$out/all"
  for f in "$corpus"/*; do
    if [[ "$(basename "$f")" =~ ^[0-9a-f]{40}$ ]]; then cp "$f" "$out/all/"; else cp "$f" "$out/merged/"; fi
  done
  cp "$out/corpus"/* "$out/all/" 2>/dev/null || true
  "$bin" "${flags[@]}" -set_cover_merge=1 -use_counters=0 "$out/merged" "$out/all"
  rm -f "$corpus"/*
  cp "$out/merged"/* "$corpus"/
  echo "fuzz.sh: $(ls "$corpus" | wc -l) inputs, $(du -sb "$corpus" | cut -f1) bytes in $corpus"
  exit 0
fi

# Fuzz on a working copy; the committed corpus is never written.
mkdir -p "$out/corpus"
cp -n "$corpus"/* "$out/corpus"/ 2>/dev/null || true
set +e
"$bin" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 "$out/corpus"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz.sh: the fuzzer failed (exit $rc); inputs in $out/artifacts/:" >&2
  ls -l "$out/artifacts" >&2
fi
exit $rc
