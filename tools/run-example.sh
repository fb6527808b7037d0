#!/usr/bin/env bash
# The main job on the embedded default: 2 CPU ranks on this machine run a
# tensor-parallel MLP forward and backward and check it equals the unsharded
# computation. Installs dependencies and builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target oslo-run tp_mlp
exec build/tools/oslo-run/oslo-run --nproc-per-node "${NPROC:-2}" build/examples/tp_mlp/tp_mlp "$@"
