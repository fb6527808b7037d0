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
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
fails=0 n=0

# ok NAME CMD...: the command succeeds (its output is in NAME.out/.err).
ok() {
  name=$1
  shift
  n=$((n + 1))
  if ! "$@" >"$name.out" 2>"$name.err"; then
    fails=$((fails + 1))
    echo "FAIL: $name: $* exited $?:"
    tail -n 20 "$name.err" | sed 's/^/  /'
    return 1
  fi
  return 0
}
# match NAME A B RTOL: logs A and B agree step by step.
match() {
  n=$((n + 1))
  if "$py" "$check" match "$2" "$3" 8 "$4" >"$1.out" 2>&1; then
    echo "$1: $(cat "$1.out")"
  else
    fails=$((fails + 1))
    echo "FAIL: $1: $(cat "$1.out")"
  fi
}
# expect STATUS NEEDLE CMD...: exits with STATUS and stderr holds NEEDLE.
expect() {
  want=$1 needle=$2
  shift 2
  n=$((n + 1))
  "$@" >err.out 2>err.txt
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -qF -- "$needle" err.txt; then
    fails=$((fails + 1))
    echo "FAIL: $* -> exit $got (want $want), stderr:"
    sed 's/^/  /' err.txt
    echo "  (wanted it to hold: $needle)"
  fi
}

sed -n '1,200p' "$src/README.md" >corpus.txt
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

echo "cli train on $dev: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ] || exit 1
rm -rf "$work"
