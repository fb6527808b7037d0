"""A LLaMA-shaped model of about GPT-2 small's size (random weights; no
pretrained weights are packaged for offline use) for bench/serve, in f32:

    python make_llama_small.py OUT_DIR   -> OUT_DIR/f32

Shape: hidden 768, 12 layers, 12 query heads and 4 KV heads (grouped-query
attention, 3 query heads per KV head), SwiGLU intermediate 2048, vocabulary
32000, untied head, RoPE (theta 10000), RMSNorm, 1024 positions: 124.5M
parameters, like GPT-2 small's 124.4M, but a third of its KV cache per
token (4 KV heads instead of 12).

The folder also gets a byte-level BPE tokenizer of the vocabulary's size
(bench/model/make_gpt2_small.py's write_tokenizer: ids 0-255 the bytes,
then merges, the last id <|endoftext|>, which is BOS and EOS here), so that
llama.cpp's converter (bench/model/make_gguf.py) accepts the folder. The
benchmarks feed token ids, never text. Nothing is redone when the folder
exists.
"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
from make_gpt2_small import write_tokenizer  # noqa: E402


def main():
    out = sys.argv[1]
    folder = os.path.join(out, "f32")
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        torch.manual_seed(0)
        vocab = 32000
        cfg = LlamaConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          num_key_value_heads=4, intermediate_size=2048, vocab_size=vocab,
                          max_position_embeddings=1024, tie_word_embeddings=False,
                          bos_token_id=vocab - 1, eos_token_id=vocab - 1, pad_token_id=None)
        m = LlamaForCausalLM(cfg).eval()
        m.save_pretrained(folder)
    if not os.path.exists(os.path.join(folder, "tokenizer.json")):
        cfg = LlamaConfig.from_pretrained(folder)
        write_tokenizer(folder, cfg.vocab_size, cfg.max_position_embeddings)
    print(out)


if __name__ == "__main__":
    main()
