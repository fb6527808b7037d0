#!/bin/sh
# A training checkpoint merged into a Hugging Face folder loads in
# transformers with the trained weights and no optimizer state
# (check_merged_train.py). Exit 77 (skip) when the interpreter has no
# torch/transformers.
# Usage: test_merged_train.sh TEST_BIN FIXTURE WORKDIR RUN_PY PYTHON
set -eu
bin=$1 fix=$2 work=$3 runpy=$4 py=$5
here=$(cd "$(dirname "$0")" && pwd)
"$bin" merge "$fix" "$work"
set +e
sh "$runpy" "$py" "$here/check_merged_train.py" "$work" "$fix"
rc=$?
set -e
[ "$rc" = 0 ] && rm -rf "$work"
exit "$rc"
