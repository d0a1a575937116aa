#!/usr/bin/env bash
# The README's main-job command: the study's benchmark (six service
# configurations, short and long reuse) on the embedded synthetic agentic
# workload. Writes report.md, results.json and PNG plots to study-report/ and
# prints the report. Extra arguments go to `kvtier bench study` (try --help;
# `kvtier bench store` is the in-process store's own benchmark).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh kvtier
exec ./build/src/tools/kvtier bench study --report study-report "$@"
