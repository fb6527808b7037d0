#!/usr/bin/env python3
"""Reads folders oslo's merge wrote with the reference safetensors package.

Usage: merged_check.py TEST_MODEL_IO

Runs `TEST_MODEL_IO --emit DIR` (an HF folder, that folder saved at TP 2 and
merged twice: into model-0000i-of-0000n.safetensors + index, and into one
model.safetensors), then checks with the reference implementation that the
merged folders hold the original tensors (names, dtypes, shapes, bytes), the
{"format": "pt"} metadata, and an index as transformers writes it. Exits 77
(skipped) without safetensors and numpy.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np  # noqa: F401
    from safetensors import safe_open
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: needs safetensors and numpy (pip install safetensors numpy): {exc}")
    sys.exit(77)

FAIL = []


def check(cond, what):
    if not cond:
        FAIL.append(what)
        print("FAIL:", what)


def tensors_of(path):
    """name -> (dtype, shape, raw bytes) via the reference's header, and
    numpy arrays via the reference reader where numpy has the dtype."""
    out = {}
    with open(path, "rb") as fh:
        blob = fh.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    with safe_open(path, "np") as f:
        check(f.metadata() == {"format": "pt"}, f"{path}: metadata {f.metadata()}")
        names = set(f.keys())
        for name in names:
            e = header[name]
            b, t = e["data_offsets"]
            raw = blob[8 + n + b:8 + n + t]
            if e["dtype"] != "BF16":
                arr = f.get_tensor(name)
                check(arr.tobytes() == raw and list(arr.shape) == e["shape"],
                      f"{path}: {name}: the reference reads other bytes")
            out[name] = (e["dtype"], e["shape"], raw)
    return out


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="oslo-merge-py-") as tmp:
        d = os.path.join(tmp, "emit")
        subprocess.run([binary, "--emit", d], check=True)
        orig = tensors_of(os.path.join(d, "hf", "model.safetensors"))
        one = tensors_of(os.path.join(d, "merged1", "model.safetensors"))
        check(one == orig, "merged model.safetensors differs from the original")
        idx_path = os.path.join(d, "merged", "model.safetensors.index.json")
        text = open(idx_path).read()
        idx = json.loads(text)
        # Exactly as transformers writes it.
        check(text == json.dumps(idx, indent=2, sort_keys=True) + "\n",
              "index is not json.dumps(indent=2, sort_keys=True) + newline")
        check(set(idx) == {"metadata", "weight_map"}, f"index keys {set(idx)}")
        files = sorted(set(idx["weight_map"].values()))
        n = len(files)
        check(n > 1, "expected several files")
        check(files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)],
              f"file names {files}")
        merged = {}
        for fn in files:
            ts = tensors_of(os.path.join(d, "merged", fn))
            for name in ts:
                check(idx["weight_map"].get(name) == fn, f"{name} is in {fn}, index disagrees")
            merged.update(ts)
        check(merged == orig, "sharded merge differs from the original")
        check(idx["metadata"]["total_size"] == sum(len(v[2]) for v in orig.values()),
              "total_size is not the sum of the tensor bytes")
        check(json.load(open(os.path.join(d, "merged", "config.json")))["model_type"] == "fake",
              "config.json")
        check(os.path.exists(os.path.join(d, "merged", "tokenizer.json")), "tokenizer.json")
    if FAIL:
        print(f"{len(FAIL)} failure(s)")
        return 1
    print("merged folders read by the reference safetensors: OK")
    return 0


sys.exit(main())
