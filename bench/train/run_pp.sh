#!/usr/bin/env bash
# Issue 18's pipeline benchmark: the GPT-2-small-shaped model of
# bench/train/run.sh (random weights, f32), global batch BATCH (default 8)
# rows of SEQ (default 128) tokens, one training step through the Trainer
# (loss, backward, clipping, AdamW). Rows, interleaved in the same order
# every round, each a fresh process (one untimed step, then one timed):
#   PP=1, 1 thread (the whole batch at once) | PP=2 (oslo-run, 2
#   processes x 1 thread), 4 and 8
#   micro-batches, blocks 9 + 3 (the last stage also runs the 50257-word
#   head, about 5.5 blocks of work) | PP=2, 8 micro-batches, blocks 6 + 6 |
#   PP=2 interleaved (2 chunks a rank), 4 and 8 micro-batches, virtual
#   stages of 4, 3, 4, 1 blocks (skipped with INTERLEAVED=0) | PP=2 with
#   the head split (pipeline_head_split -1), 4 and 8 micro-batches, blocks
#   6 + 6, and 8 micro-batches at 7 + 5; interleaved with the head split,
#   3 blocks a chunk, 4 and 8 micro-batches
# Each line: step time, tokens/s, the measured bubble (1 - the stages'
# compute / (2 x the longest stage's wall time)), 1F1B's (p - 1) /
# (m + p - 1) for equal stages, and the bubble 1F1B gives stages of the
# measured compute times (simulate_pipeline).
#
#   bash bench/train/run_pp.sh [ROUNDS]      (ROUNDS defaults to 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
batch=${BATCH:-8}
seq=${SEQ:-128}
py=$(bash tools/test-venv.sh build --hf)
cmake --build build -j2 --target bench_pp oslo-run >/dev/null
out=build/bench-train
mkdir -p "$out"
: >"$out/pp-log"
: >"$out/pp-results.jsonl"
models=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/pp-log" | tail -1)
m=$models/f32
run=build/tools/oslo-run/oslo-run
bin=build/bench/train/bench_pp
args=(--seq "$seq" --batch "$batch" --steps 1 --warmup 1 --threads 1)
row() {
  local name=$1
  shift
  "$@" 2>>"$out/pp-log" | sed -n "s/^{/{\"row\": \"$name\", /p" | tee -a "$out/pp-results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(date -u +%F' '%H:%M) UTC"
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds"
  row "PP=1, 1 thread" "$bin" "$m" "${args[@]}"
  row "PP=2, m=4, blocks 9+3" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" --micro 4 \
    --layers 9,3
  row "PP=2, m=8, blocks 9+3" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" --micro 8 \
    --layers 9,3
  row "PP=2, m=8, blocks 6+6" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" --micro 8
  # The head split: the first stage also runs the head of each micro-batch's
  # first tokens (the share that equalises the stages' products).
  row "PP=2, m=4, blocks 6+6, head split" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
    --micro 4 --head-split -1
  row "PP=2, m=8, blocks 6+6, head split" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
    --micro 8 --head-split -1
  row "PP=2, m=8, blocks 7+5, head split" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
    --micro 8 --layers 7,5 --head-split -1
  [ "${INTERLEAVED:-1}" = 1 ] || continue
  # Interleaved: 2 chunks a rank, virtual stages of 4, 3, 4, 1 blocks (rank 0
  # holds 8, rank 1 4 and the head).
  row "PP=2, V=2, m=4, blocks 4+3+4+1" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
    --micro 4 --virtual 2 --layers 4,3,4,1
  row "PP=2, V=2, m=8, blocks 4+3+4+1" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
    --micro 8 --virtual 2 --layers 4,3,4,1
  # Interleaved with the head split: 3 blocks a chunk.
  row "PP=2, V=2, m=4, blocks 3+3+3+3, head split" "$run" --nproc-per-node 2 "$bin" "$m" \
    "${args[@]}" --micro 4 --virtual 2 --layers 3,3,3,3 --head-split -1
  row "PP=2, V=2, m=8, blocks 3+3+3+3, head split" "$run" --nproc-per-node 2 "$bin" "$m" \
    "${args[@]}" --micro 8 --virtual 2 --layers 3,3,3,3 --head-split -1
done
"$py" - "$out/pp-results.jsonl" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    rows.setdefault(j["row"], []).append(j)
base = [j["tokens_per_s"] for j in rows.get("PP=1, 1 thread", [])]
print("| row | rounds | step s best | median | tokens/s median | tokens/s / PP=1 (median) | bubble median | theory (equal stages) | measured / theory | 1F1B for these stages | measured / that | stage compute s |")
print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- |")
for name, js in rows.items():
    s = sorted(j["step_s"] for j in js)
    tps = statistics.median(j["tokens_per_s"] for j in js)
    ratio = tps / statistics.median(base) if base else float("nan")
    bub = statistics.median(j["bubble"] for j in js)
    th = js[-1]["bubble_theory"]
    rel = bub / th if th > 0 else float("nan")
    st = statistics.median(j["bubble_these_stages"] for j in js)
    rel_st = bub / st if st > 0 else float("nan")
    comp = " / ".join(f"{c:.2f}" for c in js[-1]["stage_compute_s"])
    print(f"| {name} | {len(js)} | {s[0]:.2f} | {statistics.median(s):.2f} | {tps:.1f} | "
          f"{ratio:.3f} | {bub:.3f} | {th:.3f} | {rel:.3f} | {st:.3f} | {rel_st:.3f} | {comp} |")
PY
