"""Writes tests/tokenizer/batch_reference.txt: what Hugging Face's
tokenizer(texts, padding=..., truncation=..., max_length=...) returns for
the tokenizers of tests/models/fixtures, the reference of
oslo_tokenizer_encode_batch (test_tokenizer_batch.c): padding on both
sides, to the longest row or to max_length, and truncation from both sides
with and without special tokens.

Plain text:
  "case FIXTURE PAD_SIDE PAD SPECIAL MAX_LENGTH TRUNC_SIDE PADDING N":
    FIXTURE a folder of tests/models/fixtures; PAD_SIDE "right" or "left";
    PAD the pad id to pass, or "default" (the tokenizer's own [PAD]);
    SPECIAL 1 or 0 (add_special_tokens); MAX_LENGTH 0 (no truncation) or
    the max_length truncated to; TRUNC_SIDE "right" or "left"; PADDING
    "longest" or "max_length" (padded to MAX_LENGTH);
  then N times: "text T" (the rest of the line; "text" alone: the empty
    text), "ids i1 ...", "mask m1 ..." (one padded row each).
Tokenizers without a padding token (GPT-2, LLaMA) pad with their EOS here.

Run (the --hf venv of tools/test-venv.sh):
  build/venv-hf/bin/python tests/tokenizer/make_batch_reference.py
"""
import os
import sys

import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "models", "fixtures")
# The bindings' reference texts (tests/bindings/make_tokenizer_batch_reference.py).
sys.path.insert(0, os.path.join(HERE, "..", "bindings"))
from make_tokenizer_batch_reference import TEXTS  # noqa: E402

# (fixture, padding side, pad: None for the tokenizer's own, else "eos",
#  add_special_tokens, max_length (0: no truncation), truncation side, padding)
CASES = [
    ("gpt2-tiny", "right", "eos", True, 0, "right", "longest"),
    ("gpt2-tiny", "left", "eos", True, 3, "left", "longest"),
    ("gpt2-tiny", "right", "eos", False, 5, "right", "max_length"),
    ("bert-tiny", "right", None, True, 6, "right", "longest"),
    ("bert-tiny", "left", None, True, 8, "left", "max_length"),
    ("bert-tiny", "right", None, True, 2, "right", "longest"),
    ("bert-tiny", "left", None, False, 0, "right", "longest"),
    ("bert-tiny", "right", None, True, 40, "right", "max_length"),
    ("llama-tiny-gqa", "left", "eos", True, 5, "right", "longest"),
    ("llama-tiny-gqa", "right", "eos", True, 4, "left", "max_length"),
    ("llama-tiny-gqa", "right", "eos", False, 4, "left", "longest"),
]


def main():
    out = [f"# written by tests/tokenizer/make_batch_reference.py with transformers "
           f"{transformers.__version__}; see that script for the format"]
    for fixture, side, pad, special, max_length, trunc_side, padding in CASES:
        tok = AutoTokenizer.from_pretrained(os.path.join(FIX, fixture))
        if pad == "eos":
            tok.pad_token = tok.eos_token
            pad_field = str(tok.pad_token_id)
        else:
            if tok.pad_token_id is None:
                sys.exit(f"{fixture}: no padding token")
            pad_field = "default"
        tok.padding_side = side
        tok.truncation_side = trunc_side
        kw = {"truncation": True, "max_length": max_length} if max_length else {}
        enc = tok(TEXTS, padding=True if padding == "longest" else "max_length",
                  add_special_tokens=special, **kw)
        out.append(f"case {fixture} {side} {pad_field} {int(special)} {max_length} {trunc_side} "
                   f"{padding} {len(TEXTS)}")
        for t, ids, mask in zip(TEXTS, enc["input_ids"], enc["attention_mask"]):
            out.append(("text " + t) if t else "text")
            out.append("ids " + " ".join(str(int(v)) for v in ids))
            out.append("mask " + " ".join(str(int(v)) for v in mask))
    with open(os.path.join(HERE, "batch_reference.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
