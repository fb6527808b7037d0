#!/bin/sh
# Parallel checkpoints saved by pipeline stages, ranks as processes: save at
# PP 2 (each stage writes its blocks; the first stage the tied embedding) ->
# load at PP 1, TP 2 x PP 2 and PP 2 (outputs bitwise those of the original
# folder at the same layout), merge into a Hugging Face folder (every tensor
# byte for byte the original's).
# Usage: test_ckpt_flow_pp.sh OSLO_RUN TEST_BIN FIXTURE WORKDIR
set -eu
run=$1 bin=$2 fix=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
OSLO_TEST_PP=2 "$run" --nproc-per-node 2 "$bin" save "$fix" "$work/pp2"
"$run" --nproc-per-node 1 "$bin" same "$fix" "$work/pp2"
OSLO_TEST_PP=2 "$run" --nproc-per-node 4 "$bin" same "$fix" "$work/pp2"
OSLO_TEST_PP=2 "$run" --nproc-per-node 2 "$bin" same "$fix" "$work/pp2"
"$bin" merge "$work/pp2" "$work/merged" "$fix"
OSLO_TEST_PP=2 "$run" --nproc-per-node 2 "$bin" same "$fix" "$work/merged"
rm -rf "$work"
echo "pipeline checkpoint flow ok"
