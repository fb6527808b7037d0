"""Single-rank tests of the oslo package; case names as tests/abi/test_api.c."""
import gc
import json
import os
import pathlib
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises  # noqa: E402

import numpy as np  # noqa: E402

import oslo  # noqa: E402


def version():
    check(oslo.version() == oslo.__version__, "version")
    check(len(oslo.version().split(".")) == 3, oslo.version())


def status_strings():
    for st in oslo.Status:
        if st == oslo.Status.OK:
            continue
        e = oslo._errors.make(int(st), "m")
        check(isinstance(e, oslo.Error) and e.status == st and e.message == "m", repr(e))
        check(str(e) == f"{st.name}: m", str(e))
    # oslo.Status mirrors oslo_status exactly (the SWIG module's constants).
    from oslo import capi
    c = {n[len("OSLO_ERR_"):]: getattr(capi, n) for n in dir(capi) if n.startswith("OSLO_ERR_")}
    c["OK"] = capi.OSLO_OK
    check(c == {s.name: int(s) for s in oslo.Status}, f"{c}")
    check(capi.status_string(int(oslo.Status.TIMEOUT)).startswith("OSLO_ERR_TIMEOUT"), "string")
    e = oslo._errors.make(99, "future")
    check(type(e) is oslo.Error and e.status == 99, repr(e))
    # Built-in bases, so `except TimeoutError` / `except OSError` /
    # `except ValueError` catch what they mean.
    import builtins
    import pickle
    t = oslo._errors.make(int(oslo.Status.TIMEOUT), "rank 1 never came")
    check(isinstance(t, builtins.TimeoutError) and isinstance(t, OSError), repr(t))
    check(t.message == "rank 1 never came" and str(t) == "TIMEOUT: rank 1 never came", str(t))
    i = oslo._errors.make(int(oslo.Status.IO), "cannot read x")
    check(isinstance(i, OSError) and not isinstance(i, builtins.TimeoutError), repr(i))
    back = pickle.loads(pickle.dumps(t))
    check(type(back) is oslo.TimeoutError and back.message == t.message, repr(back))
    check(isinstance(oslo._errors.make(int(oslo.Status.CONFIG), "k"), ValueError), "ValueError")


def context_defaults():
    with oslo.Context() as ctx:
        for g in oslo.Group:
            check(ctx.rank(g) == 0 and ctx.size(g) == 1, f"group {g.name}")
        check(ctx.backend == "cpu", ctx.backend)
        check(ctx.transport(oslo.Group.TENSOR) == "self", ctx.transport(oslo.Group.TENSOR))
    check(ctx.closed, "closed after with")
    ctx.close()  # idempotent
    e = raises(oslo.InvalidArgumentError, ctx.rank)
    check("closed" in e.message, e.message)


def context_from_config():
    """A context from a config given as a dict, JSON text, keywords or in
    OSLO's model_parallelism form."""
    cfg = {"tensor_parallel_size": 1, "timeout_seconds": 30, "num_threads": 1}
    with oslo.Context(cfg) as a:  # dict
        check(a.size(oslo.Group.TENSOR) == 1 and a.rank() == 0, "dict")
        check(a.backend == "cpu", a.backend)
    with oslo.Context(json.dumps(cfg)) as b:  # JSON text
        check(b.size() == 1, "text")
    with oslo.Context(tensor_parallel_size=1) as c:  # keywords
        check(c.size() == 1, "keywords")
    with oslo.Context({"model_parallelism": {"tensor_parallel_size": 1}}) as d:
        check(d.size(oslo.Group.TENSOR) == 1, "OSLO form")


def context_from_json_file():
    """The same config from a JSON file: a str path or an os.PathLike."""
    cfg = {"model_parallelism": {"tensor_parallel_size": 1}, "timeout_seconds": 30,
           "num_threads": 1}
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "oslo.json"
        path.write_text(json.dumps(cfg))
        with oslo.Context(str(path)) as e:  # path
            check(e.size(oslo.Group.TENSOR) == 1 and e.rank() == 0, "path")
        with oslo.Context(path) as f:  # os.PathLike
            check(f.size() == 1, "PathLike")


def context_bad_config():
    e = raises(oslo.ConfigError, oslo.Context, {"tensor_paralel_size": 2})
    check(e.status == oslo.Status.CONFIG, repr(e.status))
    check("tensor_paralel_size" in e.message, e.message)
    check(isinstance(e, ValueError), "ConfigError is a ValueError")
    e = raises(oslo.ConfigError, oslo.Context, {"tensor_parallel_size": 0})
    check("tensor_parallel_size" in e.message, e.message)
    e = raises(oslo.ConfigError, oslo.Context, {"tensor_parallel_size": 2})  # world is 1
    e = raises(oslo.FormatError, oslo.Context, "{\"tensor_parallel_size\": ")
    check(e.status == oslo.Status.FORMAT, repr(e.status))
    e = raises(oslo.Error, oslo.Context, "/nonexistent/oslo-config.json")
    check(e.status in (oslo.Status.IO, oslo.Status.FORMAT), repr(e))
    raises(oslo.InvalidArgumentError, oslo.Context, 42)
    # The message is read in the failing call: a later success changes nothing.
    e = raises(oslo.ConfigError, oslo.Context, {"backend": "no such backend!"})
    with oslo.Context():
        pass
    check("backend" in e.message, e.message)


def context_abort():
    with oslo.Context() as ctx:
        ctx.abort()
        x = np.ones(4, dtype=np.float32)
        raises(oslo.CommError, ctx.all_reduce, x)


def tensor_create_and_query():
    with oslo.Context() as ctx:
        # The element dtypes (the block-quantized ones are models' dtypes, not
        # tensors': tensor_quantized_refused checks that).
        for dt in (oslo.DType.F32, oslo.DType.F16, oslo.DType.BF16, oslo.DType.I32,
                   oslo.DType.I64):
            t = ctx.tensor([2, 3, 4], dt)
            check(t.shape == (2, 3, 4) and t.dtype == dt and t.numel == 24 and t.ndim == 3,
                  repr(t))
            check(t.nbytes == 24 * {oslo.DType.F32: 4, oslo.DType.F16: 2, oslo.DType.BF16: 2,
                                    oslo.DType.I32: 4, oslo.DType.I64: 8}[dt], "nbytes")
            check(not t.numpy().any(), "zero-filled")
            t.close()
        for dt in (oslo.DType.Q8_0, oslo.DType.Q4_0, oslo.DType.Q4_K, oslo.DType.Q6_K,
                   oslo.DType.I8):
            raises(oslo.DTypeError, ctx.tensor, [2, 32], dt)
        s = ctx.tensor([])
        check(s.shape == () and s.numel == 1, "0-d")
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        t = oslo.Tensor.from_numpy(ctx, a)
        check(np.array_equal(t.numpy(), a), "round trip")
        h = oslo.Tensor.from_numpy(ctx, a, dtype="f16")
        check(h.dtype == oslo.DType.F16 and np.array_equal(h.numpy(), a.astype(np.float16)), "f16")
        out = np.empty((3, 4), dtype=np.float32)
        check(t.copy_to(out) is out and np.array_equal(out, a), "copy_to")
        t.copy_from(a[:, ::-1])  # non-contiguous: copied contiguous first
        check(np.array_equal(t.numpy(), a[:, ::-1]), "copy_from strided")
        check(np.array_equal(np.asarray(t), a[:, ::-1]), "__array__")


def tensor_bad_args():
    with oslo.Context() as ctx:
        e = raises(oslo.InvalidArgumentError, ctx.tensor, [2, -1])
        check(e.status == oslo.Status.INVALID_ARGUMENT, repr(e))
        raises(ValueError, ctx.tensor, [1] * 9)
        raises(oslo.DTypeError, ctx.tensor, [2], np.float64)
        t = ctx.tensor([2, 2])
        e = raises(oslo.ShapeError, t.copy_from, np.zeros(3, dtype=np.float32))
        check("16" in e.message and "12" in e.message, e.message)
        raises(oslo.ShapeError, t.copy_to, np.zeros(5, dtype=np.float32))
        raises(BufferError, t.copy_to, b"read-only bytes of 16 bytes!!!!!")
        raises(oslo.DTypeError, oslo.Tensor.wrap, ctx, np.zeros(2))
        raises(oslo.InvalidArgumentError, oslo.Tensor.wrap, ctx, np.zeros((4, 4), np.float32)[:, ::2])


def tensor_wrap_no_copy():
    with oslo.Context() as ctx:
        a = np.zeros((2, 3), dtype=np.float32)
        t = oslo.Tensor.wrap(ctx, a)
        t.copy_from(np.ones((2, 3), dtype=np.float32))
        check((a == 1).all(), "wrapped memory written in place")
        a[0, 0] = 7
        check(t.numpy()[0, 0] == 7, "wrapped memory read in place")
        # The tensor keeps the array alive.
        del a
        gc.collect()
        check(t.numpy()[0, 0] == 7, "array kept alive")
        # Collectives on numpy arrays work in place.
        b = np.arange(4, dtype=np.int64)
        check(ctx.all_reduce(b) is b and np.array_equal(b, np.arange(4)), "in place")


def dlpack():
    with oslo.Context() as ctx:
        t = oslo.Tensor.from_numpy(ctx, np.arange(6, dtype=np.float32).reshape(2, 3))
        check(t.__dlpack_device__() == (1, 0), "kDLCPU")
        a = np.from_dlpack(t)  # numpy 2 asks for a versioned capsule
        check(np.array_equal(a, np.arange(6).reshape(2, 3)), "export")
        t.copy_from(np.full((2, 3), 5, dtype=np.float32))
        check((a == 5).all(), "export shares memory")
        t.close()
    check((a == 5).all(), "an export outlives its tensor and context")
    cap = None
    with oslo.Context() as ctx:
        t = ctx.tensor([3], oslo.DType.I32)
        cap = t.__dlpack__()  # unversioned
        del cap  # never consumed: the capsule's destructor calls the deleter
        b = np.arange(5, dtype=np.int64)
        u = oslo.from_dlpack(ctx, b)
        check(u.shape == (5,) and u.dtype == oslo.DType.I64, repr(u))
        u.copy_from(np.arange(5, dtype=np.int64) * 2)
        check(np.array_equal(b, np.arange(5) * 2), "import shares memory")
        raises(oslo.DTypeError, oslo.from_dlpack, ctx, np.zeros(2))
        ro = np.zeros(2, dtype=np.float32)
        ro.flags.writeable = False
        raises(Exception, oslo.from_dlpack, ctx, ro)  # read-only: refused by oslo or numpy


def collectives_single():
    with oslo.Context() as ctx:
        x = np.arange(8, dtype=np.float32)
        for op in oslo.ReduceOp:
            y = x.copy()
            ctx.all_reduce(y, op, oslo.Group.TENSOR)
            check(np.array_equal(y, x), op.name)
        g = ctx.all_gather(x)
        check(np.array_equal(g, x), "all_gather")
        r = ctx.reduce_scatter(x)
        check(np.array_equal(r, x), "reduce_scatter")
        t = oslo.Tensor.from_numpy(ctx, x)
        ctx.broadcast(t, root=0)
        check(np.array_equal(t.numpy(), x), "broadcast")
        ctx.barrier()
        raises(oslo.InvalidArgumentError, ctx.broadcast, t, 1)  # root out of range
        raises(oslo.InvalidArgumentError, ctx.send, t, 0)  # to itself


def handles_lifetime():
    """Children keep their context; close() of a context closes its
    children first; collected cycles destroy children before contexts."""
    ctx = oslo.Context()
    t = ctx.tensor([4])
    del ctx
    gc.collect()
    check(t.context.rank() == 0, "the tensor keeps its context alive")
    c2 = t.context
    t2 = c2.tensor([2])
    c2.close()
    check(t.closed and t2.closed and c2.closed, "close() closes children first")
    raises(oslo.InvalidArgumentError, t.numpy)
    for _ in range(3):  # reference cycles, collected in any order
        c = oslo.Context()
        ts = [c.tensor([8]) for _ in range(4)]
        c.cycle = ts
        for x in ts:
            x.cycle = c
        del c, ts, x
        gc.collect()


def gil_released():
    """A blocking call in one thread lets another run Python meanwhile."""
    store = os.path.join(tempfile.mkdtemp(prefix="oslo-py-"), "store")
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.01)

    th = threading.Thread(target=ticker)
    th.start()
    # Rank 0 of 2 waits in the rendezvous for a rank that never comes.
    e = raises(oslo.Error, oslo.Context, {"rank": 0, "world_size": 2,
                                          "init_method": "file://" + store,
                                          "timeout_seconds": 1})
    done.set()
    th.join()
    check(e.status in (oslo.Status.TIMEOUT, oslo.Status.COMM), repr(e))
    check(len(ticks) >= 20, f"only {len(ticks)} ticks while oslo blocked for 1 s")


def tokenizer_capi(fixture):
    tok = oslo.Tokenizer(fixture)
    text = "The quick brown fox jumps over the lazy dog"
    ids = tok.encode(text)
    check(ids[:3] == [52, 441, 221], ids)  # tests/models/fixtures/gpt2-tiny/reference.json
    check(tok.decode(ids) == text, tok.decode(ids))
    check(tok.encode("") == [], "empty")
    check(len(tok) == tok.vocab_size and tok.vocab_size > 0, "vocab size")
    check(tok.token_to_id(tok.id_to_token(ids[1])) == ids[1], "token <-> id")
    check(tok.token_to_id("no such token, surely") is None, "unknown token")
    e = raises(oslo.InvalidArgumentError, tok.encode, b"\xff\xfe")
    check("offset" in e.message or "UTF-8" in e.message, e.message)
    raises(oslo.IOError, oslo.Tokenizer, "/nonexistent/tokenizer")
    tok.close()
    tok.close()


def linear_bad_args():
    with oslo.Context() as ctx:
        e = raises(oslo.InvalidArgumentError, oslo.ParallelLinear, ctx, 0, 4)
        check("in_features" in e.message or "size" in e.message, e.message)
        raises(oslo.DTypeError, oslo.ParallelLinear, ctx, 4, 4, dtype=oslo.DType.I32)
        fc = oslo.ParallelLinear(ctx, 4, 6, "column", bias=False)
        check(fc.bias is None and fc.weight.shape == (6, 4), "params")
        raises(oslo.ShapeError, fc.load_full, np.zeros((4, 4), np.float32))
        raises(oslo.InvalidArgumentError, fc.load_full, np.zeros((6, 4), np.float32),
               np.zeros(6, np.float32))  # a bias for a layer without one
        raises(oslo.ShapeError, fc.forward, np.zeros((2, 5), np.float32),
               np.zeros((2, 6), np.float32))
        # numpy arrays go to C in one call (oslo.i bind_array): the same errors.
        e = raises(oslo.ShapeError, fc.forward, np.zeros((2, 5), np.float32),
                   np.zeros((2, 6), np.float32))
        check("5" in e.message or "shape" in e.message.lower(), e.message)
        e = raises(oslo.DTypeError, fc.forward, np.zeros((2, 4), np.float64),
                   np.zeros((2, 6), np.float32))
        check("format 'd'" in e.message, e.message)
        e = raises(oslo.InvalidArgumentError, fc.forward, np.zeros((4, 2), np.float32).T,
                   np.zeros((2, 6), np.float32))
        check("C-contiguous" in e.message, e.message)
        ro = np.zeros((2, 6), np.float32)
        ro.flags.writeable = False
        e = raises(oslo.InvalidArgumentError, fc.forward, np.zeros((2, 4), np.float32), ro)
        check("writable" in e.message, e.message)
        y = fc.forward(np.ones((2, 4), np.float32), np.full((2, 6), 7, np.float32))
        check(not y.any(), "weights start at zero: the output is overwritten with 0")
        gx = fc.backward(np.ones((2, 4), np.float32), np.ones((2, 6), np.float32),
                         np.full((2, 4), 7, np.float32))
        check(not gx.any(), "grad_input of zero weights")
        check(fc.backward(np.ones((2, 4), np.float32), np.ones((2, 6), np.float32)) is None,
              "no grad_input")
        check(np.array_equal(fc.grad_weight.numpy(), np.full((6, 4), 4, np.float32)),
              f"grad_weight {fc.grad_weight.numpy()}")
        w = fc.weight
        del fc
        import gc
        gc.collect()
        check(w.numpy().shape == (6, 4), "a borrowed tensor keeps its layer alive")


def embedding_bad_args():
    with oslo.Context() as ctx:
        emb = oslo.ParallelEmbedding(ctx, 10, 4)
        check(emb.vocab_range == (0, 10) and emb.local_rows == 10, emb.vocab_range)
        table = np.arange(40, dtype=np.float32).reshape(10, 4)
        emb.load_full(table)
        out = emb.forward(np.array([[1, 9]], np.int64), np.empty((1, 2, 4), np.float32))
        check(np.array_equal(out[0], table[[1, 9]]), "lookup")
        e = raises(oslo.InvalidArgumentError, emb.forward, np.array([10], np.int64),
                   np.empty((1, 4), np.float32))
        check("10" in e.message, e.message)
        raises(oslo.DTypeError, emb.forward, np.array([1.0], np.float32),
               np.empty((1, 4), np.float32))


def cross_entropy_bad_args():
    with oslo.Context() as ctx:
        logits = np.log(np.array([[0.25, 0.25, 0.5]], np.float32))
        loss = ctx.vocab_parallel_cross_entropy(logits, np.array([2], np.int64), 3)
        check(abs(loss - np.log(2)) < 1e-5, loss)
        raises(oslo.InvalidArgumentError, ctx.vocab_parallel_cross_entropy, logits,
               np.array([3], np.int64), 3)
        raises(oslo.InvalidArgumentError, ctx.vocab_parallel_cross_entropy, logits,
               np.array([0], np.int64), 0)


def train_options(fixture):
    """oslo.Optimizer's keyword defaults are the C ABI's
    (oslo_optimizer_options_init, and oslo_train_options_init for the
    training settings, which OptimizerOptions no longer has); kinds and schedules by name; bad options
    refused with InvalidArgumentError naming them; one train step without an
    optimizer, then a step; activation checkpointing; the data-parallel
    options (zero_stage 1 and 2 with a small bucket_bytes train on a TP=1
    context, with the losses of stage 0, and so does stage 3, after which
    the model refuses inference by name; stage 7 and bucket_bytes 2
    InvalidArgumentError, each named); closing
    the model closes its optimizer first."""
    import inspect
    d = {k: p.default for k, p in inspect.signature(oslo.Optimizer).parameters.items()
         if p.default is not inspect.Parameter.empty}
    c = oslo.capi.OptimizerOptions()
    t = oslo.capi.TrainOptions()
    train_keys = ("grad_accum_steps", "zero_stage", "bucket_bytes", "micro_batches",
                  "pipeline_head_split")
    # The training settings are oslo_train_options' (0.3), no longer the
    # optimizer options'.
    for k in train_keys:
        check(not hasattr(c, k) and hasattr(t, k), f"{k} is a TrainOptions field")
    for k, v in d.items():
        if k == "betas":
            got = (c.beta1, c.beta2)
        elif k == "kind":
            got, v = oslo.OptimizerKind(c.kind), oslo.OptimizerKind[v.upper()]
        elif k == "schedule":
            got, v = oslo.LRSchedule(c.schedule), oslo.LRSchedule[v.upper()]
        elif k == "loss_scaling":
            got, v = c.loss_scaling, -1
        else:
            got = getattr(t if k in train_keys else c, k)
        check(got == v, f"default {k}: Python {v!r}, C {got!r}")
    check(len(d) == 23, sorted(d))
    check(d["zero_stage"] == 0 and d["bucket_bytes"] == 25 << 20 and d["micro_batches"] == 1 and
          d["pipeline_head_split"] == 0.0, d)
    with oslo.Context() as ctx, oslo.Model(ctx, fixture) as m:
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, schedule="cosin")
        check("'cosine'" in e.message, e.message)
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, lr=-1.0)
        check("lr" in e.message, e.message)
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, schedule=oslo.LRSchedule.LINEAR)
        check("total_steps" in e.message, e.message)
        raises(oslo.InvalidArgumentError, oslo.Optimizer, ctx)
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, zero_stage=7)
        check("zero_stage" in e.message, e.message)
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, bucket_bytes=2)
        check("bucket_bytes" in e.message, e.message)
        e = raises(oslo.InvalidArgumentError, oslo.Optimizer, m, pipeline_head_split=2.0)
        check("pipeline_head_split" in e.message, e.message)
        e = raises(oslo.NotSupportedError, oslo.Optimizer, m, pipeline_head_split=-1)
        check("pipeline stages" in e.message, e.message)
        ids = np.array([[5, 9, 14, 3]], np.int64)
        losses = {}
        for stage in (0, 1, 2, 3):  # a fresh model each: at DP=1 the stages agree
            with oslo.Model(ctx, fixture) as mz, oslo.Optimizer(
                    mz, kind="sgd", lr=0.1, zero_stage=stage, bucket_bytes=4096) as z:
                rs = [mz.train_step(ids, optimizer=z) for _ in range(3)]
                if stage == 3:  # the parameters live in the optimizer's partitions
                    e = raises(oslo.NotSupportedError, mz.forward, ids)
                    check("ZeRO-3" in e.message, e.message)
            losses[stage] = [r.loss for r in rs]
            check(all(r.stepped for r in rs) and rs[-1].step == 3, f"ZeRO-{stage}: {rs!r}")
            check(losses[stage][2] < losses[stage][1] < losses[stage][0],
                  f"ZeRO-{stage}: SGD lowers the loss: {losses[stage]}")
            check(np.allclose(losses[stage], losses[0], rtol=1e-6, atol=0),
                  f"ZeRO-{stage} {losses[stage]} vs ZeRO-0 {losses[0]}")
        m.set_activation_checkpointing(True)
        r = m.train_step(ids)
        check(r.loss > 0 and not r.stepped and r.step == 0, repr(r))
        m.set_activation_checkpointing(False)
        check(m.train_step(ids[0]).loss == r.loss, "checkpointing: the same loss")
        raises(oslo.ShapeError, m.train_step, ids, labels=ids[:, :3])
        opt = oslo.Optimizer(m, kind="sgd", lr=0.1, momentum=0.9, max_grad_norm=1.0)
        s = opt.step()
        check(s.stepped and s.step == 1 and abs(s.lr - 0.1) < 1e-12 and s.grad_norm > 0, repr(s))
        check(m.train_step(ids, labels=ids, optimizer=opt).loss < r.loss, "SGD lowered the loss")
        opt.zero_grad()
        check(opt.model is m, "the optimizer's model")
        m.close()
        check(opt.closed, "closing the model closes its optimizer")
        raises(oslo.InvalidArgumentError, opt.step)


def encoder_backward(fixture):
    """Model.backward (oslo_model_backward) trains an encoder from a loss on
    its hidden states: with grad_hidden = h (the gradient of sum(h^2)/2) one
    SGD step lowers sum(h^2); wrong shapes are refused by name."""
    with oslo.Context() as ctx, oslo.Model(ctx, fixture) as m:
        ids = np.array([[2, 40, 41], [7, 99, 3]], np.int64)
        types = np.array([[0, 0, 1], [0, 1, 1]], np.int64)
        h = m.forward(ids, token_type_ids=types, output="hidden")
        opt = oslo.Optimizer(m, kind="sgd", lr=0.05)
        e = raises(oslo.ShapeError, m.backward, ids, h[:, :2], token_type_ids=types)
        check("grad_hidden" in e.message, e.message)
        raises(oslo.NotSupportedError, m.train_step, ids, optimizer=opt)
        r = m.backward(ids, h, token_type_ids=types, optimizer=opt)
        check(r.stepped and r.step == 1 and r.loss == 0, repr(r))
        h2 = m.forward(ids, token_type_ids=types, output="hidden")
        check(float((h2 ** 2).sum()) < float((h ** 2).sum()), "the step lowered sum(h^2)")


def train_checkpoint(fixture):
    """Optimizer.save_checkpoint / load_checkpoint (oslo_checkpoint_save /
    _load): a fresh model loaded from the checkpoint folder with a fresh
    optimizer continues bitwise and gets the train state back; a plain model
    folder is not a training checkpoint."""
    import tempfile
    ids = np.array([[5, 17, 42, 9], [3, 77, 12, 8]], np.int64)
    with tempfile.TemporaryDirectory() as d, oslo.Context() as ctx:
        with oslo.Model(ctx, fixture) as a:
            oa = oslo.Optimizer(a, lr=2e-3, weight_decay=0.01, max_grad_norm=1.0)
            a.train_step(ids, optimizer=oa)
            oa.save_checkpoint(d, seed=2**63 + 5, epoch=1, data_position=42)
            want = [a.train_step(ids, optimizer=oa).loss for _ in range(3)]
        with oslo.Model(ctx, d) as b:
            ob = oslo.Optimizer(b, lr=2e-3, weight_decay=0.01, max_grad_norm=1.0)
            e = raises(oslo.FormatError, ob.load_checkpoint, fixture)
            check("not a training checkpoint" in e.message, e.message)
            st = ob.load_checkpoint(d)
            check(st == {"seed": 2**63 + 5, "epoch": 1, "data_position": 42}, repr(st))
            got = [b.train_step(ids, optimizer=ob).loss for _ in range(3)]
            check(got == want, f"resumed losses {got} != {want}")


if __name__ == "__main__":
    main({f.__name__: f for f in (version, status_strings, context_defaults, context_from_config,
                                  context_from_json_file, context_bad_config, context_abort, tensor_create_and_query,
                                  tensor_bad_args, tensor_wrap_no_copy, dlpack,
                                  collectives_single, handles_lifetime, gil_released,
                                  tokenizer_capi, linear_bad_args, embedding_bad_args,
                                  cross_entropy_bad_args, train_options, encoder_backward,
                                  train_checkpoint)})
