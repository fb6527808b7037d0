"""Step 1 of the quantized-model oracle (tests/quant/test_quant_model.sh):
copies a Hugging Face fixture folder, replacing the weight of every linear
layer of the blocks by its values after quantization to a GGUF block format
and back, computed by llama.cpp's gguf-py (gguf.quants: bit for bit llama.cpp's
reference quantizers), along each nn.Linear row (the input dimension; GPT-2's
Conv1D weights [in, out] are transposed for it and back). The folder then
holds exactly the values a model quantized at load holds, in f32, for
transformers to compute the reference with (hf_quant_refs.py).

    python dequant_fixture.py FIXTURE OUT --dtype q8_0|q4_0
"""
import argparse
import json
import os
import re
import shutil

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors.numpy import load_file, save_file

LINEAR = re.compile(
    r"\.(layers|h|layer)\.\d+\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|"
    r"c_attn|c_proj|c_fc|query_key_value|dense|dense_h_to_4h|dense_4h_to_h|qkv_proj|"
    r"gate_up_proj|fc1|fc2)\.weight$")
CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("out")
    ap.add_argument("--dtype", required=True, choices=("q8_0", "q4_0"))
    a = ap.parse_args()
    qt = {"q8_0": T.Q8_0, "q4_0": T.Q4_0}[a.dtype]
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
            q = quants.quantize(np.ascontiguousarray(lin), qt)
            d = quants.dequantize(q, qt).reshape(lin.shape).astype(np.float32)
            ts[name] = np.ascontiguousarray(d.T if lin is not w else d)
            done += 1
        save_file(ts, os.path.join(a.out, f), metadata={"format": "pt"})
    assert done > 0, "no linear weight found"
    print(f"{done} linear weights through {a.dtype}")


if __name__ == "__main__":
    main()
