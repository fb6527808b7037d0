#!/bin/sh
# `oslo generate --model FILE.gguf` with no other file: token ids in (16
# greedy tokens equal to llama.cpp's, the expected ids given), at TP=1 and,
# under oslo-run, TP=2; and a text prompt through the GGUF's own tokenizer.
#   test_cli.sh OSLO OSLO_RUN FILE.gguf PROMPT_IDS "EXPECTED IDS"
set -eu
oslo=$1 run=$2 gguf=$3 prompt=$4 want=$5
for tp in 1 2; do
  got=$("$run" --nproc-per-node $tp "$oslo" generate --model "$gguf" --tp $tp \
        --prompt-ids "$prompt" --max-new-tokens 16 --ids 2>/dev/null | grep '^\[0\]')
  if [ "$got" != "[0] $want" ]; then
    echo "FAIL: TP=$tp: got '$got', llama.cpp '[0] $want'"
    exit 1
  fi
  echo "ok: TP=$tp greedy ids equal llama.cpp's"
done
out=$("$oslo" generate --model "$gguf" --prompt "Hello world" --max-new-tokens 4 2>/dev/null)
case "$out" in
  "[0] Hello world"*) echo "ok: text prompt: $out" ;;
  *) echo "FAIL: text prompt gave '$out'"; exit 1 ;;
esac
