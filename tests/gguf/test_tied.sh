#!/bin/sh
# A LLaMA GGUF whose head is tied to its token table (llama-256-q4_0.gguf
# with output.weight dropped by make_tied.py; llama.cpp then multiplies by
# token_embd): oslo holds the one Q4_0 table for both, and `held` checks it
# against the same file dequantized at load, saved and loaded back
# (test_gguf_model.cpp). Exit 77 (skip) without gguf-py in PYTHON.
#   test_tied.sh PYTHON OSLO_RUN GGUF_MODEL_TEST SRC.gguf TP WORK_DIR
set -eu
py=$1 run=$2 bin=$3 src=$4 tp=$5 work=$6
rm -rf "$work"
mkdir -p "$work"
rc=0
sh "$(dirname "$0")/../common/run_py.sh" "$py" "$(dirname "$0")/make_tied.py" "$src" \
  "$work/tied.gguf" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
"$run" --nproc-per-node "$tp" "$bin" held "$work/tied.gguf" "$work" q4_0 tied save
