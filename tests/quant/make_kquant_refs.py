"""Golden vectors for oslo's K-quant quantizers from llama.cpp's own ggml.

Usage:
  make_kquant_refs.py write VENV FIXTURE
      quantize the seeded inputs below with ggml (libggml-base from the
      llama-cpp-python venv VENV, e.g. build/venv-llamacpp) and write FIXTURE
      (tests/quant/kquant_refs.bin, committed: CI has no llama.cpp).
  make_kquant_refs.py live VENV BINARY WORK
      the same into WORK/kquant_live.bin, then run BINARY (test_kquant) on
      it: the live check against the ggml on this machine. Exit 77 (skip)
      with a message when VENV holds no libggml-base.

ggml is called through ctypes: ggml_quantize_chunk(type, src, dst, start,
nrows, n_per_row, imatrix=NULL), which for Q4_K (12) and Q6_K (14) without
an importance matrix runs quantize_row_q4_K_ref / quantize_row_q6_K_ref.

Fixture format (little-endian): b"OSLOKQ01", u32 case count, then per case
u8 name length, name (ASCII), u32 rows, u32 columns, rows x columns f32
inputs, then their Q4_K bytes (rows x columns / 256 x 144) and their Q6_K
bytes (rows x columns / 256 x 210).
"""
import ctypes
import glob
import os
import struct
import subprocess
import sys

import numpy as np

TYPES = {"q4_k": (12, 144), "q6_k": (14, 210)}


def find_ggml(venv):
    pats = ["lib/python3*/site-packages/llama_cpp/lib/libggml-base.so",
            "lib/python3*/site-packages/lib/libggml-base.so",
            "lib/python3*/site-packages/llama_cpp/lib/libggml-base.so.*"]
    for p in pats:
        hits = sorted(glob.glob(os.path.join(venv, p)))
        if hits:
            return hits[0]
    return None


def inputs():
    """(name, rows x cols f32) cases: seeded, each kind of block the
    quantizers treat differently."""
    rng = np.random.default_rng(35)
    f = np.float32
    n = lambda r, c, s=1.0: (rng.standard_normal((r, c)) * s).astype(f)
    yield "normal", n(2, 512)
    yield "normal_wide", n(2, 1024, 300.0)
    yield "uniform", rng.uniform(-1, 1, (3, 256)).astype(f)
    yield "uniform_pos", rng.uniform(0.5, 2, (2, 256)).astype(f)
    yield "uniform_neg", rng.uniform(-2, -0.5, (2, 256)).astype(f)
    yield "all_equal", np.full((2, 256), 0.75, f)
    yield "all_equal_neg", np.full((1, 256), -3.0, f)
    yield "zeros", np.zeros((2, 256), f)
    yield "tiny", n(2, 256, 1e-6)
    yield "tinier", n(1, 256, 1e-30)
    yield "huge", n(2, 256, 1e4)
    yield "huger", n(1, 256, 1e9)
    out = n(2, 512)
    for r in range(out.shape[0]):  # one outlier in every block of 32
        for b in range(0, out.shape[1], 32):
            out[r, b + rng.integers(0, 32)] = f(rng.choice([-1, 1]) * rng.uniform(20, 80))
    yield "outliers", out
    mixed = n(2, 512)
    mixed[:, 16:48] = 0  # zero sub-blocks inside a super-block
    mixed[:, 300:316] = f(1e-3) * mixed[:, 300:316]
    yield "mixed", mixed
    ints = rng.integers(-8, 8, size=(2, 256)).astype(f) / f(4)
    yield "ties", ints
    yield "many_rows", n(16, 256, 0.02)


def quantize(lib, type_id, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, cols = x.shape
    rb = lib.ggml_row_size(type_id, cols)
    dst = np.zeros(rows * rb, dtype=np.uint8)
    got = lib.ggml_quantize_chunk(type_id, x.ctypes.data_as(ctypes.c_void_p),
                                  dst.ctypes.data_as(ctypes.c_void_p), 0, rows, cols, None)
    assert got == rows * rb, (got, rows, rb)
    return dst


def write(venv, path):
    so = find_ggml(venv)
    if so is None:
        print(f"SKIP: no libggml-base.so under {venv} (llama-cpp-python venv, "
              "bench/model/llama_cpp_venv.sh makes it)")
        return 77
    lib = ctypes.CDLL(so)
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    cases = []
    for name, x in inputs():
        qs = []
        for fmt, (tid, bb) in TYPES.items():
            q = quantize(lib, tid, x)
            assert q.size == x.shape[0] * x.shape[1] // 256 * bb
            qs.append(q)
        cases.append((name, x, qs))
    with open(path, "wb") as f:
        f.write(b"OSLOKQ01" + struct.pack("<I", len(cases)))
        for name, x, qs in cases:
            nb = name.encode()
            f.write(struct.pack("<B", len(nb)) + nb)
            f.write(struct.pack("<II", x.shape[0], x.shape[1]))
            f.write(x.astype("<f4").tobytes())
            for q in qs:
                f.write(q.tobytes())
    print(f"{path}: {len(cases)} cases from {so}")
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "write":
        return write(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 5 and sys.argv[1] == "live":
        venv, binary, work = sys.argv[2:5]
        os.makedirs(work, exist_ok=True)
        path = os.path.join(work, "kquant_live.bin")
        rc = write(venv, path)
        if rc:
            return rc
        return subprocess.call([binary, path])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
