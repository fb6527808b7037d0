#!/usr/bin/env bash
# Issue 16's training benchmark: a GPT-2-small-shaped model (124M, random
# weights: bench/model/make_gpt2_small.py), f32, batch 4 x 256 tokens, one
# training step (loss, backward, clip_grad_norm 1.0, AdamW), against PyTorch
# (transformers' GPT2LMHeadModel, its default attention SDPA, 2 threads;
# ATTN=eager for the composed attention) in the same
# run. Rows, interleaved in the same order every round:
#   PyTorch, 2 threads | oslo TP=1, 2 threads | oslo TP=1, 1 thread |
#   oslo TP=2 (oslo-run, 2 processes x 1 thread) |
#   oslo TP=1, 2 threads, activation checkpointing
# each a fresh process: WARMUP untimed steps, then STEPS timed (best kept).
#
#   bash bench/train/run.sh [ROUNDS]      (ROUNDS defaults to 5)
#   DTYPE=bf16 bash bench/train/run.sh    mixed precision instead: PyTorch
#       under torch.autocast(bfloat16) | oslo TP=1 bf16, 2 threads | oslo
#       TP=2 bf16 (the model loaded in bf16, f32 masters)
#
# Needs build/ configured with OSLO_BUILD_BENCH=ON and the HF venv
# (tools/test-venv.sh build --hf). Prints each JSON line, then best and
# median per row (bench/model/summarize.py's format is not reused: the
# columns differ).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
steps=${STEPS:-1}
warmup=${WARMUP:-1}
py=$(bash tools/test-venv.sh build --hf)
cmake --build build -j2 --target bench_train oslo-run >/dev/null
out=build/bench-train
mkdir -p "$out"
: >"$out/log"
: >"$out/results.jsonl"
models=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/log" | tail -1)
m=$models/f32
run=build/tools/oslo-run/oslo-run
bin=build/bench/train/bench_train
args=(--seq 256 --batch 4 --steps "$steps" --warmup "$warmup")
row() {
  local name=$1
  shift
  "$@" 2>>"$out/log" | sed -n "s/^{/{\"row\": \"$name\", /p" | tee -a "$out/results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(date -u +%F' '%H:%M) UTC"
dtype=${DTYPE:-f32}
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds"
  if [ "$dtype" != f32 ]; then
    row "PyTorch $dtype autocast, 2 threads" "$py" bench/train/torch_reference.py "$m" \
      "${args[@]}" --threads 2 --dtype "$dtype" --attn "${ATTN:-sdpa}"
    row "oslo TP=1 $dtype, 2 threads" "$bin" "$m" "${args[@]}" --threads 2 --dtype "$dtype"
    row "oslo TP=2 $dtype, 2 x 1 thread" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
      --threads 1 --dtype "$dtype"
    continue
  fi
  row "PyTorch, 2 threads" "$py" bench/train/torch_reference.py "$m" "${args[@]}" --threads 2 \
    --attn "${ATTN:-sdpa}"
  row "oslo TP=1, 2 threads" "$bin" "$m" "${args[@]}" --threads 2
  row "oslo TP=1, 1 thread" "$bin" "$m" "${args[@]}" --threads 1
  row "oslo TP=2, 2 x 1 thread" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" --threads 1
  row "oslo TP=1, 2 threads, activation checkpointing" "$bin" "$m" "${args[@]}" --threads 2 \
    --checkpoint-activations 1
done
"$py" - "$out/results.jsonl" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["row"], []).append(r)
print("| row | rounds | tokens/s best | tokens/s median | peak RSS MiB | block activations MiB | peak / (4 x params + activations) |")
print("| --- | --: | --: | --: | --: | --: | --: |")
for name, rs in rows.items():
    t = [x["tokens_per_s"] for x in rs]
    peak = statistics.median(x["peak_rss_mib"] for x in rs)
    if "peak_over_expected" in rs[0]:
        act = statistics.median(x["activations_mib"] for x in rs)
        poe = statistics.median(x["peak_over_expected"] for x in rs)
        tail = f"{act:.0f} | {poe:.3f} |"
    else:
        tail = " | |"
    print(f"| {name} | {len(rs)} | {max(t):.1f} | {statistics.median(t):.1f} | {peak:.0f} | " + tail)
PY
