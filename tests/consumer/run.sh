#!/usr/bin/env bash
# Installs the built library into a staging prefix and builds
# examples/consumer against it, with find_package(kvtier) and with
# pkg-config, then runs both programs. Also checks that the installed headers
# name none of kvtier's private dependencies.
# Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail
BUILD=$1
WORK=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
LIBDIR=$(dirname "$(find "$WORK/prefix" -name 'libkvtier.so' | head -1)")
if grep -rlE '#include <(asio|liburing|spdlog|fmt|nlohmann|grpc)' "$WORK/prefix/include"; then
  echo "installed headers include a private dependency" >&2
  exit 1
fi
# Private symbols stay inside the library.
if nm -D --defined-only "$LIBDIR/libkvtier.so" | grep -qE ' (asio|spdlog|fmt)::| _ZN(4asio|6spdlog|3fmt)'; then
  echo "libkvtier.so exports symbols of a private dependency" >&2
  exit 1
fi
cmake -S "$SRC/examples/consumer" -B "$WORK/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/build" >/dev/null
LD_LIBRARY_PATH="$LIBDIR" "$WORK/build/consumer_c"
LD_LIBRARY_PATH="$LIBDIR" "$WORK/build/consumer_cxx"
# pkg-config, the way a Makefile or a Cargo build script would link it.
PKG_CONFIG_PATH="$LIBDIR/pkgconfig" cc -std=c11 -Wall -Werror "$SRC/examples/consumer/main.c" \
  $(PKG_CONFIG_PATH="$LIBDIR/pkgconfig" pkg-config --cflags --libs kvtier) -o "$WORK/consumer_pc"
LD_LIBRARY_PATH="$LIBDIR" "$WORK/consumer_pc"
echo "out-of-tree consumer: ok"
