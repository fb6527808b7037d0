#!/bin/sh
# Runs a GPU test only where a usable CUDA GPU is present: the probe
# (test_cuda_plugin PLUGIN probe) exits 77 only when the plugin reports no
# usable GPU (OSLO_ERR_BACKEND_UNAVAILABLE); then this exits 77 too (ctest:
# skipped, reported by name). Any other probe failure is a failure.
# Usage: if_gpu.sh PROBE PLUGIN COMMAND [ARGS...]
probe=$1
plugin=$2
shift 2
"$probe" "$plugin" probe
rc=$?
if [ "$rc" = 77 ]; then
  echo "SKIP: $* needs a CUDA GPU"
  exit 77
fi
[ "$rc" = 0 ] || exit "$rc"
exec "$@"
