"""The quantized GGUF files of the quantized decode benchmark
(bench/model/run_quant.sh), made with llama.cpp's own tools, and what each
file holds. Run with the llama.cpp venv's python
(bench/model/llama_cpp_venv.sh: llama-cpp-python 0.3.36 and gguf-py from the
same sdist).

    python gguf_quant.py quantize F32.gguf OUT.gguf q4_0|q4_k
    python gguf_quant.py describe FILE.gguf

quantize: llama.cpp's quantizer (llama_cpp.llama_model_quantize, the C
function llama_model_quantize that the llama-quantize tool calls) from the
f32 GGUF, with `pure` set: every 2-D weight (the blocks' linear weights, the
token table and the head) in the one type, no per-tensor mix (without
`pure`, Q4_0 puts the head in Q6_K and Q4_K_M puts half the attn_v /
ffn_down weights in Q6_K). q4_0 is LLAMA_FTYPE_MOSTLY_Q4_0, q4_k
LLAMA_FTYPE_MOSTLY_Q4_K_M (with `pure`, all Q4_K). No importance matrix.
Norms and biases stay f32. Nothing is done when OUT.gguf is newer than
F32.gguf. (Q8_0 comes from llama.cpp's converter, make_gguf.py q8_0.)

describe: one JSON line: the file, general.file_type, the tensor types
counted ({"Q4_K": 86, "F32": 25}), the types of the head and the token
table, and the bytes of weights one batch-1 decode step reads:
  - weight_bytes: every 2-D weight of the blocks plus the head (output.weight,
    or the token table when the head is tied to it), in the file's types:
    what llama.cpp reads per token (a token-table or position-table lookup
    reads one row and is left out, as are the f32 norms and biases: under
    0.1 % of it);
  - oslo_weight_bytes: the same matrices as oslo holds them when it loads
    the file with the default dtype: the blocks' linear weights and the
    head in the file's block types (oslo_model_load keeps a GGUF file's
    block-quantized tensors so, the token table and the head included); a
    head the file stores in a float type is held in f32 (the config's
    torch_dtype for a GGUF file).
"""
import collections
import ctypes
import json
import os
import sys

FTYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def quantize(src, out, fmt):
    if os.path.exists(out) and os.path.getmtime(out) > os.path.getmtime(src):
        return
    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, FTYPES[fmt])
    p.pure = True
    p.nthread = 2
    tmp = out + ".tmp"
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize {src} -> {tmp} ({fmt}) failed: {rc}")
    os.replace(tmp, out)


def describe(path):
    import gguf

    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    tensors = {t.name: t for t in r.tensors}
    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    head = tensors.get("output.weight") or tensors["token_embd.weight"]
    mats = [t for t in r.tensors if t.name.startswith("blk.") and len(t.shape) == 2]
    block_bytes = sum(int(t.n_bytes) for t in mats)
    head_elems = int(head.n_elements)
    return {"file": os.path.basename(path), "architecture": arch,
            "file_type": r.fields["general.file_type"].contents(),
            "tensor_types": dict(types.most_common()),
            "block_matrix_types": dict(collections.Counter(t.tensor_type.name for t in mats)),
            "head": head.name, "head_type": head.tensor_type.name,
            "token_embd_type": tensors["token_embd.weight"].tensor_type.name,
            "weight_bytes": block_bytes + int(head.n_bytes),
            "oslo_weight_bytes": block_bytes + (int(head.n_bytes) if head.tensor_type.name in
                                                ("Q8_0", "Q4_0", "Q4_K", "Q6_K")
                                                else 4 * head_elems)}


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "quantize" and sys.argv[4] in FTYPES:
        quantize(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "describe":
        print(json.dumps(describe(sys.argv[2])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
