#!/usr/bin/env bash
# Save a checkpoint at TP=2, load it at TP=4, 1 and 3 (processes), and at TP=2
# as threads; save as threads at TP=4 and load at TP=2 processes.
set -euo pipefail
run=$1
bin=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 "$bin" ckpt-save --tp 2 --dir "$dir/a"
ls "$dir/a"
test -f "$dir/a/oslo_checkpoint.json"
"$run" --nproc-per-node 4 "$bin" ckpt-load --tp 4 --dir "$dir/a"
"$run" --nproc-per-node 1 "$bin" ckpt-load --tp 1 --dir "$dir/a"
"$run" --nproc-per-node 3 "$bin" ckpt-load --tp 3 --dir "$dir/a"
"$bin" ckpt-load --tp 2 --threads 2 --dir "$dir/a"
"$bin" ckpt-save --tp 4 --threads 4 --dir "$dir/b"
"$run" --nproc-per-node 2 "$bin" ckpt-load --tp 2 --dir "$dir/b"
# Saving again into the same directory replaces the checkpoint atomically.
"$run" --nproc-per-node 2 "$bin" ckpt-save --tp 2 --dir "$dir/b"
"$run" --nproc-per-node 4 "$bin" ckpt-load --tp 4 --dir "$dir/b"
echo "checkpoint reshard: 9 passed, 0 failed"
