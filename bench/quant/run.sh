#!/usr/bin/env bash
# Issue 35: GEMV (M = 1) with quantized weights against f32 and bf16, then
# the prefill sweep that picks the CPU's switch to a GEMM (kQuantGemmRows).
#
# Usage: bench/quant/run.sh BUILD_DIR [ROUNDS]     (default 5 rounds)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [ROUNDS]}
ROUNDS=${2:-5}
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bench/quant/bench_quant
if [[ ! -x $BIN ]]; then
  echo "building bench_quant in $BUILD" >&2
  cmake --build "$BUILD" --target bench_quant -j2 >&2
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --rounds "$ROUNDS"
"$BIN" --prefill --rounds 3
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
