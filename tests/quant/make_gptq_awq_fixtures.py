"""GPTQ and AWQ checkpoints of a tiny LLaMA, written from the formats'
documented layouts with numpy, and their dequantized weights.

Usage: make_gptq_awq_fixtures.py OUT_DIR [TEST_BINARY]
(with TEST_BINARY, test_gptq, runs it on OUT_DIR afterwards: the ctest
quant_gptq_awq)

The model is tests/models/fixtures/llama-tiny-gqa's (its config, tokenizer
and generation config) widened to hidden_size 128 / intermediate_size 256 /
head_dim 32, because groups of 128 inputs need in_features that are
multiples of 128 (the fixture's hidden size is 64). Its weights are seeded
N(0, 0.2) like the fixture's, rounded to f16 (the dense tensors are stored
f16; config.json keeps the fixture's torch_dtype float32, so a model runs in
f32).
Every linear of the blocks (q/k/v/o, gate/up/down) is quantized with GPTQ's
round-to-nearest quantizer (no calibration: the layout is what is tested):
per output row and group of 128 inputs, xmin = min(0, min w), xmax = max(0,
max w), scale = f16((xmax - xmin) / 15), zero = round(-xmin / scale), q =
clamp(round(w / scale) + zero, 0, 15) (round half to even, as torch.round).

Writes, under OUT_DIR:
  gptq/     config.json with quantization_config as transformers' GPTQConfig
            writes it (bits 4, group_size 128, desc_act false, sym false,
            checkpoint_format "gptq": zeros stored minus one), model.safetensors
            with <p>.qweight int32 [K/8, N], .qzeros int32 [K/128, N/8],
            .scales f16 [K/128, N], .g_idx int32 [K] (k // 128), and the
            unquantized tensors (embeddings, norms, lm_head) in f16
  gptq_v2/  the same linears in GPTQModel's "gptq_v2" format (zeros as they are)
  awq/      config.json with AwqConfig's quantization_config (version "gemm",
            zero_point true), <p>.qweight int32 [K, N/8] and .qzeros int32
            [K/128, N/8] in AWQ's nibble order [0, 2, 4, 6, 1, 3, 5, 7],
            .scales f16 [K/128, N]
  gptq_actorder/  one linear (model.layers.0.mlp.down_proj, K = 256) with a
            permuted g_idx (desc_act true), and the rest of gptq/
  gptq_g64/ gptq/ with group_size 64 (refused: q4_g128 needs 128)
  reference.safetensors  for every linear <p>: "<p>.weight" f32, the
            dequantization as transformers/AutoGPTQ/AutoAWQ define it,
            scale * (q - zero), computed here in f32 (exact: a small integer
            times an f16); "<p>.weight.f16": the same computed in f16 as those
            packages do on a GPU (f16 operands, f16 result); and
            "act.<p>.weight" f32 for the act-order linear, in input order.
"""
import json
import os
import shutil
import struct
import sys

try:
    import numpy as np
except ImportError as e:  # the tests' venv has it (tools/test-venv.sh)
    print(f"SKIP: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "models", "fixtures", "llama-tiny-gqa")
G = 128
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def write_safetensors(path, tensors):
    """tensors: name -> numpy array (f16, f32, i32). Sorted keys, 8-aligned."""
    names = {np.dtype("<f2"): "F16", np.dtype("<f4"): "F32", np.dtype("<i4"): "I32"}
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        b = a.tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def rtn(w, group):
    """w f32 [N, K] -> q uint8 [N, K], zero int [N, K/group], scale f16 [N, K/group]."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    xmin = np.minimum(g.min(axis=2), 0).astype(np.float32)
    xmax = np.maximum(g.max(axis=2), 0).astype(np.float32)
    same = xmin == xmax
    xmin[same], xmax[same] = -1, 1
    scale = ((xmax - xmin) / np.float32(15)).astype(np.float16)
    s32 = scale.astype(np.float32)
    zero = np.clip(np.round(-xmin / s32), 0, 15).astype(np.int64)
    q = np.clip(np.round(g / s32[:, :, None]) + zero[:, :, None], 0, 15).astype(np.int64)
    return q.reshape(n, k), zero, scale


def pack_rows(nibbles):
    """[..., 8] ints 0..15 -> int32, nibble i in bits 4i..4i+3."""
    v = np.zeros(nibbles.shape[:-1], np.uint32)
    for i in range(8):
        v |= (nibbles[..., i].astype(np.uint32) & 0xF) << np.uint32(4 * i)
    return v.view(np.int32)


def gptq_pack(q, zero, scale, minus_one, g_idx):
    n, k = q.shape
    qweight = pack_rows(q.T.reshape(k // 8, 8, n).transpose(0, 2, 1))      # [K/8, N]
    z = (zero.T - (1 if minus_one else 0)) & 0xF                              # [K/G, N]
    qzeros = pack_rows(z.reshape(z.shape[0], n // 8, 8))                      # [K/G, N/8]
    return {"qweight": qweight, "qzeros": qzeros, "scales": scale.T.copy(),
            "g_idx": g_idx.astype(np.int32)}


def awq_pack(q, zero, scale):
    n, k = q.shape
    order = np.array(AWQ_ORDER)
    qt = q.T.reshape(k, n // 8, 8)[:, :, order]                               # nibble i <- col order[i]
    zt = zero.T.reshape(zero.shape[1], n // 8, 8)[:, :, order]
    return {"qweight": pack_rows(qt), "qzeros": pack_rows(zt), "scales": scale.T.copy()}


def dequant(q, zero, scale, cols_group):
    """Reference: W[n, k] = scale[n, g] * (q[n, k] - zero[n, g]), g = cols_group[k]."""
    s = scale[:, cols_group]
    z = zero[:, cols_group]
    f32 = (s.astype(np.float32) * (q - z).astype(np.float32)).astype(np.float32)
    f16 = (s * (q - z).astype(np.float16)).astype(np.float16)  # f16 operands, f16 result
    return f32, f16


def main(out):
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(BASE, "config.json")))
    cfg.update(hidden_size=128, intermediate_size=256, head_dim=32)  # torch_dtype float32
    H, I, V, L = 128, 256, cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], 32
    rng = np.random.default_rng(35)
    f16 = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float16)
    dense = {"model.embed_tokens.weight": f16(V, H), "lm_head.weight": f16(V, H),
             "model.norm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float16)}
    linears = {}
    for l in range(L):
        p = f"model.layers.{l}."
        dense[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(H)).astype(np.float16)
        dense[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(H)).astype(np.float16)
        for name, (n, k) in {"self_attn.q_proj": (nh * hd, H), "self_attn.k_proj": (nkv * hd, H),
                             "self_attn.v_proj": (nkv * hd, H), "self_attn.o_proj": (H, nh * hd),
                             "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H),
                             "mlp.down_proj": (H, I)}.items():
            linears[p + name] = f16(n, k).astype(np.float32)

    ref = {}
    variants = {"gptq": {}, "gptq_v2": {}, "awq": {}, "gptq_g64": {}}
    for p, w in linears.items():
        n, k = w.shape
        q, zero, scale = rtn(w, G)
        trivial = np.arange(k) // G
        ref[p + ".weight"], ref[p + ".weight.f16"] = dequant(q, zero, scale, trivial)
        for v, minus in (("gptq", True), ("gptq_v2", False)):
            for part, a in gptq_pack(q, zero, scale, minus, trivial).items():
                variants[v][f"{p}.{part}"] = a
        for part, a in awq_pack(q, zero, scale).items():
            variants["awq"][f"{p}.{part}"] = a
        q64, z64, s64 = rtn(w, 64)
        for part, a in gptq_pack(q64, z64, s64, True, np.arange(k) // 64).items():
            variants["gptq_g64"][f"{p}.{part}"] = a

    # Act-order: inputs visited in a random order; group i takes the i-th
    # block of 128 visited inputs (GPTQ with desc_act quantizes in that order).
    act = dict(variants["gptq"])
    p = "model.layers.0.mlp.down_proj"
    w = linears[p]
    order = rng.permutation(w.shape[1])
    g_idx = np.empty(w.shape[1], np.int64)
    g_idx[order] = np.arange(w.shape[1]) // G
    qp, zp, sp = rtn(w[:, order], G)  # groups contiguous in visiting order
    q = np.empty_like(qp)
    q[:, order] = qp
    for part, a in gptq_pack(q, zp, sp, True, g_idx).items():
        act[f"{p}.{part}"] = a
    ref["act." + p + ".weight"], _ = dequant(q, zp, sp, g_idx)
    variants["gptq_actorder"] = act

    qcfg = {
        "gptq": {"bits": 4, "group_size": 128, "desc_act": False, "sym": False, "damp_percent": 0.1,
                 "true_sequential": True, "quant_method": "gptq", "checkpoint_format": "gptq",
                 "use_exllama": True, "model_seqlen": None, "block_name_to_quantize": None,
                 "module_name_preceding_first_block": None, "batch_size": 1, "pad_token_id": None,
                 "use_cuda_fp16": False, "max_input_length": None, "cache_block_outputs": True,
                 "modules_in_block_to_quantize": None, "dataset": None, "tokenizer": None},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                "version": "gemm", "backend": "autoawq", "modules_to_not_convert": None,
                "do_fuse": False, "fuse_max_seq_len": None, "modules_to_fuse": None,
                "exllama_config": None},
    }
    qcfg["gptq_v2"] = dict(qcfg["gptq"], checkpoint_format="gptq_v2")
    qcfg["gptq_actorder"] = dict(qcfg["gptq"], desc_act=True)
    qcfg["gptq_g64"] = dict(qcfg["gptq"], group_size=64)
    for v, tensors in variants.items():
        d = os.path.join(out, v)
        os.makedirs(d, exist_ok=True)
        c = dict(cfg, quantization_config=qcfg[v])
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
        for extra in ("generation_config.json", "tokenizer.json", "tokenizer.model",
                      "tokenizer_config.json"):
            shutil.copy(os.path.join(BASE, extra), d)
        write_safetensors(os.path.join(d, "model.safetensors"), dict(dense, **tensors))
    write_safetensors(os.path.join(out, "reference.safetensors"), ref)
    print(f"{out}: {', '.join(variants)}; {len(linears)} linears")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
    if len(sys.argv) == 3:
        import subprocess
        sys.exit(subprocess.call([sys.argv[2], sys.argv[1]]))
