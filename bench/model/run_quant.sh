#!/usr/bin/env bash
# Issue 35's quantized decode benchmark: batch-1 decode speed of oslo against
# llama.cpp on the SAME .gguf file, for a GPT-2-small-shaped model
# (bench/model/make_gpt2_small.py, 124M, random weights) and a LLaMA-shaped
# one of the same size (bench/serve/make_llama_small.py: grouped-query
# attention, SwiGLU, RMSNorm, untied head), each in Q8_0, Q4_0 and Q4_K.
#
#   bash bench/model/run_quant.sh [ROUNDS]      (ROUNDS defaults to 5)
#
# The files, made once with llama.cpp's own tools from the f32 model
# folders (build/bench-quant/MODEL-FORMAT.gguf):
#   q8_0: llama.cpp's converter, --outtype q8_0 (bench/model/make_gguf.py);
#   q4_0, q4_k: llama.cpp's quantizer (llama_model_quantize, what
#     llama-quantize runs) from the f32 GGUF (make_gguf.py f32) with `pure`
#     set, so every 2-D weight is in the one type (bench/model/gguf_quant.py;
#     q4_k is ftype Q4_K_M made pure: no Q6_K tensors).
# What each file holds (tensor types counted, the head's type, the bytes of
# matrices a decode step reads) is printed before the rounds.
#
# Rows, per round, interleaved in this order for each model and format,
# each a fresh process on the same file, 2 threads or 2 x 1:
#   llama.cpp, 2 threads       (llama_cpp_reference.py --decode-only)
#   oslo TP=1, 2 threads       (bench_model --decode-only)
#   oslo TP=2, 2 x 1 thread    (oslo-run --nproc-per-node 2 bench_model)
# Decode is measured the way benchmark 7 (run.sh) measures it: a 32-token
# prompt of ids (i * 7919 + 13) % vocab, greedy, no EOS, (time of 129 new
# tokens - time of 1) / 128, best of REPS (default 1) per process after one
# warm-up call; both engines print the first 8 generated tokens, and the
# summary says in how many rounds oslo's equal llama.cpp's. oslo loads the
# .gguf with the default dtype: the blocks' linear weights stay in the
# file's block types and run through the backend's matmul_quant (int8 dot
# products on the CPU), the token table and the head too when the file
# stores them quantized (the head through matmul_quant, the lookup
# dequantizing only its rows; see README.md). A TP=2 row that cannot load (a Q4_K tensor whose
# tensor-parallel slice is not whole 256-element blocks, as the 768 x 384
# o_proj slice of these shapes) is recorded with oslo's error and the
# rounds go on.
#
# The bandwidth bound is benchmark 7's: bench_model measures the streaming
# read bandwidth of its threads after the decode (a 1 GiB buffer, best of
# 3) and divides the bytes of the matrices one decode step reads (here the
# GGUF file's own, in its types: --weight-bytes from gguf_quant.py describe)
# over TP by it; a llama.cpp row takes the bandwidth of the same round's
# oslo TP=1 row. The summary (bench/model/summarize_quant.py) prints per
# model, format and row the best and median decode tokens/s over the rounds,
# oslo / llama.cpp, and decode time / bound.
#
# Environment: PLAIN=1 adds a row, oslo TP=1 with OSLO_PREPACK=0 (the
# one-row kernels on the file's layout instead of the packed copies: the
# packed copies' gain in the same rounds); KV8=1 adds a row, oslo TP=1 with
# the int8 KV cache (--kv-dtype int8; llama.cpp's cache is f16, oslo's
# default f32); MODELS="gpt2 llama",
# FORMATS="q8_0 q4_0 q4_k" (subsets),
# REPS (default 1), BUILD_DIR (the build tree of bench_model and oslo-run,
# default build), BUILD=0 (run the binaries in BUILD_DIR as they are,
# without building bench_model and oslo-run first), PY / LPY: the interpreters of the HF venv
# (tools/test-venv.sh build --hf; only to make the model folders) and of the
# llama.cpp venv (bench/model/llama_cpp_venv.sh build: llama-cpp-python
# 0.3.36 built from source for this processor, the first time takes about
# 20 minutes), made when not given. Prints the machine, each run's JSON
# line (tagged with row, model, format, round and the 1-minute load
# average), then the summary. Results in build/bench-quant/results.jsonl
# and files.jsonl, the engines' stderr in build/bench-quant/log. Measure on
# an otherwise idle machine: llama.cpp's threads spin-wait between steps and
# lose far more than oslo's to a competing load.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
reps=${REPS:-1}
models=${MODELS:-gpt2 llama}
formats=${FORMATS:-q8_0 q4_0 q4_k}
py=${PY:-$(bash tools/test-venv.sh build --hf)}
lpy=${LPY:-$(bash bench/model/llama_cpp_venv.sh build)}
conv="$(dirname "$lpy")/../llama.cpp-convert"
bdir=${BUILD_DIR:-build}
if [ "${BUILD:-1}" = 1 ]; then cmake --build "$bdir" -j2 --target bench_model oslo-run >/dev/null; fi
out=build/bench-quant
mkdir -p "$out"
: >"$out/log"
trap 'echo "failed; the end of $out/log:" >&2; tail -20 "$out/log" >&2' ERR
run=$bdir/tools/oslo-run/oslo-run
bin=$bdir/bench/model/bench_model
declare -A file bytes
: >"$out/files.jsonl"
for name in $models; do
  case $name in
    gpt2) d=$("$py" bench/model/make_gpt2_small.py build/bench-gpt2 2>>"$out/log" | tail -1) ;;
    llama) d=$("$py" bench/serve/make_llama_small.py build/bench-llama 2>>"$out/log" | tail -1) ;;
    *) echo "unknown model $name (gpt2, llama)" >&2; exit 2 ;;
  esac
  "$lpy" bench/model/make_gguf.py "$conv" "$d/f32" "$d/f32.gguf" f32 >>"$out/log" 2>&1
  for fmt in $formats; do
    f=$out/$name-$fmt.gguf
    case $fmt in
      q8_0) "$lpy" bench/model/make_gguf.py "$conv" "$d/f32" "$f" q8_0 >>"$out/log" 2>&1 ;;
      q4_0 | q4_k) "$lpy" bench/model/gguf_quant.py quantize "$d/f32.gguf" "$f" "$fmt" >>"$out/log" 2>&1 ;;
      *) echo "unknown format $fmt (q8_0, q4_0, q4_k)" >&2; exit 2 ;;
    esac
    file[$name/$fmt]=$f
    desc=$("$lpy" bench/model/gguf_quant.py describe "$f" 2>>"$out/log")
    echo "$desc" | sed "s/^{/{\"model\": \"$name\", \"format\": \"$fmt\", /" >>"$out/files.jsonl"
    bytes[$name/$fmt]=$("$lpy" -c 'import json, sys; print(json.loads(sys.argv[1])["weight_bytes"])' "$desc")
  done
done
: >"$out/results.jsonl"
# Runs one engine, tags its JSON line (or, when it fails, its error: the
# first line of its stderr that says why) with row, model, format, round
# and load average, prints and keeps it.
row() {
  local name=$1 model=$2 fmt=$3 round=$4 load line mark
  shift 4
  load=$(cut -d' ' -f1 /proc/loadavg)
  mark=$(wc -l <"$out/log")
  echo "== $model $fmt round $round: $name" >>"$out/log"
  line=$("$@" 2>>"$out/log" | grep '^{' | tail -1) || true
  if [ -z "$line" ]; then
    line=$("$lpy" -c 'import json, sys; print(json.dumps({"error": sys.argv[1][:400]}))' \
      "$(tail -n +"$((mark + 2))" "$out/log" | grep -m1 -iE 'error|fail' || echo 'no output')")
  fi
  echo "$line" |
    sed "s/^{/{\"row\": \"$name\", \"model\": \"$model\", \"format\": \"$fmt\", \"round\": $round, \"load1\": $load, /" |
    tee -a "$out/results.jsonl"
}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores), $(date -u +%F' '%H:%M) UTC"
echo "files (matrices read per decode step in the file's types, as oslo holds them):"
cat "$out/files.jsonl"
for r in $(seq "$rounds"); do
  for name in $models; do
    for fmt in $formats; do
      f=${file[$name/$fmt]}
      b=${bytes[$name/$fmt]}
      echo "== $name $fmt, round $r of $rounds"
      row "llama.cpp, 2 threads" "$name" "$fmt" "$r" \
        "$lpy" bench/model/llama_cpp_reference.py "$f" --threads 2 --reps "$reps" --decode-only
      row "oslo TP=1, 2 threads" "$name" "$fmt" "$r" \
        "$bin" "$f" --threads 2 --reps "$reps" --decode-only --weight-bytes "$b"
      row "oslo TP=2, 2 x 1 thread" "$name" "$fmt" "$r" \
        "$run" --nproc-per-node 2 "$bin" "$f" --threads 1 --reps "$reps" --decode-only --weight-bytes "$b"
      if [ "${PLAIN:-0}" = 1 ]; then
        row "oslo TP=1, 2 threads, OSLO_PREPACK=0" "$name" "$fmt" "$r" \
          env OSLO_PREPACK=0 "$bin" "$f" --threads 2 --reps "$reps" --decode-only --weight-bytes "$b"
      fi
      if [ "${KV8:-0}" = 1 ]; then
        row "oslo TP=1, 2 threads, int8 KV" "$name" "$fmt" "$r" \
          "$bin" "$f" --threads 2 --reps "$reps" --decode-only --weight-bytes "$b" --kv-dtype int8
      fi
    done
  done
done
echo
echo "best and median of $rounds round(s), decode tokens/s (REPS=$reps per process):"
"$lpy" bench/model/summarize_quant.py "$out/results.jsonl" "$out/files.jsonl"
