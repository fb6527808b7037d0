#!/usr/bin/env bash
# A checkpoint saved by one backend loads with another, at the sizes one GPU
# allows: saved at TP=2 on the CPU (processes) and loaded at TP=1 on the
# second backend, and saved at TP=1 on the first backend and loaded at TP=1
# and TP=2 (threads) on the CPU.
# Usage: ckpt_cuda.sh OSLO_RUN RANK_TEST SAVE_BACKEND LOAD_BACKEND
set -euo pipefail
run=$1
bin=$2
sb=$3
lb=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ "$sb" = cpu ]; then
  "$run" --nproc-per-node 2 "$bin" ckpt-save --tp 2 --dir "$dir/a" --backend cpu
  "$bin" ckpt-load --tp 1 --threads 1 --dir "$dir/a" --backend "$lb"
  "$bin" ckpt-save --tp 1 --threads 1 --dir "$dir/b" --backend cpu
  "$bin" ckpt-load --tp 1 --threads 1 --dir "$dir/b" --backend "$lb"
else
  "$bin" ckpt-save --tp 1 --threads 1 --dir "$dir/a" --backend "$sb"
  "$bin" ckpt-load --tp 1 --threads 1 --dir "$dir/a" --backend "$lb"
  "$bin" ckpt-load --tp 2 --threads 2 --dir "$dir/a" --backend "$lb"
fi
echo "checkpoint $sb -> $lb: passed"
