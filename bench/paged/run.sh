#!/usr/bin/env bash
# Issue 33: one serving step's paged attention, the CPU backend's
# paged_attention entry against its composition (the blocks gathered per
# chunk, then attention()), 1 and 2 threads, interleaved rounds; then the
# same over int8 pools (issue 35): paged_attention_kv8's entry against its
# composition (the step's blocks dequantized into f32, then the entry).
#
# Usage: bench/paged/run.sh BUILD_DIR [ROUNDS]     (default 7 rounds; about a minute)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [ROUNDS]}
ROUNDS=${2:-7}
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bench/paged/bench_paged_attention
if [[ ! -x $BIN ]]; then
  echo "building bench_paged_attention in $BUILD" >&2
  cmake --build "$BUILD" --target bench_paged_attention -j2 >&2
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$BIN" --threads 1,2 --rounds "$ROUNDS" || status=$?
"$BIN" --threads 1,2 --rounds "$ROUNDS" --kv int8 || status=$?
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
