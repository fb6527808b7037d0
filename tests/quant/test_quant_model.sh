#!/bin/bash
# The quantized-model oracle: a fixture loaded with a block-quantized dtype
# (its linear weights quantized at load, each rank its own slice) against
# transformers' forward of the same fixture with those weights quantized and
# dequantized by llama.cpp's gguf-py (dequant_fixture.py, hf_quant_refs.py):
# logits and hidden states within TOL, greedy tokens equal, at each TP size.
#
#   test_quant_model.sh PY PY_HF MODEL_REF_TEST FIXTURE DTYPE TOL TP...
set -euo pipefail
py=$1 pyhf=$2 bin=$3 fixture=$4 dtype=$5 tol=$6
shift 6
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/oslo-quant-model.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$py" "$here/dequant_fixture.py" "$fixture" "$work/dq" --dtype "$dtype"
"$pyhf" "$here/hf_quant_refs.py" "$work/dq" "$fixture" "$work/ref.safetensors"
for tp in "$@"; do
  "$bin" "$fixture" --tp "$tp" --dtype "$dtype" --tol "$tol" --ref "$work/ref.safetensors"
done
