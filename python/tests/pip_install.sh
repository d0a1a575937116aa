#!/usr/bin/env bash
# `pip install ./python` offline (--no-index: no package index is used) into
# a virtual environment over Debian's python3, then the installed package is
# imported from outside the repository and does a round trip.
# Usage: pip_install.sh PYTHON BUILD_DIR WORK_DIR
set -euo pipefail
PY=$1
BUILD=$2
WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
"$PY" -m venv --system-site-packages "$WORK/venv"
KVTIER_BUILD_DIR="$BUILD" "$WORK/venv/bin/pip" install --no-index --quiet "$SRC/python"
cd "$WORK"
"$WORK/venv/bin/python" - <<'PY'
import numpy as np
import kvtier
assert "site-packages" in kvtier.__file__, kvtier.__file__
ns = kvtier.Namespace("pip-test", "v1", "tok", "bf16", "NHD", block_tokens=16)
keys = ns.block_keys(list(range(64)))
with kvtier.open("mem://?ram=16MiB") as store:
    assert all(store.batch_put(ns, keys, [np.full(4096, i, np.uint8) for i in range(4)]))
    out = [np.empty(4096, np.uint8) for _ in range(4)]
    assert all(store.batch_get_into(ns, keys, out))
    assert all((o == i).all() for i, o in enumerate(out))
print("pip install ./python: installed", kvtier.__version__, "at", kvtier.__file__)
PY
