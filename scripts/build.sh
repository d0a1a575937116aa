#!/usr/bin/env bash
# Configures and builds kvtier into build/ (RelWithDebInfo, two jobs: the
# reference machine has two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS" "$@"
