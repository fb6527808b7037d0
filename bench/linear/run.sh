#!/usr/bin/env bash
# Benchmark 1: oslo column-parallel linear forward at TP=1 vs a direct
# dnnl_sgemm call, M x K x N = 2048x4096x4096 and 1x4096x4096, 1 and 2 threads.
#
# Usage: bench/linear/run.sh BUILD_DIR [ROUNDS]     (default 7 rounds; ~1.5 min on a quiet machine, 2.5-4 when shared)
# BUILD_DIR is a build of this tree, e.g.
#   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [ROUNDS]}
ROUNDS=${2:-7}
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bench/linear/bench_linear
if [[ ! -x $BIN ]]; then
  echo "building bench_linear in $BUILD" >&2
  cmake --build "$BUILD" --target bench_linear -j2 >&2
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$BIN" --threads 1,2 --rounds "$ROUNDS" || status=$?
echo
echo "Information, outside the f32 headline: the same 1x4096x4096 forward with the weight stored as bf16/f16"
"$BIN" --dtypes --threads 1,2 --rounds 3 || status=$?
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
