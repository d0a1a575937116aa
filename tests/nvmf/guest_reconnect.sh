#!/bin/sh
# Runs inside the linux-nvme-peer guest (busybox sh) against kvtier's target:
# checks the number of queues the kernel opened, writes the pattern with
# O_DIRECT, deletes the controller (full shutdown sequence), connects again
# and verifies the data. MIB and WANT_QUEUES come from the environment.
set -e
MIB=${MIB:-4}
got=$(lnp queues "$LNP_CTRL" | awk '{print $1}')
echo "kvtier-guest: queue line: $(lnp queues "$LNP_CTRL")"
if [ -n "$WANT_QUEUES" ] && ! lnp queues "$LNP_CTRL" | grep -q "$WANT_QUEUES"; then
  echo "kvtier-guest: FAIL: expected queue_count $WANT_QUEUES"
  exit 7
fi
lnp write-pattern "$LNP_NS" "$MIB"
lnp verify-pattern "$LNP_NS" "$MIB"
lnp disconnect "$LNP_CTRL"
sleep 1
ctrl=$(lnp connect)
ns=$(lnp ns "$ctrl" 30)
lnp verify-pattern "$ns" "$MIB"
echo "kvtier-guest: PASS after reconnect as $ctrl"
