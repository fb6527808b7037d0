#!/usr/bin/env bash
# Runs every test: installs dependencies (Debian packages; test-only Python
# packages into build/venv), builds, runs ctest on the normal build, then
# builds again with AddressSanitizer + UndefinedBehaviorSanitizer and runs
# the C tests under them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh --test
jobs=$(nproc)
# Test-only Python packages live in a virtual environment in the build tree.
python=$(bash tools/test-venv.sh build)
# Hugging Face transformers on torch: the oracle that loads merged checkpoints.
python_hf=$(bash tools/test-venv.sh build --hf)
# Skips are failures here: a test that cannot run must not pass silently.
export OSLO_TEST_STRICT=1

# ccache, when the machine has it (tools/deps.sh does not install it): a
# rerun, or a new clone on the same machine, recompiles only what changed.
# The base and hash-dir settings let two clones at different paths share it.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

echo "== build (RelWithDebInfo)"
cmake -S . -B build "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOSLO_BUILD_TESTS=ON -DOSLO_BUILD_BENCH=ON \
  -DOSLO_TEST_PYTHON="$python" -DOSLO_TEST_PYTHON_HF="$python_hf" >/dev/null
cmake --build build -j"$jobs"
echo "== tests"
(cd build && ctest --output-on-failure -j2 --timeout 600)

if [ "${OSLO_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DOSLO_SANITIZE=address,undefined \
    -DOSLO_BUILD_TESTS=ON -DOSLO_BUILD_BENCH=OFF -DOSLO_TEST_PYTHON="$python" \
    -DOSLO_TEST_PYTHON_HF="$python_hf" >/dev/null
  cmake --build build-asan -j"$jobs"
  # The install test links a fresh program against the library, which an
  # ASan-built library cannot serve; it runs in the normal build above.
  echo "== tests under ASan + UBSan"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$PWD/tools/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The guard backend's multi-rank suite (tests/guard_ranks) checks where
  # memory goes, not how it is used: it ran in the normal build above.
  (cd build-asan && ctest --output-on-failure -j2 --timeout 900 -E "${OSLO_ASAN_EXCLUDE:-^install_}" \
    -LE guard_ranks)
fi
