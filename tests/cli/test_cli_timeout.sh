#!/bin/sh
# --timeout SECONDS and OSLO_TIMEOUT: how long a rank waits for its peers.
#  - a rank whose peer never arrives (rank 0 of 2 started alone) fails the
#    rendezvous with OSLO_ERR_TIMEOUT after about --timeout (generate) or
#    OSLO_TIMEOUT (train) seconds, not the default 300;
#  - two ranks of oslo train under oslo-run, rank 1 stopped with SIGSTOP
#    after the first step: rank 0 fails its next collective with
#    OSLO_ERR_TIMEOUT after about --timeout seconds, and the run ends;
#  - bad values are usage errors naming --timeout or OSLO_TIMEOUT.
# Usage: test_cli_timeout.sh OSLO OSLO_RUN FIXTURE SOURCE_DIR WORKDIR
set -u
oslo=$1 run=$2 fix=$3 src=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
fails=0 n=0
unset OSLO_TIMEOUT

now_ms() { echo $(($(date +%s%N) / 1000000)); }
fail() {
  fails=$((fails + 1))
  echo "FAIL: $*"
}
# within NAME MS LO HI: LO*1000 <= MS <= HI*1000.
within() {
  n=$((n + 1))
  if [ "$2" -lt $(($3 * 1000)) ] || [ "$2" -gt $(($4 * 1000)) ]; then
    fail "$1: took $2 ms, expected $3 to $4 s"
  else
    echo "$1: $2 ms"
  fi
}
# holds NAME FILE NEEDLE: FILE holds NEEDLE.
holds() {
  n=$((n + 1))
  grep -qF -- "$3" "$2" || {
    fail "$1: $2 does not hold \"$3\":"
    sed 's/^/  /' "$2"
  }
}
# expect STATUS NEEDLE CMD...: exits with STATUS and stderr holds NEEDLE.
expect() {
  want=$1 needle=$2
  shift 2
  n=$((n + 1))
  "$@" >err.out 2>err.txt
  got=$?
  if [ "$got" -ne "$want" ] || ! grep -qF -- "$needle" err.txt; then
    fail "$* -> exit $got (want $want), stderr:"
    sed 's/^/  /' err.txt
    echo "  (wanted it to hold: $needle)"
  fi
}

sed -n '1,200p' "$src/README.md" >corpus.txt
port=$((20000 + $$ % 20000))
alone="env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1"

# Rank 1 never arrives: --timeout 2 (generate).
t0=$(now_ms)
expect 1 "OSLO_ERR_TIMEOUT" $alone MASTER_PORT=$port "$oslo" generate --model "$fix" \
  --prompt-ids 1,2,3 --max-new-tokens 2 --ids --timeout 2
within never_arrives_generate $(($(now_ms) - t0)) 2 30
holds never_arrives_says_2s err.txt "timed out after 2"
# OSLO_TIMEOUT=2 (train; the data is read first).
t0=$(now_ms)
expect 1 "OSLO_ERR_TIMEOUT" $alone MASTER_PORT=$((port + 1)) OSLO_TIMEOUT=2 "$oslo" train \
  --model "$fix" --data corpus.txt --seq-len 32 --batch-size 4 --steps 1
within never_arrives_train_env $(($(now_ms) - t0)) 2 30
holds never_arrives_env_says_2s err.txt "timed out after 2"

# Bad values: usage errors before any context exists.
gen="generate --model $fix --prompt-ids 1,2,3 --max-new-tokens 2 --ids"
expect 2 "--timeout must be a number of seconds in (0, 1e7], got \"0\"" "$oslo" $gen --timeout 0
expect 2 "--timeout: not a number: \"soon\"" "$oslo" $gen --timeout soon
expect 2 "OSLO_TIMEOUT must be a number of seconds in (0, 1e7], got \"-1\"" env OSLO_TIMEOUT=-1 \
  "$oslo" $gen
expect 2 "--timeout must be a number of seconds in (0, 1e7], got \"1e9\"" "$oslo" train \
  --model "$fix" --data corpus.txt --seq-len 32 --batch-size 4 --steps 1 --timeout 1e9
# --timeout wins over OSLO_TIMEOUT; a good value changes nothing else.
expect 0 "loaded in" env OSLO_TIMEOUT=bad "$oslo" $gen --timeout 30

# A stopped peer: rank 1 gets SIGSTOP after the first step; rank 0 fails
# within about --timeout 3 seconds and oslo-run ends the run.
"$run" --nproc-per-node 2 "$oslo" train --model "$fix" --data corpus.txt --seq-len 32 \
  --batch-size 4 --steps 1000000 --lr 1e-3 --timeout 3 --log stop.jsonl >stop.out 2>stop.err &
runpid=$!
i=0
while [ ! -s stop.jsonl ] && [ $i -lt 1800 ] && kill -0 $runpid 2>/dev/null; do
  sleep 0.1
  i=$((i + 1))
done
rank1=""
for c in $(pgrep -P $runpid); do
  if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx RANK=1; then rank1=$c; fi
done
n=$((n + 1))
if [ ! -s stop.jsonl ] || [ -z "$rank1" ]; then
  fail "stopped peer: no first step or no rank 1 (log: $(wc -c <stop.jsonl 2>/dev/null), rank 1: '$rank1')"
  sed 's/^/  /' stop.err
  kill $runpid 2>/dev/null
  wait $runpid
else
  t0=$(now_ms)
  kill -STOP "$rank1"
  wait $runpid
  rc=$?
  within stopped_peer $(($(now_ms) - t0)) 3 40
  n=$((n + 1))
  [ $rc -ne 0 ] || fail "stopped peer: oslo-run exited 0"
  holds stopped_peer_timeout stop.err "OSLO_ERR_TIMEOUT"
  holds stopped_peer_rank0 stop.err "oslo: [rank 0] train step"
  grep -F "OSLO_ERR_TIMEOUT" stop.err | head -n 2
fi

echo "cli timeout: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ] || exit 1
rm -rf "$work"
