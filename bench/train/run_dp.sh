#!/usr/bin/env bash
# Issue 17's data-parallel benchmark: the GPT-2-small-shaped model of
# bench/train/run.sh (random weights, f32), seq 256, per-rank batch BATCH
# (default 2), one training step through the Trainer (loss, backward with
# the bucketed reduction, clipping, AdamW). Rows, interleaved in the same
# order every round, each a fresh process (one untimed step, then one
# timed):
#   DP=1, 1 thread | two DP=1 processes at once (the control: what
#   sharing the two cores and the memory costs with no reduction at all) |
#   DP=2 (oslo-run, 2 processes x 1 thread) ZeRO-0 with
#   buckets of 25 MiB, 5 MiB and 100 MiB | DP=2 ZeRO-1 | ZeRO-2 | ZeRO-3
# Each line: step time, tokens/s over both ranks, the reduction left
# exposed after the backward, peak RSS per rank against the ZeRO formula
# plus activations.
#
#   bash bench/train/run_dp.sh [ROUNDS]      (ROUNDS defaults to 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
batch=${BATCH:-2}
py=$(bash tools/test-venv.sh build --hf)
cmake --build build -j2 --target bench_dp oslo-run >/dev/null
out=build/bench-train
mkdir -p "$out"
: >"$out/dp-log"
: >"$out/dp-results.jsonl"
models=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/dp-log" | tail -1)
m=$models/f32
run=build/tools/oslo-run/oslo-run
bin=build/bench/train/bench_dp
args=(--seq 256 --batch "$batch" --steps 1 --warmup 1 --threads 1)
row() {
  local name=$1
  shift
  "$@" 2>>"$out/dp-log" | sed -n "s/^{/{\"row\": \"$name\", /p" | tee -a "$out/dp-results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(date -u +%F' '%H:%M) UTC"
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds"
  row "DP=1, 1 thread" "$bin" "$m" "${args[@]}"
  # The control: two independent DP=1 processes sharing the machine; the
  # slower one's step.
  "$bin" "$m" "${args[@]}" >"$out/dp-pair-a" 2>>"$out/dp-log" &
  "$bin" "$m" "${args[@]}" >"$out/dp-pair-b" 2>>"$out/dp-log"
  wait
  "$py" - "$out/dp-pair-a" "$out/dp-pair-b" <<'PY' | tee -a "$out/dp-results.jsonl"
import json, sys
js = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith("{")]
j = max(js, key=lambda j: j["step_s"])
j = {"row": "2 x DP=1 at once (no reduction)", **j}
print(json.dumps(j))
PY
  for mb in 25 5 100; do
    row "DP=2 ZeRO-0, ${mb} MiB buckets" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" \
      --bucket-mb "$mb"
  done
  for z in 1 2 3; do
    row "DP=2 ZeRO-$z" "$run" --nproc-per-node 2 "$bin" "$m" "${args[@]}" --zero "$z"
  done
done
"$py" - "$out/dp-results.jsonl" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    rows.setdefault(j["row"], []).append(j)
base = [j["step_s"] for j in rows.get("DP=1, 1 thread", [])]
print("| row | rounds | step s best | median | step / DP=1 step (median) | exposed after backward s (median) | peak RSS MiB | expected MiB | peak / expected | largest unit MiB | peak / (expected + unit) |")
print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
for name, js in rows.items():
    s = sorted(j["step_s"] for j in js)
    med = statistics.median(s)
    ratio = med / statistics.median(base) if base else float("nan")
    ex = statistics.median(j["exposed_after_backward_s"] for j in js)
    last = js[-1]
    print(f"| {name} | {len(js)} | {s[0]:.2f} | {med:.2f} | {ratio:.3f} | {ex:.3f} | "
          f"{last['peak_rss_mib']:.0f} | {last['expected_mib']:.0f} | {last['peak_over_expected']:.3f} | "
          f"{last['largest_unit_mib']:.0f} | {last['peak_over_expected_with_unit']:.3f} |")
PY
