"""Hugging Face transformers on the GPU, the reference of the CUDA decode
benchmark: the same model folder, batch 1, bf16. Prints one JSON line with
prefill tokens/s (512-token prompt, first token out), decode tokens/s (128
new tokens after a 32-token prompt, greedy, no EOS; eager, and with
--compile a second line adding a static cache, which generate() compiles), the measured device copy
bandwidth and the HBM bound of decode (weight bytes per token / bandwidth).

    python hf_cuda.py MODEL_DIR [--reps R] [--compile]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def bandwidth():
    n = 1 << 30  # 1 Gi floats: 4 GiB read + 4 GiB written per copy
    a = torch.empty(n, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del a, b
    torch.cuda.empty_cache()
    return 2 * 4 * n / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    bw = bandwidth()
    m = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to("cuda").eval()
    vocab = m.config.vocab_size
    # Weights read per decode step: every parameter once (a tied head reads
    # the embedding table: counted once more), bf16.
    params = sum(p.numel() for p in m.parameters())
    if m.config.tie_word_embeddings:
        params += m.get_input_embeddings().weight.numel()
    wbytes = 2 * params

    def ids(n):
        return torch.tensor([[(i * 7919 + 13) % vocab for i in range(n)]], device="cuda")

    def gen(prompt, n, **kw):
        x = ids(prompt)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        assert out.shape[1] == prompt + n
        return t

    gen(8, 2)
    prefill = decode = 1e30
    for _ in range(a.reps):
        prefill = min(prefill, gen(512, 1))
        decode = min(decode, (gen(32, 129) - gen(32, 1)) / 128)
    res = {"engine": "transformers", "version": __import__("transformers").__version__,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "dtype": "bf16",
           "params": params, "prefill_tok_s": round(512 / prefill, 1),
           "decode_tok_s": round(1 / decode, 1), "copy_gb_s": round(bw, 0),
           "hbm_bound_tok_s": round(bw * 1e9 / wbytes, 0)}
    print(json.dumps(res), flush=True)
    if a.compile:
        # Hugging Face's best setting for decode: a static cache, with which
        # generate() compiles the forward pass itself (torch.compile).
        kw = {"cache_implementation": "static"}
        try:
            gen(32, 129, **kw)
            gen(32, 1, **kw)
            d = 1e30
            for _ in range(a.reps):
                d = min(d, (gen(32, 129, **kw) - gen(32, 1, **kw)) / 128)
            res["decode_static_compile_tok_s"] = round(1 / d, 1)
        except Exception as e:  # report, keep the eager numbers
            res["decode_static_compile_error"] = str(e)[:200]
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
