#!/bin/sh
# Parallel checkpoints of a model end to end, ranks as processes:
# save at TP 2 -> load at TP 4 and TP 1 (logits bitwise those of the original
# folder at the same size), merge into a Hugging Face folder (every tensor
# byte for byte the original's), reshard 2 -> 4 offline and load that.
# Usage: test_ckpt_flow.sh OSLO_RUN TEST_BIN FIXTURE WORKDIR
set -eu
run=$1 bin=$2 fix=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
"$run" --nproc-per-node 2 "$bin" save "$fix" "$work/tp2"
"$run" --nproc-per-node 4 "$bin" same "$fix" "$work/tp2"
"$run" --nproc-per-node 1 "$bin" same "$fix" "$work/tp2"
"$bin" merge "$work/tp2" "$work/merged" "$fix"
"$run" --nproc-per-node 2 "$bin" same "$fix" "$work/merged"
"$bin" reshard "$work/tp2" "$work/tp4" 4
"$run" --nproc-per-node 4 "$bin" same "$fix" "$work/tp4"
"$bin" reshard "$fix" "$work/tp3-from-hf" 1
"$run" --nproc-per-node 1 "$bin" same "$fix" "$work/tp3-from-hf"
rm -rf "$work"
echo "checkpoint flow ok"
