"""Writes tests/tokenizer/pad_reference.txt: what Hugging Face's
tokenizer.pad (as DataCollatorWithPadding calls it) returns for rows of
token ids, the reference of oslo_pad_batch (test_pad_batch.c): padding on
both sides, to the longest row or to max_length, with a chosen pad id, and
rows truncated first as tokenizer(text, add_special_tokens=False,
truncation=True, max_length=...) cuts them, from either side.

Plain text:
  "case PAD_SIDE PAD MAX_LENGTH TRUNCATION TRUNC_SIDE PADDING N":
    PAD_SIDE "right" or "left"; PAD the pad id; MAX_LENGTH 0 (none) or the
    max_length; TRUNCATION 1 or 0; TRUNC_SIDE "right" or "left"; PADDING
    "longest" or "max_length" (padded to MAX_LENGTH);
  then N times: "row i1 ..." (the ids handed to oslo_pad_batch; "row"
    alone: an empty row), "ids i1 ...", "mask m1 ..." (the padded row).
The rows are the bert-tiny fixture's ids of the bindings' reference texts
(tests/bindings/make_tokenizer_batch_reference.py) without special tokens.

Run (the --hf venv of tools/test-venv.sh):
  build/venv-hf/bin/python tests/tokenizer/make_pad_reference.py
"""
import os
import sys

import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "models", "fixtures")
sys.path.insert(0, os.path.join(HERE, "..", "bindings"))
from make_tokenizer_batch_reference import TEXTS  # noqa: E402

# (padding side, pad id, max_length (0: none), truncation, truncation side, padding)
CASES = [
    ("right", 0, 0, False, "right", "longest"),
    ("left", 0, 0, False, "right", "longest"),
    ("right", 7, 0, False, "right", "longest"),
    ("left", 7, 40, False, "right", "max_length"),
    ("right", 3, 5, True, "right", "longest"),
    ("left", 3, 5, True, "left", "longest"),
    ("right", 9, 4, True, "left", "max_length"),
    ("left", 0, 6, True, "right", "max_length"),
    ("right", 0, 1, True, "right", "longest"),
]


def main():
    tok = AutoTokenizer.from_pretrained(os.path.join(FIX, "bert-tiny"))
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    out = [f"# written by tests/tokenizer/make_pad_reference.py with transformers "
           f"{transformers.__version__}; see that script for the format"]
    for side, pad, max_length, truncation, trunc_side, padding in CASES:
        tok.pad_token = tok.convert_ids_to_tokens(pad)
        assert tok.pad_token_id == pad
        tok.padding_side = side
        tok.truncation_side = trunc_side
        if truncation:
            cut = [tok(t, add_special_tokens=False, truncation=True,
                       max_length=max_length)["input_ids"] for t in TEXTS]
        else:
            cut = rows
        kw = {"max_length": max_length} if padding == "max_length" else {}
        enc = tok.pad({"input_ids": cut}, padding=True if padding == "longest" else "max_length",
                      **kw)
        out.append(f"case {side} {pad} {max_length} {int(truncation)} {trunc_side} {padding} "
                   f"{len(rows)}")
        for row, ids, mask in zip(rows, enc["input_ids"], enc["attention_mask"]):
            out.append(" ".join(["row"] + [str(int(v)) for v in row]))
            out.append("ids " + " ".join(str(int(v)) for v in ids))
            out.append("mask " + " ".join(str(int(v)) for v in mask))
    with open(os.path.join(HERE, "pad_reference.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
