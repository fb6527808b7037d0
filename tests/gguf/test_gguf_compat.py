"""oslo's GGUF reader against files written by llama.cpp's gguf-py GGUFWriter.

Usage: test_gguf_compat.py TEST_BINARY WORK_DIR

Writes GGUF files with every metadata value type (scalars, strings, arrays of
each type, nested arrays of strings and of integers) and tensors of every
format oslo reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; 1 to 4
dimensions), with the default alignment and general.alignment = 64, as
version 3 (the writer's) and version 2 (the same bytes with the version field
2). Next to each NAME.gguf: NAME.expected, the canonical dump of what this
script put in (tests/gguf/gguf_check.hpp's dump() format: derived from the
values given to the writer, not from any reader), and per tensor
NAME.TENSOR.bytes and NAME.TENSOR.deq (gguf.quants.dequantize, f32). Then runs
the CMocka binary on WORK_DIR, which parses each file with oslo and compares.
Exit 77 (skip) without numpy or gguf.
"""
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFValueType as V
    from gguf import GGUFWriter, quants
except ImportError as e:  # the tests' venv has them (tools/test-venv.sh)
    print(f"SKIP: {e}")
    sys.exit(77)

BINARY, WORK = sys.argv[1:3]
os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(35)
VT = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
      V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array",
      V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}
BLOCK = {T.F32: (1, 4), T.F16: (1, 2), T.BF16: (1, 2), T.Q8_0: (32, 34), T.Q4_0: (32, 18),
         T.Q4_K: (256, 144), T.Q6_K: (256, 210)}


def canon(vtype, val, sub=None):
    """A value as gguf_check.hpp's dump() writes it."""
    if vtype == V.STRING:
        b = val.encode("utf-8") if isinstance(val, str) else bytes(val)
        return f"string:{b.hex()}"
    if vtype == V.FLOAT32:
        return "f32:%08x" % struct.unpack("<I", struct.pack("<f", val))[0]
    if vtype == V.FLOAT64:
        return "f64:%016x" % struct.unpack("<Q", struct.pack("<d", val))[0]
    if vtype == V.BOOL:
        return f"bool:{1 if val else 0}"
    if vtype == V.ARRAY:
        et = sub if sub is not None else V.get_type(val[0])
        return "array:" + VT[et] + "[" + ",".join(canon(et, x) for x in val) + "]"
    return f"{VT[vtype]}:{int(val)}"


def rand_floats(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def k_bytes(qtype, rows, cols):
    """Random K-quant blocks with finite, moderate f16 scales."""
    nb = rows * cols // 256
    b = rng.integers(0, 256, size=(nb, BLOCK[qtype][1]), dtype=np.uint8)
    half = lambda: rng.uniform(-0.05, 0.05, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    if qtype == T.Q4_K:
        b[:, 0:2], b[:, 2:4] = half(), half()
    else:
        b[:, 208:210] = half()
    return b.reshape(rows, cols // 256 * BLOCK[qtype][1])


def write(name, alignment=None, version=3):
    path = os.path.join(WORK, name + ".gguf")
    w = GGUFWriter(path, arch="llama")
    lines = [f"version {version}", f"alignment {alignment or 32}",
             "kv general.architecture " + canon(V.STRING, "llama")]

    def kv(key, vtype, val, sub=None):
        w.add_key_value(key, val, vtype, sub_type=sub)
        lines.append(f"kv {key} " + canon(vtype, val, sub))

    if alignment:
        w.add_custom_alignment(alignment)
        lines.append("kv general.alignment " + canon(V.UINT32, alignment))
    kv("t.u8", V.UINT8, 255)
    kv("t.i8", V.INT8, -128)
    kv("t.u16", V.UINT16, 65535)
    kv("t.i16", V.INT16, -32768)
    kv("t.u32", V.UINT32, 4294967295)
    kv("t.i32", V.INT32, -2147483648)
    kv("t.u64", V.UINT64, 18446744073709551615)
    kv("t.i64", V.INT64, -9223372036854775808)
    kv("t.f32", V.FLOAT32, 3.1415927)
    kv("t.f32neg", V.FLOAT32, -1.5e-42)  # subnormal
    kv("t.f64", V.FLOAT64, 2.718281828459045)
    kv("t.true", V.BOOL, True)
    kv("t.false", V.BOOL, False)
    kv("t.string", V.STRING, "Grüße, 世界 \n\t\"quoted\"")
    kv("t.empty_string", V.STRING, "")
    kv("llama.context_length", V.UINT32, 4096)
    kv("llama.rope.freq_base", V.FLOAT32, 10000.0)
    for vt, vals in [(V.UINT8, [0, 1, 255]), (V.INT8, [-128, 0, 127]), (V.UINT16, [0, 65535]),
                     (V.INT16, [-32768, 32767]), (V.UINT32, [7, 4294967295]),
                     (V.INT32, [-5, 5, 2147483647]), (V.UINT64, [2**64 - 1, 0]),
                     (V.INT64, [-(2**63), 2**63 - 1]), (V.FLOAT32, [0.5, -0.0, 1e30]),
                     (V.FLOAT64, [1e300, -2.5]), (V.BOOL, [True, False, True])]:
        kv(f"t.array.{VT[vt]}", V.ARRAY, vals, vt)
    tokens = ["<s>", "</s>", "▁the", "Ġworld", "\u0000nul", "日本"]
    kv("tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING)
    kv("tokenizer.ggml.scores", V.ARRAY, [float(-i) for i in range(len(tokens))], V.FLOAT32)
    kv("t.nested.strings", V.ARRAY, [["a", "bc"], ["", "déf", "g"], ["h"]])
    kv("t.nested.ints", V.ARRAY, [[1, 2, 3], [-4]])
    kv("t.nested.deep", V.ARRAY, [[["x"], ["y", "z"]], [["w"]]])
    kv("t.big_array", V.ARRAY, [int(x) for x in rng.integers(-1000, 1000, 3000)], V.INT32)

    tensors = []

    def tensor(tname, qtype, shape):
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        cols = shape[-1]
        if qtype == T.F32:
            arr = rand_floats(shape)
            raw = arr.view(np.uint8).reshape(rows, -1)
            w.add_tensor(tname, arr)
        elif qtype == T.F16:
            arr = rand_floats(shape).astype(np.float16)
            raw = arr.view(np.uint8).reshape(rows, -1)
            w.add_tensor(tname, arr)
        else:
            if qtype in (T.Q4_K, T.Q6_K):
                raw = k_bytes(qtype, rows, cols)
            else:
                x = rand_floats((rows, cols), 2.0)
                raw = quants.quantize(x, qtype).view(np.uint8).reshape(rows, -1)
            byte_shape = tuple(shape[:-1]) + (raw.shape[-1],)
            w.add_tensor(tname, raw.reshape(byte_shape), raw_dtype=qtype)
        deq = quants.dequantize(raw, qtype).astype(np.float32)
        assert deq.size == int(np.prod(shape))
        raw.tofile(os.path.join(WORK, f"{name}.{tname}.bytes"))
        deq.astype("<f4").tofile(os.path.join(WORK, f"{name}.{tname}.deq"))
        dims = ",".join(str(d) for d in reversed(shape))
        tensors.append(f"tensor {tname} {int(qtype)} {dims} {raw.size}")

    tensor("token_embd.weight", T.Q8_0, (10, 64))
    tensor("blk.0.attn_norm.weight", T.F32, (64,))
    tensor("blk.0.attn_q.weight", T.Q4_0, (64, 64))
    tensor("blk.0.attn_k.weight", T.Q4_K, (3, 512))
    tensor("blk.0.ffn_down.weight", T.Q6_K, (5, 256))
    tensor("blk.0.ffn_up.weight", T.BF16, (4, 33))
    tensor("blk.0.ffn_gate.weight", T.F16, (2, 3, 7))
    tensor("t.four_d", T.Q8_0, (2, 1, 3, 32))
    tensor("output.weight", T.Q4_K, (2, 256))
    tensor("t.scalar_like", T.F32, (1,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    lines += tensors
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(struct.pack("<I", version))
    with open(os.path.join(WORK, name + ".expected"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


write("v3_default")
write("v3_align64", alignment=64)
write("v2_default", version=2)
with open(os.path.join(WORK, "files.txt"), "w") as f:
    f.write("v3_default\nv3_align64\nv2_default\n")
print("3 GGUF files written to", WORK, flush=True)
sys.exit(subprocess.call([BINARY, WORK]))
