"""oslo's logits of a GGUF model equal an independent float64 NumPy forward
over the same weights dequantized by gguf-py (llama.cpp's own Python
package): the same dequantization, the rotary row order undone, the same
LLaMA / Qwen2 block. Unlike the comparison with llama.cpp (whose CPU kernels
round activations to 8 bits), nothing here rounds, so the bound is tight.

    check_numpy_forward.py GGUF_MODEL_TEST FILE.gguf DTYPE WORK_DIR TOL

Runs `gguf_model_test dump FILE DTYPE` (every position of the prompts of
kDumpPrompts in test_gguf_model.cpp, repeated in PROMPTS below) and checks
max |oslo - numpy| <= TOL x max |logit|. Exit 77 (skip) without numpy or
gguf.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

PROMPTS = [[1, 45, 300, 17, 99], [1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [1, 400]]


def load(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    arch = f["general.architecture"].contents()

    def md(k, d=None):
        return f[arch + "." + k].contents() if arch + "." + k in f else d

    hp = dict(arch=arch, L=md("block_count"), H=md("embedding_length"),
              NH=md("attention.head_count"), eps=md("attention.layer_norm_rms_epsilon"),
              theta=md("rope.freq_base"))
    hp["KV"] = md("attention.head_count_kv", hp["NH"])
    hp["D"] = md("attention.key_length", hp["H"] // hp["NH"])
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        W[t.name] = a.reshape([int(x) for x in reversed(list(t.shape))])
    return hp, W


def unpermute(w, n):
    # llama.cpp's converter put HF row h*D + i*D/2 + j at row h*D + 2j + i.
    d = w.shape[0] // n
    idx = np.empty(w.shape[0], dtype=np.int64)
    for h in range(n):
        for i in range(2):
            for j in range(d // 2):
                idx[h * d + i * (d // 2) + j] = h * d + 2 * j + i
    return w[idx]


def forward(hp, W, ids):
    S, D, NH, KV, eps = len(ids), hp["D"], hp["NH"], hp["KV"], hp["eps"]
    perm = hp["arch"] == "llama"

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):
        inv = 1.0 / hp["theta"] ** (np.arange(0, D, 2) / D)
        ang = np.arange(S, dtype=np.float64)[:, None] * inv[None]
        cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None]
        sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None]
        return x * cos + np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1) * sin

    x = W["token_embd.weight"][ids]
    for l in range(hp["L"]):
        p = f"blk.{l}."
        h = rms(x, W[p + "attn_norm.weight"])
        wq, wk = W[p + "attn_q.weight"], W[p + "attn_k.weight"]
        if perm:
            wq, wk = unpermute(wq, NH), unpermute(wk, KV)
        q, k, v = h @ wq.T, h @ wk.T, h @ W[p + "attn_v.weight"].T
        if p + "attn_q.bias" in W:
            q, k, v = q + W[p + "attn_q.bias"], k + W[p + "attn_k.bias"], v + W[p + "attn_v.bias"]
        q, k = rope(q.reshape(S, NH, D)), rope(k.reshape(S, KV, D))
        k, v = np.repeat(k, NH // KV, 1), np.repeat(v.reshape(S, KV, D), NH // KV, 1)
        att = np.einsum("snd,tnd->nst", q, k) / np.sqrt(D) + np.triu(np.full((S, S), -np.inf), 1)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + np.einsum("nst,tnd->snd", att, v).reshape(S, NH * D) @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    x = rms(x, W["output_norm.weight"])
    return x @ W.get("output.weight", W["token_embd.weight"]).T


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    binary, path, dtype, work, tol = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "oslo.bin")
    subprocess.run([binary, "dump", path, dtype, out], check=True)
    got = np.fromfile(out, dtype=np.float32).astype(np.float64)
    hp, W = load(path)
    want = np.concatenate([forward(hp, W, ids).ravel() for ids in PROMPTS])
    if got.shape != want.shape:
        print(f"FAIL: oslo wrote {got.size} logits, NumPy has {want.size}")
        return 1
    diff, scale = np.abs(got - want).max(), max(1.0, np.abs(want).max())
    ok = diff <= float(tol) * scale
    print(f"{os.path.basename(path)} ({dtype}): max |oslo - numpy| {diff:.3g}, "
          f"max |logit| {scale:.3g}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
