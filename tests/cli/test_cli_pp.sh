#!/bin/sh
# `oslo generate --pp N`: the blocks cut into pipeline stages give the tokens
# one rank gives (greedy and beam search, TP 1 and 2 inside the stages), and
# bad sizes exit 2 naming --pp.
# test_cli_pp.sh OSLO_BINARY OSLO_RUN MODEL_DIR
set -u
oslo=$1 run=$2 model=$3
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen="generate --model $model --prompt-ids 1,2,3 --prompt-ids 7,8 --max-new-tokens 6 --ids"
. "$(dirname "$0")/same_tokens.sh"
for mode in greedy beams; do
  extra=""
  [ "$mode" = beams ] && extra="--num-beams 3"
  baseline "$mode" "$oslo" $gen $extra
  same "pp2-$mode" "$run" --nproc-per-node 2 "$oslo" $gen $extra --pp 2
  same "tp2-pp2-$mode" "$run" --nproc-per-node 4 "$oslo" $gen $extra --pp 2
done
# --pp that does not divide the world: exit 2, naming it.
"$run" --nproc-per-node 2 "$oslo" $gen --pp 3 >"$tmp/out" 2>"$tmp/err"
st=$?
if [ "$st" -ne 2 ] || ! grep -q -- "--pp 3 must divide the world size 2" "$tmp/err"; then
  fails=$((fails + 1))
  echo "FAIL: --pp 3 at world 2 exited $st:"
  sed 's/^/  /' "$tmp/err"
fi
# Explicit blocks per stage: 1 + 1 gives the same tokens; counts that do
# not add up to the model's 2 blocks are named.
baseline greedy "$oslo" $gen
same "pp2-layers-1-1" "$run" --nproc-per-node 2 "$oslo" $gen --pp 2 --pp-layers 1,1
"$run" --nproc-per-node 2 "$oslo" $gen --pp 2 --pp-layers 2,1 >"$tmp/out" 2>"$tmp/err"
st=$?
if [ "$st" -eq 0 ] || ! grep -q "sum" "$tmp/err"; then
  fails=$((fails + 1))
  echo "FAIL: --pp-layers 2,1 for 2 blocks exited $st:"
  sed 's/^/  /' "$tmp/err"
fi
[ "$fails" -eq 0 ] && echo "oslo generate --pp: passed" && exit 0
echo "$fails failures"
exit 1
