#!/usr/bin/env bash
# Creates (once) the virtual environment the tests' Python scripts run in and
# prints the path of its interpreter. Test-only packages go here, never into
# the system Python (Debian 12 refuses that anyway: PEP 668).
#
#   bash tools/test-venv.sh BUILD_DIR     -> BUILD_DIR/venv/bin/python
set -euo pipefail
build=${1:?usage: test-venv.sh BUILD_DIR}
venv="$build/venv"
# The packages the tests import; bump the list and the venv is refreshed.
reqs=(safetensors numpy)
stamp="$venv/.oslo-requirements"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${reqs[*]}" ]; then
  mkdir -p "$build"
  rm -rf "$venv"
  # Debian's python3 is used when present (python3-venv gives it ensurepip); a
  # python3 earlier in PATH (pyenv and the like) works too.
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${reqs[@]}" >&2
  echo "${reqs[*]}" >"$stamp"
fi
"$venv/bin/python" -c "import safetensors, numpy" >&2
echo "$venv/bin/python"
