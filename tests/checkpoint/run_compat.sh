#!/bin/sh
# Runs the safetensors compatibility script; exit 77 (skipped) without Python.
# Usage: run_compat.sh PYTHON SCRIPT ST_TOOL CORPUS_DIR
py="$1"
shift
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIP: no Python interpreter ($py) for the safetensors compatibility test"
  exit 77
fi
exec "$py" "$@"
