#!/usr/bin/env bash
# Save a checkpoint at TP=2, load it at TP=4, 1 and 3 (processes), and at TP=2
# as threads; save as threads at TP=4 and load at TP=2 processes. Optional
# third and fourth arguments: the backend that saves and the one that loads
# (default cpu), so a checkpoint written by one backend is read by another.
# Usage: test_ckpt_reshard.sh OSLO_RUN RANK_TEST [SAVE_BACKEND [LOAD_BACKEND]]
set -euo pipefail
run=$1
bin0=$2
sb=${3:-cpu}
lb=${4:-$sb}
save() { "$bin0" "$@" --backend "$sb"; }
load() { "$bin0" "$@" --backend "$lb"; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 "$bin0" ckpt-save --tp 2 --dir "$dir/a" --backend "$sb"
ls "$dir/a"
test -f "$dir/a/oslo_checkpoint.json"
"$run" --nproc-per-node 4 "$bin0" ckpt-load --tp 4 --dir "$dir/a" --backend "${lb}"
"$run" --nproc-per-node 1 "$bin0" ckpt-load --tp 1 --dir "$dir/a" --backend "${lb}"
"$run" --nproc-per-node 3 "$bin0" ckpt-load --tp 3 --dir "$dir/a" --backend "${lb}"
load ckpt-load --tp 2 --threads 2 --dir "$dir/a"
save ckpt-save --tp 4 --threads 4 --dir "$dir/b"
"$run" --nproc-per-node 2 "$bin0" ckpt-load --tp 2 --dir "$dir/b" --backend "${lb}"
# Saving again into the same directory replaces the checkpoint atomically.
"$run" --nproc-per-node 2 "$bin0" ckpt-save --tp 2 --dir "$dir/b" --backend "$sb"
"$run" --nproc-per-node 4 "$bin0" ckpt-load --tp 4 --dir "$dir/b" --backend "${lb}"
echo "checkpoint reshard: 9 passed, 0 failed"
