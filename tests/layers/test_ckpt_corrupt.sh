#!/usr/bin/env bash
# A checkpoint whose shard of tensor-parallel rank 1 is corrupt: loading it at
# TP=2 (processes, then threads) and TP=3 (rank 1 and 2 read that shard) must
# fail with the same status on every rank, each message naming the lowest
# failing world rank (rank 0 reads only the intact shard of rank 0).
set -euo pipefail
run=$1
bin=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 "$bin" ckpt-save --tp 2 --dir "$dir/a"
"$run" --nproc-per-node 2 "$bin" ckpt-load --tp 2 --dir "$dir/a"
shard=$(ls "$dir"/a/shard-*-tp1-pp0.safetensors)
# The safetensors header length (first 8 bytes) becomes absurd.
printf '\377\377\377\377\377\377\377\177' | dd of="$shard" bs=1 count=8 conv=notrunc status=none
"$run" --nproc-per-node 2 "$bin" ckpt-load-bad --tp 2 --dir "$dir/a" --bad-rank 1
"$bin" ckpt-load-bad --tp 2 --threads 2 --dir "$dir/a" --bad-rank 1
"$run" --nproc-per-node 3 "$bin" ckpt-load-bad --tp 3 --dir "$dir/a" --bad-rank 1
echo "checkpoint corrupt shard: 4 passed, 0 failed"
