#!/usr/bin/env bash
# kvtier host -> kvtier target restart under load: `kvtier nvmf write` streams
# 40 MiB (from a slow producer) to a file-backed namespace while the
# `kvtier nvmf serve` process is SIGKILLed and started again on the same
# port. The host must wait for the reconnect (fast_io_fail_tmo off) and finish
# with exit 0 within a bound, and `kvtier nvmf read` must return every byte.
#   target_restart_test.sh KVTIER_BINARY
set -euo pipefail
kvtier=$1
work=$(mktemp -d)
serve_pid="" writer_pid=""
cleanup() {
  for p in $writer_pid $serve_pid; do
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p"; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
nqn=nqn.2024-01.io.kvtier:restart-test
host=nqn.2024-01.io.kvtier:restart-host
start_target() {  # port (0: any)
  cat > "$work/config.json" <<JSON
{"listen": {"address": "127.0.0.1", "port": $1},
 "subsystems": [{"nqn": "$nqn", "allowed_hosts": ["$host"],
                 "namespaces": [{"file": "$work/ns.img", "size_mib": 64, "direct": false}]}]}
JSON
  : > "$work/serve.out"
  "$kvtier" nvmf serve --config "$work/config.json" > "$work/serve.out" 2>> "$work/serve.err" &
  serve_pid=$!
  for _ in $(seq 1200); do  # the target's READY, up to 120 s on a busy machine
    grep -q '^READY ' "$work/serve.out" && return 0
    kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.err"; echo "FAIL: target died"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: target never printed READY"; exit 1
}
start_target 0
port=$(awk '/^READY /{print $3}' "$work/serve.out")
head -c $((40 << 20)) /dev/urandom > "$work/in.bin"
# 1 MiB every 50 ms: about 2 s of writing, the kill lands in the middle.
( for i in $(seq 0 39); do dd if="$work/in.bin" bs=1M skip="$i" count=1 status=none; sleep 0.05; done ) |
  timeout 60 "$kvtier" nvmf write --port "$port" --nqn "$nqn" --hostnqn "$host" --io-queues 2 \
    --in - 2> "$work/write.err" &
writer_pid=$!
sleep 0.7
kill -KILL "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
echo "target killed"
sleep 0.5
start_target "$port"
echo "target restarted on $port"
rc=0
wait "$writer_pid" || rc=$?
writer_pid=""
[[ $rc == 0 ]] || { cat "$work/write.err"; echo "FAIL: write exited $rc across the restart"; exit 1; }
grep -q "reconnected\|lost" "$work/write.err" || { cat "$work/write.err"; echo "FAIL: no reconnect seen"; exit 1; }
"$kvtier" nvmf read --port "$port" --nqn "$nqn" --hostnqn "$host" --length $((40 << 20)) \
  --out "$work/out.bin"
cmp "$work/in.bin" "$work/out.bin" || { echo "FAIL: data differs after the restart"; exit 1; }
echo "PASS"
