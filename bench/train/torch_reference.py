#!/usr/bin/env python3
"""The PyTorch side of bench/train/run.sh: one training step (causal-LM loss
over a random batch, backward, clip_grad_norm_(1.0), AdamW) of the same HF
folder with transformers, timed; prints one JSON line.

    torch_reference.py MODEL_DIR [--seq 256] [--batch 4] [--steps 1] [--warmup 1] [--threads 2]
                       [--attn sdpa|eager]

The attention is transformers' default (SDPA, what users run) unless
--attn eager asks for the composed one.
"""
import argparse
import json
import resource
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32",
                    help="bf16/f16: torch.autocast on the f32 model (f16 with GradScaler)")
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                    help="transformers' attn_implementation (default: sdpa, its default)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        a.model, torch_dtype=torch.float32, attn_implementation=a.attn)
    model.train()
    for mod in model.modules():  # no dropout: the same arithmetic as oslo's step
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    # The batch bench_train builds: token i of the flattened batch is
    # (i * 2654435761 + 7) mod vocab.
    n, v = a.batch * a.seq, model.config.vocab_size
    ids = torch.tensor([(i * 2654435761 + 7) % v for i in range(n)]).reshape(a.batch, a.seq)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-4)

    amp = {"bf16": torch.bfloat16, "f16": torch.float16}.get(a.dtype)
    scaler = torch.amp.GradScaler("cpu") if a.dtype == "f16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if amp is None:
            loss = model(input_ids=ids, labels=ids).loss
        else:
            with torch.autocast(device_type="cpu", dtype=amp):
                loss = model(input_ids=ids, labels=ids).loss
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        return loss.item()

    for _ in range(a.warmup):
        step()
    best, loss = 1e30, 0.0
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        best = min(best, time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"engine": "pytorch", "torch": torch.__version__, "dtype": a.dtype, "attn": a.attn,
                      "threads": a.threads,
                      "seq": a.seq, "batch": a.batch, "step_s": round(best, 3),
                      "tokens_per_s": round(a.batch * a.seq / best, 1), "loss": round(loss, 4),
                      "peak_rss_mib": round(peak, 1)}))


if __name__ == "__main__":
    main()
