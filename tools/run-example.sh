#!/usr/bin/env bash
# The main job on the embedded default: 2 CPU ranks on this machine run a
# tensor-parallel MLP forward and backward and check it equals the unsharded
# computation. Installs the build dependencies (no Python, no test libraries)
# and builds only what the job runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
# Tests and benchmarks are configured by tools/test.sh; switching them off here
# keeps the main job free of their dependencies (CMocka, Python, Open MPI).
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOSLO_BUILD_TESTS=OFF -DOSLO_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target oslo-run tp_mlp
exec build/tools/oslo-run/oslo-run --nproc-per-node "${NPROC:-2}" build/examples/tp_mlp/tp_mlp "$@"
