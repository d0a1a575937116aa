#!/usr/bin/env bash
# `kvtier nvmf write|read|connect|discover` against a `kvtier nvmf serve` process:
# a file with a partial last block is written at an offset, read back to a
# file and to stdout and compared; connect prints the namespace and leaves
# after --seconds; discover lists the subsystem for the allowed host NQN
# only; a host not on the allow-list and a bad offset fail with a
# clear message and a non-zero exit.
#   cli_test.sh KVTIER_BINARY
set -euo pipefail
kvtier=$1
work=$(mktemp -d)
serve_pid=""
cleanup() {
  if [[ -n "$serve_pid" ]] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$serve_pid"
    wait "$serve_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
nqn=nqn.2024-01.io.kvtier:cli-test
host=nqn.2024-01.io.kvtier:cli-host
cat > "$work/config.json" <<JSON
{"listen": {"address": "127.0.0.1", "port": 0},
 "subsystems": [{"nqn": "$nqn", "allowed_hosts": ["$host"], "namespaces": [{"mem_mib": 16}]}]}
JSON
"$kvtier" nvmf serve --config "$work/config.json" > "$work/serve.out" 2> "$work/serve.err" &
serve_pid=$!
for _ in $(seq 1200); do  # the target's READY, up to 120 s on a busy machine
  grep -q '^READY ' "$work/serve.out" && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.err"; echo "target died"; exit 1; }
  sleep 0.1
done
port=$(awk '/^READY /{print $3}' "$work/serve.out")
[[ -n "$port" ]] || { echo "FAIL: target never printed READY"; exit 1; }
common=(--port "$port" --nqn "$nqn" --hostnqn "$host")

head -c $((3 * 1048576 + 1000)) /dev/urandom > "$work/in.bin"
"$kvtier" nvmf write "${common[@]}" --io-queues 2 --ddgst --offset 8192 --in "$work/in.bin"
size=$(( (3 * 1048576 + 1000 + 4095) / 4096 * 4096 ))
"$kvtier" nvmf read "${common[@]}" --hdgst --offset 8192 --length "$size" --out "$work/out.bin"
cmp -n $((3 * 1048576 + 1000)) "$work/in.bin" "$work/out.bin" || { echo "FAIL: data differs"; exit 1; }
# The zero padding of the last block, then stdout gives the same bytes.
[[ $(tail -c $((size - 3 * 1048576 - 1000)) "$work/out.bin" | tr -d '\0' | wc -c) == 0 ]] ||
  { echo "FAIL: padding is not zeros"; exit 1; }
"$kvtier" nvmf read "${common[@]}" --offset 8192 --length 4096 | cmp -n 4096 - "$work/in.bin" ||
  { echo "FAIL: stdout read differs"; exit 1; }

"$kvtier" nvmf connect "${common[@]}" --seconds 1 > "$work/connect.out"
grep -q "namespace 1: 16777216 bytes, block size" "$work/connect.out" ||
  { cat "$work/connect.out"; echo "FAIL: connect output"; exit 1; }
grep -q "io queues: 4" "$work/connect.out" || { cat "$work/connect.out"; echo "FAIL: queue count (the default is 4)"; exit 1; }

"$kvtier" nvmf discover --port "$port" --hostnqn "$host" > "$work/discover.out"
grep -q "^subnqn:  $nqn\$" "$work/discover.out" && grep -q "^trsvcid: $port\$" "$work/discover.out" ||
  { cat "$work/discover.out"; echo "FAIL: discover output"; exit 1; }
# Another host NQN sees no subsystem in the log.
"$kvtier" nvmf discover --port "$port" --hostnqn nqn.2024-01.io.kvtier:other > "$work/discover.out"
grep -q "Number of Records 0," "$work/discover.out" || { cat "$work/discover.out"; echo "FAIL: other"; exit 1; }

rc=0
"$kvtier" nvmf read --port "$port" --nqn "$nqn" --hostnqn nqn.2024-01.io.kvtier:stranger \
  --length 4096 > /dev/null 2> "$work/err" || rc=$?
[[ $rc != 0 ]] && grep -q "Connect" "$work/err" || { cat "$work/err"; echo "FAIL: stranger"; exit 1; }
rc=0
"$kvtier" nvmf read "${common[@]}" --offset 100 --length 4096 > /dev/null 2> "$work/err" || rc=$?
[[ $rc != 0 ]] && grep -q "multiples of the" "$work/err" || { cat "$work/err"; echo "FAIL: offset"; exit 1; }
echo "PASS"
