"""The serving engine from Python (oslo.Engine, oslo/serve.py): the engine_*
cases of tests/bindings/cases.txt, plus asyncio with many requests.

  python engine.py engine_stream_gpt2 FIXTURE
  python engine.py engine_cancel_and_errors FIXTURE
  python engine.py engine_asyncio FIXTURE
  oslo-run --nproc-per-node 2 python engine.py engine_tp2 FIXTURE
(append --threads 2 to engine_tp2 to run the ranks as threads of one process)

Every request's tokens are compared with Model.generate of that prompt
alone, computed before the engine exists (while an engine lives its model
belongs to the thread that steps it).
"""
import asyncio
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises, run_ranks  # noqa: E402

import oslo  # noqa: E402

SOLO = {"tensor_parallel_size": 1, "timeout_seconds": 120}


def _split(args):
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 0
    pos = [a for i, a in enumerate(args) if a != "--threads" and (i == 0 or args[i - 1] != "--threads")]
    return pos, threads


def _reference(fixture):
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    return ref, ref["greedy"]["eos_token_id"]


# The tests' engines hold a few hundred KV blocks (the default, 1 GiB of
# them, is more than a test needs).

# Four requests of different prompts, lengths and sampling, added together.
def _specs(ref):
    p = ref["prompts"]
    return [(p[0], dict(max_new_tokens=12)),
            (p[1], dict(max_new_tokens=7, do_sample=True, seed=11, top_k=20, temperature=0.8)),
            (p[2], dict(max_new_tokens=12)),
            (p[0][:3] + p[2], dict(max_new_tokens=9, do_sample=True, seed=3, top_p=0.9,
                                   repetition_penalty=1.3))]


def _expected_text(tok, tokens, finish, eos):
    """What the pieces' text must join to: the tokens decoded without
    special tokens, as the engine decodes (the EOS token's own text may be
    left out)."""
    full = tok.decode(tokens, skip_special_tokens=True)
    if finish == oslo.FinishReason.EOS and tokens and tokens[-1] == eos:
        return (full, tok.decode(tokens[:-1], skip_special_tokens=True))
    return (full,)


def _check_pieces(what, pieces, want, tok, eos, max_new):
    tokens = [t for p in pieces for t in p.tokens]
    text = "".join(p.text for p in pieces)
    check(tokens == want, f"{what}: engine tokens {tokens} != generate's {want}")
    check(all(p.finish_reason is None for p in pieces[:-1]), f"{what}: finished early")
    last = pieces[-1].finish_reason
    expect = oslo.FinishReason.EOS if want and want[-1] == eos else oslo.FinishReason.LENGTH
    check(len(want) == max_new or expect == oslo.FinishReason.EOS, f"{what}: {len(want)} tokens")
    check(last == expect, f"{what}: finish {last!r}, want {expect!r}")
    if tok is not None:
        check(text in _expected_text(tok, tokens, last, eos),
              f"{what}: text {text!r} != decoded {_expected_text(tok, tokens, last, eos)!r}")
    return tokens, text


def engine_stream_gpt2(fixture):
    """Four requests added together and streamed concurrently (a thread
    each): every one's tokens equal Model.generate of its prompt alone
    (greedy and seeded sampling, the greedy ones also transformers'), the
    text pieces join to the decoded tokens; a text prompt with a stop
    string; result(); stats; state."""
    ref, eos = _reference(fixture)
    specs = _specs(ref)
    with oslo.Context(SOLO) as ctx, oslo.Model(ctx, fixture) as m:
        want = [m.generate(p, eos_token_id=eos, **s) for p, s in specs]
        for i in (0, 2):
            t = ref["greedy"]["outputs"][f"greedy_{i}"][len(specs[i][0]):]
            check(want[i] == t, f"generate greedy {i} {want[i]} != transformers' {t}")
        # generate's options version 2: min_new_tokens holds EOS back (greedy
        # 0 ends with EOS after 4 tokens), repetition_penalty changes greedy
        # 1's repeats.
        g0 = ref["greedy"]["outputs"]["greedy_0"][len(specs[0][0]):]
        check(g0[-1] == eos and len(g0) < 6, f"greedy 0 ends early: {g0}")
        held = m.generate(specs[0][0], max_new_tokens=12, eos_token_id=eos, min_new_tokens=6)
        check(len(held) >= 6 and eos not in held[:6], f"min_new_tokens=6: {held}")
        rep = m.generate(specs[2][0], max_new_tokens=12, eos_token_id=eos, repetition_penalty=3.0)
        check(rep != want[2], f"repetition_penalty=3 changes greedy: {rep}")
        text_prompt = ref["prompt_texts"][2]
        gen = m.generate(text_prompt, max_new_tokens=12, eos_token_id=eos)
        tok = m.tokenizer
        full = gen.text
        check(len(full) > 6, f"the greedy continuation {full!r} is long enough for a stop")
        stop = full[3:6]  # a stop string that starts inside the text
        with oslo.Engine(m, block_size=4, num_blocks=96, max_seqs=8) as eng:
            check(eng.tokenizer is not None, "the folder's tokenizer by default")
            reqs = [eng.add(p, eos_token_ids=eos, **s) for p, s in specs]
            check(len({r.id for r in reqs}) == 4, "distinct ids")
            check(reqs[0].state in (oslo.RequestState.WAITING, oslo.RequestState.RUNNING),
                  f"state before reading: {reqs[0].state!r}")
            got = [None] * 4
            errors = []

            def read(i):
                try:
                    got[i] = list(reqs[i])
                except BaseException as e:  # noqa: B036 - reported below
                    errors.append((i, e))

            ts = [threading.Thread(target=read, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            check(not errors, f"readers failed: {errors}")
            for i, (p, s) in enumerate(specs):
                _check_pieces(f"request {i}", got[i], want[i], tok, eos, s["max_new_tokens"])
                check(reqs[i].state == oslo.RequestState.FINISHED, "finished")
                check(list(reqs[i]) == [], "a finished request yields nothing more")
            # A text prompt: the engine's tokenizer encodes it; result().
            c = eng.add(text_prompt, max_new_tokens=12, eos_token_ids=eos).result()
            check(c.tokens == gen.ids, f"text prompt: {c.tokens} != {gen.ids}")
            check(c.text in _expected_text(tok, c.tokens, c.finish_reason, eos),
                  f"text prompt: {c.text!r}")
            # A stop string that spans tokens: the text ends before it.
            c = eng.add(text_prompt, max_new_tokens=12, eos_token_ids=eos, stop=[stop]).result()
            check(c.finish_reason == oslo.FinishReason.STOP, f"stop: {c.finish_reason!r}")
            check(c.text == full[:full.index(stop)], f"stop {stop!r}: text {c.text!r}")
            check(c.tokens == gen.ids[:len(c.tokens)], "stop: the tokens are generate's")
            st = eng.stats()
            check(st.block_size == 4 and st.blocks_total == 96, repr(st))
            check(st.generated_tokens >= sum(len(w) for w in want) and st.steps > 0, repr(st))
            check(st.running == 0 and st.waiting == 0, repr(st))
        print(f"4 requests streamed together equal generate alone; stop {stop!r} ends the text; "
              f"{st.steps} steps, {st.generated_tokens} tokens")


def engine_cancel_and_errors(fixture):
    """Cancel mid-stream ends the request CANCELLED; bad requests and bad
    engines raise the named error; a hand-stepped engine gives events and
    refuses reading through requests; a closed engine refuses use."""
    ref, eos = _reference(fixture)
    p = ref["prompts"]
    with oslo.Context(SOLO) as ctx, oslo.Model(ctx, fixture) as m:
        vocab = m.info.vocab_size
        alone = m.generate(p[1], max_new_tokens=6, eos_token_id=eos)
        with oslo.Engine(m, num_blocks=256) as eng:
            r = eng.add(p[0], max_new_tokens=100)
            first = next(r)
            check(first.finish_reason is None and first.tokens, f"first piece {first}")
            check(r.cancel() is True, "cancel a live request")
            rest = list(r)
            check(rest and rest[-1].finish_reason == oslo.FinishReason.CANCELLED,
                  f"after cancel: {rest[-1:]}")
            n = len(first.tokens) + sum(len(x.tokens) for x in rest)
            check(n < 100, f"cancelled after {n} tokens")
            check(r.cancel() is False and r.state == oslo.RequestState.FINISHED, "cancel again")
            # Bad requests: the named error, the engine goes on.
            e = raises(oslo.InvalidArgumentError, eng.add, [])
            check("empty" in e.message or "prompt" in e.message, e.message)
            e = raises(oslo.InvalidArgumentError, eng.add, [1, vocab + 5])
            check(str(vocab + 5) in e.message or "vocab" in e.message, e.message)
            e = raises(oslo.InvalidArgumentError, eng.add, p[0], max_new_tokens=500)
            check(e.message, "too long for the positions: named")
            raises(oslo.InvalidArgumentError, eng.add, p[0], do_sample=True, temperature=0.0)
            raises(oslo.InvalidArgumentError, eng.add, p[0], stop=[""])
            raises(oslo.InvalidArgumentError, eng.add, p[0], stop=[3])
            raises(oslo.InvalidArgumentError, eng.add, ["a", "b"])
            raises(oslo.InvalidArgumentError, eng.add, b"bytes")
            # ... and still serves.
            c = eng.add(p[1], max_new_tokens=6, eos_token_ids=eos).result()
            check(c.tokens == alone, f"after the errors: {c.tokens} != {alone}")
        check(eng.closed, "closed by with")
        raises(oslo.InvalidArgumentError, eng.add, p[0])
        raises(oslo.InvalidArgumentError, eng.stats)
        check(list(r) == [], "a finished request yields nothing more")
        # Bad engines.
        raises(oslo.InvalidArgumentError, oslo.Engine, m, block_size=0)
        raises(oslo.InvalidArgumentError, oslo.Engine, m, max_seqs=-3)
        raises(oslo.InvalidArgumentError, oslo.Engine, "model")
        raises(oslo.InvalidArgumentError, oslo.Engine, m, tokenizer="gpt2")
        # Without a tokenizer: token ids only; text prompts and stops refused.
        with oslo.Engine(m, tokenizer=False, num_blocks=256) as eng:
            e = raises(oslo.InvalidArgumentError, eng.add, "Hello")
            check("tokenizer" in e.message, e.message)
            e = raises(oslo.InvalidArgumentError, eng.add, p[1], stop=["x"])
            check("tokenizer" in e.message, e.message)
            c = eng.add(p[1], max_new_tokens=6, eos_token_ids=eos).result()
            check(c.tokens == alone and c.text == "", f"ids only: {c}")
        # Stepping by hand: events; reading through a request is refused.
        with oslo.Engine(m, tokenizer=False, num_blocks=256) as eng:
            a = eng.add(p[1], max_new_tokens=6, eos_token_ids=eos)
            b = eng.add(p[2], max_new_tokens=4, eos_token_ids=eos)
            toks = {a.id: [], b.id: []}
            done = {}
            for _ in range(200):
                for ev in eng.step():
                    toks[ev.request_id] += ev.tokens
                    if ev.finish_reason is not None:
                        done[ev.request_id] = ev.finish_reason
                        check(ev.error is None, "no error")
                if len(done) == 2:
                    break
            check(toks[a.id] == alone, f"hand-stepped: {toks[a.id]} != {alone}")
            check(len(toks[b.id]) == 4 and done[b.id] == oslo.FinishReason.LENGTH, repr(done))
            raises(oslo.InvalidArgumentError, lambda: next(eng.add(p[0], max_new_tokens=2)))
            eng.shutdown()
            eng.step()
            raises(oslo.InvalidArgumentError, eng.add, p[0])
    print("cancel mid-stream, bad requests and engines, hand stepping: as documented")


def engine_asyncio(fixture):
    """Many concurrent asyncio tasks, each `async for` over its request, on
    fewer reader threads than tasks: every request equals generate alone; a
    task cancelled mid-stream cancels its request."""
    ref, eos = _reference(fixture)
    p = ref["prompts"]
    prompts = [p[i % 3][: 2 + i % 5] + [40 + i] for i in range(24)]
    with oslo.Context(SOLO) as ctx, oslo.Model(ctx, fixture) as m:
        want = [m.generate(q, max_new_tokens=4 + i % 6, eos_token_id=eos,
                           do_sample=bool(i % 2), seed=i, top_k=30)
                for i, q in enumerate(prompts)]
        with oslo.Engine(m, max_seqs=16, reader_threads=4, block_size=8, num_blocks=512) as eng:

            async def one(i):
                out = []
                async for piece in eng.add(prompts[i], max_new_tokens=4 + i % 6,
                                           eos_token_ids=eos, do_sample=bool(i % 2), seed=i,
                                           top_k=30):
                    out += piece.tokens
                return out

            async def cancelled():
                r = eng.add(p[0], max_new_tokens=100)
                started = asyncio.Event()

                async def reader():
                    async for _ in r:
                        started.set()
                task = asyncio.ensure_future(reader())
                await started.wait()
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                return r

            async def all_of():
                return await asyncio.gather(*(one(i) for i in range(24)), cancelled())

            *got, r = asyncio.run(all_of())
            for i in range(24):
                check(got[i] == want[i], f"async request {i}: {got[i]} != {want[i]}")
            # The cancelled task cancelled its request: what is left ends CANCELLED.
            rest = r.result()
            check(rest.finish_reason == oslo.FinishReason.CANCELLED, repr(rest))
    print("24 asyncio tasks on 4 reader threads equal generate alone; a cancelled task "
          "cancels its request")


def engine_tp2(*args):
    """Two ranks: rank 0 adds and reads (its reads step the engine), rank 1
    runs engine.run(), which returns when rank 0 shuts the engine down.
    Every request equals generate alone at TP=2."""
    (fixture,), threads = _split(args)
    ref, eos = _reference(fixture)
    specs = _specs(ref)
    world = threads or int(os.environ.get("WORLD_SIZE", "1"))

    def body(cfg):
        with oslo.Context(cfg) as ctx, oslo.Model(ctx, fixture) as m:
            check(ctx.size(oslo.Group.TENSOR) == 2, "TP=2")
            want = [m.generate(q, eos_token_id=eos, **s) for q, s in specs]
            with oslo.Engine(m, num_blocks=256) as eng:  # small pools: 2 engines per process
                if ctx.rank() != 0:
                    eng.run()  # until rank 0 shuts the engine down
                    raises(oslo.InvalidArgumentError, eng.add, specs[0][0])
                    return
                reqs = [eng.add(q, eos_token_ids=eos, **s) for q, s in specs]
                got = [None] * len(reqs)

                def read(i):
                    got[i] = reqs[i].result()

                ts = [threading.Thread(target=read, args=(i,)) for i in range(len(reqs))]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                for i in range(len(reqs)):
                    check(got[i] is not None and got[i].tokens == want[i],
                          f"TP=2 request {i}: {got[i]} != {want[i]}")
                eng.shutdown()
            print(f"TP=2: {len(specs)} requests equal generate alone; rank 1's run() ended")

    run_ranks(body, world, threads > 0)


def engine_int8_kv(fixture):
    """The int8 KV cache from Python: generate(kv_cache_dtype="int8") and an
    Engine(kv_dtype="int8") give the same greedy tokens (the same int8
    bytes through two attention paths), close to the f32 cache's; the
    engine holds 3.2x the blocks in the same memory; other dtypes are
    refused with DTypeError."""
    ref, eos = _reference(fixture)
    p = ref["prompts"]
    with oslo.Context(SOLO) as ctx, oslo.Model(ctx, fixture) as m:
        want = [m.generate(q, max_new_tokens=10, kv_cache_dtype="int8") for q in p]
        f32 = [m.generate(q, max_new_tokens=10) for q in p]
        same = sum(a == b for a, b in zip(want, f32))
        print(f"int8 cache: {same} of {len(p)} greedy continuations equal the f32 cache's")
        mib = 1 << 20
        with oslo.Engine(m, kv_memory_bytes=mib) as e32:
            n32 = e32.stats().blocks_total
        with oslo.Engine(m, kv_dtype="int8", kv_memory_bytes=mib) as eng:
            n8 = eng.stats().blocks_total
            check(3.1 * n32 <= n8 <= 3.3 * n32, f"blocks: f32 {n32}, int8 {n8}")
            reqs = [eng.add(q, max_new_tokens=10) for q in p]
            for i, r in enumerate(reqs):
                got = r.result().tokens
                check(got == want[i], f"request {i}: engine {got} != generate {want[i]}")
        raises(oslo.DTypeError, m.generate, p[0], max_new_tokens=2, kv_cache_dtype="bf16")
        raises(oslo.DTypeError, oslo.Engine, m, kv_dtype="q8_0")
    print(f"int8 KV cache: {len(p)} requests equal generate's; {n8} int8 blocks vs {n32} f32")


if __name__ == "__main__":
    main({"engine_stream_gpt2": engine_stream_gpt2,
          "engine_int8_kv": engine_int8_kv,
          "engine_cancel_and_errors": engine_cancel_and_errors,
          "engine_asyncio": engine_asyncio,
          "engine_tp2": engine_tp2})
