#!/bin/sh
# Save at TP 2, merge into one Hugging Face folder, and load that folder with
# Hugging Face transformers (tests/models/check_merged_hf.py): every tensor
# equal to the original's and the logits equal to the fixture's references.
# Exit 77 (skip) when the interpreter has no torch/transformers.
# Usage: test_merged_hf.sh OSLO_RUN TEST_BIN FIXTURE WORKDIR RUN_PY PYTHON
set -eu
run=$1 bin=$2 fix=$3 work=$4 runpy=$5 py=$6
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
"$run" --nproc-per-node 2 "$bin" save "$fix" "$work/tp2"
"$bin" merge "$work/tp2" "$work/merged" "$fix"
set +e
sh "$runpy" "$py" "$here/check_merged_hf.py" "$work/merged" "$fix"
rc=$?
set -e
[ "$rc" = 0 ] && rm -rf "$work"
exit "$rc"
