#!/usr/bin/env python3
"""Writes tests/generate/reference.json: what Hugging Face transformers' own
`generate` and logits warpers produce on a toy causal LM, for the C++ tests
of core/generate (test_generate.cpp) to compare against. CI has no torch; the
JSON file is committed and this script re-makes it.

Run it in a virtual environment outside the repository with torch and
transformers from PyPI, e.g.

    python3 -m venv /work/venv-gen
    /work/venv-gen/bin/pip install --no-deps torch
    /work/venv-gen/bin/pip install filelock typing-extensions sympy networkx jinja2 \
        fsspec numpy transformers
    # the CUDA wheel's libtorch_cuda.so needs these to load, even without a GPU:
    /work/venv-gen/bin/pip install nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 \
        nvidia-nccl-cu13 'cuda-toolkit[cufile]'
    /work/venv-gen/bin/python tests/generate/make_reference.py

(made with transformers 5.23.0 and torch 2.15.0; the JSON records both).

The toy model (the C++ test has the same one, reading the tables from the
JSON file): the logits of the next token of a row depend only on the row's
real tokens (attention mask 1) t_1..t_n:

    logits = A[t_n] + B[t_{n-1} or V if n == 1] + C[n % P]

with A [V, V], B [V + 1, V], C [P, V] fixed random tables whose entries are
multiples of 2^-16 below 8 in magnitude, so every sum is exact in float32 and
the C++ and torch logits are bitwise equal.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

V = 40  # vocabulary
P = 7  # position period
EOS_A, EOS_B = 3, 7


def quantize(x):
    return np.clip(np.round(x * 65536.0) / 65536.0, -7.99, 7.99).astype(np.float32)


rng = np.random.default_rng(20261123)
TABLE_A = quantize(rng.normal(0.0, 1.1, size=(V, V)))
TABLE_A[:, EOS_A] += np.float32(1.5)  # EOS competes often enough to be hit
TABLE_B = quantize(rng.normal(0.0, 0.7, size=(V + 1, V)))
TABLE_C = quantize(rng.normal(0.0, 0.5, size=(P, V)))


class ToyConfig(PretrainedConfig):
    model_type = "oslo_generate_toy"

    def __init__(self, vocab_size=V, **kwargs):
        self.vocab_size = vocab_size
        super().__init__(**kwargs)


class ToyLM(PreTrainedModel, GenerationMixin):
    config_class = ToyConfig
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        self.a = torch.from_numpy(TABLE_A)
        self.b = torch.from_numpy(TABLE_B)
        self.c = torch.from_numpy(TABLE_C)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.post_init()

    def _init_weights(self, module):
        pass

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        rows, length = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        logits = torch.zeros(rows, length, V, dtype=torch.float32)
        for r in range(rows):
            real = input_ids[r][attention_mask[r].bool()].tolist()
            n = len(real)
            prev = real[-2] if n >= 2 else V
            logits[r, -1] = self.a[real[-1]] + self.b[prev] + self.c[n % P]
        return CausalLMOutputWithPast(logits=logits)


MODEL = ToyLM(ToyConfig())
MODEL.eval()


def left_pad(prompts, pad):
    L = max(len(p) for p in prompts)
    ids = [[pad] * (L - len(p)) + p for p in prompts]
    mask = [[0] * (L - len(p)) + [1] * len(p) for p in prompts]
    return torch.tensor(ids), torch.tensor(mask), L


def cut(tokens, eos):
    out = []
    for t in tokens:
        out.append(int(t))
        if int(t) in eos:
            break
    return out


def run_case(name, prompts, opts):
    """opts uses the C++ field names; returns the case record."""
    eos = opts.get("eos_token_ids", [])
    pad = opts.get("pad_token_id", -1)
    feed_pad = pad if pad >= 0 else (eos[0] if eos else 0)
    ids, mask, L = left_pad(prompts, feed_pad)
    kw = dict(
        max_new_tokens=opts["max_new_tokens"],
        do_sample=False,
        num_beams=opts.get("num_beams", 1),
        use_cache=False,
        return_dict_in_generate=True,
        output_scores=True,
    )
    kw["eos_token_id"] = eos if eos else None
    kw["pad_token_id"] = pad if pad >= 0 else None
    if opts.get("num_beams", 1) > 1:
        kw["length_penalty"] = opts.get("length_penalty", 1.0)
        es = opts.get("early_stopping", "false")
        kw["early_stopping"] = {"false": False, "true": True, "never": "never"}[es]
    if opts.get("min_new_tokens", 0):
        kw["min_new_tokens"] = opts["min_new_tokens"]
    if opts.get("repetition_penalty", 1.0) != 1.0:
        kw["repetition_penalty"] = opts["repetition_penalty"]
    gc = GenerationConfig(**kw)
    with torch.no_grad():
        out = MODEL.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    seqs = out.sequences[:, L:].tolist()
    rec = {"name": name, "prompts": prompts, "options": opts,
           "tokens": [cut(s, eos) for s in seqs]}
    if opts.get("num_beams", 1) > 1:
        rec["scores"] = [float(x) for x in out.sequences_scores.tolist()]
    return rec


def generation_cases():
    cases = []
    batch = [[5, 9, 2], [11], [1, 2, 3, 4, 5, 6], [30, 31]]
    cases.append(run_case("greedy_single", [[5, 9, 2]], {"max_new_tokens": 12}))
    cases.append(run_case("greedy_batch_left_padded", batch, {"max_new_tokens": 16}))
    cases.append(run_case("greedy_batch_eos", batch,
                          {"max_new_tokens": 16, "eos_token_ids": [EOS_A], "pad_token_id": 0}))
    cases.append(run_case("greedy_batch_two_eos_default_pad", batch,
                          {"max_new_tokens": 20, "eos_token_ids": [EOS_A, EOS_B]}))
    cases.append(run_case("greedy_rep_penalty_min_new", batch,
                          {"max_new_tokens": 14, "eos_token_ids": [EOS_A], "pad_token_id": 1,
                           "repetition_penalty": 1.3, "min_new_tokens": 4}))
    bprompts = [[5, 9, 2], [17], [1, 2, 3, 4, 5, 6], [38, 0]]
    for nb in (2, 3, 4):
        for lp in (1.0, 0.5, 2.0):
            for es in ("false", "true", "never"):
                for eos_name, eos in (("eos", [EOS_A]), ("noeos", [])):
                    opts = {"max_new_tokens": 10, "num_beams": nb, "length_penalty": lp,
                            "early_stopping": es, "eos_token_ids": eos, "pad_token_id": 0}
                    cases.append(run_case(f"beam{nb}_lp{lp}_{es}_{eos_name}", bprompts, opts))
    extra = [
        ("beam3_two_eos", {"num_beams": 3, "eos_token_ids": [EOS_A, EOS_B], "max_new_tokens": 12}),
        ("beam2_lp0_never", {"num_beams": 2, "length_penalty": 0.0, "early_stopping": "never",
                             "eos_token_ids": [EOS_A], "pad_token_id": 0, "max_new_tokens": 9}),
        ("beam3_lp_neg", {"num_beams": 3, "length_penalty": -1.0, "eos_token_ids": [EOS_A],
                          "pad_token_id": 0, "max_new_tokens": 9}),
        ("beam4_min_new_rep", {"num_beams": 4, "min_new_tokens": 3, "repetition_penalty": 1.2,
                               "eos_token_ids": [EOS_A], "pad_token_id": 0, "max_new_tokens": 8}),
        ("beam2_one_token", {"num_beams": 2, "eos_token_ids": [EOS_A], "pad_token_id": 0,
                             "max_new_tokens": 1}),
    ]
    for name, opts in extra:
        cases.append(run_case(name, bprompts, opts))
    # Longer runs: the early-stop heuristic and late EOS.
    long_prompts = [[8], [2, 4, 6, 8, 10], [33, 21, 13], [0, 39], [26]]
    for nb in (2, 4):
        for lp in (1.0, 0.7, 1.5):
            for es in ("false", "true", "never"):
                opts = {"max_new_tokens": 25, "num_beams": nb, "length_penalty": lp,
                        "early_stopping": es, "eos_token_ids": [EOS_B], "pad_token_id": 0}
                cases.append(run_case(f"beam{nb}_long_lp{lp}_{es}", long_prompts, opts))
    cases.append(run_case("greedy_long_two_eos", long_prompts,
                          {"max_new_tokens": 40, "eos_token_ids": [EOS_B, 19], "pad_token_id": 2}))
    return cases


def filter_cases():
    """HF's warpers (temperature -> top-k -> top-p, as _get_logits_processor
    orders them) on random rows: which tokens survive, and their
    probabilities."""
    g = torch.Generator().manual_seed(7)
    out = []
    sizes = [1, 2, 3, 5, 17, 50, 333]
    settings = [(t, k, p) for t in (1.0, 0.7, 1.9) for k in (0, 1, 3, 10, 60)
                for p in (1.0, 0.95, 0.6, 0.2, 0.01)]
    i = 0
    for n in sizes:
        for t, k, p in settings:
            if (i % 3) and n > 50:
                i += 1
                continue  # keep the file small: a third of the large rows
            kind = i % 4
            x = torch.randn(n, generator=g) * (1 + 3 * (i % 5) / 4)
            if kind == 1:  # ties: a few distinct values
                x = torch.round(x * 2) / 2
            elif kind == 2 and n > 2:  # some tokens already filtered out
                x[torch.randperm(n, generator=g)[: n // 3]] = -math.inf
            x = x.to(torch.float32)[None, :]
            y = x.clone()
            if t != 1.0:
                y = TemperatureLogitsWarper(t)(None, y)
            if k != 0:
                y = TopKLogitsWarper(k)(None, y)
            if p < 1.0:
                y = TopPLogitsWarper(p)(None, y)
            y = y[0]
            kept = [j for j in range(n) if y[j] > -math.inf]
            probs = torch.softmax(y.double(), dim=-1)
            out.append({
                "logits": [None if v == -math.inf else float(v) for v in x[0].tolist()],
                "temperature": t, "top_k": k, "top_p": p,
                "kept": kept,
                "kept_scores": [float(y[j]) for j in kept],
                "probs": [float(probs[j]) for j in kept],
            })
            i += 1
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ref = {
        "generator": f"tests/generate/make_reference.py with transformers {transformers.__version__},"
                     f" torch {torch.__version__}",
        "vocab": V, "period": P,
        "A": TABLE_A.tolist(), "B": TABLE_B.tolist(), "C": TABLE_C.tolist(),
        "cases": generation_cases(),
        "filters": filter_cases(),
    }
    path = os.path.join(here, "reference.json")
    with open(path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(ref['cases'])} generation cases, {len(ref['filters'])} filter cases",
          file=sys.stderr)


if __name__ == "__main__":
    main()
