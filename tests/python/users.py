"""What users pass (issue 19): ragged id lists, texts and a tokenizer's batch
call, as a new user hands them over, against independent references.

  python users.py tokenizer_batch FIXTURES REFERENCE [MINILM]
  python users.py tokenizer_options FIXTURES BATCH_REFERENCE PAD_REFERENCE
  python users.py embed_ragged FIXTURES
  python users.py generate_text FIXTURES
  python users.py no_tokenizer FIXTURES DIR
  oslo-run --nproc-per-node 2 python users.py minilm_texts MINILM REFDIR REFERENCE
(append --threads 2 to minilm_texts to run the ranks as threads)

REFERENCE is tests/bindings/tokenizer_batch_reference.txt: what Hugging
Face's tokenizer(texts, padding=True) returns (written by
tests/bindings/make_tokenizer_batch_reference.py). BATCH_REFERENCE and
PAD_REFERENCE are tests/tokenizer/batch_reference.txt (tokenizer(texts,
truncation=True, max_length=..., padding=...)) and pad_reference.txt
(tokenizer.pad of rows of ids), written by the make_*_reference.py next to
them.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises, run_ranks  # noqa: E402

import numpy as np  # noqa: E402

import oslo  # noqa: E402


def read_cases(path, head_fields, item):
    """The cases of tests/tokenizer/{batch,pad}_reference.txt: a list of
    (head fields, [(item, ids, mask)]) with `item` the text ("text ...")
    or row ("row ...") line's rest."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.rstrip("\n") for ln in f if not ln.startswith("#")]
    cases, i = [], 0
    while i < len(lines):
        head = lines[i].split(" ")
        check(head[0] == "case" and len(head) == head_fields + 1, f"bad line {lines[i]!r}")
        n = int(head[-1])
        rows = []
        for k in range(n):
            t, ids, mask = lines[i + 1 + 3 * k: i + 4 + 3 * k]
            check(t == item or t.startswith(item + " "), f"bad line {t!r}")
            rows.append((t[len(item) + 1:], [int(v) for v in ids.split()[1:]],
                         [int(v) for v in mask.split()[1:]]))
        cases.append((head[1:], rows))
        i += 1 + 3 * n
    return cases


def read_reference(path):
    """The cases of tokenizer_batch_reference.txt: a list of dicts."""
    cases = []
    for (fixture, side, pad, special, _), rows in read_cases(path, 5, "text"):
        cases.append({"fixture": fixture, "side": side,
                      "pad": None if pad == "default" else int(pad),
                      "special": special == "1", "texts": [r[0] for r in rows],
                      "ids": [r[1] for r in rows], "mask": [r[2] for r in rows]})
    return cases


def tokenizer_batch(fixtures, reference, minilm=None):
    """tok(texts, padding=True) equals Hugging Face's input_ids and
    attention_mask (GPT-2, BERT WordPiece, LLaMA SentencePiece, and the real
    MiniLM when given; both padding sides); the other forms and bad input."""
    cases = read_reference(reference)
    check(len(cases) >= 6, f"{len(cases)} cases")
    done = 0
    for c in cases:
        folder = minilm if c["fixture"] == "minilm" else os.path.join(fixtures, c["fixture"])
        if folder is None:
            continue
        with oslo.Tokenizer(folder) as tok:
            enc = tok(c["texts"], padding=True, padding_side=c["side"], pad_id=c["pad"],
                      add_special_tokens=c["special"])
            what = f"{c['fixture']} {c['side']}"
            check(isinstance(enc, oslo.BatchEncoding) and set(enc) == {"input_ids",
                                                                     "attention_mask"}, what)
            check(enc["input_ids"] == c["ids"], f"{what}: ids {enc['input_ids']} != {c['ids']}")
            check(enc.attention_mask == c["mask"], f"{what}: mask")
            a = tok(c["texts"], padding="longest", padding_side=c["side"], pad_id=c["pad"],
                    add_special_tokens=c["special"], return_tensors="np")
            check(a["input_ids"].dtype == np.int64 and a["input_ids"].tolist() == c["ids"],
                  f"{what}: np")
            check(np.array_equal(a["attention_mask"], np.array(c["mask"])), f"{what}: np mask")
            # Without padding: each row as encode gives it, mask all 1.
            r = tok(c["texts"], add_special_tokens=c["special"])
            want = [[v for v, m in zip(ids, mk) if m] for ids, mk in zip(c["ids"], c["mask"])]
            check(r["input_ids"] == want, f"{what}: unpadded")
            check(r["attention_mask"] == [[1] * len(w) for w in want], f"{what}: unpadded mask")
            # One text: one list each, as Hugging Face.
            one = tok(c["texts"][0], add_special_tokens=c["special"])
            check(one["input_ids"] == want[0] and one["attention_mask"] == [1] * len(want[0]),
                  f"{what}: one text")
            one = tok(c["texts"][0], add_special_tokens=c["special"], return_tensors="np")
            check(one["input_ids"].shape == (1, len(want[0])), f"{what}: one text, np")
            # padding="max_length".
            n = len(c["ids"][0]) + 3
            ml = tok(c["texts"], padding="max_length", max_length=n, padding_side=c["side"],
                     pad_id=c["pad"], add_special_tokens=c["special"])
            check(all(len(x) == n for x in ml["input_ids"]), f"{what}: max_length")
            done += 1
    check(done >= 6, f"{done} cases run")

    with oslo.Tokenizer(os.path.join(fixtures, "bert-tiny")) as tok:
        check(tok.special_id("pad") == 0, "bert [PAD]")
        # A tokenizer without a padding token (GPT-2) pads with 0 by default.
    with oslo.Tokenizer(os.path.join(fixtures, "gpt2-tiny")) as tok:
        check(tok.special_id("pad") is None, "gpt2 has no [PAD]")
        e = tok(["a b c d", "a"], padding=True)
        check(e["input_ids"][1][1:] == [0] * (len(e["input_ids"][0]) - 1), repr(e))
        e = tok(["a b c d", "a"], padding=True, pad_id=7, padding_side="left")
        check(e["input_ids"][1][:-1] == [7] * (len(e["input_ids"][0]) - 1), repr(e))
        # Bad input: a clear error, never a crash.
        for bad, words in ((None, "NoneType"), ([], "empty list"),
                           (["a", 3], "text 1 is int"), ([["a"]], "text 0 is list"),
                           (b"bytes", "bytes"), (5, "int"), ({"a": 1}, "dict")):
            err = raises(oslo.InvalidArgumentError, tok, bad, padding=True)
            check(words in err.message, f"{bad!r}: {err.message}")
        for kw, words in (({"padding": "maybe"}, "padding must be"),
                          ({"padding_side": "up"}, "padding_side"),
                          ({"return_tensors": "pt"}, "return_tensors"),
                          ({"pad_id": -1}, "pad_id"), ({"pad_id": 1.5}, "pad_id"),
                          ({"padding": "max_length"}, "max_length"),
                          ({"padding": "max_length", "max_length": 1}, "does not truncate")):
            err = raises(oslo.InvalidArgumentError, tok, ["a b c", "d"], **kw)
            check(words in err.message, f"{kw}: {err.message}")
        err = raises(oslo.InvalidArgumentError, tok, ["a b c", "d"], return_tensors="np")
        check("padding=True" in err.message, err.message)


def tokenizer_options(fixtures, batch_reference, pad_reference):
    """tok(texts, truncation=True, max_length=..., padding="max_length",
    truncation_side=...) equals Hugging Face's (batch_reference.txt), and
    oslo.pad_batch of rows of ids equals tokenizer.pad's
    (pad_reference.txt); bad options are named errors."""
    cases = read_cases(batch_reference, 8, "text")
    check(len(cases) >= 10, f"{len(cases)} batch cases")
    for (fixture, side, pad, special, max_length, trunc_side, padding, _), rows in cases:
        with oslo.Tokenizer(os.path.join(fixtures, fixture)) as tok:
            ml = int(max_length)
            kw = {"truncation": True, "max_length": ml, "truncation_side": trunc_side} if ml else {}
            enc = tok([r[0] for r in rows], padding=True if padding == "longest" else padding,
                      padding_side=side, pad_id=None if pad == "default" else int(pad),
                      add_special_tokens=special == "1", **kw)
            what = f"{fixture} {side} {max_length} {trunc_side} {padding}"
            check(enc["input_ids"] == [r[1] for r in rows], f"{what}: ids {enc['input_ids']}")
            check(enc["attention_mask"] == [r[2] for r in rows], f"{what}: mask")
    cases = read_cases(pad_reference, 7, "row")
    check(len(cases) >= 9, f"{len(cases)} pad cases")
    for (side, pad, max_length, truncation, trunc_side, padding, _), rows in cases:
        ids = [[int(v) for v in r[0].split()] for r in rows]
        ml = int(max_length)
        enc = oslo.pad_batch(ids, int(pad), padding=True if padding == "longest" else padding,
                             padding_side=side, max_length=ml or None,
                             truncation=truncation == "1", truncation_side=trunc_side)
        what = f"pad {side} {pad} {max_length} {truncation} {trunc_side} {padding}"
        check(enc["input_ids"].dtype == np.int64, what)
        check(enc["input_ids"].tolist() == [r[1] for r in rows], f"{what}: {enc['input_ids']}")
        check(enc["attention_mask"].tolist() == [r[2] for r in rows], f"{what}: mask")
    # A 2-D array is rows too; numpy rows of any integer type.
    e = oslo.pad_batch(np.array([[1, 2], [3, 4]], dtype=np.int32), 0, padding="max_length",
                       max_length=3, padding_side="left")
    check(e["input_ids"].tolist() == [[0, 1, 2], [0, 3, 4]], repr(e))
    check(e["attention_mask"].tolist() == [[0, 1, 1], [0, 1, 1]], repr(e))
    # Bad input: named errors, never a crash.
    for args, kw, words in ((([[1, 2]], -1), {}, "pad_id"), (([], 0), {}, "no rows"),
                            (([[1], "ab"], 0), {}, "row 1"), (([[1], [1.5]], 0), {}, "row 1"),
                            (("12", 0), {}, "str"), ((np.zeros(3, np.int64), 0), {}, "2-D"),
                            (([[1]], 0), {"padding": False}, "padding must be"),
                            (([[1]], 0), {"padding_side": "up"}, "padding_side"),
                            (([[1]], 0), {"truncation_side": "up"}, "truncation_side"),
                            (([[1]], 0), {"max_length": 0}, "max_length"),
                            (([[1, 2, 3], [4]], 0), {"max_length": 2}, "row 0 has 3 ids"),
                            (([[1]], 0), {"truncation": True}, "max_length is 0 but truncation"),
                            (([[1]], 0), {"padding": "max_length"}, "max_length is 0")):
        err = raises(oslo.InvalidArgumentError, oslo.pad_batch, *args, **kw)
        check(words in err.message, f"{args} {kw}: {err.message}")
    with oslo.Tokenizer(os.path.join(fixtures, "bert-tiny")) as tok:
        for kw, words in (({"truncation": True}, "needs max_length"),
                          ({"truncation_side": "up"}, "truncation_side"),
                          ({"max_length": 1, "truncation": True}, "shorter than its 2 special"),
                          ({"max_length": 3}, "text 0 has")):
            err = raises(oslo.InvalidArgumentError, tok, ["a b c d e", "f"], padding=True, **kw)
            check(words in err.message, f"{kw}: {err.message}")
        # Left padding without padding: each row's real tokens as they are.
        r = tok(["a b c", "d"], padding_side="left", max_length=3, truncation=True)
        check(r["input_ids"] == [tok.encode("a b c")[:2] + tok.encode("a")[-1:],
                                 tok.encode("d")], repr(r))


def embed_ragged(fixtures):
    """BERT (bert-tiny): rows of different lengths, texts and a tokenizer's
    output go straight into embed and forward; a ragged batch equals each
    row alone, and the hidden states of ragged rows with segments equal
    transformers' (reference.safetensors, real positions)."""
    from safetensors.numpy import load_file
    fixture = os.path.join(fixtures, "bert-tiny")
    ref = load_file(os.path.join(fixture, "reference.safetensors"))
    texts = ["This License applies to any program or other work which contains a notice",
             "no warranty", "Hello world!", "THE QUICK BROWN FOX"]
    with oslo.Context() as ctx, oslo.Model(ctx, fixture) as m:
        tok = m.tokenizer
        check(isinstance(tok, oslo.Tokenizer) and m.tokenizer is tok, "one lazy tokenizer")
        rows = [tok.encode(s) for s in texts]  # the example: ragged lists
        check(len({len(r) for r in rows}) > 1, "rows differ in length")
        e = m.embed(rows)
        check(e.shape == (len(texts), m.info.hidden_size), e.shape)
        for i, r in enumerate(rows):
            alone = m.embed([r])[0]
            d = float(np.abs(e[i] - alone).max())
            check(d <= 1e-5, f"row {i}: ragged batch vs alone max |diff| {d}")
        check(np.array_equal(m.embed(texts), e), "texts == their ids")
        check(np.array_equal(m.embed(texts[1]), m.embed([rows[1]])), "one text")
        check(np.array_equal(m.embed(rows[1]), m.embed([rows[1]])), "one row of ids")
        enc = tok(texts, padding=True)
        check(np.abs(m.embed(enc) - e).max() <= 1e-6, "a tokenizer's output")
        enc_np = tok(texts, padding=True, return_tensors="np")
        check(np.abs(m.embed(enc_np) - e).max() <= 1e-6, "a tokenizer's arrays")
        check(np.abs(m.embed(np.array(enc_np["input_ids"]), enc_np["attention_mask"]) - e).max()
              <= 1e-6, "arrays and mask")
        check(np.abs(m.embed([np.array(r) for r in rows]) - e).max() == 0, "numpy rows")
        un = m.embed(rows, normalize=False)
        check(np.allclose(un / np.linalg.norm(un, axis=1, keepdims=True), e, atol=1e-6),
              "normalize=False")

        # forward: ragged rows with ragged segments against transformers.
        mask = ref["attention_mask"]
        lens = mask.sum(1)
        ids = [ref["input_ids"][i, :n].tolist() for i, n in enumerate(lens)]
        types = [ref["token_type_ids"][i, :n].tolist() for i, n in enumerate(lens)]
        h = m.forward(ids, token_type_ids=types, output="hidden")
        check(h.shape == ref["last_hidden_state"].shape, f"{h.shape}")
        worst = max(float(np.abs(h[i, :n] - ref["last_hidden_state"][i, :n]).max())
                    for i, n in enumerate(lens))
        check(worst <= 1e-4, f"ragged forward vs transformers max |diff| {worst}")
        for i, n in enumerate(lens):
            alone = m.forward([ids[i]], token_type_ids=[types[i]], output="hidden")[0]
            d = float(np.abs(h[i, :n] - alone).max())
            check(d <= 1e-5, f"forward row {i}: batch vs alone {d}")

        # Bad input: a clear error, never a crash.
        cases = [(None, "got None"), ([], "empty list"), ([[]], "row 0 has no tokens"),
                 ([[5, 6], "a"], "mixes"), ([5, [6]], "mixes"), ([[5, 2.5]], "2.5"),
                 ([[5, None]], "None"), ([[5, "x"]], "'x'"), (3.0, "float"), (b"x", "bytes"),
                 ([[[1, 2], [3]]], "row 0"), (np.zeros((2, 3)), "dtype float64"),
                 ({"ids": [1]}, "input_ids"), ([None], "None"), ([True, False], "bool")]
        for bad, words in cases:
            err = raises(oslo.InvalidArgumentError, m.embed, bad)
            check(words in err.message, f"{bad!r}: {err.message}")
            check(err.message.startswith("embed: "), err.message)
        err = raises(oslo.ShapeError, m.embed, np.zeros((1, 2, 3), np.int64))
        check("[batch, seq]" in err.message, err.message)
        err = raises(oslo.ShapeError, m.embed, rows, mask=[[1] * 3 for _ in rows])
        check("lengths" in err.message, err.message)
        err = raises(oslo.InvalidArgumentError, m.embed, texts, mask=[[1]])
        check("texts come without a mask" in err.message, err.message)
        err = raises(oslo.InvalidArgumentError, m.embed, [[5, 10 ** 6]])
        check("outside" in err.message, err.message)  # oslo's own check, named
        err = raises(oslo.InvalidArgumentError, m.forward, [[5, 6], [7]], token_type_ids="ab")
        check("token_type_ids" in err.message, err.message)
    check(tok.closed, "the model's tokenizer is closed with it")


def generate_text(fixtures):
    """GPT-2 (gpt2-tiny): generate(text) returns a Generation whose ids
    equal generate(tokenizer.encode(text)) and transformers' greedy tokens
    (reference.json, for texts that encode to the reference prompts), and
    whose text is the decoded ids; lists of texts and ragged prompts."""
    fixture = os.path.join(fixtures, "gpt2-tiny")
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    greedy = ref["greedy"]
    kw = dict(max_new_tokens=greedy["max_new_tokens"], eos_token_id=greedy["eos_token_id"],
              pad_token_id=greedy["pad_token_id"])
    with oslo.Context() as ctx, oslo.Model(ctx, fixture) as m:
        tok = m.tokenizer
        # Texts that encode to the reference prompts: transformers' greedy.
        texts = [tok.decode(p) for p in ref["prompts"]]
        for i, t in enumerate(texts):
            check(tok.encode(t) == ref["prompts"][i], f"prompt {i} round trip")
        gens = m.generate(texts, **kw)
        check(isinstance(gens, list) and len(gens) == len(texts), repr(gens))
        for i, g in enumerate(gens):
            want = greedy["outputs"][f"greedy_{i}"][len(ref["prompts"][i]):]
            check(isinstance(g, oslo.Generation), repr(g))
            check(g.ids == want, f"text {i}: {g.ids} != transformers' {want}")
            check(g.text == tok.decode(want, skip_special_tokens=True), f"text {i}: {g.text!r}")
            one = m.generate(texts[i], **kw)
            check(one.ids == want and one.text == g.text, f"text {i} alone: {one}")
            text, ids, score = one
            check(text == one.text and ids == one.ids and score == one.score, "unpacks")
        # The example: a free text, 20 new tokens.
        g = m.generate("Once upon a time", max_new_tokens=20)
        check(isinstance(g.text, str) and 1 <= len(g.ids) <= 20, repr(g))
        check(g.ids == m.generate(tok.encode("Once upon a time"), max_new_tokens=20),
              "generate(text) == generate(tokenizer.encode(text))")
        # Ragged prompts of ids, and a tokenizer's (left-padded) output.
        rows = m.generate(ref["prompts"], **kw)
        check(rows == [g.ids for g in gens], "ragged ids == texts")
        enc = tok(texts, padding=True, padding_side="left", pad_id=0)
        check(m.generate(enc, **kw) == rows, "a tokenizer's output")
        enc = tok(texts, padding=True)  # right padding: the mask selects the tokens
        check(m.generate(enc, **kw) == rows, "a right-padded tokenizer output")
        # Bad input: a clear error, never a crash.
        for bad, words in ((None, "got None"), ([], "empty list"), ("", "no tokens"),
                           (["a", [52]], "mixes"), ([[]], "prompt 0 has no tokens"),
                           ([52, 1.5], "1.5"), ([["a"]], "row 0"), (7, "int")):
            err = raises(oslo.InvalidArgumentError, m.generate, bad, max_new_tokens=2)
            check(words in err.message and err.message.startswith("generate: "),
                  f"{bad!r}: {err.message}")


def no_tokenizer(fixtures, out):
    """A model folder without tokenizer files: ids work, texts raise an
    error naming the folder; an assigned tokenizer makes texts work."""
    fixture = os.path.join(fixtures, "gpt2-tiny")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(os.path.join(fixture, f), out)
    with oslo.Context() as ctx, oslo.Model(ctx, out) as m:
        ids = m.generate([52, 441, 221], max_new_tokens=4)
        check(len(ids) == 4, repr(ids))
        for call in (lambda: m.generate("Hello", max_new_tokens=2), lambda: m.embed(["a", "b"]),
                     lambda: m.forward("Hello"), lambda: m.tokenizer):
            err = raises(oslo.Error, call)
            check(out in err.message and "has no tokenizer" in err.message and
                  "oslo.Tokenizer" in err.message, err.message)
        with oslo.Tokenizer(fixture) as tok:
            m.tokenizer = tok
            g = m.generate(tok.decode([52, 441, 221]), max_new_tokens=4)
            check(g.ids == ids, f"{g.ids} != {ids}")
        err = raises(oslo.InvalidArgumentError, setattr, m, "tokenizer", "gpt2")
        check("oslo.Tokenizer" in err.message, err.message)


def minilm_texts(*args):
    """The real all-MiniLM-L6-v2 at TP=2, fed as a new user would: texts,
    and the issue's [tok.encode(s) for s in sentences]: embeddings equal to
    sentence-transformers' (max |diff| <= 1e-5, cosine >= 0.99999), and
    tok(sentences, padding=True) equal to its input_ids and mask."""
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 0
    model_dir, refdir, reference = [a for i, a in enumerate(args)
                                    if a != "--threads" and (i == 0 or args[i - 1] != "--threads")]
    from safetensors.numpy import load_file
    ref = load_file(os.path.join(refdir, "reference.safetensors"))
    sentences = json.load(open(os.path.join(refdir, "reference.json")))["sentences"]
    want = ref["sentence_embedding"]
    hf = [c for c in read_reference(reference) if c["fixture"] == "minilm"][0]
    check(hf["texts"] == sentences, "the same sentences")

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, model_dir) as m:
            tok = m.tokenizer
            enc = tok(sentences, padding=True)
            check(enc["input_ids"] == ref["input_ids"].tolist(), "ids as sentence-transformers")
            check(enc["attention_mask"] == ref["attention_mask"].tolist(), "mask")
            check(enc["input_ids"] == hf["ids"], "ids as transformers")
            for name, e in (("texts", m.embed(sentences)),
                            ("ragged ids", m.embed([tok.encode(s) for s in sentences])),
                            ("tokenizer output", m.embed(enc))):
                d = float(np.abs(e - want).max())
                cos = float(((e * want).sum(1) / np.linalg.norm(e, axis=1) /
                             np.linalg.norm(want, axis=1)).min())
                check(d <= 1e-5 and cos >= 0.99999, f"{name}: max |diff| {d}, cosine {cos}")
                if ctx.rank() == 0:
                    print(f"MiniLM TP={ctx.size(oslo.Group.TENSOR)} {name}: max |diff| to "
                          f"sentence-transformers {d:.2e}, min cosine {cos:.7f}")

    run_ranks(body, threads or int(os.environ.get("WORLD_SIZE", "1")), threads > 0)


if __name__ == "__main__":
    main({f.__name__: f for f in (tokenizer_batch, tokenizer_options, embed_ragged, generate_text, no_tokenizer,
                                  minilm_texts)})
