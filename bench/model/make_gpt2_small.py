"""A GPT-2-small-shaped model (124M parameters, random weights; no pretrained
weights are packaged for offline use) for bench_model, in f32 and bf16.

    python make_gpt2_small.py OUT_DIR   -> OUT_DIR/f32, OUT_DIR/bf16

config.json gets "n_ctx" (= n_positions, 1024) as in the published gpt2
config.json: llama.cpp's converter reads the context length from it, and
transformers 5 no longer writes it. Each folder also gets a tokenizer of the model's vocabulary size (50257), so
that llama.cpp's converter (bench/model/make_gguf.py) accepts the folder: a
byte-level BPE with GPT-2's byte alphabet and pre-tokenizer, made here
offline with the `tokenizers` package (GPT-2's own vocabulary is not packaged
for offline use either). Its ids 0-255 are the 256 bytes, 256-50255 are
50000 merges of two byte symbols (pairs in alphabet order), 50256 is
<|endoftext|>, as in GPT-2. The benchmarks feed token ids, never text, so
the tokenizer only has to be valid and of the right size. Folders made
before n_ctx and the tokenizer were added get them without their weights
being redone. bench/serve/make_llama_small.py imports write_tokenizer from
here.
"""
import json
import os
import sys

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel


def byte_alphabet():
    """GPT-2's printable stand-ins for the 256 bytes, in byte order: the
    bytes that are printable Latin-1 characters stand for themselves, the
    others are given the code points 256, 257, ... in turn."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def write_tokenizer(folder, vocab_size, max_len):
    alphabet = byte_alphabet()
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(vocab) == vocab_size - 1:
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    eos = "<|endoftext|>"
    tok.add_special_tokens([AddedToken(eos, special=True, normalized=False)])
    assert tok.get_vocab_size() == vocab_size and tok.token_to_id(eos) == vocab_size - 1
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": eos, "eos_token": eos,
                   "unk_token": eos, "add_prefix_space": False, "model_max_length": max_len}, f, indent=2)


def main():
    out = sys.argv[1]
    if not os.path.exists(os.path.join(out, "bf16", "model.safetensors")):
        torch.manual_seed(0)
        m = GPT2LMHeadModel(GPT2Config()).eval()  # the gpt2 (small) shape
        m.save_pretrained(os.path.join(out, "f32"))
        m.to(torch.bfloat16).save_pretrained(os.path.join(out, "bf16"))
    cfg = GPT2Config.from_pretrained(os.path.join(out, "f32"))
    for dt in ("f32", "bf16"):
        path = os.path.join(out, dt, "config.json")
        with open(path) as f:
            c = json.load(f)
        if "n_ctx" not in c:
            c["n_ctx"] = c["n_positions"]
            with open(path, "w") as f:
                json.dump(c, f, indent=2, sort_keys=True)
                f.write("\n")
        if not os.path.exists(os.path.join(out, dt, "tokenizer.json")):
            write_tokenizer(os.path.join(out, dt), cfg.vocab_size, cfg.n_positions)
    print(out)


if __name__ == "__main__":
    main()
