#!/bin/sh
# Runs a test written in Python: exit 77 (ctest: skipped) when the interpreter
# is missing or the script itself reports a skip (77) for a missing package;
# with OSLO_TEST_STRICT=1 (tools/test.sh sets it) a skip is a failure instead.
# Usage: run_py.sh PYTHON SCRIPT [ARGS...]
py="$1"
shift
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIP: no Python interpreter ($py) for $1"
  rc=77
else
  "$py" "$@"
  rc=$?
fi
if [ "$rc" = 77 ] && [ "${OSLO_TEST_STRICT:-0}" = 1 ]; then
  echo "FAIL: skipped, but OSLO_TEST_STRICT=1 forbids skips"
  exit 1
fi
exit "$rc"
