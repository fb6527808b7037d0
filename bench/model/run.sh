#!/usr/bin/env bash
# Benchmark 7: GPT-2-small-shaped model (124M, random weights), batch 1, f32
# and bf16, against Hugging Face transformers on torch CPU in the same run:
#   1. prefill (512 tokens) and decode (128 after 32) tokens/s at TP=1, 2 threads
#   2. decode time per token against the memory-bandwidth bound
#   3. decode at TP=2 (2 processes x 1 thread) against TP=1 (1 and 2 threads)
#   4. peak resident memory per rank against weights/TP + KV cache + activations
# Needs build/ with OSLO_BUILD_BENCH=ON and the HF venv (made here).
#   bash bench/model/run.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-3}
py=$(bash tools/test-venv.sh build --hf)
cmake --build build -j2 --target bench_model oslo-run >/dev/null
models=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>/dev/null | tail -1)
run=build/tools/oslo-run/oslo-run
bin=build/bench/model/bench_model
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
for dt in f32 bf16; do
  m=$models/$dt
  echo "== $dt"
  "$py" bench/model/hf_reference.py "$m" --threads 2 --dtype "$dt" --reps "$reps" 2>/dev/null
  "$bin" "$m" --threads 2 --reps "$reps"
  "$py" bench/model/hf_reference.py "$m" --threads 1 --dtype "$dt" --reps "$reps" 2>/dev/null
  "$bin" "$m" --threads 1 --reps "$reps"
  "$run" --nproc-per-node 2 "$bin" "$m" --threads 1 --reps "$reps"
done
