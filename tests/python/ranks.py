"""Collectives over 2 ranks from Python: processes under oslo-run, or
threads of one process (file:// rendezvous; works because every blocking
call releases the GIL).

  oslo-run --nproc-per-node 2 python ranks.py collectives
  python ranks.py collectives --threads 2
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises, run_ranks  # noqa: E402

import numpy as np  # noqa: E402

import oslo  # noqa: E402


def _threads(args):
    return int(args[args.index("--threads") + 1]) if "--threads" in args else 0


def collectives(*args):
    world = _threads(args) or int(os.environ.get("WORLD_SIZE", "1"))

    def body(cfg):
        with oslo.Context(cfg) as ctx:
            r, n = ctx.rank(), ctx.size()
            check(n == world and ctx.size(oslo.Group.TENSOR) == world, "sizes")
            check(ctx.transport(oslo.Group.TENSOR) in ("shm", "gloo"),
                  ctx.transport(oslo.Group.TENSOR))
            # all-reduce, every op, on numpy arrays in place and on tensors.
            x = np.arange(6, dtype=np.float32) + r
            s = ctx.all_reduce(x.copy())
            want = sum(np.arange(6, dtype=np.float32) + k for k in range(n))
            check(np.array_equal(s, want), f"sum {s}")
            check(np.array_equal(ctx.all_reduce(x.copy(), oslo.ReduceOp.MAX),
                                 np.arange(6, dtype=np.float32) + n - 1), "max")
            check(np.array_equal(ctx.all_reduce(x.copy(), oslo.ReduceOp.MIN),
                                 np.arange(6, dtype=np.float32)), "min")
            i = np.array([-7 + r, 3], dtype=np.int64)
            check(ctx.all_reduce(i, oslo.ReduceOp.AVG, oslo.Group.TENSOR)[1] == 3, "avg")
            t = oslo.Tensor.from_numpy(ctx, np.full((2, 2), r + 1, dtype=np.float32))
            ctx.all_reduce(t)
            check((t.numpy() == n * (n + 1) / 2).all(), "tensor all-reduce")
            # all-gather along dimension 0 in rank order.
            g = ctx.all_gather(np.full((2, 3), r, dtype=np.int32))
            check(g.shape == (2 * n, 3), g.shape)
            check(all((g[2 * k:2 * k + 2] == k).all() for k in range(n)), "gather order")
            out = ctx.tensor([n, 2], oslo.DType.F16)
            ctx.all_gather(oslo.Tensor.from_numpy(ctx, np.full((1, 2), r, np.float16)), out)
            check(np.array_equal(out.numpy()[:, 0], np.arange(n, dtype=np.float16)), "f16 gather")
            # reduce-scatter, broadcast, send/recv, barrier.
            rs = ctx.reduce_scatter(np.ones((2 * n, 2), dtype=np.float32))
            check(rs.shape == (2, 2) and (rs == n).all(), "reduce_scatter")
            b = np.full(3, r * 10, dtype=np.int64)
            check((ctx.broadcast(b, root=n - 1) == (n - 1) * 10).all(), "broadcast")
            if n > 1:
                if r == 0:
                    ctx.send(np.arange(4, dtype=np.float32), 1)
                elif r == 1:
                    got = ctx.recv(np.empty(4, dtype=np.float32), 0)
                    check(np.array_equal(got, np.arange(4)), "recv")
            ctx.barrier()
            # Errors are the same on every rank and name the problem.
            e = raises(oslo.ShapeError, ctx.all_gather, np.zeros(2, np.float32),
                       np.zeros(2 * n + 1, np.float32))
            check(e.status == oslo.Status.SHAPE, repr(e))
            ctx.barrier()

    run_ranks(body, world, _threads(args) > 0)


def abort(*args):
    """Context.abort from another thread ends a collective that waits for a
    rank that never calls it, long before the timeout."""
    world = _threads(args) or int(os.environ.get("WORLD_SIZE", "1"))
    check(world == 2, "abort runs on 2 ranks")

    def body(cfg):
        cfg = dict(cfg, timeout_seconds=60)
        ctx = oslo.Context(cfg)
        r = ctx.rank()
        ctx.barrier()
        if r == 0:
            watchdog = threading.Timer(0.5, ctx.abort)
            watchdog.start()
            t0 = time.monotonic()
            e = raises(oslo.CommError, ctx.all_reduce, np.ones(4, np.float32))
            elapsed = time.monotonic() - t0
            watchdog.join()
            check(elapsed < 30, f"abort took {elapsed:.1f} s")
            check(e.status == oslo.Status.COMM, repr(e))
            print(f"rank 0: aborted after {elapsed:.2f} s: {e}")
        else:
            # Rank 1 never joins the all-reduce; its peer's abort reaches it
            # through shared memory: its own next collective fails too.
            time.sleep(3)
            raises(oslo.Error, ctx.barrier)
        ctx.close()

    run_ranks(body, world, _threads(args) > 0)


def _mlp_data():
    """The MLP of mlp_tp2_forward_backward_w2 and clip_grad_norm_w2: column
    (8 -> 16) then row (16 -> 8) with biases, 3 rows; the reference is the
    unsharded computation in float64."""
    rng = np.random.default_rng(5)
    d, h, rows = 8, 16, 3
    f = {k: rng.uniform(-1, 1, shape).astype(np.float32) for k, shape in
         (("w1", (h, d)), ("b1", (h,)), ("w2", (d, h)), ("b2", (d,)), ("x", (rows, d)),
          ("gy", (rows, d)))}
    w1, b1, w2, b2, x, gy = (f[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2", "x", "gy"))
    mid = x @ w1.T + b1
    ref = {"mid": mid, "y": mid @ w2.T + b2, "gmid": gy @ w2}
    ref.update(gx=ref["gmid"] @ w1, gw1=ref["gmid"].T @ x, gb1=ref["gmid"].sum(0),
               gw2=gy.T @ mid, gb2=gy.sum(0))
    return d, h, rows, f, ref


def _mlp_forward_backward(ctx, d, h, rows, f, ref):
    """Forward and backward on this rank, every result checked against the
    float64 reference (this rank's shard where the result is sharded)."""
    r, n = ctx.rank(oslo.Group.TENSOR), ctx.size(oslo.Group.TENSOR)
    cols = slice(r * h // n, (r + 1) * h // n)
    fc1 = oslo.ColumnParallelLinear(ctx, d, h)  # Megatron's names
    fc2 = oslo.RowParallelLinear(ctx, h, d)
    check(isinstance(fc1, oslo.ParallelLinear) and oslo.VocabParallelEmbedding is
          oslo.ParallelEmbedding, "aliases")
    fc1.load_full(f["w1"], f["b1"])
    fc2.load_full(f["w2"], f["b2"])

    def close(a, b, what):
        err = float(np.max(np.abs(a - b) / np.maximum(1, np.abs(b))))
        check(err < 1e-4, f"{what}: max error {err}")

    mid = fc1.forward(f["x"], np.empty((rows, h // n), np.float32))
    close(mid, ref["mid"][:, cols], "column output")
    y = fc2.forward(mid, np.empty((rows, d), np.float32))
    close(y, ref["y"], "MLP output")
    gmid = fc2.backward(mid, f["gy"], np.empty_like(mid))
    close(gmid, ref["gmid"][:, cols], "grad of the column output")
    gx = fc1.backward(f["x"], gmid, np.empty_like(f["x"]))
    close(gx, ref["gx"], "input gradient")
    close(fc1.grad_weight.numpy(), ref["gw1"][cols], "column weight gradient")
    close(fc1.grad_bias.numpy(), ref["gb1"][cols], "column bias gradient")
    close(fc2.grad_weight.numpy(), ref["gw2"][:, cols], "row weight gradient")
    close(fc2.grad_bias.numpy(), ref["gb2"], "row bias gradient")
    return fc1, fc2


def mlp_tp2_forward_backward_w2(*args):
    """A column -> row MLP at TP=2: output, input gradient and parameter
    gradients equal the unsharded float64 computation."""
    world = _threads(args) or int(os.environ.get("WORLD_SIZE", "1"))
    check(world == 2, "runs on 2 ranks")
    data = _mlp_data()

    def body(cfg):
        with oslo.Context(cfg) as ctx:
            _mlp_forward_backward(ctx, *data)

    run_ranks(body, world, _threads(args) > 0)


def clip_grad_norm_w2(*args):
    """The global gradient norm over the shards equals the unsharded one;
    clipping scales every gradient by max_norm / (norm + 1e-6)."""
    world = _threads(args) or int(os.environ.get("WORLD_SIZE", "1"))
    check(world == 2, "runs on 2 ranks")
    data = _mlp_data()
    ref = data[4]
    want = float(np.sqrt(sum((ref[k] ** 2).sum() for k in ("gw1", "gb1", "gw2", "gb2"))))

    def body(cfg):
        with oslo.Context(cfg) as ctx:
            fc1, fc2 = _mlp_forward_backward(ctx, *data)
            with oslo.ParamSet(ctx) as ps:
                ps.add_linear("fc1", fc1)
                ps.add_linear("fc2", fc2)
                before = fc1.grad_weight.numpy()
                norm = ps.clip_grad_norm(10 * want)
                check(abs(norm - want) < 1e-4 * want, f"global norm {norm} vs unsharded {want}")
                check(np.array_equal(fc1.grad_weight.numpy(), before), "no clipping below max_norm")
                norm = ps.clip_grad_norm(want / 4)
                check(abs(norm - want) < 1e-4 * want, "the norm before clipping is returned")
                coef = (want / 4) / (want + 1e-6)
                check(np.abs(fc1.grad_weight.numpy() - before * coef).max() < 1e-5, "clipped")
                norm = ps.clip_grad_norm(1e9)
                check(abs(norm - want / 4) < 1e-4 * want, "the norm after clipping is max_norm")

    run_ranks(body, world, _threads(args) > 0)


def layers(*args):
    """A tensor-parallel MLP (column then row) forward and backward equal to
    the unsharded numpy computation; its parameter set saved at TP=world and
    loaded at TP=1 with the same values (with a closed-set and borrowed-
    tensor check on the way)."""
    world = _threads(args) or int(os.environ.get("WORLD_SIZE", "1"))
    rng = np.random.default_rng(3)
    d, h, rows = 8, 16, 3
    w1, b1 = rng.standard_normal((h, d)).astype(np.float32), rng.standard_normal(h).astype(np.float32)
    w2, b2 = rng.standard_normal((d, h)).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    want = (x @ w1.T + b1) @ w2.T + b2
    ckpt = os.path.join(args[args.index("--dir") + 1] if "--dir" in args else
                        __import__("tempfile").mkdtemp(prefix="oslo-py-layers-"), "ckpt")

    def body(cfg):
        with oslo.Context(cfg) as ctx:
            r, n = ctx.rank(oslo.Group.TENSOR), ctx.size(oslo.Group.TENSOR)
            fc1 = oslo.ParallelLinear(ctx, d, h, "column")
            fc2 = oslo.ParallelLinear(ctx, h, d, "row")
            fc1.load_full(w1, b1)
            fc2.load_full(w2, b2)
            check(fc1.weight.shape == (h // n, d), fc1.weight.shape)
            check(np.array_equal(fc1.weight.numpy(), w1[r * h // n:(r + 1) * h // n]), "slice")
            mid = fc1.forward(x, np.empty((rows, h // n), np.float32))
            y = fc2.forward(mid, np.empty((rows, d), np.float32))
            check(np.abs(y - want).max() < 1e-4, f"forward max diff {np.abs(y - want).max()}")
            gy = np.ones((rows, d), np.float32)
            gmid = fc2.backward(mid, gy, np.empty_like(mid))
            fc1.backward(x, gmid)
            gw2 = fc2.grad_weight.numpy()
            check(np.abs(gw2 - (gy.T @ ((x @ w1.T + b1)))[:, r * h // n:(r + 1) * h // n]).max()
                  < 1e-3, "grad of the row layer's weight")
            ps = oslo.ParamSet(ctx)
            ps.add_linear("fc1", fc1)
            ps.add_linear("fc2", fc2)
            check(len(ps) == 4, len(ps))
            norm = ps.clip_grad_norm()
            check(norm > 0, norm)
            ps.save_checkpoint(ckpt)
            ctx.barrier()
            w = fc1.weight
            fc1.close()  # closes the set (it depends on fc1) and the borrowed weight
            check(ps.closed and w.closed, "dependants closed first")

    run_ranks(body, world, _threads(args) > 0)
    if os.environ.get("RANK", "0") != "0":
        return
    store = os.path.join(__import__("tempfile").mkdtemp(prefix="oslo-py-"), "store")
    with oslo.Context({"rank": 0, "world_size": 1, "init_method": "file://" + store}) as ctx:
        fc1 = oslo.ParallelLinear(ctx, d, h, "column")
        fc2 = oslo.ParallelLinear(ctx, h, d, "row")
        with oslo.ParamSet(ctx) as ps:
            ps.add_linear("fc1", fc1)
            ps.add_linear("fc2", fc2)
            ps.load_checkpoint(ckpt)
        check(np.array_equal(fc1.weight.numpy(), w1) and np.array_equal(fc2.bias.numpy(), b2),
              "loaded at TP=1")
        y = fc2.forward(fc1.forward(x, np.empty((rows, h), np.float32)),
                        np.empty((rows, d), np.float32))
        check(np.abs(y - want).max() < 1e-4, "TP=1 forward after load")
    print(f"layers: TP={world} MLP equals numpy; checkpoint saved at TP={world} loads at TP=1")


if __name__ == "__main__":
    main({"collectives_w2": collectives, "abort_from_thread_w2": abort, "layers": layers,
          "mlp_tp2_forward_backward_w2": mlp_tp2_forward_backward_w2,
          "clip_grad_norm_w2": clip_grad_norm_w2})
