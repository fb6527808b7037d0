"""llama.cpp's continuous batching as a reference of bench/serve, through
llama-cpp-python's low-level API (the llama.cpp C API; built from source by
bench/model/llama_cpp_venv.sh): the workload file bench_serve writes
(--mode workload: one request a line, "OUTPUT_LENGTH ID ID ..."), every
request arriving at once, greedy (the argmax of each row's logits, no
sampler chain), no EOS check (every request runs its full length), the GGUF
made from the same model folder (bench/model/make_gguf.py, f32).

    python llama_cpp_cb_reference.py MODEL.gguf WORKLOAD --threads N [--kv-type f32|f16]
                                     [--kv slot|unified]

The loop is llama.cpp's server's (tools/server, update_slots) without HTTP:
one slot per request (n_parallel = the number of requests, all admitted at
once); each step builds one llama_batch of first one token of every slot
that is generating (its last token, logits on), then chunks of the prompts
of the slots still reading theirs, in arrival order, up to n_batch = 512
tokens per step (oslo's max_step_tokens; the server's default n_batch is
2048, split into ubatches of 512), logits only on a prompt's last token;
one llama_decode; each row with logits chooses its slot's next token. A
finished slot's KV cells are freed (llama_memory_seq_rm). The context, by
--kv: "slot" (the default) gives every slot its own KV stream (kv_unified
off) of the longest request's tokens rounded up to 256, so each step's
attention reads only its own sequence's cells; "unified" makes one KV cache
shared by all slots (kv_unified on) of the whole workload's tokens rounded up
to 256, whose attention spans the whole buffer. Either way every request
fits at once, as in the other rows;
n_seq_max = the number of requests, n_threads = n_threads_batch = N,
KV cache in --kv-type (default f32, the dtype of the weights and of oslo's
KV pool), flash attention as llama.cpp's default decides (printed).

Prints one JSON line like bench_serve's: output tokens/s over the whole
workload (all output tokens / the wall time from the first step to the last
token) and time to first token p50/p99 (from the start to the step that
chose a request's first token). One untimed warm-up decode first.
"""
import argparse
import os
import sys
import ctypes
import json
import time

import numpy as np

import llama_cpp as L

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import percentile, read_workload  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("workload")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", choices=("f32", "f16"), default="f32")
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--kv", choices=("slot", "unified"), default="slot")
    a = ap.parse_args()
    reqs = read_workload(a.workload)
    nreq = len(reqs)
    n_batch = a.n_batch

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        raise RuntimeError("cannot load " + a.model)
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    total = sum(len(p) + n for p, n in reqs)
    longest = max(len(p) + n for p, n in reqs)
    if a.kv == "unified":
        cp.n_ctx = (total + 255) // 256 * 256
    else:
        cp.n_ctx = nreq * ((longest + 255) // 256 * 256)
    cp.n_batch = n_batch
    cp.n_ubatch = n_batch
    cp.n_seq_max = nreq
    cp.kv_unified = a.kv == "unified"
    cp.n_threads = a.threads
    cp.n_threads_batch = a.threads
    kv = L.GGML_TYPE_F32 if a.kv_type == "f32" else L.GGML_TYPE_F16
    cp.type_k = kv
    cp.type_v = kv
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError("cannot make the llama.cpp context")
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(n_batch, 0, 1)

    def add(tok, pos, seq, logits):
        k = batch.n_tokens
        batch.token[k] = tok
        batch.pos[k] = pos
        batch.n_seq_id[k] = 1
        batch.seq_id[k][0] = seq
        batch.logits[k] = 1 if logits else 0
        batch.n_tokens = k + 1

    def argmax(row):
        p = L.llama_get_logits_ith(ctx, row)
        return int(np.argmax(np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                                   shape=(vocab,))))

    def decode():
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    # Warm-up: one short prompt, then its cells freed.
    batch.n_tokens = 0
    for i, t in enumerate(reqs[0][0][:8]):
        add(t, i, 0, i == min(8, len(reqs[0][0])) - 1)
    decode()
    L.llama_memory_clear(mem, True)

    fed = [0] * nreq          # prompt tokens fed so far
    out = [[] for _ in range(nreq)]
    first = [None] * nreq
    done = 0
    finished = [False] * nreq
    t0 = time.perf_counter()
    while done < nreq:
        batch.n_tokens = 0
        rows = []  # (batch row, slot)
        for s in range(nreq):  # generating slots: one token each
            if not finished[s] and fed[s] == len(reqs[s][0]):
                add(out[s][-1], len(reqs[s][0]) + len(out[s]) - 1, s, True)
                rows.append((batch.n_tokens - 1, s))
        for s in range(nreq):  # then prompt chunks, in arrival order
            budget = n_batch - batch.n_tokens
            if budget <= 0:
                break
            p = reqs[s][0]
            if fed[s] == len(p):
                continue
            take = min(budget, len(p) - fed[s])
            for i in range(fed[s], fed[s] + take):
                add(p[i], i, s, i == len(p) - 1)
            fed[s] += take
            if fed[s] == len(p):
                rows.append((batch.n_tokens - 1, s))
        decode()
        t = time.perf_counter() - t0
        for row, s in rows:
            out[s].append(argmax(row))
            if first[s] is None:
                first[s] = t
            if len(out[s]) == reqs[s][1]:
                finished[s] = True
                done += 1
                L.llama_memory_seq_rm(mem, s, -1, -1)
    secs = time.perf_counter() - t0
    out_tokens = sum(n for _, n in reqs)
    assert all(len(o) == n for o, (_, n) in zip(out, reqs))
    cpa = L.llama_context_default_params()
    fa = getattr(cpa, "flash_attn_type", None)
    print(json.dumps({
        "engine": "llama.cpp continuous batching", "version": L.__version__, "threads": a.threads,
        "kv_cache": a.kv_type, "kv": a.kv, "flash_attn_type": fa, "n_batch": n_batch, "n_ctx": cp.n_ctx,
        "requests": nreq, "prompt_tokens": sum(len(p) for p, _ in reqs), "output_tokens": out_tokens,
        "seconds": round(secs, 3), "tok_s": round(out_tokens / secs, 2),
        "ttft_p50_ms": round(percentile(first, 0.5) * 1e3, 1),
        "ttft_p99_ms": round(percentile(first, 0.99) * 1e3, 1)}))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
