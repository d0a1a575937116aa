#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier builds, tests and benchmarks with.
# Safe to run again: apt-get skips what is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config g++ clang clang-format
  liburing-dev libxxhash-dev libssl-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libasio-dev libisal-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  fio iperf3 etcd-server etcd-client
  python3 python3-matplotlib
  # The Python package (pybind11 extension), its tests and the real-compute engine.
  pybind11-dev python3-dev python3-numpy python3-pytest python3-pip python3-setuptools python3-venv
  python3-torch
  # The exposition format is checked by a real Prometheus server.
  prometheus
  ccache
  # A CPU hog, to check that the tests pass on a busy machine (README: "Tests").
  stress-ng
  # An optimized BLAS for PyTorch (Debian's default alternative is the reference BLAS).
  libopenblas0-pthread
)
# libFuzzer's runtime (clang -fsanitize=fuzzer) ships in a versioned package.
FUZZ_RUNTIME=libclang-rt-14-dev

missing=()
for p in "${PACKAGES[@]}" "$FUZZ_RUNTIME"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
