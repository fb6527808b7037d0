#!/bin/sh
# `oslo train` on token ids, on the gpt2-tiny fixture with part of README.md
# as the corpus. The text's own ids (oslo_test_tokenize: each document
# tokenized through the C API and followed by EOS) as .jsonl "input_ids"
# train exactly as the text does (.txt and .jsonl: the same data hashes and
# losses, to the bit). From those ids make_token_files.py writes Megatron-LM's
# samples of --seq-len tokens sharing a token side by side as .jsonl ids
# (cut as text, they are those samples): a flat uint16 .bin, a flat uint32
# .bin (--data-dtype uint32) and Megatron-LM datasets (uint16 and int32, as
# PREFIX, PREFIX.bin and PREFIX.idx) each train exactly as that file does,
# and on 2 data-parallel ranks as 1 (1e-5). Truncated, lying and malformed
# files and ids outside the vocabulary are errors naming the file and the
# place, printed by every rank, never a crash.
# Usage: test_cli_train_ids.sh OSLO OSLO_RUN TOKENIZE FIXTURE SOURCE_DIR WORKDIR RUN_PY PYTHON
set -u
oslo=$1 run=$2 tokenize=$3 fix=$4 src=$5 work=$6 runpy=$7 py=$8
here=$(cd "$(dirname "$0")" && pwd)
check="$here/check_train.py"
# shellcheck source=tests/cli/train_common.sh
. "$here/train_common.sh"
# same NAME A B: logs A and B have the same data hashes and losses (bitwise)
# over the 4 steps; close NAME A B: losses within 1e-5 relative.
same() {
  check_run "$1" "$2 vs $3" sh "$runpy" "$py" "$check" same "$2" "$3" 4 0
}
close() {
  check_run "$1" "$2 vs $3" sh "$runpy" "$py" "$check" close "$2" "$3" 4 1e-5
}

"$py" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        print(json.dumps({"text": line.rstrip("\n")}))' corpus.txt >corpus.jsonl
train="--model $fix --seq-len 32 --batch-size 4 --lr 3e-3 --warmup 2 --steps 4"

# The text's ids train as the text: .txt (one document) and .jsonl (one a line).
ok tok_txt "$tokenize" "$fix" corpus.txt ids_txt.jsonl &&
  ok text_txt "$oslo" train $train --data corpus.txt --log text_txt.log &&
  ok ids_txt "$oslo" train $train --data ids_txt.jsonl --log ids_txt.log &&
  same ids_txt_vs_text text_txt.log ids_txt.log
ok tok_jsonl "$tokenize" "$fix" corpus.jsonl ids.jsonl &&
  ok text_jsonl "$oslo" train $train --data corpus.jsonl --log text_jsonl.log &&
  ok ids_jsonl "$oslo" train $train --data ids.jsonl --log ids_jsonl.log &&
  same ids_jsonl_vs_text text_jsonl.log ids_jsonl.log
grep -q "lines of token ids" ids_jsonl.err || {
  fails=$((fails + 1))
  echo "FAIL: the banner does not say the data are token ids:"
  cat ids_jsonl.err
}

# Binary token files of those ids against their samples as .jsonl ids.
if ok make sh "$runpy" "$py" "$here/make_token_files.py" ids.jsonl 32 tok; then
  cat make.out
  ok windows "$oslo" train $train --data tok/windows.jsonl --log windows.log
  ok flat16 "$oslo" train $train --data tok/flat16.bin --log flat16.log &&
    same flat16_vs_windows windows.log flat16.log
  grep "tokens (" flat16.err
  ok flat16_banner grep -qF "(a flat uint16 token file) in " flat16.err
  ok flat16_shared grep -qF "rows of 32 sharing a token" flat16.err
  ok flat32 "$oslo" train $train --data tok/flat32.bin --data-dtype uint32 --log flat32.log &&
    same flat32_vs_windows windows.log flat32.log
  ok mega16 "$oslo" train $train --data tok/mega16 --log mega16.log &&
    same mega16_vs_windows windows.log mega16.log
  ok mega16_banner grep -qF "of a Megatron-LM uint16 dataset" mega16.err
  ok mega16_idx "$oslo" train $train --data tok/mega16.idx --log mega16_idx.log &&
    same mega16_idx_vs_windows windows.log mega16_idx.log
  ok mega16_bin "$oslo" train $train --data tok/mega16.bin --log mega16_bin.log &&
    same mega16_bin_vs_windows windows.log mega16_bin.log
  ok mega32 "$oslo" train $train --data tok/mega32 --log mega32.log &&
    same mega32_vs_windows windows.log mega32.log
  # Two data-parallel ranks, each reading the files itself: --dp 1's data.
  ok mega16_dp2 "$run" --nproc-per-node 2 "$oslo" train $train --data tok/mega16 --dp 2 \
    --batch-size 2 --log mega16_dp2.log && close mega16_dp2_vs_windows windows.log mega16_dp2.log

  # Flat files: a byte too many for uint16, none, an id outside the
  # vocabulary, one outside any (uint32 >= 2^31); --data-dtype's values.
  d="--model $fix --seq-len 32 --batch-size 4 --steps 1"
  expect 1 "bytes is not a whole number of uint16 tokens (2 bytes each)" "$oslo" train $d \
    --data tok/odd.bin
  expect 1 "too little data for one batch: 0 tokens (a flat uint16 token file)" "$oslo" train $d \
    --data tok/empty.bin
  expect 1 "tok/oov16.bin: token 5 (byte 10): token id 600 is outside the model's vocabulary (515 ids, 0 to 514)" \
    "$oslo" train $d --data tok/oov16.bin
  expect 1 "tok/huge32.bin: token 4 (byte 16): 2147483648 is not a token id" "$oslo" train $d \
    --data tok/huge32.bin --data-dtype uint32
  expect 2 "--data-dtype must be uint16 or uint32, got \"int8\"" "$oslo" train $d \
    --data tok/flat16.bin --data-dtype int8
  expect 2 "--data-dtype is for .bin token files, not corpus.txt" "$oslo" train $d \
    --data corpus.txt --data-dtype uint16
  expect 2 "--data-dtype uint32 but tok/mega16.idx says its tokens are uint16" "$oslo" train $d \
    --data tok/mega16 --data-dtype uint32
  expect 1 "--data tok/nothing.bin: cannot open: No such file" "$oslo" train $d \
    --data tok/nothing.bin
  expect 2 "must be a .txt (one document) or .jsonl" "$oslo" train $d --data tok/nothing

  # Megatron-LM datasets: the index's magic, version, dtype, counts,
  # lengths, pointers and document indices, and the .bin's size.
  expect 1 "tok/badmagic.idx: not a Megatron-LM index" "$oslo" train $d --data tok/badmagic
  expect 1 "tok/version2.idx: index version 2, only version 1 is known" "$oslo" train $d \
    --data tok/version2
  expect 1 "tok/floats.idx: its tokens are float32, not integer token ids" "$oslo" train $d \
    --data tok/floats
  expect 1 "tok/badcode.idx: unknown token dtype code 11" "$oslo" train $d --data tok/badcode
  expect 1 "tok/short.idx: truncated: 20 bytes, under the 34-byte header" "$oslo" train $d \
    --data tok/short
  expect 1 "which do not fit its" "$oslo" train $d --data tok/cutidx
  expect 1 "tok/lyingcount.idx: its header says" "$oslo" train $d --data tok/lyingcount
  expect 1 "tok/hugecount.idx: its header says 4611686018427387904 sequences" "$oslo" train $d \
    --data tok/hugecount
  expect 1 "tok/lyingdocs.idx: its header says" "$oslo" train $d --data tok/lyingdocs
  expect 1 "tok/badptr.idx: sequence 1 starts at byte" "$oslo" train $d --data tok/badptr
  expect 1 "tok/farptr.idx: sequence 1 starts at byte 4611686018427387904" "$oslo" train $d \
    --data tok/farptr
  expect 1 "tok/neglen.idx: sequence 0 has length -3" "$oslo" train $d --data tok/neglen
  expect 1 "tok/truncbin.bin: truncated:" "$oslo" train $d --data tok/truncbin
  expect 1 "the .bin and .idx do not belong together" "$oslo" train $d --data tok/longbin
  expect 1 "tok/baddoc.idx: document index 1 is" "$oslo" train $d --data tok/baddoc
  expect 1 "tok/shortdoc.idx: its document indices do not end at the sequence count" \
    "$oslo" train $d --data tok/shortdoc
  expect 1 "tok/oovmega.bin: sequence 0 (document 0), token 3 (byte 12): token id 9999 is outside the model's vocabulary" \
    "$oslo" train $d --data tok/oovmega
  expect 1 "--data tok/onlyidx.bin: cannot open" "$oslo" train $d --data tok/onlyidx.idx
  # Under oslo-run every rank says it.
  expect 1 "] --data tok/badmagic.idx: not a Megatron-LM index" "$run" --nproc-per-node 2 \
    "$oslo" train $d --data tok/badmagic
  grep -q "oslo: \[rank [01]\] --data tok/badmagic.idx" err.txt || {
    fails=$((fails + 1))
    echo "FAIL: no [rank N] prefix:"
    cat err.txt
  }

  # JSON lines of ids: each bad line named with its number and the element.
  expect 1 "tok/oov.jsonl:2: input_ids[1]: token id 515 is outside the model's vocabulary" \
    "$oslo" train $d --data tok/oov.jsonl
  expect 1 "tok/negative.jsonl:2: input_ids[0] = -1 is not a token id" "$oslo" train $d \
    --data tok/negative.jsonl
  expect 1 "tok/fraction.jsonl:2: input_ids[1] is 1.5, not an integer token id" "$oslo" train $d \
    --data tok/fraction.jsonl
  expect 1 "tok/nested.jsonl:2: input_ids[0] is [1,2], not an integer token id" "$oslo" train $d \
    --data tok/nested.jsonl
  expect 1 "tok/toolarge.jsonl:2: input_ids[0] = 1099511627776 is not a token id" "$oslo" train $d \
    --data tok/toolarge.jsonl
  expect 1 "tok/noids.jsonl:3: no \"input_ids\" array" "$oslo" train $d --data tok/noids.jsonl
  expect 1 "tok/badjson.jsonl:2: not valid JSON" "$oslo" train $d --data tok/badjson.jsonl
fi

finish "cli train ids"
