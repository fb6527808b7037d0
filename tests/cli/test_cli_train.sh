#!/bin/sh
# `oslo train` end to end on the gpt2-tiny fixture, with part of README.md as
# the corpus: at TP=2 under oslo-run the loss goes down and the log is valid
# JSON lines; TP=1 gives the same data and losses (1e-4); the data order
# depends on --seed only; --grad-accum 2 with half the batch and
# --activation-checkpointing give the same losses; .jsonl data; named errors
# on every rank for bad inputs; the saved checkpoint merges into a folder
# transformers loads (its greedy tokens equal oslo generate's) and oslo
# generate runs on it; --resume continues bit-exactly; --dtype bf16 and f16
# train. Data parallelism: --dp 2 --batch-size 2 (also ZeRO 1 and 2, and
# TP=2 x DP=2 ZeRO 2 on 4 processes) logs the losses, data and tokens of
# --dp 1 --batch-size 4 (1e-5 relative); its checkpoint merges and
# generates; a run resumed across DP sizes and ZeRO stages equals the
# straight one; resuming with another global batch or --grad-accum, bad
# rank counts, --zero 7 and -1, bad --bucket-mb and a bad oslo_train.json are
# named errors. Pipeline stages: --pp 2 (and TP 2 x PP 2) with micro-batches
# log --dp 1's losses and a bubble; bad --pp, --micro-batches and ZeRO 2
# with --pp are named errors.
# Usage: test_cli_train.sh OSLO OSLO_RUN FIXTURE SOURCE_DIR WORKDIR RUN_PY PYTHON PYTHON_HF
set -u
oslo=$1 run=$2 fix=$3 src=$4 work=$5 runpy=$6 py=$7 pyhf=$8
here=$(cd "$(dirname "$0")" && pwd)
check="$here/check_train.py"
# shellcheck source=tests/cli/train_common.sh
. "$here/train_common.sh"
# pycheck NAME ARGS...: check_train.py ARGS holds (77: skipped).
pycheck() {
  name=$1
  shift
  check_run "$name" - sh "$runpy" "$pyhf" "$check" "$@"
}

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

# Data parallelism (--batch-size per data rank): the union of the data
# ranks' micro-batch k is --dp 1's micro-batch k at dp x --batch-size, so
# the log (the loss averaged over the data ranks, global tokens, the hash of
# the global micro-batch) equals it. Buckets of 0.05 MiB: several per step.
dp="--model $fix --data corpus.txt --seq-len 32 --lr 3e-3 --warmup 2 --steps 6"
if ok dp1 "$oslo" train $dp --batch-size 4 --log dp1.jsonl; then
  ok dp2 "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 2 --dp 2 --log dp2.jsonl &&
    pycheck dp2_vs_dp1 close dp2.jsonl dp1.jsonl 6 1e-5 &&
    ok dp2_banner grep -qF "(tp 1 x dp 2, --batch-size 2 per data rank, ZeRO 0)" dp2.err
  ok dp2_zero1 "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 2 --tp 1 --dp 2 --zero 1 \
    --bucket-mb 0.05 --log dp2z1.jsonl && pycheck dp2_zero1_vs_dp1 close dp2z1.jsonl dp1.jsonl 6 1e-5
  ok dp2_zero2 "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 2 --tp 1 --dp 2 --zero 2 \
    --bucket-mb 0.05 --log dp2z2.jsonl && pycheck dp2_zero2_vs_dp1 close dp2z2.jsonl dp1.jsonl 6 1e-5
  ok dp2_zero3 "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 2 --tp 1 --dp 2 --zero 3 \
    --bucket-mb 0.05 --save z3ck && pycheck dp2_zero3_vs_dp1 close z3ck/train_log.jsonl dp1.jsonl 6 1e-5 &&
    ok z3_merge "$oslo" merge z3ck z3merged &&
    ok z3_gen "$oslo" generate --model z3merged --prompt-ids 52,441,221 --max-new-tokens 8 --ids
  # TP=2 x DP=2, ZeRO 2, on 4 processes; its checkpoint merges and generates.
  ok tp2dp2 "$run" --nproc-per-node 4 "$oslo" train $dp --batch-size 2 --tp 2 --dp 2 --zero 2 \
    --bucket-mb 0.05 --save dpck &&
    pycheck tp2dp2_vs_dp1 close dpck/train_log.jsonl dp1.jsonl 6 1e-5 &&
    ok dp_merge "$oslo" merge dpck dpmerged &&
    ok dp_gen "$oslo" generate --model dpmerged --prompt-ids 52,441,221 --max-new-tokens 8 --ids &&
    ok dp_gen_tokens grep -q '^\[0\] [0-9]' dp_gen.out
  # Pipeline stages: --pp 2 with 4 micro-batches of one row, and TP 2 x PP 2
  # on 4 processes with 2 micro-batches, log --dp 1's data and losses (the
  # rows keep equally many labels, so the mean of the micro-batches' means
  # is the batch's mean); the log carries the measured bubble.
  ok pp2 "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 4 --pp 2 --micro-batches 4 \
    --log pp2.jsonl && pycheck pp2_vs_dp1 close pp2.jsonl dp1.jsonl 6 1e-5 &&
    ok pp2_bubble grep -q '"bubble":0\.[0-9]' pp2.jsonl &&
    ok pp2_banner grep -qF "(tp 1 x pp 2 x dp 1, --batch-size 4 per data rank in 4 micro-batches" pp2.err
  ok tp2pp2 "$run" --nproc-per-node 4 "$oslo" train $dp --batch-size 4 --tp 2 --pp 2 \
    --micro-batches 2 --log tp2pp2.jsonl && pycheck tp2pp2_vs_dp1 close tp2pp2.jsonl dp1.jsonl 6 1e-5
  # The head split: the first stage runs the head of each micro-batch's
  # first tokens; the same losses.
  ok pp2_split "$run" --nproc-per-node 2 "$oslo" train $dp --batch-size 4 --pp 2 --micro-batches 4 \
    --pipeline-head-split auto --log pp2split.jsonl &&
    pycheck pp2_split_vs_dp1 close pp2split.jsonl dp1.jsonl 6 1e-5
fi
expect 2 "--pipeline-head-split must be auto or a fraction in (0, 1], got 2" \
  "$run" --nproc-per-node 2 "$oslo" train $common --steps 1 --pp 2 --pipeline-head-split 2
expect 2 "--pipeline-head-split needs --pp 2 or more" \
  "$oslo" train $common --steps 1 --pipeline-head-split 0.5
# Interleaved stages on the four-block fixture: --pp 2 --virtual-stages 2
# (each rank two chunks of one block) logs one rank's losses.
v4="--model ${fix}-4l --data corpus.txt --seq-len 32 --lr 3e-3 --warmup 2 --steps 4 --batch-size 4"
ok v4_one "$oslo" train $v4 --log v4one.jsonl &&
  ok v4_pp2v2 "$run" --nproc-per-node 2 "$oslo" train $v4 --pp 2 --virtual-stages 2 \
    --micro-batches 4 --pp-layers 1,1,1,1 --log v4pp.jsonl &&
  pycheck v4_pp2v2_vs_one close v4pp.jsonl v4one.jsonl 4 1e-5
expect 2 "--micro-batches 3 does not divide --batch-size 4" \
  "$run" --nproc-per-node 2 "$oslo" train $common --steps 1 --pp 2 --micro-batches 3
expect 2 "--pp 3 does not divide the world size 2" \
  "$run" --nproc-per-node 2 "$oslo" train $common --steps 1 --pp 3
expect 1 "ZeRO stage 2 with pipeline_parallel_size 2" \
  "$run" --nproc-per-node 2 "$oslo" train $common --steps 1 --pp 2 --zero 2
# Resume across data-parallel sizes and ZeRO stages with the same global
# batch (4 rows): DP=2 ZeRO 2 for 2 steps, DP=1 to 4, DP=2 ZeRO 1 to 6 equal
# 6 straight steps at DP=1.
rdp="--model $fix --data corpus.txt --seq-len 32 --lr 3e-3 --schedule constant"
ok dp_straight "$oslo" train $rdp --batch-size 4 --steps 6 --log dp_straight.jsonl &&
  ok dp_first "$run" --nproc-per-node 2 "$oslo" train $rdp --batch-size 2 --dp 2 --zero 2 --steps 2 \
    --save drck &&
  ok dp_second "$oslo" train $rdp --batch-size 4 --steps 4 --save drck --resume drck &&
  ok dp_third "$run" --nproc-per-node 2 "$oslo" train $rdp --batch-size 2 --dp 2 --zero 1 --steps 6 \
    --save drck --resume drck &&
  pycheck dp_resume_log log drck/train_log.jsonl 6 &&
  pycheck dp_resume_close close drck/train_log.jsonl dp_straight.jsonl 6 1e-5
# At the same DP size and ZeRO stage the resumed run is bitwise the straight one.
zdp="$rdp --batch-size 2 --dp 2 --zero 1"
ok dpz_straight "$run" --nproc-per-node 2 "$oslo" train $zdp --steps 4 --log dpz_straight.jsonl &&
  ok dpz_first "$run" --nproc-per-node 2 "$oslo" train $zdp --steps 2 --save dpzck &&
  ok dpz_next "$run" --nproc-per-node 2 "$oslo" train $zdp --steps 4 --save dpzck --resume dpzck &&
  pycheck dpz_resume_exact same dpzck/train_log.jsonl dpz_straight.jsonl 4 0
# Another global batch or --grad-accum cannot continue the data: refused,
# naming what must match (drck/oslo_train.json records it).
expect 2 "global batch (dp x --batch-size) 4 then, 2 now" "$oslo" train $rdp --batch-size 2 \
  --steps 8 --resume drck
expect 2 "--grad-accum 1 then, 2 now" "$oslo" train $rdp --batch-size 4 --grad-accum 2 --steps 8 \
  --resume drck
# Without oslo_train.json the position (row 24 of the epoch) must still fit.
for d in nometa stale badjson badrows noid; do rm -rf $d && cp -r drck $d; done
rm nometa/oslo_train.json
expect 1 "its data position (epoch 0, row 24) does not fit this data" "$oslo" train $rdp \
  --batch-size 5 --steps 8 --resume nometa
# One of an earlier save (another save_id) is not checked; malformed ones are
# errors.
sed 's/"save_id": "[0-9a-f]*"/"save_id": "0000000000000000"/' drck/oslo_train.json \
  >stale/oslo_train.json
ok dp_stale "$oslo" train $rdp --batch-size 4 --steps 7 --resume stale &&
  ok dp_stale_said grep -q "oslo_train.json belongs to an earlier save: not checked" dp_stale.err
echo garbage >badjson/oslo_train.json
expect 1 "badjson/oslo_train.json is not valid JSON" "$oslo" train $rdp --batch-size 4 --steps 7 \
  --resume badjson
sed 's/"rows": [0-9]*/"rows": 0/' drck/oslo_train.json >badrows/oslo_train.json
expect 1 '"rows" is not a positive integer' "$oslo" train $rdp --batch-size 4 --steps 7 \
  --resume badrows
echo '{"rows": 1}' >noid/oslo_train.json
expect 1 'no "save_id" string' "$oslo" train $rdp --batch-size 4 --steps 7 --resume noid
# oslo_train.json cannot be written (its temporary is a folder): an error.
rm -rf nowrite && cp -r drck nowrite && mkdir nowrite/oslo_train.json.tmp
expect 1 "cannot write nowrite/oslo_train.json" "$oslo" train $rdp --batch-size 4 --steps 1 \
  --save nowrite
# Rank counts and ZeRO stages: named errors (every rank, before loading).
expect 2 "--dp 3 does not divide the world size 2" "$run" --nproc-per-node 2 "$oslo" train $common \
  --steps 1 --dp 3
expect 2 "--tp 3 does not divide the world size 2" "$run" --nproc-per-node 2 "$oslo" train $common \
  --steps 1 --tp 3
expect 2 "--tp 2 x --dp 2 = 4 ranks, but the world size is 2" "$run" --nproc-per-node 2 "$oslo" \
  train $common --steps 1 --tp 2 --dp 2
grep -q "oslo: \[rank [01]\] --tp 2 x --dp 2" err.txt || {
  fails=$((fails + 1))
  echo "FAIL: no [rank N] prefix:"
  cat err.txt
}
expect 2 "--dp 2 does not divide the world size 1" "$oslo" train $common --steps 1 --dp 2
expect 2 "--dp must be in [1," "$oslo" train $common --steps 1 --dp 0
expect 2 "--zero must be 0, 1, 2 or 3, got 7" "$oslo" train $common --steps 1 --zero 7
expect 2 "--zero must be 0, 1, 2 or 3, got -1" "$oslo" train $common --steps 1 --zero -1
expect 2 "--zero: not an integer" "$oslo" train $common --steps 1 --zero one
expect 2 "--bucket-mb must be > 0" "$oslo" train $common --steps 1 --bucket-mb 0
expect 2 "--bucket-mb must be at most 1048576" "$oslo" train $common --steps 1 --bucket-mb 1e9
expect 2 "--bucket-mb 0.000001 is under 4 bytes" "$oslo" train $common --steps 1 \
  --bucket-mb 0.000001
expect 1 "and --batch-size 64 on 4 data-parallel ranks needs 256 rows" "$run" --nproc-per-node 4 \
  "$oslo" train $common --steps 1 --batch-size 64 --tp 1

finish "cli train"
