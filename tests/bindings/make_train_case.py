"""Writes tests/bindings/train_gpt2_tiny.txt, the data of the bindings case
train_gpt2_tiny_tp2_w2, from the PyTorch loop reference of
tests/models/make_train_refs.py (tests/models/fixtures/gpt2-tiny/
train_loop_ref.safetensors): 40 micro-batches [2, 9] (ids and attention
mask; labels are the ids with -100 under padding) and the loss of each of
the 20 AdamW steps (lr 2e-3, weight decay 0.01 except 1-D parameters,
cosine schedule with 3 warmup steps over 20, accumulation 2, clipping 1.0).
Plain text so every language's test reads it without a library:
  line 1: "micro_batches 40 batch 2 seq 9 steps 20 accum 2"
  then per micro-batch: "ids i1 ... i18" and "mask m1 ... m18"
  then per step: "loss L" (float64, repr).
Run: build/venv/bin/python tests/bindings/make_train_case.py"""
import os

from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "models", "fixtures", "gpt2-tiny", "train_loop_ref.safetensors")


def main():
    t = load_file(REF)
    ids, mask, losses = t["input_ids"], t["attention_mask"], t["losses_adamw"]
    n, b, s = ids.shape
    lines = [f"micro_batches {n} batch {b} seq {s} steps {len(losses)} accum {n // len(losses)}"]
    for i in range(n):
        lines.append("ids " + " ".join(str(int(v)) for v in ids[i].reshape(-1)))
        lines.append("mask " + " ".join(str(int(v)) for v in mask[i].reshape(-1)))
    for v in losses:
        lines.append(f"loss {float(v)!r}")
    with open(os.path.join(HERE, "train_gpt2_tiny.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
