"""Writes a copy of a LLaMA GGUF file without its output.weight: llama.cpp
(and oslo) then use token_embd.weight as the head (tied embeddings). The
metadata and the other tensor infos are copied byte for byte, the data
section as it is (the dropped tensor's bytes stay, unreferenced: GGUF
allows gaps), so every offset keeps its meaning.

    make_tied.py IN.gguf OUT.gguf

Exit 77 (skip) without gguf-py.
"""
import struct
import sys

try:
    import gguf
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    raw = open(src, "rb").read()
    ends = [t.field.offset + sum(p.nbytes for p in t.field.parts) for t in r.tensors]
    out_t = [t for t in r.tensors if t.name == "output.weight"]
    if not out_t:
        sys.exit(f"{src} has no output.weight")
    f = out_t[0].field
    start, end = f.offset, f.offset + sum(p.nbytes for p in f.parts)
    head = bytearray(raw[:start] + raw[end:max(ends)])
    (n,) = struct.unpack_from("<Q", head, 8)  # magic, version, then n_tensors
    struct.pack_into("<Q", head, 8, n - 1)
    head += b"\0" * ((-len(head)) % r.alignment)
    with open(dst, "wb") as o:
        o.write(bytes(head) + raw[r.data_offset:])
    t = gguf.GGUFReader(dst)
    assert len(t.tensors) == n - 1 and "output.weight" not in {x.name for x in t.tensors}
    print(f"wrote {dst}: {n - 1} tensors, token_embd.weight "
          f"{[x for x in t.tensors if x.name == 'token_embd.weight'][0].tensor_type.name} as head")


if __name__ == "__main__":
    main()
