#!/bin/sh
# Runs the Go binding's benchmark (bench/go/main.go) of the build folder
# BUILD_DIR and prints its BENCH lines:
#   sh bench/go/run.sh build
set -eu
build=${1:?usage: $0 BUILD_DIR}
bin=$build/bindings/go/bin/oslo_go_bench
if [ ! -x "$bin" ]; then
  echo "building the Go benchmark in $build" >&2
  cmake --build "$build" --target oslo_go -j2 >&2
fi
if [ ! -x "$bin" ]; then
  echo "bench/go: $bin is not built (needs OSLO_BUILD_BENCH=ON and the Go binding)" >&2
  exit 1
fi
exec "$bin"
