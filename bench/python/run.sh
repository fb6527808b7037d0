#!/bin/sh
# Benchmark 8, Python column: prints BENCH lines (bench/bindings/run.sh).
#   sh bench/python/run.sh BUILD_DIR [CALLS]
set -eu
build=${1:?usage: run.sh BUILD_DIR [CALLS]}
py=$build/venv/bin/python
[ -x "$py" ] || py=python3
PYTHONPATH=$build/bindings/python exec "$py" "$(dirname "$0")/bench_bindings.py" ${2:-}
