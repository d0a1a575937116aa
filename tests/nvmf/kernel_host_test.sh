#!/usr/bin/env bash
# Kernel NVMe/TCP host (linux-nvme-peer guest) against kvtier's target.
#   kernel_host_test.sh SERVE_BINARY LINUX_NVME_PEER VARIANT KVTIER_BINARY
# VARIANT plain:   1 I/O queue, no digests, default 4 MiB O_DIRECT pattern test,
#                  then a host NQN that is not on the allow-list must be refused.
# VARIANT digests: header + data digests, 4 I/O queues, discovery first, write,
#                  disconnect, connect again, verify.
# VARIANT dhchap:  the host must authenticate (DH-HMAC-CHAP, ffdhe2048, SHA-384,
#                  both ways: the kernel checks the controller's key too) on
#                  its admin queue and 2 I/O queues, then the default test;
#                  a wrong host secret and a wrong controller secret must each
#                  fail the kernel's connect.
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
[[ -n "${KEEP_WORK:-}" ]] && trap - EXIT
nqn=nqn.2024-01.io.kvtier:nvmf-test
host=nqn.2024-01.io.kvtier:allowed-host
mib=4
host_keys=""
if [[ $variant == dhchap ]]; then
  # Secrets as nvme-cli makes them, in files only their owner may read.
  (umask 077
   "$kvtier" nvmf gen-dhchap-key --hmac 1 > "$work/host.key"
   "$kvtier" nvmf gen-dhchap-key --hmac 2 --key-bytes 48 > "$work/ctrl.key"
   "$kvtier" nvmf gen-dhchap-key --hmac 1 > "$work/other.key")
  host_keys=", \"host_keys\": [{\"hostnqn\": \"$host\", \"dhchap_key_file\": \"$work/host.key\",
    \"dhchap_ctrl_key_file\": \"$work/ctrl.key\", \"hash\": \"sha384\", \"dhgroup\": \"ffdhe2048\"}]"
fi
cat > "$work/config.json" <<JSON
{"listen": {"address": "127.0.0.1", "port": 0},
 "subsystems": [{"nqn": "$nqn", "allowed_hosts": ["$host"]$host_keys,
                 "namespaces": [{"file": "$work/ns.img", "size_mib": 32, "direct": false}]}]}
JSON
"$serve" "$work/config.json" > "$work/serve.out" 2> "$work/serve.err" &
serve_pid=$!
for _ in $(seq 1200); do  # the target's READY, up to 120 s on a busy machine
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
  dhchap)
    # Base64 secrets hold characters the tool's --connect-opts does not pass:
    # the guest script connects itself (lnp connect), its secrets written in.
    guest_connect() {  # host-secret-file ctrl-secret-file queues -> guest script
      printf 'lnp connect --queues %s --opts "dhchap_secret=%s,dhchap_ctrl_secret=%s"\n' \
        "$3" "$(cat "$1")" "$(cat "$2")"
    }
    { echo 'set -e'
      echo "ctrl=\$($(guest_connect "$work/host.key" "$work/ctrl.key" 2))"
      echo 'LNP_CTRL=/dev/$ctrl; LNP_NS=$(lnp ns "$ctrl" 30); export LNP_CTRL LNP_NS'
      echo 'lnp default-test'
      echo 'echo "kvtier-guest: PASS"'; } > "$work/guest-ok.sh"
    run_host 0 --hostnqn "$host" --no-connect --cpus 2 --mib "$mib" --script "$work/guest-ok.sh"
    grep -q 'kvtier-guest: PASS' "$work/host.out" || { echo "FAIL: guest test did not pass"; exit 1; }
    # Admin queue and both I/O queues, each authenticated by kvtier's target.
    n=$(cat "$work/serve.out" "$work/serve.err" | grep -c 'authenticated' || true)
    [[ $n -ge 3 ]] || { echo "FAIL: $n queues authenticated, want 3"; cat "$work/serve.err"; exit 1; }
    # A wrong host secret (kvtier's target refuses the host) and a wrong
    # controller secret (the kernel refuses kvtier's target): no connection.
    for wrong in host ctrl; do
      hk="$work/host.key" ck="$work/ctrl.key"
      [[ $wrong == host ]] && hk="$work/other.key"
      [[ $wrong == ctrl ]] && ck="$work/other.key"
      { echo "if $(guest_connect "$hk" "$ck" 1) >/dev/null; then"
        echo '  echo "kvtier-guest: connected with a wrong secret"; exit 1'
        echo 'fi'
        echo "echo \"kvtier-guest: wrong $wrong secret refused\""; } > "$work/guest-$wrong.sh"
      run_host 0 --hostnqn "$host" --no-connect --script "$work/guest-$wrong.sh"
      grep -q "kvtier-guest: wrong $wrong secret refused" "$work/host.out" ||
        { echo "FAIL: the wrong $wrong secret was not refused"; exit 1; }
    done
    # The helper logs to stdout (its own default), the CLI's target to stderr.
    grep -q 'wrong response' "$work/serve.out" "$work/serve.err" || { echo "FAIL: target did not refuse the key"; exit 1; }
    grep -q 'gave up' "$work/serve.out" "$work/serve.err" || { echo "FAIL: the kernel did not refuse the target"; exit 1; }
    ;;
  *) echo "unknown variant $variant"; exit 2 ;;
esac

# Data written by the kernel host, read back by kvtier's host.
host_flags=(--io-queues 1)
[[ $variant == digests ]] && host_flags=(--io-queues 4 --hdgst --ddgst)
[[ $variant == dhchap ]] &&
  host_flags=(--io-queues 2 --dhchap-secret-file "$work/host.key" --dhchap-ctrl-secret-file "$work/ctrl.key")
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
