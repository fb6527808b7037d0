#!/usr/bin/env python3
"""Writes the training oracle of the causal model fixtures: for each
tests/models/fixtures/<name> (a tiny Hugging Face folder written by
make_fixtures.py), one batch, the causal-LM loss Hugging Face transformers
computes for it and the gradient of that loss with respect to every
parameter (`loss.backward()`), into <name>/train_ref.safetensors:

    input_ids       [B, S] int64   right-padded rows
    attention_mask  [B, S] int64   1 = token, 0 = padding
    labels          [B, S] int64   input_ids, -100 at padding and at one
                                   position inside row 0 (ignored labels)
    loss            [1]    float64 transformers' mean over the kept labels
    grad.<name>     f32            d loss / d parameter, Hugging Face name
                                   and layout (a tied head's gradient is in
                                   the embedding's entry, as torch sums it)

    build/venv-hf/bin/python tests/models/make_train_refs.py [--only NAME ...]

and, for a few fixtures, a training loop into <name>/train_loop_ref.safetensors:
40 micro-batches (input_ids, attention_mask, labels [40, 2, 9]) and, per
optimizer, the loss of each of 20 steps and the gradient norm before
clipping: AdamW (lr 2e-3, weight decay 0.01 except 1-D parameters, cosine
schedule with 3 warmup steps) and SGD (lr 0.05, Nesterov momentum 0.9, the
same decay, linear schedule with 2 warmup steps), each with gradient
accumulation over 2 micro-batches and clip_grad_norm_(1.0).

and, for the mixed-precision loop fixtures, <name>/train_amp_ref.safetensors:
the same data and loop (AdamW unless named) with the model's matrices (every parameter of
two or more dimensions but position tables, as oslo's loader holds them)
rounded to the compute dtype and kept as f32 master weights, the forward
under torch.autocast(dtype) and the update through torch.amp.GradScaler:

    losses_<run>, grad_norms_<run>  [20] float64  as above (norm after unscale)
    scales_<run>                    [20] float64  the scale after each step
    skipped_<run>                   [20] int64    1 = GradScaler skipped it
    inject_<run>                    [20] int64    1 = inf written into one
                                                  gradient before unscale_

for runs bf16 (autocast bfloat16, no scaler; bf16_sgd: the same with
run_loop's Nesterov SGD and linear schedule), f16 (autocast float16,
GradScaler's defaults) and f16_overflow (float16, init_scale 2**24,
backoff_factor 2**-8, growth_interval 5: step 0 overflows and is skipped,
inf is injected at steps 5 and 12, the scale grows after 5 good steps in a
row; it stays at or below the default 2**16 after step 0, where neither
PyTorch nor oslo overflows on these fixtures, so both skip the same steps).
The scheduler steps only after a step that was not skipped (Accelerate's
rule, which oslo's Trainer follows).

    build/venv-hf/bin/python tests/models/make_train_refs.py --amp [--only NAME ...]

writes only the mixed-precision references.

Deterministic: a fixed generator for the ids, one torch thread, f32 on the
CPU, eager attention, model.eval() (no dropout: the fixtures have none, and
training equality is about the arithmetic). Labels are shifted inside the
model (logits at position t predict labels[t + 1]), as transformers'
ForCausalLMLoss does.
"""
import argparse
import glob
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
# Causal fixtures with a language-model head (bert-tiny is an encoder).
CAUSAL = ["gpt2-tiny", "gpt2-tiny-4l", "gpt2-tiny-8l", "llama-tiny-gqa", "llama-tiny-mqa", "gpt-neox-tiny", "gpt-neox-tiny-seq",
          "phi3-tiny", "gemma-tiny", "mistral-tiny", "qwen2-tiny"]
B, S = 3, 11
LENGTHS = (11, 8, 5)  # real tokens per row (right padding after them)


def batch(vocab, pad_id):
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab, (B, S), generator=g)
    mask = torch.zeros(B, S, dtype=torch.long)
    for r, n in enumerate(LENGTHS):
        mask[r, :n] = 1
        ids[r, n:] = pad_id
    labels = ids.clone()
    labels[mask == 0] = -100
    labels[0, 4] = -100
    return ids, mask, labels


def make(name):
    folder = os.path.join(FIXTURES, name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cfg = model.config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    ids, mask, labels = batch(cfg.vocab_size, pad)
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    tensors = {
        "input_ids": ids.contiguous(),
        "attention_mask": mask.contiguous(),
        "labels": labels.contiguous(),
        "loss": out.loss.detach().double().reshape(1),
    }
    # Gradients under the checkpoint's tensor names (a module may name a
    # tensor otherwise, e.g. GPT-NeoX's lm_head is embed_out in the files):
    # a parameter not found by name is matched to the one stored tensor
    # with its exact values.
    stored = {}
    for f in sorted(glob.glob(os.path.join(folder, "model*.safetensors"))):
        stored.update(load_file(f))
    params = dict(model.named_parameters())
    for pname, p in params.items():
        assert p.grad is not None, f"{name}: no gradient for {pname}"
        key = pname
        if key not in stored:
            same = [k for k, t in stored.items() if k not in params and t.shape == p.shape
                    and torch.equal(t.float(), p.detach().float())]
            assert len(same) == 1, f"{name}: {pname} matches stored tensors {same}"
            key = same[0]
        tensors["grad." + key] = p.grad.detach().float().contiguous()
    path = os.path.join(folder, "train_ref.safetensors")
    save_file(tensors, path, metadata={"transformers": transformers.__version__,
                                       "torch": torch.__version__})
    print(f"{name}: loss {out.loss.item():.6f}, {len(tensors) - 4} gradients -> {path}")


LOOP_FIXTURES = ["gpt2-tiny", "gpt2-tiny-4l", "gpt2-tiny-8l", "llama-tiny-gqa", "gemma-tiny", "gpt-neox-tiny"]
LOOP_STEPS, LOOP_ACCUM, LOOP_B, LOOP_S = 20, 2, 2, 9
AMP_FIXTURES = ["gpt2-tiny", "llama-tiny-gqa"]


def loop_data(vocab, pad_id):
    g = torch.Generator().manual_seed(4321)
    n = LOOP_STEPS * LOOP_ACCUM
    ids = torch.randint(0, vocab, (n, LOOP_B, LOOP_S), generator=g)
    mask = torch.ones(n, LOOP_B, LOOP_S, dtype=torch.long)
    mask[:, 1, 6:] = 0  # row 1: 6 tokens, right padding
    ids[mask == 0] = pad_id
    labels = ids.clone()
    labels[mask == 0] = -100
    return ids, mask, labels


def make_optimizer(model, opt_name, steps=LOOP_STEPS):
    """The loops' optimizer and schedule: AdamW (lr 2e-3, cosine, 3 warmup
    steps) or Nesterov SGD (lr 0.05, momentum 0.9, linear, 2 warmup steps),
    weight decay 0.01 except 1-D parameters (Hugging Face Trainer's groups)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    if opt_name == "adamw":
        opt = torch.optim.AdamW(groups, lr=2e-3, betas=(0.9, 0.999), eps=1e-8)
        sched = transformers.get_scheduler("cosine", opt, num_warmup_steps=3,
                                           num_training_steps=steps)
    else:
        opt = torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True)
        sched = transformers.get_scheduler("linear", opt, num_warmup_steps=2,
                                           num_training_steps=steps)
    return opt, sched


def run_loop(folder, opt_name, ids, mask, labels):
    """A plain PyTorch training loop: micro-batch losses / accumulation
    backward, clip_grad_norm_(1.0), optimizer and scheduler step."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()  # no dropout: equality is about the arithmetic
    opt, sched = make_optimizer(model, opt_name)
    losses, norms = [], []
    for step in range(LOOP_STEPS):
        total = 0.0
        for k in range(LOOP_ACCUM):
            i = step * LOOP_ACCUM + k
            out = model(input_ids=ids[i], attention_mask=mask[i], labels=labels[i])
            (out.loss / LOOP_ACCUM).backward()
            total += out.loss.item() / LOOP_ACCUM
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    return losses, norms


AMP_RUNS = {
    # name: (autocast dtype, GradScaler kwargs or None, steps with an injected inf, optimizer)
    "bf16": (torch.bfloat16, None, (), "adamw"),
    "bf16_sgd": (torch.bfloat16, None, (), "sgd"),
    "f16": (torch.float16, {}, (), "adamw"),
    "f16_overflow": (torch.float16,
                     {"init_scale": 2.0 ** 24, "backoff_factor": 2.0 ** -8, "growth_interval": 5},
                     (5, 12), "adamw"),
}


def held_in_compute_dtype(name, p):
    """Whether oslo's loader holds this parameter in the model's dtype
    (matrices and embedding tables; norms, biases, position tables f32)."""
    return p.ndim >= 2 and "wpe" not in name and "position" not in name


def run_amp_loop(folder, run, ids, mask, labels):
    """run_loop's loop with mixed precision: f32 master weights
    (the matrices first rounded to the compute dtype, as a model loaded in
    that dtype starts), autocast forward and backward, GradScaler."""
    dtype, scaler_kw, inject, opt_name = AMP_RUNS[run]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if held_in_compute_dtype(name, p):
                p.copy_(p.to(dtype).float())
    opt, sched = make_optimizer(model, opt_name)
    scaler = torch.amp.GradScaler("cpu", enabled=scaler_kw is not None, **(scaler_kw or {}))
    first = next(iter(model.parameters()))
    out = {"losses": [], "grad_norms": [], "scales": [], "skipped": [], "inject": []}
    for step in range(LOOP_STEPS):
        total = 0.0
        for k in range(LOOP_ACCUM):
            i = step * LOOP_ACCUM + k
            with torch.autocast("cpu", dtype=dtype):
                res = model(input_ids=ids[i], attention_mask=mask[i], labels=labels[i])
            scaler.scale(res.loss / LOOP_ACCUM).backward()
            total += res.loss.item() / LOOP_ACCUM
        if step in inject:
            with torch.no_grad():
                first.grad.view(-1)[0] = float("inf")
        before = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.unscale_(opt)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        scaler.step(opt)
        scaler.update()
        after = scaler.get_scale() if scaler.is_enabled() else 1.0
        skipped = after < before
        if not skipped:
            sched.step()
        opt.zero_grad(set_to_none=True)
        out["losses"].append(total)
        out["grad_norms"].append(norm)
        out["scales"].append(after)
        out["skipped"].append(int(skipped))
        out["inject"].append(int(step in inject))
    return out


def make_amp(name):
    folder = os.path.join(FIXTURES, name)
    cfg = transformers.AutoConfig.from_pretrained(folder)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    ids, mask, labels = loop_data(cfg.vocab_size, pad)
    tensors = {}
    for run in AMP_RUNS:
        out = run_amp_loop(folder, run, ids, mask, labels)
        for key, vals in out.items():
            dt = torch.int64 if key in ("skipped", "inject") else torch.float64
            tensors[f"{key}_{run}"] = torch.tensor(vals, dtype=dt)
        print(f"{name} {run}: loss {out['losses'][0]:.4f} -> {out['losses'][-1]:.4f}, "
              f"scales {sorted(set(out['scales']))}, skipped steps "
              f"{[i for i, s in enumerate(out['skipped']) if s]}")
    save_file(tensors, os.path.join(folder, "train_amp_ref.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})


def make_loop(name):
    folder = os.path.join(FIXTURES, name)
    cfg = transformers.AutoConfig.from_pretrained(folder)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    ids, mask, labels = loop_data(cfg.vocab_size, pad)
    tensors = {"input_ids": ids.contiguous(), "attention_mask": mask.contiguous(),
               "labels": labels.contiguous()}
    for opt_name in ("adamw", "sgd"):
        losses, norms = run_loop(folder, opt_name, ids, mask, labels)
        tensors[f"losses_{opt_name}"] = torch.tensor(losses, dtype=torch.float64)
        tensors[f"grad_norms_{opt_name}"] = torch.tensor(norms, dtype=torch.float64)
        print(f"{name} {opt_name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    save_file(tensors, os.path.join(folder, "train_loop_ref.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})


# The pad row: runs on data where the pad id is also a real token (an input
# and a label), under the fixture's own pad_token_id ("own") or one moved to
# row 400 ("p400": on the last tensor-parallel rank at TP 2 and 4).
PAD_RUNS = {"llama-tiny-gqa": ("own", "p400"), "gemma-tiny": ("own",),
            "qwen2-tiny": ("own",), "gpt2-tiny": ("own",)}
PAD_STEPS, PAD_ACCUM, PAD_B, PAD_S = 6, 2, 2, 9


def pad_data(vocab, pad):
    g = torch.Generator().manual_seed(2468)
    n = PAD_STEPS * PAD_ACCUM
    ids = torch.randint(0, vocab, (n, PAD_B, PAD_S), generator=g)
    mask = torch.ones(n, PAD_B, PAD_S, dtype=torch.long)
    mask[:, 1, 6:] = 0  # row 1: 6 tokens, right padding
    ids[mask == 0] = pad
    ids[:, 0, 3] = pad  # the pad id as a real token, inside a row
    ids[::2, 1, 1] = pad  # and once more in every other micro-batch
    labels = ids.clone()
    labels[mask == 0] = -100
    return ids, mask, labels


def pad_model(folder, run):
    kw = {} if run == "own" else {"pad_token_id": int(run[1:])}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=torch.float32, attn_implementation="eager", **kw)
    model.eval()
    return model


def make_pad(name):
    """<name>/train_pad_ref.safetensors, per run R in PAD_RUNS[name]:

        R.pad_token_id    [1]      the pad id (config.json's, or the override)
        R.override        [1]      1: config.json's pad_token_id is replaced by it
        R.masks           [1]      1: the input embedding has padding_idx = pad
        R.input_ids, R.attention_mask, R.labels  [12, 2, 9]  micro-batches
        R.grad_rows_ids   [n]      the ids of micro-batch 0 (sorted, unique)
        R.grad_rows       [n, H]   their rows of d loss / d token table
                                   (micro-batch 0; a tied head's share included)
        R.grad_pad_with, R.grad_pad_without  [H]  the pad row's gradient with
                                   padding_idx = pad and with none
        R.grad_norm       [1]      the gradient norm over every parameter
        R.pad_row_before  [H]      the pad row as loaded
        R.losses_<opt>, R.grad_norms_<opt>  [6]  6 steps of make_optimizer's
                                   optimizer (accumulation 2, clipping 1.0)
        R.pad_row_<opt>   [H]      the pad row after them
    """
    folder = os.path.join(FIXTURES, name)
    tensors = {}
    for run in PAD_RUNS[name]:
        model = pad_model(folder, run)
        emb = model.get_input_embeddings()
        pad = model.config.pad_token_id
        masks = emb.padding_idx is not None
        assert not masks or emb.padding_idx == pad, (name, emb.padding_idx, pad)
        ids, mask, labels = pad_data(model.config.vocab_size, pad)
        k = run + "."

        def backward():
            model.zero_grad(set_to_none=True)
            model(input_ids=ids[0], attention_mask=mask[0], labels=labels[0]).loss.backward()
            return emb.weight.grad

        rows = {}
        for pidx in (pad, None):
            emb.padding_idx = pidx
            rows[pidx] = backward()[pad].clone()
        emb.padding_idx = pad if masks else None
        grad = backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
        uniq = torch.unique(ids[0])
        tensors.update({
            k + "pad_token_id": torch.tensor([pad]), k + "override": torch.tensor([int(run != "own")]),
            k + "masks": torch.tensor([int(masks)]),
            k + "input_ids": ids.contiguous(), k + "attention_mask": mask.contiguous(),
            k + "labels": labels.contiguous(),
            k + "grad_rows_ids": uniq.contiguous(), k + "grad_rows": grad[uniq].float().contiguous(),
            k + "grad_pad_with": rows[pad].float(), k + "grad_pad_without": rows[None].float(),
            k + "grad_norm": norm.reshape(1), k + "pad_row_before": emb.weight[pad].detach().clone(),
        })
        for opt_name in ("adamw", "sgd"):
            model = pad_model(folder, run)
            opt, sched = make_optimizer(model, opt_name, PAD_STEPS)
            losses, norms = [], []
            for step in range(PAD_STEPS):
                total = 0.0
                for a in range(PAD_ACCUM):
                    i = step * PAD_ACCUM + a
                    out = model(input_ids=ids[i], attention_mask=mask[i], labels=labels[i])
                    (out.loss / PAD_ACCUM).backward()
                    total += out.loss.item() / PAD_ACCUM
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                losses.append(total)
            after = model.get_input_embeddings().weight[pad].detach().clone()
            tensors[k + "losses_" + opt_name] = torch.tensor(losses, dtype=torch.float64)
            tensors[k + "grad_norms_" + opt_name] = torch.tensor(norms, dtype=torch.float64)
            tensors[k + "pad_row_" + opt_name] = after
            moved = (after - tensors[k + "pad_row_before"]).abs().max().item()
            print(f"{name} {run} (pad {pad}, padding_idx {masks}) {opt_name}: loss "
                  f"{losses[0]:.4f} -> {losses[-1]:.4f}, pad row moved {moved:.3g}")
        print(f"{name} {run}: pad row gradient with padding_idx "
              f"{rows[pad].abs().max().item():.3g}, without {rows[None].abs().max().item():.3g}")
    save_file(tensors, os.path.join(folder, "train_pad_ref.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--amp", action="store_true",
                    help="only the mixed-precision loop references")
    ap.add_argument("--pad", action="store_true",
                    help="only the pad-row references (train_pad_ref.safetensors)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    names = a.only or [n for n in CAUSAL if os.path.isdir(os.path.join(FIXTURES, n))]
    if a.pad:
        for n in names:
            if n in PAD_RUNS:
                make_pad(n)
        return 0
    if not a.amp:
        for n in names:
            make(n)
        for n in LOOP_FIXTURES:
            if n in names:
                make_loop(n)
    for n in AMP_FIXTURES:
        if n in names:
            make_amp(n)


if __name__ == "__main__":
    sys.exit(main())
