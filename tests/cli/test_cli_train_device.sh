#!/bin/sh
# `oslo train` on a device backend against `--device cpu`: the same data and
# every step's loss and gradient norm (check_train.py match) on the gpt2-tiny
# fixture, 8 steps of AdamW with warmup, cosine decay, clipping and
# --grad-accum 2:
#   world 1, with and without --activation-checkpointing (f32: RTOL), and
#     in bf16 and f16 with loss scaling (NARROW_RTOL);
#   2 processes sharing the device (--communicator host): --tp 2, and --dp 2
#     --zero 1, each against the CPU at the same layout (RTOL);
#   --communicator backend on the CPU (no communicators of its own) and a bad
#     --communicator: named errors.
# DEVICE is the options that pick the device: "--backend guard" here (the
# guard test backend: memory the host cannot read, the code path of a GPU;
# ctest cli_train_device_guard), "--device cuda" on a GPU
# (tools/gpu-check.sh). The tolerances: test_backend_curve.cpp, docs/MODELS.md.
# Usage: test_cli_train_device.sh OSLO OSLO_RUN FIXTURE SOURCE_DIR WORKDIR PYTHON DEVICE
#                                 [RTOL [NARROW_RTOL]]
set -u
oslo=$1 run=$2 fix=$3 src=$4 work=$5 py=$6 dev=$7 rtol=${8:-1e-5} nrtol=${9:-2e-2}
here=$(cd "$(dirname "$0")" && pwd)
check="$here/check_train.py"
# shellcheck source=tests/cli/train_common.sh
. "$here/train_common.sh"
# match NAME A B RTOL: logs A and B agree step by step.
match() {
  check_run "$1" - "$py" "$check" match "$2" "$3" 8 "$4"
}

common="--model $fix --data corpus.txt --seq-len 32 --batch-size 4 --grad-accum 2 --steps 8 \
--lr 3e-3 --warmup 2 --schedule cosine --weight-decay 0.01 --max-grad-norm 1.0 --threads 1"

# World 1.
ok cpu1 "$oslo" train $common --log cpu1.jsonl &&
  ok dev1 "$oslo" train $common $dev --log dev1.jsonl && match dev1_vs_cpu dev1.jsonl cpu1.jsonl "$rtol"
ok dev1_ac "$oslo" train $common $dev --activation-checkpointing --log dev1ac.jsonl &&
  match dev1_checkpointing_vs_cpu dev1ac.jsonl cpu1.jsonl "$rtol"
for dt in bf16 f16; do
  ok cpu1_$dt "$oslo" train $common --dtype $dt --log cpu1_$dt.jsonl &&
    ok dev1_$dt "$oslo" train $common $dev --dtype $dt --activation-checkpointing \
      --log dev1_$dt.jsonl && match dev1_${dt}_vs_cpu dev1_$dt.jsonl cpu1_$dt.jsonl "$nrtol"
done
# Two processes sharing the device through the host transports.
ok cpu_tp2 "$run" --nproc-per-node 2 "$oslo" train $common --tp 2 --log cpu_tp2.jsonl &&
  ok dev_tp2 "$run" --nproc-per-node 2 "$oslo" train $common $dev --communicator host --tp 2 \
    --log dev_tp2.jsonl && match dev_tp2_vs_cpu dev_tp2.jsonl cpu_tp2.jsonl "$rtol"
ok cpu_dp2 "$run" --nproc-per-node 2 "$oslo" train $common --dp 2 --batch-size 2 --zero 1 \
  --log cpu_dp2.jsonl &&
  ok dev_dp2 "$run" --nproc-per-node 2 "$oslo" train $common $dev --communicator host --dp 2 \
    --batch-size 2 --zero 1 --log dev_dp2.jsonl && match dev_dp2_vs_cpu dev_dp2.jsonl cpu_dp2.jsonl "$rtol"
# Named errors.
expect 2 "--communicator must be auto, backend or host, got \"nccl\"" "$oslo" train $common \
  --communicator nccl
expect 1 "backend 'cpu' has no communicator of its own for group world" "$oslo" train $common \
  --communicator backend

finish "cli train on $dev"
