#!/bin/sh
# A GGUF model whose block-quantized weights are kept (their blocks copied
# into the local tensors as the file stores them) gives the logits of the
# same file dequantized at load (every tensor read as f32), within TOL x
# max |logit|. Run under OSLO_FUSED_OPS=0, so that both multiply in f32 (the
# kept blocks dequantized by the core's composition): what differs is only
# how the weights were loaded (GPT-2's projections: blocks of the stored
# [out, in] layout against the transposed f32 read of its Conv1D layout).
#   test_blocks.sh OSLO_RUN GGUF_MODEL_TEST GGUF TP WORK_DIR TOL
set -eu
run=$1 bin=$2 gguf=$3 tp=$4 work=$5 tol=$6
mkdir -p "$work"
"$run" --nproc-per-node "$tp" "$bin" dump "$gguf" keep "$work/keep.bin"
"$run" --nproc-per-node "$tp" "$bin" dump "$gguf" f32 "$work/f32.bin"
"$bin" compare "$work/keep.bin" "$work/f32.bin" "$tol"
