#!/bin/sh
# `oslo train` end to end on the gpt2-tiny fixture, with part of README.md as
# the corpus: at TP=2 under oslo-run the loss goes down and the log is valid
# JSON lines; TP=1 gives the same data and losses (1e-4); the data order
# depends on --seed only; --grad-accum 2 with half the batch and
# --activation-checkpointing give the same losses; .jsonl data; named errors
# on every rank for bad inputs; the saved checkpoint merges into a folder
# transformers loads (its greedy tokens equal oslo generate's) and oslo
# generate runs on it; --resume continues bit-exactly; --dtype bf16 and f16
# train.
# Usage: test_cli_train.sh OSLO OSLO_RUN FIXTURE SOURCE_DIR WORKDIR RUN_PY PYTHON PYTHON_HF
set -u
oslo=$1 run=$2 fix=$3 src=$4 work=$5 runpy=$6 py=$7 pyhf=$8
here=$(cd "$(dirname "$0")" && pwd)
check="$here/check_train.py"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
fails=0 n=0 skips=0

# ok NAME CMD...: the command succeeds (its output is in NAME.out/.err).
ok() {
  name=$1
  shift
  n=$((n + 1))
  if ! "$@" >"$name.out" 2>"$name.err"; then
    fails=$((fails + 1))
    echo "FAIL: $name: $* exited $?:"
    tail -n 20 "$name.err" | sed 's/^/  /'
    tail -n 5 "$name.out" | sed 's/^/  /'
    return 1
  fi
  return 0
}
# pycheck NAME ARGS...: check_train.py ARGS holds (77: skipped).
pycheck() {
  name=$1
  shift
  n=$((n + 1))
  sh "$runpy" "$pyhf" "$check" "$@" >"$name.out" 2>&1
  rc=$?
  cat "$name.out"
  if [ $rc = 77 ]; then
    skips=$((skips + 1))
  elif [ $rc != 0 ]; then
    fails=$((fails + 1))
    echo "FAIL: $name"
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
common="--model $fix --data corpus.txt --seq-len 32 --batch-size 4 --lr 3e-3 --warmup 2"

# TP=2 under oslo-run: saves at step 10 and at the end; the log in the save dir.
ok tp2 "$run" --nproc-per-node 2 "$oslo" train $common --steps 20 --save ckpt --save-every 10 &&
  grep -q "saved ckpt" tp2.err &&
  pycheck log_tp2 log ckpt/train_log.jsonl 20 && pycheck loss_tp2 decreases ckpt/train_log.jsonl
grep "trained" tp2.err
# TP=1: the same data and losses.
ok tp1 "$oslo" train $common --steps 20 --log tp1.jsonl &&
  pycheck tp1_vs_tp2 same tp1.jsonl ckpt/train_log.jsonl 20 1e-4
# The data order: the same for the same seed, another for another seed.
ok seed0 "$oslo" train $common --steps 4 --seed 0 --log seed0.jsonl &&
  pycheck seed0_again same seed0.jsonl tp1.jsonl 4 1e-4
ok seed1 "$oslo" train $common --steps 4 --seed 1 --log seed1.jsonl &&
  pycheck seed1_differs differs seed1.jsonl seed0.jsonl 4
# --grad-accum 2 with half the batch: the same rows per step, the same losses.
ok accum "$oslo" train --model $fix --data corpus.txt --seq-len 32 --batch-size 2 --grad-accum 2 \
  --lr 3e-3 --warmup 2 --steps 20 --log accum.jsonl &&
  pycheck accum_losses same accum.jsonl tp1.jsonl 10 1e-4
# Activation checkpointing: bitwise-equal gradients, the same losses.
# (--steps sets the schedule: compare runs of equal --steps.)
ok ac "$run" --nproc-per-node 2 "$oslo" train $common --steps 4 --activation-checkpointing \
  --log ac.jsonl && pycheck ac_losses same ac.jsonl seed0.jsonl 4 1e-4
# Other options run: .jsonl data, SGD with momentum and a cosine schedule.
"$py" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        print(json.dumps({"text": line.rstrip("\n")}))' corpus.txt >corpus.jsonl
ok jsonl "$oslo" train --model $fix --data corpus.jsonl --seq-len 32 --batch-size 4 --steps 3 \
  --optimizer sgd --momentum 0.9 --lr 0.05 --schedule cosine --log jsonl.jsonl &&
  pycheck jsonl_log log jsonl.jsonl 3
# --dtype bf16 and f16 train (f32 master weights; f16 with loss scaling,
# whose scale the log records).
ok bf16 "$oslo" train $common --steps 3 --dtype bf16 --log bf16.jsonl &&
  pycheck bf16_log log bf16.jsonl 3
ok f16 "$oslo" train $common --steps 3 --dtype f16 --log f16.jsonl &&
  pycheck f16_log log f16.jsonl 3 &&
  ok f16_scale grep -q loss_scale f16.jsonl

# Named errors: exit 1 (data) or 2 (usage). Every rank that gets there says
# it, prefixed [rank N] under a launcher (oslo-run stops the other ranks as
# soon as the first exits, so not every rank may get there).
printf '{"text": "fine"}\n{"text": "broken"\n' >bad1.jsonl
printf '{"text": "fine"}\n\n{"content": "no text"}\n' >bad2.jsonl
expect 1 "] --data nothing.txt: cannot open: No such file" "$run" --nproc-per-node 2 "$oslo" train \
  --model $fix --data nothing.txt --seq-len 32 --batch-size 4 --steps 1
grep -q "oslo: \[rank [01]\] --data nothing.txt" err.txt || {
  fails=$((fails + 1))
  echo "FAIL: no [rank N] prefix:"
  cat err.txt
}
expect 1 "bad1.jsonl:2: not valid JSON" "$oslo" train --model $fix --data bad1.jsonl --seq-len 32 \
  --batch-size 4 --steps 1
expect 1 "bad2.jsonl:3: no \"text\" string" "$oslo" train --model $fix --data bad2.jsonl \
  --seq-len 32 --batch-size 4 --steps 1
expect 1 "too little data for one batch" "$oslo" train --model $fix --data corpus.txt --seq-len 32 \
  --batch-size 100000 --steps 1
expect 2 "must be a .txt" "$oslo" train --model $fix --data corpus.csv --seq-len 32 --batch-size 4 \
  --steps 1
expect 2 "--lr: not a number" "$oslo" train $common --steps 1 --lr fast
expect 2 "--lr must be > 0" "$oslo" train $common --steps 1 --lr -1
expect 2 "--seq-len must be in [2," "$oslo" train $common --seq-len 0 --steps 1
expect 2 "--steps must be in [1," "$oslo" train $common --steps -3
expect 2 "--batch-size: not an integer" "$oslo" train $common --batch-size 4x --steps 1
expect 2 "--optimizer must be adamw or sgd" "$oslo" train $common --steps 1 --optimizer adam
expect 2 "--schedule must be" "$oslo" train $common --steps 1 --schedule exp
expect 2 "--save-every needs --save" "$oslo" train $common --steps 1 --save-every 2
expect 2 "--steps is required" "$oslo" train --model $fix --data corpus.txt --seq-len 32 \
  --batch-size 4
expect 2 "exceeds the model's 128 positions" "$oslo" train $common --seq-len 256 --steps 1
expect 0 "usage: oslo train" sh -c "\"$oslo\" train --help >&2"

# The checkpoint: oslo merge -> a Hugging Face folder; transformers loads it
# and its greedy tokens equal oslo generate's; oslo generate reads text.
if ok merge "$oslo" merge ckpt merged; then
  ok gen_ids "$oslo" generate --model merged --prompt-ids 52,441,221 --max-new-tokens 8 --ids
  pycheck hf_loads hf merged "$fix" 52,441,221 8
  if [ -s gen_ids.out ] && grep -q '^\[0\]' hf_loads.out; then
    n=$((n + 1))
    ours=$(cat gen_ids.out) theirs=$(grep '^\[0\]' hf_loads.out)
    case "$theirs" in
    "$ours"*) echo "oslo generate on the merged folder: $ours (transformers: $theirs)" ;;
    *)
      fails=$((fails + 1))
      echo "FAIL: oslo generate '$ours' is not transformers' '$theirs'"
      ;;
    esac
  fi
  ok gen_text "$oslo" generate --model merged --prompt "This License applies" --max-new-tokens 8 &&
    grep -q '^\[0\] This License applies' gen_text.out && cat gen_text.out
fi

# --resume: 5 steps then 5 more equal 10 straight (constant schedule so
# that --steps does not change the learning rates).
resume="--model $fix --data corpus.txt --seq-len 32 --batch-size 4 --lr 3e-3 --schedule constant"
ok straight "$run" --nproc-per-node 2 "$oslo" train $resume --steps 10 --log straight.jsonl &&
  ok first5 "$run" --nproc-per-node 2 "$oslo" train $resume --steps 5 --save rck &&
  ok next5 "$run" --nproc-per-node 2 "$oslo" train $resume --steps 10 --save rck --resume rck &&
  pycheck resume_log log rck/train_log.jsonl 10 &&
  pycheck resume_exact same rck/train_log.jsonl straight.jsonl 10 0

echo "cli train: $((n - fails - skips)) passed, $fails failed, $skips skipped"
[ "$fails" -eq 0 ] || exit 1
[ "$skips" -eq 0 ] || exit 77
rm -rf "$work"
