#!/bin/sh
# README.md's "Fine-tune a small GPT-2 at TP=2" works as written: its ```sh
# block runs as is (the `oslo` and `oslo-run` of this build first on PATH, in
# a scratch folder whose tests/ is the source tree's), the loss in its log goes
# down, the merged folder holds the weights, and generate continues the prompt.
# Usage: test_readme_train.sh OSLO OSLO_RUN SOURCE_DIR WORKDIR
set -eu
oslo=$1 run=$2 src=$3 work=$4
rm -rf "$work"
mkdir -p "$work/bin"
ln -s "$oslo" "$work/bin/oslo"
ln -s "$run" "$work/bin/oslo-run"
ln -s "$src/tests" "$work/tests"
awk '/^## / { sec = ($0 == "## Fine-tune a small GPT-2 at TP=2") }
     sec && /^```sh$/ { on = 1; next }
     on && /^```$/ { exit }
     on' "$src/README.md" >"$work/example.sh"
if ! grep -q "oslo train" "$work/example.sh"; then
  echo "FAIL: README.md has no \`\`\`sh block with oslo train under \"## Fine-tune a small GPT-2 at TP=2\""
  exit 1
fi
cd "$work"
echo "== README example ($(grep -c . example.sh) lines):"
cat example.sh
echo "=="
PATH="$work/bin:$PATH" bash -euo pipefail example.sh >example.out 2>example.err || {
  echo "FAIL: the README example exited $?"
  tail -n 30 example.err
  exit 1
}
cat example.out
grep "trained" example.err
fails=0
first=$(head -n 1 ckpt/train_log.jsonl | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(tail -n 1 ckpt/train_log.jsonl | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
if ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }'; then
  echo "FAIL: the loss did not go down: $first -> $last"
  fails=1
fi
[ -s out/model.safetensors ] && [ -s out/config.json ] && [ -s out/tokenizer.json ] || {
  echo "FAIL: out/ is not a Hugging Face folder:"
  ls -l out
  fails=1
}
grep -q '^\[0\] The GNU General Public License is' example.out || {
  echo "FAIL: generate printed no continuation of the prompt"
  fails=1
}
echo "README fine-tuning example: loss $first -> $last"
[ "$fails" = 0 ] && echo "1 passed, 0 failed" && rm -rf "$work"
exit "$fails"
