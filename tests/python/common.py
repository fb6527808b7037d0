"""Shared by the Python tests: imports (exit 77, a skip, when numpy or the
built package is missing), case dispatch, ranks as processes or threads."""
import os
import sys
import tempfile
import threading
import traceback

try:
    import numpy as np  # noqa: F401
except ImportError:
    print("SKIP: numpy is not installed for", sys.executable)
    sys.exit(77)
try:
    import oslo  # noqa: F401
except ImportError as e:
    print("SKIP: cannot import oslo (PYTHONPATH=build/bindings/python):", e)
    sys.exit(77)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def raises(exc, fn, *args, **kwargs):
    """Calls fn and returns the exception of type exc it must raise."""
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc.__name__}")


def main(cases):
    """python script.py CASE [ARGS...]: runs cases[CASE](*ARGS)."""
    if len(sys.argv) < 2 or sys.argv[1] not in cases:
        print(f"usage: {sys.argv[0]} {'|'.join(sorted(cases))} [ARGS...]", file=sys.stderr)
        sys.exit(2)
    name = sys.argv[1]
    cases[name](*sys.argv[2:])
    rank = os.environ.get("RANK")
    print(f"{name}: OK" + (f" (rank {rank})" if rank is not None else ""))


def run_ranks(body, world, threads):
    """Runs body(config) on every rank: as `world` threads of this process
    (file:// rendezvous, explicit rank) when threads, else once in this
    process with the launcher's environment (oslo-run)."""
    if not threads:
        body({"tensor_parallel_size": int(os.environ.get("WORLD_SIZE", "1")),
              "timeout_seconds": 120})
        return
    store = os.path.join(tempfile.mkdtemp(prefix="oslo-py-"), "store")
    errors = []

    def one(r):
        try:
            body({"rank": r, "world_size": world, "tensor_parallel_size": world,
                  "init_method": "file://" + store, "timeout_seconds": 120})
        except BaseException:  # noqa: B036 - reported below
            errors.append((r, traceback.format_exc()))

    ts = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r, tb in errors:
        print(f"[thread rank {r}]\n{tb}", file=sys.stderr)
    if errors:
        sys.exit(1)
