#!/bin/sh
# A GGUF model at TP=2 gives the logits it gives at TP=1 (every position of
# three prompts, within TOL x max |logit|: only the order of the sums that
# the tensor-parallel reductions split differs).
#   test_tp.sh OSLO_RUN GGUF_MODEL_TEST GGUF DTYPE WORK_DIR TOL
set -eu
run=$1 bin=$2 gguf=$3 dt=$4 work=$5 tol=$6
mkdir -p "$work"
"$run" --nproc-per-node 1 "$bin" dump "$gguf" "$dt" "$work/tp1.bin"
"$run" --nproc-per-node 2 "$bin" dump "$gguf" "$dt" "$work/tp2.bin"
"$bin" compare "$work/tp1.bin" "$work/tp2.bin" "$tol"
