#!/bin/sh
# `oslo generate --device cuda` and `--device cuda:0` print the tokens
# `--device cpu` prints (greedy, a fixture model).
# Usage: cli_cuda.sh OSLO_BINARY MODEL_DIR
set -u
oslo=$1 model=$2
gen="generate --model $model --prompt-ids 1,2,3 --max-new-tokens 8 --ids"
cpu=$("$oslo" $gen --device cpu) || { echo "FAIL: --device cpu"; exit 1; }
for d in cuda cuda:0; do
  got=$("$oslo" $gen --device $d) || { echo "FAIL: --device $d exited $?"; exit 1; }
  if [ "$got" != "$cpu" ]; then
    echo "FAIL: --device $d printed '$got', --device cpu '$cpu'"
    exit 1
  fi
done
echo "oslo generate --device cuda: $cpu (same as cpu): passed"
