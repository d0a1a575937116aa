#!/usr/bin/env bash
# The README's main-job command. Until the serving testbed lands, the main job
# is the store benchmark: RAM and disk tiers against memcpy and fio measured in
# the same run. Extra arguments go to `kvtier bench store` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh kvtier
exec ./build/src/tools/kvtier bench store --volume build/kvtier-bench.vol "$@"
