"""Models from Python at TP=2 (processes under oslo-run, or threads), against
the same references as the C tests (tests/models/test_model_capi.cpp).

  oslo-run --nproc-per-node 2 python models.py model_bert_minilm_embed MINILM REFDIR
  oslo-run --nproc-per-node 2 python models.py model_gpt2_generate FIXTURE
  oslo-run --nproc-per-node 2 python models.py model_gpt2_checkpoint_save_load FIXTURE DIR
  oslo-run --nproc-per-node 2 python models.py train_gpt2_tiny FIXTURE DATA
  oslo-run --nproc-per-node 2 python models.py train_error_in_flight FIXTURE
(append --threads 2 to run the ranks as threads of one process instead)
"""
import gc
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises, run_ranks  # noqa: E402

import numpy as np  # noqa: E402

import oslo  # noqa: E402


def _split(args):
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 0
    pos = [a for i, a in enumerate(args) if a != "--threads" and (i == 0 or args[i - 1] != "--threads")]
    return pos, threads


def _world(threads):
    return threads or int(os.environ.get("WORLD_SIZE", "1"))


def model_bert_minilm_embed(*args):
    """The real all-MiniLM-L6-v2: sentence embeddings equal to
    sentence-transformers' (cosine >= 0.9999, as the C test), token ids from
    oslo.Tokenizer equal to sentence-transformers' inputs."""
    (model_dir, refdir), threads = _split(args)
    try:
        from safetensors.numpy import load_file
    except ImportError:
        print("SKIP: safetensors is not installed")
        sys.exit(77)
    ref = load_file(os.path.join(refdir, "reference.safetensors"))
    sentences = json.load(open(os.path.join(refdir, "reference.json")))["sentences"]
    if isinstance(sentences, str):  # stored as its Python repr
        import ast
        sentences = ast.literal_eval(sentences)
    ids, mask, want = ref["input_ids"], ref["attention_mask"], ref["sentence_embedding"]

    tok = oslo.Tokenizer(model_dir)
    for i, s in enumerate(sentences):
        got = tok.encode(s)
        n = int(mask[i].sum())
        check(got == ids[i, :n].tolist(), f"sentence {i}: ids {got} != {ids[i, :n].tolist()}")

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, model_dir) as m:
            check(m.info.model_type == "bert" and not m.info.is_causal, repr(m.info))
            e = m.embed(ids, mask)
            check(e.shape == want.shape and e.dtype == np.float32, e.shape)
            cos = (e * want).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(want, axis=1)
            worst = float(cos.min())
            check(worst >= 0.9999, f"worst cosine {worst}")
            h = m.forward(ids, mask, output="hidden")
            check(h.shape == ref["token_embeddings"].shape, h.shape)
            raises_logits = False
            try:
                m.forward(ids, mask)
            except oslo.NotSupportedError:
                raises_logits = True
            check(raises_logits, "logits of an encoder are refused")
            if ctx.rank() == 0:
                print(f"MiniLM at TP={ctx.size(oslo.Group.TENSOR)}: worst cosine to "
                      f"sentence-transformers {worst:.7f}")

    run_ranks(body, _world(threads), threads > 0)


def model_gpt2_generate(*args):
    """Greedy (batched) and beam search equal to transformers' generate."""
    (fixture,), threads = _split(args)
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    prompts = ref["prompts"]
    greedy, beam = ref["greedy"], ref["beam"]

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, fixture) as m:
            check(m.info.is_causal and m.info.vocab_size == ref["vocab_size"], repr(m.info))
            got = m.generate(prompts, max_new_tokens=greedy["max_new_tokens"],
                             eos_token_id=greedy["eos_token_id"],
                             pad_token_id=greedy["pad_token_id"])
            for i, p in enumerate(prompts):
                want = greedy["outputs"][f"greedy_{i}"][len(p):]
                check(got[i] == want, f"greedy {i}: {got[i]} != {want}")
            for i, p in enumerate(prompts):
                toks, score = m.generate(p, max_new_tokens=beam["max_new_tokens"],
                                         num_beams=beam["num_beams"],
                                         eos_token_id=beam["eos_token_id"],
                                         pad_token_id=beam["pad_token_id"], return_scores=True)
                want = beam["outputs"][f"beam_{i}"][len(p):]
                check(toks == want, f"beam {i}: {toks} != {want}")
                ws = beam["scores"][f"beam_{i}_score"]
                check(abs(score - ws) < 1e-3, f"beam {i} score {score} != {ws}")
            a = m.generate(prompts[0], max_new_tokens=6, do_sample=True, seed=7, top_k=20)
            b = m.generate(prompts[0], max_new_tokens=6, do_sample=True, seed=7, top_k=20)
            check(a == b and 1 <= len(a) <= 6, f"seeded sampling repeats: {a} {b}")
            # The tokenizer gives the fixture's prompt ids.
            tok = oslo.Tokenizer(fixture)
            for i, text in enumerate(ref["prompt_texts"]):
                check(tok.encode(text)[:len(prompts[i])] == prompts[i], f"prompt {i} ids")
            e = None
            try:
                m.generate([[]])
            except oslo.InvalidArgumentError as x:
                e = x
            check(e is not None, "an empty prompt is refused")
            if ctx.rank() == 0:
                print(f"GPT-2 at TP={ctx.size(oslo.Group.TENSOR)}: greedy and beam search "
                      "equal to transformers")

    run_ranks(body, _world(threads), threads > 0)


def model_gpt2_checkpoint_save_load(*args):
    """Save at TP=2, load at TP=1 (and merge, reshard, inspect) with the
    same logits."""
    (fixture, out), threads = _split(args)
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    ids = np.array([ref["prompts"][0]], dtype=np.int64)
    ckpt, merged, tp1 = (os.path.join(out, d) for d in ("ckpt-tp2", "merged", "ckpt-tp1"))
    if os.environ.get("RANK", "0") == "0":  # before the context: no rank has started
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    logits = {}

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, fixture) as m:
            check(ctx.size(oslo.Group.TENSOR) == 2, "TP=2")
            logits[ctx.rank()] = m.forward(ids)
            m.save(ckpt)
            ctx.barrier()

    run_ranks(body, _world(threads), threads > 0)
    if os.environ.get("RANK", "0") != "0":
        return
    want = logits[0]
    desc = oslo.inspect(ckpt, json=True)
    check(isinstance(desc, dict), "inspect JSON")
    check("tensors" in oslo.inspect(ckpt), "inspect text")
    store = os.path.join(out, "store")
    with oslo.Context({"rank": 0, "world_size": 1, "init_method": "file://" + store}) as ctx:
        for path in (ckpt,):
            with oslo.Model(ctx, path) as m:
                got = m.forward(ids)
                check(np.abs(got - want).max() < 1e-4, f"{path}: max diff {np.abs(got - want).max()}")
        oslo.merge(ckpt, merged)
        e = None
        try:
            oslo.merge(ckpt, merged)
        except oslo.Error as x:
            e = x
        # oslo.h documents OSLO_ERR_IO here; the library reports
        # OSLO_ERR_INVALID_ARGUMENT ("not empty (pass overwrite ...)").
        check(e is not None and e.status in (oslo.Status.IO, oslo.Status.INVALID_ARGUMENT)
              and merged in e.message, f"merge refuses an existing folder: {e!r}")
        oslo.merge(ckpt, merged, overwrite=True)
        oslo.reshard(merged, tp1, 1)
        for path in (merged, tp1):
            with oslo.Model(ctx, path) as m:
                got = m.forward(ids)
                check(np.abs(got - want).max() < 1e-4, f"{path}: max diff")
    print("saved at TP=2, loaded at TP=1 (checkpoint, merged, resharded): equal logits")


def _train_case(path):
    """tests/bindings/train_gpt2_tiny.txt (tests/bindings/make_train_case.py):
    the micro-batches as (ids, mask) int64 [batch, seq] and the reference
    loss of every optimizer step."""
    with open(path) as f:
        lines = f.read().split("\n")
    head = lines[0].split()
    n, b, s, steps = (int(head[head.index(k) + 1]) for k in ("micro_batches", "batch", "seq",
                                                              "steps"))
    batches, losses = [], []
    rows = {"ids": None}
    for line in lines[1:]:
        if not line:
            continue
        key, *vals = line.split()
        if key == "ids":
            rows["ids"] = np.array(vals, dtype=np.int64).reshape(b, s)
        elif key == "mask":
            batches.append((rows["ids"], np.array(vals, dtype=np.int64).reshape(b, s)))
        elif key == "loss":
            losses.append(float(vals[0]))
    check(len(batches) == n and len(losses) == steps, f"{path}: {len(batches)} batches, "
          f"{len(losses)} losses")
    return batches, losses


def train_gpt2_tiny(*args):
    """GPT-2 tiny at TP=2 trained 20 AdamW steps (cosine schedule, warmup 3,
    accumulation 2, clipping 1.0): every step's mean loss within 1e-4
    (relative) of PyTorch's loop, on every rank; a token outside the
    vocabulary is refused with InvalidArgumentError naming it."""
    (fixture, data), threads = _split(args)
    batches, losses = _train_case(data)
    accum = len(batches) // len(losses)

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, fixture, dtype="f32") as m:
            check(ctx.size(oslo.Group.TENSOR) == 2, "TP=2")
            opt = oslo.Optimizer(m, lr=2e-3, weight_decay=0.01, schedule="cosine",
                                 warmup_steps=3, total_steps=len(losses), grad_accum_steps=accum,
                                 max_grad_norm=1.0)
            worst = 0.0
            for i, (ids, mask) in enumerate(batches):
                r = m.train_step(ids, mask=mask, optimizer=opt)
                check(np.isfinite(r.loss), f"micro-batch {i}: loss {r.loss}")
                if (i + 1) % accum:
                    check(not r.stepped, f"micro-batch {i}: stepped inside the window")
                    continue
                k = i // accum
                check(r.stepped and not r.skipped and r.step == k + 1, f"step {k}: {r!r}")
                err = abs(r.mean_loss - losses[k]) / abs(losses[k])
                check(err < 1e-4, f"step {k}: loss {r.mean_loss!r} vs PyTorch {losses[k]!r} "
                      f"(relative error {err:.3g})")
                check(np.isfinite(r.grad_norm) and r.lr >= 0, f"step {k}: {r!r}")
                worst = max(worst, err)
            # A token outside the vocabulary: refused on every rank, named.
            bad = batches[0][0].copy()
            bad[0, 1] = m.info.vocab_size + 7
            e = raises(oslo.InvalidArgumentError, m.train_step, bad, None, batches[0][1], opt)
            check(e.status == oslo.Status.INVALID_ARGUMENT and str(m.info.vocab_size + 7) in
                  e.message, f"the error names the token: {e!r}")
            # The optimizer keeps its model: closing the model closes it first.
            m.close()
            check(opt.closed, "closing the model closes its optimizer")
            raises(oslo.InvalidArgumentError, opt.step)
            if ctx.rank() == 0:
                print(f"GPT-2 tiny at TP=2: {len(losses)} AdamW steps, worst relative loss "
                      f"error to PyTorch {worst:.2e}")

    run_ranks(body, _world(threads), threads > 0)


def train_gpt2_tiny_pp2(*args):
    """GPT-2 tiny on two pipeline stages: each optimizer step's micro-batches
    of PyTorch's loop passed as one batch that the pipeline cuts into the
    same micro-batches (Optimizer micro_batches), 20 AdamW steps: every mean
    loss within 1e-4 (relative) of PyTorch's, on both stages;
    Model.pipeline_stats reports this rank's compute and wall seconds and a
    bubble in [0, 1)."""
    (fixture, data), threads = _split(args)
    batches, losses = _train_case(data)
    accum = len(batches) // len(losses)

    def body(cfg):
        cfg = dict(cfg, tensor_parallel_size=1, pipeline_parallel_size=2)
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, fixture, dtype="f32") as m:
            check(ctx.size(oslo.Group.PIPELINE) == 2, "PP=2")
            opt = oslo.Optimizer(m, lr=2e-3, weight_decay=0.01, schedule="cosine",
                                 warmup_steps=3, total_steps=len(losses), micro_batches=accum,
                                 max_grad_norm=1.0)
            check(m.pipeline_stats() == (0.0, 0.0, 0.0), "no step yet: zeros")
            worst = 0.0
            for k in range(len(losses)):
                group = batches[k * accum:(k + 1) * accum]
                ids = np.concatenate([b[0] for b in group])
                mask = np.concatenate([b[1] for b in group])
                r = m.train_step(ids, mask=mask, optimizer=opt)
                check(r.stepped and not r.skipped and r.step == k + 1, f"step {k}: {r!r}")
                err = abs(r.mean_loss - losses[k]) / abs(losses[k])
                check(err < 1e-4, f"step {k}: loss {r.mean_loss!r} vs PyTorch {losses[k]!r} "
                      f"(relative error {err:.3g})")
                worst = max(worst, err)
                compute, wall, bubble = m.pipeline_stats()
                check(0 < compute <= wall and 0 <= bubble < 1,
                      f"step {k}: pipeline stats {compute}, {wall}, {bubble}")
            if ctx.rank() == 0:
                print(f"GPT-2 tiny on 2 pipeline stages: {len(losses)} AdamW steps, worst "
                      f"relative loss error to PyTorch {worst:.2e}, last bubble {bubble:.3f}")

    run_ranks(body, _world(threads), threads > 0)


def model_gpt2_generate_pp2_layers(*args):
    """GPT-2 with 4 blocks over two pipeline stages cut by Model's
    pipeline_layers ([1, 3], [3, 1]) and into virtual stages
    (pipeline_virtual_stages=2): greedy tokens equal to transformers' each
    way; counts that do not add up to the blocks, a non-int count and a
    string are refused by name."""
    (fixture,), threads = _split(args)
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    prompts, greedy = ref["prompts"], ref["greedy"]

    def body(cfg):
        cfg = dict(cfg, tensor_parallel_size=1, pipeline_parallel_size=2)
        with oslo.Context(cfg) as ctx:
            for kw in ({"pipeline_layers": [1, 3]}, {"pipeline_layers": (3, 1)},
                       {"pipeline_virtual_stages": 2},
                       {"pipeline_virtual_stages": 2, "pipeline_layers": [1, 1, 1, 1]}):
                with oslo.Model(ctx, fixture, **kw) as m:
                    got = m.generate(prompts, max_new_tokens=greedy["max_new_tokens"],
                                     eos_token_id=greedy["eos_token_id"],
                                     pad_token_id=greedy["pad_token_id"])
                    for i, p in enumerate(prompts):
                        want = greedy["outputs"][f"greedy_{i}"][len(p):]
                        check(got[i] == want, f"{kw} greedy {i}: {got[i]} != {want}")
            for bad, what in (({"pipeline_layers": [2, 1]}, "sum to 3"),
                              ({"pipeline_layers": [1.5, 2.5]}, "int"),
                              ({"pipeline_layers": "1,3"}, "sequence"),
                              ({"pipeline_virtual_stages": True}, "int")):
                e = raises(oslo.InvalidArgumentError, lambda: oslo.Model(ctx, fixture, **bad))
                check(what in str(e), f"{bad}: {e}")
            if ctx.rank() == 0:
                print("GPT-2 (4 blocks) on 2 pipeline stages cut [1, 3], [3, 1] and into 4 "
                      "virtual stages: greedy equal to transformers")

    run_ranks(body, _world(threads), threads > 0)


def train_error_in_flight(*args):
    """A ZeRO-3 train step that fails (a label outside the vocabulary) inside
    `with oslo.Context(...)` on every rank (1 rank; 2 data-parallel ranks
    with --threads 2 or under oslo-run): the error propagates through the
    `with`, whose Context.close() closes the optimizer, the model and the
    context while the traceback still holds train_step's frames and the raw
    handles in them. The error is the expected one; closing destroyed the
    objects (the raw handles the traceback keeps are empty: using one raises
    InvalidArgumentError "... is closed"); releasing the traceback destroys
    nothing more and the process exits cleanly (it used to destroy the
    optimizer then, after its model: "double free detected" or SIGSEGV)."""
    (fixture,), threads = _split(args)
    world = _world(threads)
    ids = np.array([[5, 9, 14, 3], [7, 1, 2, 8]], np.int64)
    bad = ids.copy()
    bad[0, 2] = 10**9

    def frames(tb):
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next

    def body(cfg):
        # The ranks are data-parallel: ZeRO-3 partitions over them.
        cfg = dict(cfg, tensor_parallel_size=1)
        err = None
        try:
            with oslo.Context(cfg) as ctx:
                check(ctx.size(oslo.Group.DATA) == world, f"DP={ctx.size(oslo.Group.DATA)}")
                m = oslo.Model(ctx, fixture)
                o = oslo.Optimizer(m, kind="sgd", lr=0.1, zero_stage=3)
                check(m.train_step(ids, optimizer=o).stepped, "a good ZeRO-3 step first")
                m.train_step(ids, labels=bad, optimizer=o)
        except oslo.InvalidArgumentError as e:
            err = e
        check(err is not None, "train_step with a label outside the vocabulary did not raise")
        check("outside the vocabulary" in err.message and
              err.status == oslo.Status.INVALID_ARGUMENT, err.message)
        check(ctx.closed and m.closed and o.closed, "the with closed all three")
        e = raises(oslo.InvalidArgumentError, o.step)
        check("Optimizer is closed" in e.message, e.message)
        # The raw handles train_step's frames still hold are empty.
        stale = [v for f in frames(err.__traceback__) for v in f.f_locals.values()
                 if isinstance(v, (oslo.capi.Optimizer, oslo.capi.Model))]
        check(any(isinstance(v, oslo.capi.Optimizer) for v in stale) and
              any(isinstance(v, oslo.capi.Model) for v in stale),
              f"the traceback holds the raw optimizer and model: {stale}")
        for h in stale:
            call = h.zero_grad if isinstance(h, oslo.capi.Optimizer) else h.info
            e = raises(oslo.InvalidArgumentError, call)
            check(f"{type(h).__name__} is closed" in e.message, e.message)
        del stale, h, err  # the traceback goes: nothing is destroyed a second time
        gc.collect()

    run_ranks(body, world, threads > 0)


if __name__ == "__main__":
    main({"model_bert_minilm_embed": model_bert_minilm_embed,
          "model_gpt2_generate": model_gpt2_generate,
          "model_gpt2_checkpoint_save_load": model_gpt2_checkpoint_save_load,
          "train_gpt2_tiny": train_gpt2_tiny,
          "train_gpt2_tiny_pp2": train_gpt2_tiny_pp2,
          "train_error_in_flight": train_error_in_flight,
          "model_gpt2_generate_pp2_layers": model_gpt2_generate_pp2_layers})
