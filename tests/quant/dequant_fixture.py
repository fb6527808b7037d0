"""Step 1 of the quantized-model oracle (tests/quant/test_quant_model.sh):
copies a Hugging Face fixture folder, replacing the weight of every linear
layer of the blocks by its values after quantization to a GGUF block format
and back, computed by llama.cpp's gguf-py (gguf.quants: bit for bit llama.cpp's
reference quantizers), along each nn.Linear row (the input dimension; GPT-2's
Conv1D weights [in, out] are transposed for it and back). The folder then
holds exactly the values a model quantized at load holds, in f32, for
transformers to compute the reference with (hf_quant_refs.py).

    python dequant_fixture.py FIXTURE OUT --dtype q8_0|q4_0
    python dequant_fixture.py FIXTURE OUT --dtype q4_k|q6_k|q4_g128 --blocks CHECKPOINT

gguf-py has no quantizer for the K-quants (only their dequantizers), so for
them the blocks come from a TP 1 checkpoint `oslo quantize` wrote (oslo's
quantizers are bit for bit llama.cpp's: quant_kquant_golden) and gguf-py
dequantizes them; each such tensor must be the fixture's shape in one piece.
q4_g128 (oslo's GPTQ-style groups of 128, no GGUF type) is dequantized here
with numpy from its documented layout (docs/QUANTIZATION.md: f16 d, u8 z,
u8 0, 64 bytes whose low nibbles are elements 0..63 and high nibbles
64..127; value (q - z) * d), not with oslo's code.
"""
import argparse
import json
import os
import re
import shutil

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

LINEAR = re.compile(
    r"\.(layers|h|layer)\.\d+\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|"
    r"c_attn|c_proj|c_fc|query_key_value|dense|dense_h_to_4h|dense_4h_to_h|qkv_proj|"
    r"gate_up_proj|fc1|fc2)\.weight$")
CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")


class Blocks:
    """The block bytes of each quantized tensor of a TP 1 oslo checkpoint
    (core/checkpoint/FORMAT.md, "Quantized tensors": U8 pieces [rows, bytes
    per row])."""

    def __init__(self, ckpt, dtype):
        self.dir = ckpt
        self.dtype = dtype
        self.tensors = json.load(open(os.path.join(ckpt, "oslo_checkpoint.json")))["tensors"]

    def get(self, name, shape):
        t = self.tensors[name]
        assert t.get("quant") == self.dtype, (name, t.get("quant"), self.dtype)
        assert list(t["shape"]) == list(shape), (name, t["shape"], shape)
        assert len(t["shards"]) == 1, (name, "not one piece: save at TP 1")
        sh = t["shards"][0]
        with safe_open(os.path.join(self.dir, sh["file"]), "np") as f:
            q = f.get_tensor(sh["key"])
        assert q.dtype == np.uint8 and q.shape[0] == shape[0], (name, q.dtype, q.shape)
        return q


def dequantize_q4_g128(q, shape):
    """Rows of q4_g128 blocks (uint8 [rows, K / 128 * 68]) as f32 [rows, K]."""
    rows, k = shape
    b = q.reshape(rows, k // 128, 68)
    d = b[:, :, 0:2].copy().view(np.float16).astype(np.float32)  # [rows, groups, 1]
    z = b[:, :, 2:3].astype(np.int32)
    assert (b[:, :, 3] == 0).all() and (z <= 15).all(), "reserved byte or zero point out of range"
    qs = b[:, :, 4:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.int32)  # [rows, groups, 128]
    return ((codes - z).astype(np.float32) * d).reshape(rows, k)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("out")
    ap.add_argument("--dtype", required=True, choices=("q8_0", "q4_0", "q4_k", "q6_k", "q4_g128"))
    ap.add_argument("--blocks", help="a TP 1 oslo checkpoint holding the blocks (K-quants, "
                    "q4_g128)")
    a = ap.parse_args()
    qt = {"q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_k": T.Q4_K, "q6_k": T.Q6_K,
          "q4_g128": None}[a.dtype]
    if a.dtype in ("q4_k", "q6_k", "q4_g128") and not a.blocks:
        ap.error(f"--dtype {a.dtype} needs --blocks (gguf-py cannot quantize it; q4_g128 has no GGUF type)")
    blocks = Blocks(a.blocks, a.dtype) if a.blocks else None
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    cfg = json.load(open(os.path.join(a.fixture, "config.json")))
    gpt2 = cfg.get("model_type") == "gpt2"
    done = 0
    for f in sorted(os.listdir(a.fixture)):
        src = os.path.join(a.fixture, f)
        if f.startswith("reference") or f.startswith("train_"):
            continue
        if not f.endswith(".safetensors"):
            shutil.copy(src, os.path.join(a.out, f))
            continue
        ts = load_file(src)
        for name, w in ts.items():
            if not LINEAR.search(name):
                continue
            assert w.dtype == np.float32, (name, w.dtype)
            lin = w.T if gpt2 and CONV1D.search(name) else w  # [out, in]
            q = blocks.get(name, lin.shape) if blocks else quants.quantize(np.ascontiguousarray(lin), qt)
            if qt is None:
                d = dequantize_q4_g128(q, lin.shape)
            else:
                d = quants.dequantize(q, qt).reshape(lin.shape).astype(np.float32)
            ts[name] = np.ascontiguousarray(d.T if lin is not w else d)
            done += 1
        save_file(ts, os.path.join(a.out, f), metadata={"format": "pt"})
    assert done > 0, "no linear weight found"
    print(f"{done} linear weights through {a.dtype}")


if __name__ == "__main__":
    main()
