"""transformers' own continuous batching as a reference of bench/serve:
the workload file bench_serve writes (--mode workload: one request a line,
"OUTPUT_LENGTH ID ID ..."), every request added at once to a
ContinuousBatchingManager (the API under model.generate_batch, used
directly because generate_batch takes one max_new_tokens for all requests
and this workload's differ), greedy, no EOS (eos_token_id -1, transformers'
"disabled"), f32, on the CPU with --threads torch threads. Prints one JSON
line like bench_serve's: output tokens/s over the whole workload (all output
tokens / the wall time from the first add to the last result) and time to
first token p50/p99 (the first token's timestamp, record_timestamps, minus
the time of the adds).

    python hf_cb_reference.py MODEL_DIR WORKLOAD --threads N [--attn sdpa]

The manager's settings: paged KV cache with transformers' default page size
(256 tokens), enough blocks for the whole workload at once (as bench_serve
gives the oslo engine), at most 512 tokens per batch (oslo's
max_step_tokens) and as many requests per batch as the workload has, block
sharing (prefix caching) on, its default. The attention implementation
asked for is --attn (default "sdpa", transformers' default on the CPU;
transformers 5.24 runs it over its paged cache as it is: the "paged|"
prefix is only kept for "paged|eager"; the JSON line names what ran);
flash attention is not available on the CPU. One untimed warm-up run of
two short requests first, through a manager of its own.
"""
import argparse
import os
import sys
import json
import math
import time

import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workload import percentile, read_workload  # noqa: E402


def run(model, reqs, page_size):
    blocks = sum(math.ceil((len(p) + n) / page_size) for p, n in reqs) + len(reqs)
    cb = ContinuousBatchingConfig(num_blocks=blocks, max_batch_tokens=512,
                                  max_requests_per_batch=len(reqs), auto_switch_to_flash=False)
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                           max_new_tokens=max(n for _, n in reqs))
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    attn = model.config._attn_implementation  # what CB runs (it restores the model's at stop)
    try:
        t0 = time.perf_counter()
        ids = [manager.add_request(p, request_id=f"r{i}", max_new_tokens=n, eos_token_id=-1,
                                   record_timestamps=True)
               for i, (p, n) in enumerate(reqs)]
        results = {}
        while len(results) < len(reqs):
            r = manager.get_result(timeout=5)
            if r is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' generation thread stopped")
                continue
            if r.is_finished():
                if r.error is not None:
                    raise RuntimeError(f"request {r.request_id} failed: {r.error}")
                results[r.request_id] = r
        secs = time.perf_counter() - t0
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    ttft = []
    for rid, (p, n) in zip(ids, reqs):
        r = results[rid]
        if len(r.generated_tokens) != n:
            raise RuntimeError(f"{rid}: {len(r.generated_tokens)} tokens, expected {n}")
        ttft.append(r.timestamps[0] - t0)
    return secs, ttft, manager.continuous_batching_config, attn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("workload")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import transformers

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                 attn_implementation=a.attn).eval()
    reqs = read_workload(a.workload)
    page = ContinuousBatchingConfig().page_size
    run(model, [(p[:8], 2) for p, _ in reqs[:2]], page)  # warm-up
    secs, ttft, cfg, attn = run(model, reqs, page)
    out_tokens = sum(n for _, n in reqs)
    print(json.dumps({
        "engine": "transformers continuous batching", "version": transformers.__version__,
        "torch": torch.__version__, "threads": a.threads, "attn": attn,
        "page_size": cfg.page_size, "num_blocks": cfg.num_blocks, "max_batch_tokens": cfg.max_batch_tokens,
        "requests": len(reqs), "prompt_tokens": sum(len(p) for p, _ in reqs), "output_tokens": out_tokens,
        "seconds": round(secs, 3), "tok_s": round(out_tokens / secs, 2),
        "ttft_p50_ms": round(percentile(ttft, 0.5) * 1e3, 1),
        "ttft_p99_ms": round(percentile(ttft, 0.99) * 1e3, 1)}))


if __name__ == "__main__":
    main()
