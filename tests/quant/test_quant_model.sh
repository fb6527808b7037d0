#!/bin/bash
# The quantized-model oracle: a fixture loaded with a block-quantized dtype
# (its linear weights quantized at load, each rank its own slice) against
# transformers' forward of the same fixture with those weights quantized and
# dequantized by llama.cpp's gguf-py (dequant_fixture.py, hf_quant_refs.py),
# at each TP size, twice:
#  - with OSLO_FUSED_OPS=0 (the core's composition: the weights dequantized,
#    then an f32 product): logits and hidden states within 1e-4, greedy
#    tokens equal -- the loading, slicing and quantization are exact;
#  - with the backend's matmul_quant kernel (activations quantized to 8 bits
#    per block of 32, as llama.cpp does): logits and hidden states within
#    TOL (no greedy check: the tiny random models' top-2 gaps are smaller
#    than that error).
# The K-quants (q4_k, q6_k), which gguf-py cannot quantize, take their
# blocks from `oslo quantize` at TP 1 (--oslo BIN; oslo's quantizers are
# llama.cpp's bit for bit: quant_kquant_golden) and gguf-py dequantizes
# them. --make NAME first makes the fixture NAME with tests/models/
# make_fixtures.py (PY_HF) in the work folder (FIXTURE is then ignored):
# llama-kq, whose rows are whole 256-element super-blocks at TP 1 and 2.
#
#   test_quant_model.sh [--oslo BIN] [--make NAME] PY PY_HF MODEL_REF_TEST FIXTURE DTYPE TOL TP...
set -euo pipefail
oslo="" make=""
while [ $# -gt 0 ]; do
  case $1 in
    --oslo) oslo=$2; shift 2 ;;
    --make) make=$2; shift 2 ;;
    *) break ;;
  esac
done
py=$1 pyhf=$2 bin=$3 fixture=$4 dtype=$5 tol=$6
shift 6
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/oslo-quant-model.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "$make" ]; then
  "$pyhf" "$here/../models/make_fixtures.py" --out "$work" --only "$make"
  fixture=$work/$make
fi
blocks=()
if [ -n "$oslo" ]; then
  "$oslo" quantize "$fixture" "$work/blocks" --dtype "$dtype"
  blocks=(--blocks "$work/blocks")
fi
"$py" "$here/dequant_fixture.py" "$fixture" "$work/dq" --dtype "$dtype" "${blocks[@]}"
"$pyhf" "$here/hf_quant_refs.py" "$work/dq" "$fixture" "$work/ref.safetensors"
"$pyhf" "$here/hf_quant_refs.py" "$work/dq" "$fixture" "$work/ref-nogreedy.safetensors" --no-greedy
for tp in "$@"; do
  OSLO_FUSED_OPS=0 "$bin" "$fixture" --tp "$tp" --dtype "$dtype" --tol 1e-4 \
    --ref "$work/ref.safetensors"
  OSLO_FUSED_OPS=1 "$bin" "$fixture" --tp "$tp" --dtype "$dtype" --tol "$tol" \
    --ref "$work/ref-nogreedy.safetensors"
done
