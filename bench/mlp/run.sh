#!/usr/bin/env bash
# Benchmark 2: TP=2 (2 processes) vs TP=1 (1 process) speed-up of an MLP block
# 4096 -> 16384 -> 4096 over 2048 tokens, forward and forward+backward.
#
# Usage: bench/mlp/run.sh BUILD_DIR [ROUNDS]     (default 3 rounds: ~1.5 min on a quiet machine, up to ~5 when shared)
# BUILD_DIR is a build of this tree, e.g.
#   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2
# Every round runs TP=1 and TP=2 once each, alternating which goes first; the
# table pairs them per round. Extra arguments for bench_mlp go in BENCH_MLP_ARGS
# (e.g. BENCH_MLP_ARGS="--tokens 256" for a quick smoke test).
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [ROUNDS]}
ROUNDS=${2:-3}
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bench/mlp/bench_mlp
RUN=$BUILD/tools/oslo-run/oslo-run
if [[ ! -x $BIN || ! -x $RUN ]]; then
  echo "building bench_mlp and oslo-run in $BUILD" >&2
  cmake --build "$BUILD" --target bench_mlp oslo-run -j2 >&2
fi
LOG=$(mktemp "${TMPDIR:-/tmp}/bench_mlp.XXXXXX")
trap 'rm -f "$LOG"' EXIT

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
one() {  # $1 = ranks
  local t0=$SECONDS
  "$RUN" --nproc-per-node "$1" "$BIN" ${BENCH_MLP_ARGS:-} | tee -a "$LOG" | sed 's/ y_sum=.*//' >&2
  echo "  (TP=$1 run took $((SECONDS - t0)) s)" >&2
}
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r/$ROUNDS" >&2
  if ((r % 2)); then one 1; one 2; else one 2; one 1; fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" --summarize "$LOG"
