"""llama.cpp (through llama-cpp-python, built from source by
bench/model/llama_cpp_venv.sh) as a reference of bench_model: the GGUF made
from the same model folder (bench/model/make_gguf.py), batch 1, the same
thread count. Prints one JSON line, like hf_reference.py: prefill tokens/s
(a 512-token prompt evaluated and the first token out) and decode tokens/s
(128 new tokens after a 32-token prompt, greedy, no EOS: (time of 129 new
tokens - time of 1) / 128). Prompt ids are (i * 7919 + 13) % vocab.

    python llama_cpp_reference.py MODEL.gguf --threads N [--reps R] [--decode-only]

--decode-only: no prefill run (prefill_tok_s 0), as bench_model's. The JSON
line also holds the first 8 tokens of the last measured 128-token decode
("first_tokens"), to compare with bench_model's on the same file.

The loop is llama-cpp-python's Llama.eval (one llama_decode per call; the
prompt in one batch: n_batch = n_ubatch = 512) and the greedy choice is the
argmax of the last row of logits, read from llama_get_logits_ith with no
copy: no sampler chain, no EOS check. n_threads = n_threads_batch = N. The
context holds 1024 positions (GPT-2's n_ctx; the longest run needs 513).
Other settings are llama-cpp-python's defaults (KV cache in f16, flash
attention off); they are printed in the JSON line.
"""
import argparse
import ctypes
import json
import time

import numpy as np

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--decode-only", action="store_true")
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_batch=512, n_ubatch=512,
                          n_threads=a.threads, n_threads_batch=a.threads,
                          n_gpu_layers=0, logits_all=False, verbose=False)
    vocab = llm.n_vocab()
    ctx = llm.ctx

    def ids(n):
        return [(i * 7919 + 13) % vocab for i in range(n)]

    def next_token():
        row = llama_cpp.llama_get_logits_ith(ctx, -1)
        logits = np.ctypeslib.as_array(ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))
        return int(np.argmax(logits))

    last = []

    def gen(prompt, n):
        x = ids(prompt)
        llm.reset()  # the next eval drops the KV cache past position 0
        t0 = time.perf_counter()
        llm.eval(x)
        out = [next_token()]
        while len(out) < n:
            llm.eval(out[-1:])
            out.append(next_token())
        t = time.perf_counter() - t0
        assert llm.n_tokens == prompt + n - 1 and len(out) == n
        last[:] = out
        return t

    if not a.decode_only:
        gen(512, 1)  # warm-up: one call of each measured kind, as bench_model does
    gen(32, 2)
    prefill = decode = 1e30
    first = []
    for _ in range(a.reps):
        if not a.decode_only:
            prefill = min(prefill, gen(512, 1))
        t1 = gen(32, 1)  # bench_model's order: 1 new token, then 129
        t129 = gen(32, 129)
        first = last[:8]
        d = (t129 - t1) / 128
        decode = min(decode, d)
    # The tensor type of the weights (the token embedding's is the same as
    # the blocks' in an f32 or bf16 GGUF), read back from the file: its
    # general.file_type (llama_ftype; 15, Q4_K_M, is also what a `pure` Q4_K
    # file made by gguf_quant.py says).
    ftype = llm.metadata.get("general.file_type")
    dtype = {"0": "f32", "1": "f16", "32": "bf16", "7": "q8_0", "2": "q4_0", "14": "q4_k_s",
             "15": "q4_k_m"}.get(ftype, "file_type " + str(ftype))
    kv = {llama_cpp.GGML_TYPE_F32: "f32", llama_cpp.GGML_TYPE_F16: "f16"}
    cp = llm.context_params
    print(json.dumps({"engine": "llama.cpp", "version": llama_cpp.__version__,
                      "threads": a.threads, "dtype": dtype,
                      "kv_cache": kv.get(cp.type_k, "ggml type %d" % cp.type_k),
                      "flash_attn": cp.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                      "prefill_tok_s": 0.0 if a.decode_only else round(512 / prefill, 1),
                      "decode_tok_s": round(1 / decode, 2), "decode_ms": round(decode * 1e3, 3),
                      "first_tokens": first}))


if __name__ == "__main__":
    main()
