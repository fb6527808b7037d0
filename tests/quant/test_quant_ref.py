"""oslo's block formats against llama.cpp's gguf-py (PyPI "gguf", numpy).

Usage: test_quant_ref.py TEST_BINARY WORK_DIR

Writes random rows (several shapes; zeros, huge, tiny, negative-only,
ties) and gguf.quants' results for them into WORK_DIR, then runs the CMocka
binary (tests/quant/test_quant.cpp) on that folder, which checks that oslo's
quantize gives the same bytes (f32, f16, bf16, q8_0, q4_0) and its dequantize
the same floats (every format; the K-quants from random bytes, since gguf-py
has no K-quant quantizer). Per case, in WORK_DIR:
  NAME.in   the input rows, f32 little-endian (only for quantizable formats)
  NAME.q    the quantized bytes (gguf.quants.quantize, or random for K-quants)
  NAME.deq  gguf.quants.dequantize of NAME.q, f32
and a line "NAME FORMAT ROWS COLS HAS_INPUT" in WORK_DIR/cases.txt.
Exit 77 (skip) without numpy or gguf.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import quants
except ImportError as e:  # the tests' venv has them (tools/test-venv.sh)
    print(f"SKIP: {e}")
    sys.exit(77)

BINARY, WORK = sys.argv[1:3]
os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(20261129)
TYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0,
         "q4_k": T.Q4_K, "q6_k": T.Q6_K}
BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32, "q4_k": 256, "q6_k": 256}
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34, "q4_0": 18, "q4_k": 144, "q6_k": 210}
lines = []


def inputs(rows, cols):
    """Named input matrices of this shape: the edge cases and random ones."""
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    yield "normal", r(rows, cols)
    yield "wide", (r(rows, cols) * np.float32(1e3)).astype(np.float32)
    yield "zeros", np.zeros((rows, cols), np.float32)
    yield "huge", (r(rows, cols) * np.float32(1e30)).astype(np.float32)
    yield "tiny", (r(rows, cols) * np.float32(1e-30)).astype(np.float32)
    yield "negonly", -np.abs(r(rows, cols))
    yield "posonly", np.abs(r(rows, cols))
    # Ties: small integers and halves (exact multiples of the scale), one
    # value of largest magnitude per sign.
    ints = rng.integers(-16, 17, size=(rows, cols)).astype(np.float32) / np.float32(2)
    yield "ties", ints
    mixed = r(rows, cols)
    mixed[:, ::7] = 0.0
    mixed[:, 3::11] = -mixed[:, 3::11] * np.float32(50)
    yield "mixed", mixed
    yield "uniform", rng.uniform(-1, 1, (rows, cols)).astype(np.float32)


def emit(name, fmt, rows, cols, x, q):
    q = np.ascontiguousarray(q).view(np.uint8).reshape(rows, cols // BLOCK[fmt] * BYTES[fmt])
    deq = quants.dequantize(q, TYPES[fmt]).astype(np.float32, copy=False)
    assert deq.shape == (rows, cols), (name, deq.shape)
    if x is not None:
        x.astype("<f4").tofile(os.path.join(WORK, name + ".in"))
    q.tofile(os.path.join(WORK, name + ".q"))
    deq.astype("<f4").tofile(os.path.join(WORK, name + ".deq"))
    lines.append(f"{name} {fmt} {rows} {cols} {1 if x is not None else 0}")


for fmt in ["f32", "f16", "bf16", "q8_0", "q4_0"]:
    for rows, cols in [(1, 32), (3, 64), (5, 96), (2, 512), (4, 4096)]:
        for label, x in inputs(rows, cols):
            q = quants.quantize(x, TYPES[fmt])
            emit(f"{fmt}_{label}_{rows}x{cols}", fmt, rows, cols, x, q)

# K-quants: gguf-py dequantizes them but has no quantizer, so the bytes are
# random: fully random (NaN/inf scales included) and with finite, moderate
# f16 scales (the values a real file holds).
for fmt in ["q4_k", "q6_k"]:
    for rows, cols in [(1, 256), (3, 512), (2, 2048)]:
        nb = rows * cols // 256
        raw = rng.integers(0, 256, size=(nb, BYTES[fmt]), dtype=np.uint8)
        emit(f"{fmt}_random_{rows}x{cols}", fmt, rows, cols, None, raw)
        sane = raw.copy()
        scale = lambda: rng.uniform(-0.05, 0.05, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
        if fmt == "q4_k":
            sane[:, 0:2] = scale()
            sane[:, 2:4] = scale()
        else:
            sane[:, 208:210] = scale()
        emit(f"{fmt}_sane_{rows}x{cols}", fmt, rows, cols, None, sane)

with open(os.path.join(WORK, "cases.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"{len(lines)} cases written to {WORK}", flush=True)
sys.exit(subprocess.call([BINARY, WORK]))
