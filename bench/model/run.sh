#!/usr/bin/env bash
# Benchmark 7: GPT-2-small-shaped model (124M, random weights), batch 1, f32
# and bf16, against Hugging Face transformers (torch CPU) and llama.cpp
# (llama-cpp-python built from source) in the same run:
#   1. prefill (512 tokens) and decode (128 after 32) tokens/s at TP=1, 2 threads
#   2. decode time per token against the memory-bandwidth bound
#   3. decode at TP=2 (2 processes x 1 thread) against TP=1 (1 and 2 threads)
#   4. peak resident memory per rank against weights/TP + KV cache + activations
#
#   bash bench/model/run.sh [ROUNDS]      (ROUNDS defaults to 5)
#
# For each dtype the engines run interleaved, ROUNDS rounds, each round in
# the same order: transformers (2 threads), llama.cpp (2 threads), oslo TP=1
# (2 threads), the same with every fused op composed (OSLO_FUSED_OPS=0),
# oslo TP=2 (oslo-run, 2 processes x 1 thread), then the 1-thread rows,
# transformers and oslo TP=1 (no 1-thread llama.cpp row; ONE_THREAD=0 skips
# them; HF=0 leaves transformers out, e.g. to re-measure oslo against
# llama.cpp quickly: transformers' bf16 prefill takes over a minute on a CPU
# without AVX-512). Each
# is a fresh process that warms up and then measures REPS times (default 1)
# and prints one JSON line (its best of REPS); run.sh tags it with its row,
# prints it and keeps it in build/bench-model/results.jsonl. At the end,
# bench/model/summarize.py prints per dtype and row the best and the median
# over the rounds as a markdown table. Engines' stderr goes to
# build/bench-model/log.
#
# Needs build/ configured with OSLO_BUILD_BENCH=ON (built here), the HF venv
# (tools/test-venv.sh build --hf) and the llama.cpp venv
# (bench/model/llama_cpp_venv.sh: llama-cpp-python 0.3.36 built from source
# with -DGGML_NATIVE=ON, no BLAS, no CUDA, and llama.cpp's converter from the
# same sdist; the first time it takes minutes, see docs/BENCHMARKS.md
# section 7). The GGUF files (build/bench-gpt2/{f32,bf16}.gguf) are made from
# the same model folders with that converter (bench/model/make_gguf.py,
# --outtype f32 / bf16). Not part of CI (.ci/run): the llama.cpp build is long.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
reps=${REPS:-1}
one_thread=${ONE_THREAD:-1}
hf=${HF:-1}
py=$(bash tools/test-venv.sh build --hf)
lpy=$(bash bench/model/llama_cpp_venv.sh build)
cmake --build build -j2 --target bench_model oslo-run >/dev/null
out=build/bench-model
mkdir -p "$out"
: >"$out/log"
trap 'echo "failed; the end of $out/log:" >&2; tail -20 "$out/log" >&2' ERR
models=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/log" | tail -1)
for dt in f32 bf16; do
  "$lpy" bench/model/make_gguf.py "$(dirname "$lpy")/../llama.cpp-convert" \
    "$models/$dt" "$models/$dt.gguf" "$dt" >>"$out/log" 2>&1
done
run=build/tools/oslo-run/oslo-run
bin=build/bench/model/bench_model
: >"$out/results.jsonl"
# Runs one engine, tags its JSON line with the row name, prints and keeps it.
row() {
  local name=$1
  shift
  "$@" 2>>"$out/log" | sed -n "s/^{/{\"row\": \"$name\", /p" | tee -a "$out/results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
for dt in f32 bf16; do
  m=$models/$dt
  for r in $(seq "$rounds"); do
    echo "== $dt, round $r of $rounds"
    if [ "$hf" = 1 ]; then
      row "transformers, 2 threads" "$py" bench/model/hf_reference.py "$m" --threads 2 --dtype "$dt" --reps "$reps"
    fi
    row "llama.cpp, 2 threads" "$lpy" bench/model/llama_cpp_reference.py "$m.gguf" --threads 2 --reps "$reps"
    row "oslo TP=1, 2 threads" "$bin" "$m" --threads 2 --reps "$reps"
    row "oslo TP=1, 2 threads, composed" env OSLO_FUSED_OPS=0 "$bin" "$m" --threads 2 --reps "$reps"
    row "oslo TP=2, 2 x 1 thread" "$run" --nproc-per-node 2 "$bin" "$m" --threads 1 --reps "$reps"
    if [ "$one_thread" = 1 ] && [ "$hf" = 1 ]; then
      row "transformers, 1 thread" "$py" bench/model/hf_reference.py "$m" --threads 1 --dtype "$dt" --reps "$reps"
      row "oslo TP=1, 1 thread" "$bin" "$m" --threads 1 --reps "$reps"
    fi
  done
done
echo
echo "best and median of $rounds round(s), tokens/s (REPS=$reps per process):"
"$py" bench/model/summarize.py "$out/results.jsonl"
