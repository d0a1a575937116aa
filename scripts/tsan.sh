#!/usr/bin/env bash
# ThreadSanitizer: builds the kv, net, serve and bench test binaries with clang and
# -fsanitize=thread into build-tsan/ and runs them. Any data race or lock
# misuse TSan reports fails the run (halt_on_error). Asio does not detect
# clang 14's C++20 coroutines by itself: they are switched on explicitly.
#
#   scripts/tsan.sh          full form: every test of the four binaries
#   scripts/tsan.sh --short  CI's form: the concurrent tests only (store,
#                            server, clients, channels, replicas)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
short=0
[[ ${1:-} == --short ]] && short=1
out=${TSAN_BUILD_DIR:-build-tsan}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1 -DASIO_HAS_CO_AWAIT=1 -DASIO_HAS_STD_COROUTINE=1" -DCMAKE_C_FLAGS="-fsanitize=thread -O1" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  >/dev/null
# The short form needs the kv, net and serve tests; the full form adds bench.
targets=(kvtier_kv_tests kvtier_net_tests kvtier_serve_tests)
((short)) || targets+=(kvtier_bench_tests)
echo "tsan: building ${targets[*]} into $out"
if ! ninja -C "$out" -j"${JOBS:-2}" "${targets[@]}" >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
run() {  # run LAYER FILTER
  local layer=$1 filter=$2
  echo "tsan: kvtier_${layer}_tests --gtest_filter=$filter"
  "$out/src/$layer/kvtier_${layer}_tests" --gtest_filter="$filter" --gtest_brief=1
}
if ((short)); then
  run kv 'Store.ConcurrentReadsDuringEvictionAlwaysGetRightBytes:Store.RacingPutsOfTheSameKeysNeverLoseOrMixBlocks:Store.RamTierLeaseBlocksVictimClaim:Store.DiskHitIsPromotedToRam'
  run net 'StoreServer.PipelinedConcurrentClients:StoreServer.SlowReader*:ShmChannelServer.*:DirectChannel.*:Tenants.Cross*:HostileClients.ClientThatStopsReading*:HostileClients.Idle*'
  run serve 'ReplicaWorker*'
else
  run kv '*'
  run net '*'
  run serve '*'
  run bench '*'
fi
echo "tsan: no data race reported"
