#!/bin/sh
# `oslo quantize` and `oslo inspect` (docs/QUANTIZATION.md): a fixture
# quantized to q8_0 at TP 1 alone and at TP 2 under oslo-run; inspect names
# the format and its bytes; generating from the quantized checkpoints gives
# the tokens of the fixture loaded with --dtype q8_0; bad dtypes exit 2 with
# a message naming the option.
# Usage: test_cli_quantize.sh OSLO OSLO_RUN FIXTURE WORKDIR
set -eu
oslo=$1 run=$2 fix=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$oslo" quantize "$fix" "$work/q1" --dtype q8_0
"$run" --nproc-per-node 2 "$oslo" quantize "$fix" "$work/q2" --dtype q8_0 --tp 2
"$oslo" inspect "$work/q2" >"$work/inspect.txt"
grep -q "q8_0" "$work/inspect.txt" || fail "inspect does not name q8_0"
grep -q "^dtypes: .*q8_0 " "$work/inspect.txt" || fail "inspect has no bytes per dtype"
grep -q "tp 2" "$work/inspect.txt" || fail "inspect does not show TP 2"
want=$("$oslo" generate --model "$fix" --dtype q8_0 --prompt-ids 5,99,300,42,7 --max-new-tokens 8 --ids)
got1=$("$oslo" generate --model "$work/q1" --prompt-ids 5,99,300,42,7 --max-new-tokens 8 --ids)
got2=$("$oslo" generate --model "$work/q2" --prompt-ids 5,99,300,42,7 --max-new-tokens 8 --ids)
[ "$want" = "$got1" ] || fail "TP 1 checkpoint: '$got1' != '$want'"
[ "$want" = "$got2" ] || fail "TP 2 checkpoint: '$got2' != '$want'"
f32=$("$oslo" generate --model "$fix" --prompt-ids 5,99,300,42,7 --max-new-tokens 8 --ids)
echo "q8_0: $want (f32: $f32)"
set +e
"$oslo" quantize "$fix" "$work/bad" --dtype f16 >"$work/err.txt" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "quantized format" "$work/err.txt" || fail "--dtype f16: status $rc"
set +e
"$oslo" reshard "$work/q2" "$work/bad" --tp 1 --dtype q4_0 >"$work/err.txt" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "oslo quantize" "$work/err.txt" || fail "reshard --dtype q4_0: status $rc"
rm -rf "$work"
echo "cli quantize ok"
