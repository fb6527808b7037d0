#!/usr/bin/env bash
# Issue 33's serving benchmark: 64 requests with mixed prompt (32-512) and
# output (16-256) lengths, drawn from a fixed seed (bench_serve --seed 1),
# all arriving together, greedy, EOS ignored (an empty EOS list: every
# request runs its full output length), f32, CPU, 2 threads, on two models
# of about 124M parameters with random weights: GPT-2 small's shape
# (bench/model/make_gpt2_small.py) and a LLaMA shape with grouped-query
# attention (bench/serve/make_llama_small.py). Rows, interleaved in the same
# order every round, each a fresh process:
#   oslo engine, 2 threads                  (bench_serve --mode engine)
#   oslo generate request by request, 2 threads (--mode sequential: the
#                                            baseline of the >= 3x goal)
#   transformers continuous batching, 2 threads (hf_cb_reference.py)
#   llama.cpp continuous batching, 2 threads    (llama_cpp_cb_reference.py)
# Before the rounds, once per model: the prefix-reuse measure (32 requests
# sharing a 400-token system prompt, prompt tokens computed with prefix
# caching against without: bench_serve --mode prefix; counts, not times).
# The engine row checks its tokens against oslo_model_generate first and
# fails otherwise.
#
#   bash bench/serve/run.sh [ROUNDS]      (ROUNDS defaults to 5)
#
# Environment: MODELS="gpt2 llama" (either or both); HF=0 leaves out
# transformers, LLAMA_CPP=0 llama.cpp; LLAMA_CPP_KV=slot (default: a KV
# stream per slot) or unified (one KV cache for every slot); SLOW_ROUNDS=N runs the slow rows
# (request by request, transformers) only in the first N rounds (default:
# every round); PY / LPY: the interpreters of the HF venv
# (tools/test-venv.sh build --hf) and of the llama.cpp venv
# (bench/model/llama_cpp_venv.sh build: llama-cpp-python 0.3.36 built from
# source, the first time takes about 20 minutes), made when not given.
# Prints the machine, each row's JSON line (with the 1-minute load average
# when it started), then per model and row the best and median over the
# rounds and the ratios of the engine's median to the others'. Results in
# build/bench-serve/results.jsonl, the engines' stderr in build/bench-serve/log.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
slow_rounds=${SLOW_ROUNDS:-$rounds}
models=${MODELS:-gpt2 llama}
hf=${HF:-1}
llama_cpp=${LLAMA_CPP:-1}
llama_cpp_kv=${LLAMA_CPP_KV:-slot}
py=${PY:-$(bash tools/test-venv.sh build --hf)}
if [ "$llama_cpp" = 1 ]; then lpy=${LPY:-$(bash bench/model/llama_cpp_venv.sh build)}; fi
cmake --build build -j2 --target bench_serve >/dev/null
out=build/bench-serve
mkdir -p "$out"
: >"$out/log"
: >"$out/results.jsonl"
trap 'echo "failed; the end of $out/log:" >&2; tail -20 "$out/log" >&2' ERR
bin=build/bench/serve/bench_serve
declare -A dir
for name in $models; do
  case $name in
    gpt2) d=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/log" | tail -1) ;;
    llama) d=$("$py" bench/serve/make_llama_small.py build/bench-llama 2>>"$out/log" | tail -1) ;;
    *) echo "unknown model $name (gpt2, llama)" >&2; exit 2 ;;
  esac
  dir[$name]=$d/f32
  "$bin" "${dir[$name]}" --mode workload --out "$out/workload-$name.txt" 2>>"$out/log"
  if [ "$llama_cpp" = 1 ]; then
    "$lpy" bench/model/make_gguf.py "$(dirname "$lpy")/../llama.cpp-convert" \
      "${dir[$name]}" "${dir[$name]}.gguf" f32 >>"$out/log" 2>&1
  fi
done
# Runs one row, tags its JSON line with the row, the model and the load
# average, prints and keeps it.
row() {
  local name=$1 model=$2 load
  shift 2
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$@" 2>>"$out/log" |
    sed -n "s/^{/{\"row\": \"$name\", \"model\": \"$model\", \"load1\": $load, /p" |
    tee -a "$out/results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(date -u +%F' '%H:%M) UTC"
for name in $models; do
  row "oslo engine, prefix reuse" "$name" "$bin" "${dir[$name]}" --mode prefix --threads 2
done
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for name in $models; do
    m=${dir[$name]}
    w=$out/workload-$name.txt
    row "oslo engine, 2 threads" "$name" "$bin" "$m" --mode engine --workload "$w" --threads 2
    if [ "$r" -le "$slow_rounds" ]; then
      row "oslo generate request by request, 2 threads" "$name" \
        "$bin" "$m" --mode sequential --workload "$w" --threads 2
      if [ "$hf" = 1 ]; then
        row "transformers continuous batching, 2 threads" "$name" \
          "$py" bench/serve/hf_cb_reference.py "$m" "$w" --threads 2
      fi
    fi
    if [ "$llama_cpp" = 1 ]; then
      row "llama.cpp continuous batching ($llama_cpp_kv KV), 2 threads" "$name" \
        "$lpy" bench/serve/llama_cpp_cb_reference.py "$m.gguf" "$w" --threads 2 \
        --kv "$llama_cpp_kv"
    fi
  done
done
echo
echo "best and median over the rounds:"
"$py" bench/serve/summarize.py "$out/results.jsonl"
