#!/usr/bin/env python3
"""Compatibility of oslo's safetensors code with the reference implementation.

Usage: test_safetensors_compat.py ST_TOOL CORPUS_DIR

Needs the reference implementation from PyPI (pip install safetensors numpy);
exits 77 (ctest: skipped) with a message when it is missing. Checks:
  1. files written by the reference (numpy.save_file, raw serialize of every
     dtype including BF16, F8 and F4) are read by oslo with the same tensors,
     bytes and metadata;
  2. files written by oslo (st_tool copy) are read by the reference with the
     same tensors and metadata, and are byte-identical to what the reference
     writes for the same tensors (when the metadata has at most one key: the
     reference orders metadata keys by a random hash);
  3. oslo and the reference accept and reject the same files, over the
     regression corpus and a few thousand deterministic mutations of valid
     files (OSLO_COMPAT_MUTANTS=N for more). The one intended difference:
     oslo rejects unknown fields inside a tensor entry, which the reference
     ignores.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import safetensors
    from safetensors import TensorSpec, safe_open, serialize
    from safetensors.numpy import load_file, save_file
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: needs the reference safetensors and numpy from PyPI "
          f"(pip install safetensors numpy): {exc}")
    sys.exit(SKIP)

ST_TOOL, CORPUS = sys.argv[1], sys.argv[2]
FAILURES = []

NP_TO_ST = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "int32": "I32", "uint32": "U32", "float32": "F32",
    "float64": "F64", "int64": "I64", "uint64": "U64", "complex64": "C64",
}


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def tool(*args):
    r = subprocess.run([ST_TOOL, *args], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise RuntimeError(f"st_tool {' '.join(args)} failed: {r.stderr}")
    return r.stdout


def numpy_tensors():
    rng = np.random.default_rng(1234)
    t = {}
    for name in NP_TO_ST:
        dt = np.dtype(name)
        if dt.kind == "b":
            a = rng.integers(0, 2, (3, 5)).astype(dt)
        elif dt.kind == "c":
            a = (rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(dt)
        elif dt.kind == "f":
            a = rng.standard_normal((3, 5)).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, (3, 5), dtype=dt, endpoint=True)
        t["t." + name] = a
    t["scalar"] = np.array(3.25, dtype=np.float32)
    t["empty"] = np.zeros((0,), dtype=np.float32)
    t["empty2d"] = np.zeros((3, 0), dtype=np.int64)
    t["big"] = rng.standard_normal((17, 33, 5)).astype(np.float32)
    t["name with spaces/ünïcode \"quoted\" \\ \u0001"] = np.arange(7, dtype=np.int16)
    return t


def compare_dump(dump, tensors, metadata, label):
    check(dump["metadata"] == metadata, f"{label}: metadata {dump['metadata']} != {metadata}")
    got = {t["name"]: t for t in dump["tensors"]}
    check(set(got) == set(tensors), f"{label}: names differ")
    for name, a in tensors.items():
        t = got.get(name)
        if t is None:
            continue
        check(t["dtype"] == NP_TO_ST[a.dtype.name], f"{label}: {name} dtype {t['dtype']}")
        check(t["shape"] == list(a.shape), f"{label}: {name} shape {t['shape']}")
        check(t["hex"] == a.tobytes().hex(), f"{label}: {name} bytes differ")


def test_numpy_both_ways(tmp):
    tensors = numpy_tensors()
    meta = {"format": "np", "note": "ü \"q\"\n"}
    ref = os.path.join(tmp, "ref.safetensors")
    save_file(tensors, ref, metadata=meta)
    # Reference -> oslo.
    compare_dump(json.loads(tool("dump", ref)), tensors, meta, "reference file read by oslo")
    # oslo -> reference.
    ours = os.path.join(tmp, "ours.safetensors")
    tool("copy", ref, ours)
    back = load_file(ours)
    check(set(back) == set(tensors), "oslo file: names differ in the reference reader")
    for name, a in tensors.items():
        b = back.get(name)
        check(b is not None and b.dtype == a.dtype and b.shape == a.shape
              and b.tobytes() == a.tobytes(), f"oslo file: tensor {name!r} differs")
    with safe_open(ours, "np") as f:
        check(f.metadata() == meta, "oslo file: metadata differs in the reference reader")
    # Byte identity with the reference writer (metadata: none, or one key).
    for md in (None, {"format": "pt"}):
        ref1 = os.path.join(tmp, "ref1.safetensors")
        ours1 = os.path.join(tmp, "ours1.safetensors")
        save_file(tensors, ref1, metadata=md)
        tool("copy", ref1, ours1)
        check(open(ref1, "rb").read() == open(ours1, "rb").read(),
              f"oslo's bytes differ from the reference writer's (metadata {md})")


def test_raw_dtypes(tmp):
    """Every dtype the reference serializer takes, through raw buffers."""
    rng = np.random.default_rng(99)
    specs, keep, expect = {}, [], {}
    raw = {
        "bfloat16": ("BF16", [4, 3], 24), "float8_e4m3fn": ("F8_E4M3", [5], 5),
        "float8_e5m2": ("F8_E5M2", [2, 3], 6), "float8_e8m0fnu": ("F8_E8M0", [3], 3),
        "float8_e4m3fnuz": ("F8_E4M3FNUZ", [2], 2), "float8_e5m2fnuz": ("F8_E5M2FNUZ", [1], 1),
        "float4_e2m1fn_x2": ("F4", [2, 3], 6), "uint16": ("U16", [], 2),
        "complex64": ("C64", [2], 16),
    }
    for torch_name, (st_name, shape, nbytes) in raw.items():
        buf = rng.integers(0, 256, nbytes, dtype=np.uint8)
        keep.append(buf)
        specs["x." + torch_name] = TensorSpec(dtype=torch_name, shape=shape,
                                              data_ptr=buf.ctypes.data, data_len=nbytes)
        logical = list(shape)
        if st_name == "F4":
            logical[-1] *= 2  # two F4 values per byte
        expect["x." + torch_name] = (st_name, logical, buf.tobytes().hex())
    data = bytes(serialize(specs, metadata={"k": "v"}))
    ref = os.path.join(tmp, "raw.safetensors")
    open(ref, "wb").write(data)
    dump = json.loads(tool("dump", ref))
    check(dump["metadata"] == {"k": "v"}, "raw: metadata")
    got = {t["name"]: (t["dtype"], t["shape"], t["hex"]) for t in dump["tensors"]}
    check(got == expect, f"raw: oslo reads {got} instead of {expect}")
    ours = os.path.join(tmp, "raw_ours.safetensors")
    tool("copy", ref, ours)
    check(open(ours, "rb").read() == data, "raw: oslo's bytes differ from the reference writer's")


# ---------------------------------------------------------------- parsing

def ref_accepts(path):
    try:
        with safe_open(path, "np") as f:
            f.keys()
        return True, ""
    except Exception as exc:  # any failure is a rejection
        return False, str(exc)


def frame(header: bytes, data: bytes, n=None):
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def seeds(tmp):
    out = []
    tensors = numpy_tensors()
    p = os.path.join(tmp, "seed0.safetensors")
    save_file(tensors, p, metadata={"a": "b"})
    out.append(open(p, "rb").read())
    out.append(frame(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                     b'"b":{"dtype":"U8","shape":[0],"data_offsets":[8,8]},'
                     b'"c":{"dtype":"F4","shape":[2],"data_offsets":[8,9]}}', b"x" * 9))
    out.append(frame(b'{"__metadata__":null}', b""))
    out.append(frame(b'{}', b""))
    return out


DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
          "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
          "C64", "F64", "I64", "U64", "f32", "F128", "", 7, None]
ODD_NUMBERS = [0, 1, 2, 3, 4, 7, 8, -1, 1.0, 1.5, 2**32, 2**62, 2**63, 2**64 - 1, 2**64,
               "1", None, [], True]


def mutate_json(rng, h):
    """A structural mutation of a parsed header (a dict)."""
    keys = [k for k in h if k != "__metadata__"]
    op = rng.randrange(12)
    if keys:
        k = rng.choice(keys)
        e = h[k]
        if not isinstance(e, dict):
            h[k] = {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}
            return h
        if op == 0:
            e["dtype"] = rng.choice(DTYPES)
        elif op == 1 and isinstance(e.get("shape"), list):
            if e["shape"] and rng.random() < 0.7:
                e["shape"][rng.randrange(len(e["shape"]))] = rng.choice(ODD_NUMBERS)
            else:
                e["shape"].append(rng.choice(ODD_NUMBERS))
        elif op == 2 and isinstance(e.get("data_offsets"), list) and e["data_offsets"]:
            i = rng.randrange(len(e["data_offsets"]))
            v = e["data_offsets"][i]
            e["data_offsets"][i] = (v + rng.choice([-8, -4, -1, 1, 4, 8])
                                    if isinstance(v, int) and rng.random() < 0.6
                                    else rng.choice(ODD_NUMBERS))
        elif op == 3 and e:
            del e[rng.choice(list(e))]
        elif op == 4:
            e[rng.choice(["x", "dtype2", "shape "])] = rng.choice(ODD_NUMBERS)
        elif op == 5:
            h[k] = rng.choice([None, 1, "F32", [], {}])
        elif op == 6:
            e["data_offsets"] = rng.choice([[0], [0, 0, 0], [], "0,4", {"a": 1}])
    if op == 7:
        h["__metadata__"] = rng.choice([None, {}, {"k": "v"}, {"k": 1}, {"k": None}, [], "x",
                                        {"k": {"a": "b"}}, {"": ""}])
    elif op == 8 and keys:
        # Swap the offsets of two tensors.
        a, b = rng.choice(keys), rng.choice(keys)
        if isinstance(h[a], dict) and isinstance(h[b], dict):
            h[a]["data_offsets"], h[b]["data_offsets"] = (h[b].get("data_offsets"),
                                                          h[a].get("data_offsets"))
    elif op == 9:
        h["new" + str(rng.randrange(3))] = {"dtype": rng.choice(DTYPES[:20]),
                                            "shape": [rng.randrange(3)],
                                            "data_offsets": [rng.randrange(12), rng.randrange(12)]}
    elif op == 10 and keys:
        del h[rng.choice(keys)]
    return h


def mutants(rng, seed, count):
    out = []
    n = struct.unpack("<Q", seed[:8])[0]
    header, data = seed[8:8 + n], seed[8 + n:]
    for _ in range(count):
        op = rng.randrange(8)
        if op == 0:
            out.append(seed[:rng.randrange(len(seed) + 1)])
        elif op == 1:
            out.append(seed + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9))))
        elif op == 2:
            out.append(frame(header, data, n=max(0, n + rng.choice([-9, -8, -1, 1, 8, 1 << 27]))))
        elif op in (3, 4):
            h = bytearray(header)
            for _ in range(rng.randrange(1, 4)):
                pos = rng.randrange(len(h) + 1)
                c = rng.choice(b'{}[]",:0123456789-.eE tfnu\\\x00\x7f\xff\xc3\xa9 ')
                kind = rng.randrange(3)
                if kind == 0 and pos < len(h):
                    h[pos] = c
                elif kind == 1:
                    h.insert(pos, c)
                elif pos < len(h):
                    del h[pos]
            out.append(frame(bytes(h), data))
        else:
            try:
                h = json.loads(header)
            except Exception:
                out.append(frame(header, data))
                continue
            for _ in range(rng.randrange(1, 3)):
                h = mutate_json(rng, h)
            text = json.dumps(h, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
            if rng.random() < 0.3:
                text = " " + text + "   "
            d = data
            if rng.random() < 0.3:
                d = data[:max(0, len(data) - rng.choice([1, 4, 8]))]
            elif rng.random() < 0.2:
                d = data + b"\x00" * rng.choice([1, 4, 8])
            out.append(frame(text.encode(), d))
    return out


def test_parse_agreement(tmp):
    cases = []
    for name in sorted(os.listdir(CORPUS)):
        cases.append(("corpus/" + name, open(os.path.join(CORPUS, name), "rb").read()))
    rng = random.Random(20240611)
    count = int(os.environ.get("OSLO_COMPAT_MUTANTS", "3000"))
    ss = seeds(tmp)
    for i, seed in enumerate(ss):
        for j, m in enumerate(mutants(rng, seed, count // len(ss))):
            cases.append((f"mutant-{i}-{j}", m))
    mdir = os.path.join(tmp, "cases")
    os.makedirs(mdir)
    paths = []
    for i, (_, data) in enumerate(cases):
        p = os.path.join(mdir, f"{i}.safetensors")
        open(p, "wb").write(data)
        paths.append(p)
    ours = []
    for start in range(0, len(paths), 500):
        ours += tool("check", *paths[start:start + 500]).splitlines()
    assert len(ours) == len(paths)
    agree = diverge_expected = 0
    accepted = 0
    for (label, data), p, line in zip(cases, paths, ours):
        ref_ok, ref_msg = ref_accepts(p)
        our_ok = line == "OK"
        accepted += our_ok
        if ref_ok == our_ok:
            agree += 1
        elif ref_ok and "unknown field" in line:
            diverge_expected += 1
        else:
            check(False, f"{label}: reference {'accepts' if ref_ok else 'rejects'} "
                         f"({ref_msg[:120]}), oslo says {line[:200]}; header "
                         f"{data[8:8 + 200]!r}")
        if not our_ok and not line.startswith("FORMAT"):
            check(False, f"{label}: oslo fails with a non-format error: {line}")
    print(f"parse agreement: {len(cases)} files, {accepted} accepted by oslo, {agree} agree, "
          f"{diverge_expected} rejected by oslo only for unknown entry fields")


def main():
    print(f"reference safetensors {safetensors.__version__}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="oslo-st-compat-") as tmp:
        test_numpy_both_ways(tmp)
        test_raw_dtypes(tmp)
        test_parse_agreement(tmp)
    if FAILURES:
        print(f"{len(FAILURES)} failures")
        return 1
    print("all compatibility checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
