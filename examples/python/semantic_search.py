#!/usr/bin/env python3
"""The main job from Python: the real all-MiniLM-L6-v2 sentence-embedding
model sharded over the ranks of the job (tensor parallelism), a small
semantic search over a handful of sentences, the similarity table, and two
checks: agreement with the unsharded model (rank 0 also loads it on its own)
and with sentence-transformers' embeddings (reference.txt). The same as
examples/minilm/semantic_search.c.

    oslo-run --nproc-per-node 2 python3 semantic_search.py [--device cpu|cuda[:N]] \
        MODEL_DIR reference.txt

(with PYTHONPATH=build/bindings/python in the build tree). --device picks the
backend as `oslo generate --device` does (default cpu; cuda[:N] is the CUDA
backend plugin on device N, else each rank's local device). Exits 0 when
every embedding matches both references (cosine >= 0.9999).
"""
import os
import sys
import tempfile

import numpy as np

import oslo


def read_reference(path):
    """Sentences and sentence-transformers' embeddings from reference.txt."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("#")]
    n, dim = (int(v) for v in lines[0].split())
    sentences = [lines[1 + 2 * i] for i in range(n)]
    emb = np.array([[float(v) for v in lines[2 + 2 * i].split()] for i in range(n)],
                   dtype=np.float32)
    if emb.shape != (n, dim):
        raise SystemExit(f"{path}: expected {n} x {dim} values")
    return sentences, emb


def cosine(a, b):
    """In float64, as the C example computes it."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b)))


def device_config(device):
    """The context config keys for --device: cpu, cuda or cuda:N (as the
    oslo command line maps them); None for a value that is none of those."""
    if device == "cpu":
        return {"backend": "cpu"}
    if device == "cuda":
        return {"backend": "cuda"}
    index = device[5:] if device.startswith("cuda:") else ""
    if index.isdigit() and index.isascii() and len(index) <= 4:
        return {"backend": "cuda", "backend_options": {"device": int(index)}}
    return None


def main():
    args, device = [], "cpu"
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a == "--device":
            if not argv:
                print("--device needs a value", file=sys.stderr)
                return 2
            device = argv.pop(0)
        else:
            args.append(a)
    dev = device_config(device)
    if dev is None:
        print(f'--device must be cpu, cuda or cuda:N (N a device index), got "{device}"',
              file=sys.stderr)
        return 2
    if len(args) != 2:
        print(f"usage: {sys.argv[0]} [--device cpu|cuda[:N]] MODEL_DIR reference.txt",
              file=sys.stderr)
        return 2
    model_dir, ref_path = args
    sentences, st = read_reference(ref_path)

    # One context over the job's ranks (oslo-run's environment): all of them
    # form the tensor-parallel group.
    world = int(os.environ.get("WORLD_SIZE", "1"))
    with oslo.Context({"tensor_parallel_size": world, "timeout_seconds": 120, **dev}) as ctx, \
            oslo.Model(ctx, model_dir) as model:
        rank, tp = ctx.rank(), ctx.size(oslo.Group.TENSOR)
        if model.info.hidden_size != st.shape[1]:
            print(f"reference has {st.shape[1]} values per sentence, the model "
                  f"{model.info.hidden_size}", file=sys.stderr)
            return 1
        # Texts straight in: the model folder's tokenizer encodes them, and the
        # rows of different lengths are padded with a mask inside.
        e = model.embed(sentences)

        ok = True
        if rank == 0:
            # The unsharded model, on rank 0 alone (a context of its own).
            store = os.path.join(tempfile.mkdtemp(prefix="oslo-semantic-search-"), "store")
            solo_cfg = {"rank": 0, "world_size": 1, "init_method": "file://" + store, **dev}
            with oslo.Context(solo_cfg) as solo, oslo.Model(solo, model_dir) as full:
                u = full.embed(sentences)

            print(f"all-MiniLM-L6-v2 split over {tp} ranks (tensor parallel)\n")
            print(f'query: "{sentences[0]}"')
            others = sorted(range(1, len(sentences)), key=lambda i: -cosine(e[0], e[i]))
            for i in others:
                print(f'  {cosine(e[0], e[i]):.4f}  "{sentences[i]}"')

            print(f"\ncosine similarity (TP={tp})\n     " +
                  "".join(f"  [{j}] " for j in range(len(sentences))))
            for i, s in enumerate(sentences):
                row = "".join(f" {cosine(e[i], e[j]):5.2f} " for j in range(len(sentences)))
                # The first 40 bytes of UTF-8, as C's "%.40s".
                print(f"[{i}] {row}  {s.encode()[:40].decode(errors='ignore')}")

            worst_st = min(cosine(e[i], st[i]) for i in range(len(sentences)))
            worst_u = min(cosine(e[i], u[i]) for i in range(len(sentences)))
            max_diff = float(np.abs(e - u).max())
            ok = worst_st >= 0.9999 and worst_u >= 0.9999
            print(f"\nagreement of the TP={tp} embeddings ({len(sentences)} sentences x "
                  f"{e.shape[1]} values):")
            print(f"  vs the unsharded model (TP=1):  min cosine {worst_u:.7f}, "
                  f"max |diff| {max_diff:.2e}")
            print(f"  vs sentence-transformers:       min cosine {worst_st:.7f}")
            print("MATCH" if ok else "MISMATCH")
        # Every rank exits with rank 0's verdict.
        verdict = ctx.broadcast(np.array([1 if ok else 0], dtype=np.int32), root=0)
        return 0 if verdict[0] == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
