#!/usr/bin/env python3
"""Benchmark 8, the Python column (bench/bindings/run.sh runs it next to C,
Java and Go in one run).

forward_1x64x64: the per-call cost of ParallelLinear.forward on a 64 -> 64
column-parallel layer (bias, f32) with input [1, 64] and output [1, 64]
tensors made once, world of one rank: 2000 warm-up calls, 7 repetitions of
CALLS calls, median. forward_1x64x64_numpy: the same call on numpy arrays
(wrapped in place for the call, no copy).

pass_256mb: a 256 MiB float32 numpy array handed to one all-reduce (in a
context of its own per repetition, so no cached block hides the copy): wrapped
without a copy (Tensor.wrap) against a deliberate copy into a new oslo tensor
(Tensor + copy_from). 5 repetitions, median time; peak RSS growth from
VmHWM after resetting it (/proc/self/clear_refs = 5).

    PYTHONPATH=build/bindings/python python3 bench/python/bench_bindings.py [CALLS]
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import oslo


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field + " not in /proc/self/status")


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def per_call_ns(fn, calls):
    for _ in range(2000):
        fn()
    reps = []
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        reps.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(reps)


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    store = os.path.join(tempfile.mkdtemp(prefix="oslo-bench-py-"), "store")
    with oslo.Context({"rank": 0, "world_size": 1, "num_threads": 1,
                       "init_method": "file://" + store}) as ctx:
        lin = oslo.ParallelLinear(ctx, 64, 64, "column")
        x, y = ctx.tensor([1, 64]), ctx.tensor([1, 64])
        ns = per_call_ns(lambda: lin.forward(x, y), calls)
        print(f"BENCH lang=python case=forward_1x64x64 ns_per_call={ns:.1f} calls={calls} reps=7")
        xa, ya = np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32)
        ns = per_call_ns(lambda: lin.forward(xa, ya), calls)
        print(f"BENCH lang=python case=forward_1x64x64_numpy ns_per_call={ns:.1f} "
              f"calls={calls} reps=7")

    # pass_256mb: each repetition in a context of its own (made and closed
    # outside the timed part), so the CPU backend's cache of freed blocks
    # cannot hide the copy's allocation.
    big = np.ones(256 * 1024 * 1024 // 4, np.float32)  # touched: resident

    def wrap(ctx):
        with oslo.Tensor.wrap(ctx, big) as t:
            ctx.all_reduce(t)

    def copy(ctx):
        with ctx.tensor(big.shape) as t:
            t.copy_from(big)
            ctx.all_reduce(t)

    for mode, fn in (("wrap", wrap), ("copy", copy)):
        times, peaks = [], []
        for rep in range(6):
            store = os.path.join(tempfile.mkdtemp(prefix="oslo-bench-py-"), "store")
            with oslo.Context({"rank": 0, "world_size": 1, "num_threads": 1,
                               "init_method": "file://" + store}) as ctx:
                reset_peak()
                base = rss_kib("VmRSS")
                t0 = time.perf_counter()
                fn(ctx)
                ms = (time.perf_counter() - t0) * 1e3
                peak = (rss_kib("VmHWM") - base) / 1024
            if rep:  # the first is a warm-up
                times.append(ms)
                peaks.append(peak)
        print(f"BENCH lang=python case=pass_256mb mode={mode} ms={statistics.median(times):.2f} "
              f"peak_rss_delta_mb={statistics.median(peaks):.1f}")

if __name__ == "__main__":
    main()
