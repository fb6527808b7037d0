"""A LLaMA-shaped 1.1B model (hidden 2048, 16 layers, 32 heads / 8 KV heads,
intermediate 5632, vocab 32000; random weights, bf16) for the GPU decode
benchmark. Made on the GPU when one is there (fast), else on the CPU.

    python make_llama_1b.py OUT_DIR
"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
if not os.path.exists(os.path.join(out, "config.json")):
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, intermediate_size=5632, vocab_size=32000,
                      max_position_embeddings=2048, tie_word_embeddings=False)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    m.save_pretrained(out)
print(out)
