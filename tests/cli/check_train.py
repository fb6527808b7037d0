#!/usr/bin/env python3
"""Checks for tests/cli/test_cli_train.sh (`oslo train`).

    check_train.py log LOG STEPS            LOG is STEPS JSON lines, steps 1..STEPS, with
                                            step, loss, lr, grad_norm, tokens_per_s,
                                            elapsed_s (numbers) and data_hash
    check_train.py decreases LOG            the mean loss of the last 5 steps is below
                                            90% of the first 5 steps'
    check_train.py same A B N [TOL]         the first N steps of logs A and B have the
                                            same data_hash and losses within TOL (1e-4)
    check_train.py close A B N RTOL         the first N steps of logs A and B have the
                                            same data_hash, losses within RTOL relative
                                            and the same tokens (e.g. --dp 2 --batch-size
                                            B against --dp 1 --batch-size 2B)
    check_train.py match A B N RTOL         the first N steps of logs A and B have the
                                            same data_hash and tokens, losses and
                                            gradient norms within RTOL relative (a
                                            device against --device cpu)
    check_train.py differs A B N            data_hash differs in some of the first N steps
    check_train.py hf MERGED FIXTURE IDS N  transformers loads MERGED (AutoModelForCausalLM,
                                            AutoTokenizer), its weights differ from
                                            FIXTURE's; prints its greedy continuation of
                                            the comma-separated IDS by N tokens, as
                                            `oslo generate --ids` prints it
Exit status 0: holds; 1: does not (says why); 77: no torch/transformers (hf).
"""
import json
import math
import sys

FIELDS = ("step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s")


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_log(path, steps):
    recs = read(path)
    if len(recs) != steps:
        fail(f"{path}: {len(recs)} lines, want {steps}")
    for i, r in enumerate(recs):
        for k in FIELDS:
            if not isinstance(r.get(k), (int, float)) or isinstance(r.get(k), bool):
                fail(f"{path} line {i + 1}: field {k} missing or not a number: {r}")
        if r["step"] != i + 1:
            fail(f"{path} line {i + 1}: step {r['step']}")
        if not isinstance(r.get("data_hash"), str) or len(r["data_hash"]) != 16:
            fail(f"{path} line {i + 1}: no data_hash: {r}")
        if not (math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 and r["elapsed_s"] > 0):
            fail(f"{path} line {i + 1}: implausible values: {r}")
    print(f"{path}: {steps} valid lines; loss {recs[0]['loss']:.4f} -> {recs[-1]['loss']:.4f}, "
          f"{sum(r['tokens_per_s'] for r in recs) / steps:.0f} tokens/s on average")


def decreases(path):
    loss = [r["loss"] for r in read(path)]
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    if not last < 0.9 * first:
        fail(f"{path}: loss does not go down: first 5 steps {first:.4f}, last 5 {last:.4f}")
    print(f"{path}: mean loss of the first 5 steps {first:.4f}, of the last 5 {last:.4f}")


def same(a, b, n, tol):
    ra, rb = read(a)[:n], read(b)[:n]
    if len(ra) != n or len(rb) != n:
        fail(f"fewer than {n} steps in {a} or {b}")
    worst = 0.0
    for x, y in zip(ra, rb):
        if x["data_hash"] != y["data_hash"]:
            fail(f"step {x['step']}: data differs: {x['data_hash']} vs {y['data_hash']}")
        worst = max(worst, abs(x["loss"] - y["loss"]))
        if abs(x["loss"] - y["loss"]) > tol:
            fail(f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r} (tolerance {tol})")
    print(f"{a} vs {b}: same data in {n} steps, losses within {worst:.2e}")


def close(a, b, n, rtol):
    ra, rb = read(a)[:n], read(b)[:n]
    if len(ra) != n or len(rb) != n:
        fail(f"fewer than {n} steps in {a} or {b}")
    worst = 0.0
    for x, y in zip(ra, rb):
        if x["data_hash"] != y["data_hash"]:
            fail(f"step {x['step']}: data differs: {x['data_hash']} vs {y['data_hash']}")
        if x["tokens"] != y["tokens"]:
            fail(f"step {x['step']}: tokens {x['tokens']} vs {y['tokens']}")
        rel = abs(x["loss"] - y["loss"]) / max(abs(y["loss"]), 1e-30)
        worst = max(worst, rel)
        if not rel <= rtol:
            fail(f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r} (relative {rel:.2e}, "
                 f"tolerance {rtol})")
    print(f"{a} vs {b}: same data in {n} steps, losses within {worst:.2e} relative")


def match(a, b, n, rtol):
    ra, rb = read(a)[:n], read(b)[:n]
    if len(ra) != n or len(rb) != n:
        fail(f"fewer than {n} steps in {a} or {b}")
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for x, y in zip(ra, rb):
        if x["data_hash"] != y["data_hash"] or x["tokens"] != y["tokens"]:
            fail(f"step {x['step']}: data differs: {x['data_hash']} vs {y['data_hash']}")
        for k in worst:
            rel = abs(x[k] - y[k]) / max(abs(y[k]), 1e-30)
            worst[k] = max(worst[k], rel)
            if not rel <= rtol:
                fail(f"step {x['step']}: {k} {x[k]!r} vs {y[k]!r} (relative {rel:.2e}, "
                     f"tolerance {rtol})")
    print(f"{a} vs {b}: same data in {n} steps, losses within {worst['loss']:.2e}, gradient "
          f"norms within {worst['grad_norm']:.2e} relative")


def differs(a, b, n):
    ha = [r["data_hash"] for r in read(a)[:n]]
    hb = [r["data_hash"] for r in read(b)[:n]]
    if ha == hb:
        fail(f"{a} and {b}: the same data in the first {n} steps")
    print(f"{a} vs {b}: different data order")


def hf(merged, fixture, ids, n):
    try:
        import torch
        import transformers
        from safetensors.torch import load_file
    except ImportError as e:
        print("SKIP: needs torch, transformers and safetensors:", e)
        sys.exit(77)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    transformers.AutoTokenizer.from_pretrained(merged)
    orig = load_file(f"{fixture}/model.safetensors")
    state = model.state_dict()
    changed = [k for k, v in orig.items() if k in state and not torch.equal(state[k], v)]
    if not changed:
        fail(f"{merged}: the weights equal the fixture's (training changed nothing)")
    for k, v in state.items():
        if not torch.isfinite(v).all():
            fail(f"{merged}: {k} is not finite")
    prompt = torch.tensor([[int(t) for t in ids.split(",")]])
    out = model.generate(prompt, max_new_tokens=n, do_sample=False, min_new_tokens=n,
                         pad_token_id=0)
    print("[0] " + " ".join(str(int(t)) for t in out[0, prompt.shape[1]:]))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "log":
        check_log(args[0], int(args[1]))
    elif cmd == "decreases":
        decreases(args[0])
    elif cmd == "same":
        same(args[0], args[1], int(args[2]), float(args[3]) if len(args) > 3 else 1e-4)
    elif cmd == "match":
        match(args[0], args[1], int(args[2]), float(args[3]))
    elif cmd == "close":
        close(args[0], args[1], int(args[2]), float(args[3]))
    elif cmd == "differs":
        differs(args[0], args[1], int(args[2]))
    elif cmd == "hf":
        hf(args[0], args[1], args[2], int(args[3]))
    else:
        sys.exit(f"unknown check {cmd}")


if __name__ == "__main__":
    main()
