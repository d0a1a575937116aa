#!/usr/bin/env bash
# The README's test command: installs packages, builds, runs every test
# (unit, integration, short fuzz runs) and ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
# Long soaks and full benchmarks carry the label "long" and are excluded here.
exec ctest --output-on-failure -j2 --timeout 900 -LE long "$@"
