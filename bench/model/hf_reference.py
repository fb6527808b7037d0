"""Hugging Face transformers on torch (CPU), the reference of bench_model:
the same model folder, batch 1, the same thread count and dtype.
Prints one JSON line: prefill tokens/s (512-token prompt, first token out) and
decode tokens/s (128 new tokens after a 32-token prompt, greedy, no EOS).

    python hf_reference.py MODEL_DIR --threads N --dtype f32|bf16 [--reps R]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = AutoModelForCausalLM.from_pretrained(a.model, dtype=dt).eval()
    vocab = m.config.vocab_size

    def ids(n):
        return torch.tensor([[(i * 7919 + 13) % vocab for i in range(n)]])

    def gen(prompt, n):
        x = ids(prompt)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
        t = time.perf_counter() - t0
        assert out.shape[1] == prompt + n
        return t

    gen(512, 1)  # warm-up: one call of each measured kind, as bench_model does
    gen(32, 2)
    prefill = decode = 1e30
    for _ in range(a.reps):
        prefill = min(prefill, gen(512, 1))
        d = (gen(32, 129) - gen(32, 1)) / 128
        decode = min(decode, d)
    print(json.dumps({"engine": "transformers", "version": __import__("transformers").__version__,
                      "torch": torch.__version__, "threads": a.threads, "dtype": a.dtype,
                      "prefill_tok_s": round(512 / prefill, 1),
                      "decode_tok_s": round(1 / decode, 2)}))


if __name__ == "__main__":
    main()
