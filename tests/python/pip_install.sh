#!/bin/sh
# pip install of the Python package (bindings/python: scikit-build-core)
# against oslo installed into a fresh prefix, then an import and a call from
# outside the build tree. Usage: pip_install.sh PYTHON BUILD_DIR SOURCE_DIR WORK_DIR
# Exit 77 (skip) when the interpreter lacks scikit-build-core (tools/test-venv.sh
# installs it).
set -eu
py=$1 build=$2 src=$3 work=$4
if ! "$py" -c "import scikit_build_core" 2>/dev/null; then
  echo "SKIP: scikit-build-core is not installed for $py"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# No build isolation: the build backend comes from the tests' venv, offline.
CMAKE_PREFIX_PATH="$work/prefix" "$py" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps --target "$work/site" "$src/bindings/python"
cd "$work"
PYTHONPATH="$work/site" "$py" - "$work/prefix" <<'PY'
import sys
import numpy as np
import oslo
assert "/site/oslo/" in oslo.__file__, oslo.__file__
with oslo.Context() as ctx:
    x = ctx.all_reduce(np.arange(3, dtype=np.float32))
    assert list(x) == [0, 1, 2], x
print("pip-installed oslo", oslo.version(), "from", oslo.__file__)
PY
