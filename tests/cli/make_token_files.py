#!/usr/bin/env python3
"""Writes token files for tests/cli/test_cli_train_ids.sh (standard library only).

    make_token_files.py IDS.jsonl SEQ_LEN OUTDIR

IDS.jsonl holds one {"input_ids": [...]} per document (oslo_test_tokenize's
output). OUTDIR gets, from the documents' ids concatenated (T):

  flat16.bin, flat32.bin   T as little-endian uint16 / uint32 (nanoGPT's
                           train.bin layout: the ids and nothing else)
  mega16.bin/.idx          a Megatron-LM indexed dataset, one sequence per
  mega32.bin/.idx          document (uint16: dtype code 8; int32: code 4), as
                           megatron/core/datasets/indexed_dataset.py's
                           _IndexWriter lays out the index
  windows.jsonl            one line whose input_ids are Megatron-LM's
                           samples of T for --seq-len SEQ_LEN side by side:
                           sample i = T[i (S-1) : i (S-1) + S] for the
                           (len(T) - 1) // (S - 1) whole ones; cut into rows
                           of S tokens as text is, it gives exactly those
                           samples
  hostile files            truncated, lying and malformed ones (below), each
                           named after what is wrong with it
"""
import json
import os
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
CODES = {"uint8": (1, "B"), "int32": (4, "i"), "uint16": (8, "H"), "float32": (7, "f")}


def flat(ids, fmt):
    return struct.pack("<%d%s" % (len(ids), fmt), *ids)


def index(lengths, itemsize, code, docs=None, count=None, doc_count=None, version=1,
          magic=MAGIC, pointers=None):
    """A Megatron-LM .idx: magic, version, dtype code, sequence and document
    counts, int32 lengths, int64 byte pointers, int64 document indices."""
    if pointers is None:
        pointers, at = [], 0
        for n in lengths:
            pointers.append(at)
            at += n * itemsize
    if docs is None:
        docs = list(range(len(lengths) + 1))  # one document per sequence
    out = magic + struct.pack("<Q", version) + struct.pack("<B", code)
    out += struct.pack("<Q", len(lengths) if count is None else count)
    out += struct.pack("<Q", len(docs) if doc_count is None else doc_count)
    out += struct.pack("<%di" % len(lengths), *lengths)
    out += struct.pack("<%dq" % len(pointers), *pointers)
    out += struct.pack("<%dq" % len(docs), *docs)
    return out


def main():
    src, seq_len, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    docs = [json.loads(line)["input_ids"] for line in open(src) if line.strip()]
    T = [t for d in docs for t in d]
    lengths = [len(d) for d in docs]
    os.makedirs(out, exist_ok=True)

    def write(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

    def mega(name, bin_data, idx_data):
        write(name + ".bin", bin_data)
        write(name + ".idx", idx_data)

    write("flat16.bin", flat(T, "H"))
    write("flat32.bin", flat(T, "I"))
    mega("mega16", flat(T, "H"), index(lengths, 2, 8))
    mega("mega32", flat(T, "i"), index(lengths, 4, 4))
    step = seq_len - 1
    rows = (len(T) - 1) // step
    windows = [t for i in range(rows) for t in T[i * step:i * step + seq_len]]
    with open(os.path.join(out, "windows.jsonl"), "w") as f:
        f.write(json.dumps({"input_ids": windows}) + "\n")

    # Hostile flat files.
    write("odd.bin", flat(T, "H") + b"\x01")                    # half a uint16
    write("empty.bin", b"")
    oov = list(T)
    oov[5] = 600                                                 # gpt2-tiny: 515 ids
    write("oov16.bin", flat(oov, "H"))
    write("huge32.bin", flat(T[:4], "I") + struct.pack("<I", 0x80000000))
    # Hostile Megatron-LM datasets (all else like mega16).
    good_bin, good_idx = flat(T, "H"), index(lengths, 2, 8)
    n = len(lengths)
    mega("badmagic", good_bin, index(lengths, 2, 8, magic=b"MMIDIDY\x00\x00"))
    mega("version2", good_bin, index(lengths, 2, 8, version=2))
    mega("floats", flat(T, "f"), index(lengths, 4, 7))
    mega("badcode", good_bin, index(lengths, 2, 11))
    mega("short", good_bin, good_idx[:20])
    mega("cutidx", good_bin, good_idx[:-4])
    mega("lyingcount", good_bin, index(lengths, 2, 8, count=n + 5))
    mega("hugecount", good_bin, index(lengths, 2, 8, count=2**62))
    mega("lyingdocs", good_bin, index(lengths, 2, 8, doc_count=n + 2))
    ptrs = [sum(lengths[:i]) * 2 for i in range(n)]
    ptrs[1] += 2
    mega("badptr", good_bin, index(lengths, 2, 8, pointers=ptrs))
    far = list(ptrs)
    far[1] = 2**62
    mega("farptr", good_bin, index(lengths, 2, 8, pointers=far))
    neg = list(lengths)
    neg[0] = -3
    mega("neglen", good_bin, index(neg, 2, 8))
    mega("truncbin", good_bin[:-2], good_idx)
    mega("longbin", good_bin + b"\0\0", good_idx)
    docs_idx = list(range(n + 1))
    docs_idx[1] = n + 7
    mega("baddoc", good_bin, index(lengths, 2, 8, docs=docs_idx))
    mega("shortdoc", good_bin, index(lengths, 2, 8, docs=list(range(n))))
    big = list(T)
    big[3] = 9999
    mega("oovmega", flat(big, "i"), index(lengths, 4, 4))
    write("onlyidx.idx", good_idx)                                # no onlyidx.bin
    # Hostile JSON lines of token ids.
    first = json.dumps({"input_ids": docs[0][:8]})
    lines = {
        "oov.jsonl": [json.dumps({"input_ids": d[:1] + [515] + d[2:] if i == 1 else d})
                      for i, d in enumerate(docs)],
        "negative.jsonl": [first, json.dumps({"input_ids": [-1]})],
        "fraction.jsonl": [first, json.dumps({"input_ids": [1, 1.5]})],
        "noids.jsonl": [first, "", json.dumps({"text": "words"})],
        "badjson.jsonl": [first, '{"input_ids": [1, 2'],
        "nested.jsonl": [first, json.dumps({"input_ids": [[1, 2]]})],
        "toolarge.jsonl": [first, json.dumps({"input_ids": [2**40]})],
    }
    for name, ls in lines.items():
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(ls) + "\n")
    print(f"{len(docs)} documents, {len(T)} tokens, {rows} samples of {seq_len} sharing a token")


if __name__ == "__main__":
    main()
