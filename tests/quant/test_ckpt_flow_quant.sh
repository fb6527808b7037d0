#!/bin/sh
# Parallel checkpoints of a quantized model, ranks as processes: the fixture
# loaded in DTYPE (linear weights quantized at load) and saved at TP 2 keeps
# its blocks (manifest "quant"); loading it (dtype kept) at TP 2 and 1 gives
# outputs bitwise those of the fixture quantized at load at the same size;
# reshard 2 -> 1 keeps the blocks too; TP 4 would cut the tiny fixture's
# rows of 64 into 16s, inside a block, and is refused by name; merge writes
# a Hugging Face folder with the weights dequantized, within TOL of the
# quantized model.
# Usage: test_ckpt_flow_quant.sh OSLO_RUN TEST_BIN FIXTURE WORKDIR DTYPE TOL
set -eu
run=$1 bin=$2 fix=$3 work=$4 dtype=$5 tol=$6
export OSLO_TEST_MODEL_DTYPE="$dtype"
rm -rf "$work"
mkdir -p "$work"
"$run" --nproc-per-node 2 "$bin" save "$fix" "$work/tp2"
grep -q "\"quant\": \"$dtype\"" "$work/tp2/oslo_checkpoint.json" || {
  echo "FAIL: the manifest records no $dtype tensor"
  exit 1
}
"$run" --nproc-per-node 2 "$bin" same "$fix" "$work/tp2"
"$run" --nproc-per-node 1 "$bin" same "$fix" "$work/tp2"
if "$run" --nproc-per-node 4 "$bin" same "$fix" "$work/tp2" \
  >"$work/tp4.log" 2>&1; then
  echo "FAIL: loading the $dtype checkpoint at TP 4 (rows cut inside blocks) was not refused"
  exit 1
fi
grep -q "not whole blocks of" "$work/tp4.log" || {
  echo "FAIL: TP 4 was refused, but not by name:"
  cat "$work/tp4.log"
  exit 1
}
"$bin" reshard "$work/tp2" "$work/tp1" 1
grep -q "\"quant\": \"$dtype\"" "$work/tp1/oslo_checkpoint.json"
"$run" --nproc-per-node 1 "$bin" same "$fix" "$work/tp1"
"$run" --nproc-per-node 2 "$bin" same "$fix" "$work/tp1"
"$bin" merge "$work/tp2" "$work/merged" "$fix"
OSLO_TEST_SAME_TOL="$tol" "$run" --nproc-per-node 2 "$bin" same "$fix" "$work/merged"
rm -rf "$work"
echo "quantized checkpoint flow ok"
