#!/bin/sh
# The Java binding's benchmark: the per-call cost of ParallelLinear.forward
# (1x64 -> 64, world size 1) and a 256 MiB direct ByteBuffer passed to oslo
# without a copy (Tensor.wrap) vs copied into a new tensor, each with its
# peak RSS growth. Prints BENCH lines.
#
# Usage: sh bench/java/run.sh BUILD_DIR   (a build with the Java binding)
set -eu
BUILD=${1:?usage: $0 BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
JAR=$BUILD/bench/java/oslo-bench.jar
if [ ! -f "$JAR" ] || [ ! -f "$BUILD/bindings/java/oslo.jar" ]; then
  echo "building oslo_bench_java in $BUILD" >&2
  cmake --build "$BUILD" --target oslo_bench_java -j2 >&2
fi
exec java -Xmx1g -Djava.library.path="$BUILD/bindings/java" \
  -cp "$BUILD/bindings/java/oslo.jar:$JAR" OsloBench
