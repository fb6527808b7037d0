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
            time.sleep(1.5)
            raises(oslo.Error, ctx.barrier)
        ctx.close()

    run_ranks(body, world, _threads(args) > 0)


if __name__ == "__main__":
    main({"collectives": collectives, "abort": abort})
