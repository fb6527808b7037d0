#!/bin/sh
# The GGUF fixtures against llama.cpp run now: make_llama_cpp_refs.py --check
# with PYTHON (llama-cpp-python) writes llama.cpp's logits, greedy tokens and
# tokenize() ids for every fixture, then gguf_model_test compares oslo with
# them (the same checks as the gguf_model_llama_cpp_* tests, which use the
# committed references). Exit 77 (skipped) when PYTHON has no llama_cpp.
# gpt2-tiny-q8_0.gguf is left out: on that fixture (random weights of std
# 0.2, logits of at most 5) the two sides' 8-bit activation rounding moves
# the logits by 0.04-0.08, past the 0.01 x max |logit| tolerance, and every
# greedy step is a near-tie by the test's rule; its blocks are checked by
# gguf_model_gpt2_q8_0_blocks_* and its f32 twin is compared here.
#   test_live.sh PYTHON SRC_DIR GGUF_MODEL_TEST WORK_DIR
set -eu
py=$1 src=$2 bin=$3 work=$4
if [ ! -x "$py" ] || ! "$py" -c "import llama_cpp" 2>/dev/null; then
  echo "skipped: no llama-cpp-python at $py (make it with bench/model/llama_cpp_venv.sh)"
  exit 77
fi
mkdir -p "$work"
"$py" "$src/make_llama_cpp_refs.py" --check unused "$src/fixtures" "$work/refs.json" 2>"$work/llama.log"
fail=0
for f in "$src"/fixtures/*.gguf; do
  [ "$(basename "$f")" = gpt2-tiny-q8_0.gguf ] && continue
  "$bin" llama "$work/refs.json" "$src/fixtures" "$(basename "$f")" keep || fail=1
done
exit $fail
