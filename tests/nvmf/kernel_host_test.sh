#!/usr/bin/env bash
# Kernel NVMe/TCP host (linux-nvme-peer guest) against kvtier's target.
#   kernel_host_test.sh SERVE_BINARY LINUX_NVME_PEER VARIANT KVTIER_BINARY
# VARIANT plain:   1 I/O queue, no digests, default 4 MiB O_DIRECT pattern test,
#                  then a host NQN that is not on the allow-list must be refused.
# VARIANT digests: header + data digests, 4 I/O queues, discovery first, write,
#                  disconnect, connect again, verify.
# Afterwards kvtier's own host (`kvtier nvmf read`, same digests and queue count
# as the kernel used) reads what the kernel wrote, the target is stopped with
# SIGTERM (must exit 0), and both that read and the backing file are checked
# block by block against the pattern the kernel wrote.
set -euo pipefail
serve=$1 lnp=$2 variant=$3 kvtier=$4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work=$(mktemp -d)
serve_pid=""
cleanup() {
  if [[ -n "$serve_pid" ]] && kill -0 "$serve_pid" 2>/dev/null; then kill -KILL "$serve_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT
nqn=nqn.2024-01.io.kvtier:nvmf-test
host=nqn.2024-01.io.kvtier:allowed-host
mib=4
cat > "$work/config.json" <<JSON
{"listen": {"address": "127.0.0.1", "port": 0},
 "subsystems": [{"nqn": "$nqn", "allowed_hosts": ["$host"],
                 "namespaces": [{"file": "$work/ns.img", "size_mib": 32, "direct": false}]}]}
JSON
"$serve" "$work/config.json" > "$work/serve.out" 2> "$work/serve.err" &
serve_pid=$!
for _ in $(seq 100); do
  grep -q '^READY ' "$work/serve.out" && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.err"; echo "target died"; exit 1; }
  sleep 0.1
done
port=$(awk '/^READY /{print $3}' "$work/serve.out")
[[ -n "$port" ]] || { echo "target never printed READY"; exit 1; }
echo "target listening on 127.0.0.1:$port"

run_host() {  # expected-status args...
  local want=$1 rc=0
  shift
  "$lnp" -q host --port "$port" --nqn "$nqn" --timeout 240 "$@" > "$work/host.out" 2>&1 || rc=$?
  grep -E 'LNP-TEST|kvtier-guest|nvme|GUEST-EXIT' "$work/host.out" | tail -40 || true
  if [[ $rc -ne $want ]]; then
    echo "FAIL: linux-nvme-peer host $* exited $rc, expected $want"
    tail -60 "$work/host.out"
    tail -20 "$work/serve.err"
    exit 1
  fi
}

case "$variant" in
  plain)
    run_host 0 --hostnqn "$host" --queues 1 --mib "$mib"
    # Deny by default: another host NQN gets "not allowed" and no controller.
    run_host 3 --hostnqn nqn.2024-01.io.kvtier:intruder --queues 1
    grep -q 'is not allowed' "$work/host.out" || { echo "FAIL: no 'not allowed' message"; exit 1; }
    ;;
  digests)
    run_host 0 --hostnqn "$host" --hdgst --ddgst --queues 4 --discover \
      --script "$here/guest_reconnect.sh" --connect-opts "nr_io_queues=4"
    grep -q 'kvtier-guest: PASS' "$work/host.out" || { echo "FAIL: guest script did not pass"; exit 1; }
    ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac

# Data written by the kernel host, read back by kvtier's host.
host_flags=(--io-queues 1)
[[ $variant == digests ]] && host_flags=(--io-queues 4 --hdgst --ddgst)
"$kvtier" nvmf read --port "$port" --nqn "$nqn" --hostnqn "$host" "${host_flags[@]}" \
  --length $((mib << 20)) --out "$work/kvtier-read.bin" 2> "$work/kvtier-read.err" ||
  { cat "$work/kvtier-read.err"; echo "FAIL: kvtier nvmf read"; exit 1; }

kill -TERM "$serve_pid"
rc=0
wait "$serve_pid" || rc=$?
serve_pid=""
[[ $rc -eq 0 ]] || { echo "FAIL: target exited $rc after SIGTERM"; cat "$work/serve.err"; exit 1; }

# What the kernel wrote is what the backing file holds.
python3 - "$work/ns.img" "$work/kvtier-read.bin" "$mib" <<'PY'
import sys
mib = int(sys.argv[3])
for what, path in (("backing file", sys.argv[1]), ("kvtier host read", sys.argv[2])):
    with open(path, "rb") as f:
        data = f.read(mib << 20)
    if len(data) != mib << 20:
        sys.exit(f"FAIL: {what} holds {len(data)} bytes, want {mib << 20}")
    for i in range(len(data) // 4096):
        want = (b"LNP%012d:" % i) + bytes(33 + ((i + j) % 94) for j in range(16, 4096))
        if data[4096 * i:4096 * (i + 1)] != want:
            sys.exit(f"FAIL: block {i} of the {what} differs from the pattern")
    print(f"{what} holds the pattern in all {len(data) // 4096} blocks")
PY
echo "PASS: $variant"
