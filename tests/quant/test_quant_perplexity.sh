#!/bin/sh
# Quality of quantized weights (issue 35): a small LLaMA-shaped model
# (tests/models/fixtures/llama-tiny-gqa) trained by oslo on real text (the
# GPL-3 of Debian's base-files, /usr/share/common-licenses), then its
# perplexity on a text it never saw (the Apache-2.0 license) loaded in f32,
# q8_0 and q4_0: q8_0 within 0.5 % of f32, q4_0 within 5 %. Then through the
# KV cache one token at a time: the f32 cache equals the forward (1e-5),
# the int8 cache within 0.5 % of it (and not equal: it is used), q4_0
# weights with the int8 cache within 5 %.
# Usage: test_quant_perplexity.sh OSLO PERPLEXITY_BIN FIXTURE WORKDIR
set -eu
oslo=$1 ppl=$2 fix=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
lic=/usr/share/common-licenses
cp "$lic/GPL-3" "$work/gpl3.txt"
"$oslo" train --model "$fix" --data "$work/gpl3.txt" --seq-len 64 --batch-size 8 --steps 120 \
  --lr 1e-2 --schedule cosine --warmup 20 --save "$work/ckpt" 2>"$work/train.err" || {
  tail -n 20 "$work/train.err"
  exit 1
}
"$ppl" "$work/ckpt" "$fix" "$lic/Apache-2.0" 64 f32 q8_0 q4_0 f32+kv_f32 f32+kv_i8 q4_0+kv_i8 \
  >"$work/ppl.txt" || {
  rc=$?
  cat "$work/ppl.txt"
  echo "FAIL: $ppl exited with $rc"
  exit 1
}
cat "$work/ppl.txt"
awk '
  { p[$1] = $3 }
  END {
    r8 = p["q8_0"] / p["f32"] - 1; r4 = p["q4_0"] / p["f32"] - 1
    rc = p["f32+kv_f32"] / p["f32"] - 1; rk = p["f32+kv_i8"] / p["f32+kv_f32"] - 1
    r4k = p["q4_0+kv_i8"] / p["f32+kv_f32"] - 1
    printf "f32 %.4f; q8_0 %+.3f%%; q4_0 %+.3f%%\n", p["f32"], 100 * r8, 100 * r4
    printf "through the KV cache: f32 cache %+.5f%% of the forward; int8 cache %+.3f%%; q4_0 weights + int8 cache %+.3f%%\n", 100 * rc, 100 * rk, 100 * r4k
    bad = 0
    if ((rc < 0 ? -rc : rc) > 1e-5) { print "FAIL: the f32 cache path is not the perplexity of the forward"; bad = 1 }
    if ((rk < 0 ? -rk : rk) > 0.005) { print "FAIL: the int8 KV cache is more than 0.5 % off"; bad = 1 }
    if (p["f32+kv_i8"] == p["f32+kv_f32"]) { print "FAIL: the int8 KV cache changed nothing (not used?)"; bad = 1 }
    if ((r4k < 0 ? -r4k : r4k) > 0.05) { print "FAIL: q4_0 with the int8 KV cache is more than 5 % off"; bad = 1 }
    if (!(p["f32"] > 1 && p["f32"] < 200)) { print "FAIL: f32 perplexity " p["f32"] " (not trained? uniform over the 515 tokens: 515)"; bad = 1 }
    if ((r8 < 0 ? -r8 : r8) > 0.005) { print "FAIL: q8_0 is more than 0.5 % off"; bad = 1 }
    if ((r4 < 0 ? -r4 : r4) > 0.05) { print "FAIL: q4_0 is more than 5 % off"; bad = 1 }
    exit bad
  }' "$work/ppl.txt"
rm -rf "$work"
