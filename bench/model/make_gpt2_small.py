"""A GPT-2-small-shaped model (124M parameters, random weights; no pretrained
weights are packaged for offline use) for bench_model, in f32 and bf16.

    python make_gpt2_small.py OUT_DIR   -> OUT_DIR/f32, OUT_DIR/bf16
"""
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

out = sys.argv[1]
if not os.path.exists(os.path.join(out, "bf16", "model.safetensors")):
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config()).eval()  # the gpt2 (small) shape
    m.save_pretrained(os.path.join(out, "f32"))
    m.to(torch.bfloat16).save_pretrained(os.path.join(out, "bf16"))
print(out)
