#!/usr/bin/env python3
"""Reference op orders of Megatron-LM's pipeline schedules, for
tests/pipeline/test_schedule.cpp.

A transcription of the loop structure of
megatron/core/pipeline_parallel/schedules.py at Megatron-LM commit
2e2bdf62382f3a77f5bd020cde51ed833ee62ead (2024-10-31, the last version with
the classic interleaved schedule: micro-batch groups of exactly the pipeline
size; the next commit, 4295be1a6c "tunable schedule with overlapping", made
the group size configurable and dropped the num_microbatches ==
pipeline_parallel_size special case). Only the order of the compute steps is
kept; the tensors are replaced by the micro-batch ids they belong to, and the
queues Megatron pops its tensors from (input_tensors[chunk].pop(0)) are kept
as queues, so that the backward's micro-batch comes out of the same FIFO
bookkeeping as in Megatron rather than from a formula.

  megatron_order.py P M V            prints every rank's order, one line each:
                                     "rank R: F0 F1 B0 ..." (v == 1) or
                                     "rank R: F0.0 F1.0 ... B0.1 ..." (v > 1,
                                     micro-batch.chunk)
  megatron_order.py --check BINARY   compares these orders with
                                     `BINARY order P R M V` (the C++ schedule)
                                     for every p in 1..4, m in 1..9, v in 1..3
                                     that Megatron accepts; exit 1 on the first
                                     difference.
"""
import subprocess
import sys


def without_interleaving(p, r, m):
    """forward_backward_pipelining_without_interleaving (training, not
    forward_only)."""
    ops = []
    num_warmup_microbatches = p - r - 1
    num_warmup_microbatches = min(num_warmup_microbatches, m)
    num_microbatches_remaining = m - num_warmup_microbatches
    input_tensors = []  # the micro-batch of each stored activation
    next_microbatch = 0  # the data iterator

    # Run warmup forward passes.
    for i in range(num_warmup_microbatches):
        ops.append("F%d" % next_microbatch)
        input_tensors.append(next_microbatch)
        next_microbatch += 1

    # Run 1F1B in steady state.
    for i in range(num_microbatches_remaining):
        ops.append("F%d" % next_microbatch)
        input_tensors.append(next_microbatch)
        next_microbatch += 1
        mb = input_tensors.pop(0)
        ops.append("B%d" % mb)

    # Run cooldown backward passes.
    for i in range(num_warmup_microbatches):
        mb = input_tensors.pop(0)
        ops.append("B%d" % mb)
    return ops


def with_interleaving(p, r, m, v):
    """forward_backward_pipelining_with_interleaving (training, not
    forward_only)."""
    if m % p != 0:
        raise RuntimeError("number of microbatches (%d) is not divisible by "
                           "pipeline-model-parallel-size (%d)" % (m, p))
    num_model_chunks = v
    total_num_microbatches = m * num_model_chunks
    if m == p:
        num_warmup_microbatches = total_num_microbatches
    else:
        num_warmup_microbatches = (p - r - 1) * 2
        num_warmup_microbatches += (num_model_chunks - 1) * p
        num_warmup_microbatches = min(num_warmup_microbatches, total_num_microbatches)
    num_microbatches_remaining = total_num_microbatches - num_warmup_microbatches

    def get_model_chunk_id(microbatch_id, forward):
        microbatch_id_in_group = microbatch_id % (p * num_model_chunks)
        model_chunk_id = microbatch_id_in_group // p
        if not forward:
            model_chunk_id = num_model_chunks - model_chunk_id - 1
        return model_chunk_id

    def get_microbatch_id_in_model_chunk(iteration_id, forward):
        assert forward
        iteration_group_id = iteration_id // (p * num_model_chunks)
        return (iteration_group_id * p) + (iteration_id % p)

    input_tensors = [[] for _ in range(num_model_chunks)]
    ops = []

    def forward_step_helper(k):
        chunk = get_model_chunk_id(k, forward=True)
        mb = get_microbatch_id_in_model_chunk(k, forward=True)
        input_tensors[chunk].append(mb)
        ops.append("F%d.%d" % (mb, chunk))

    def backward_step_helper(k):
        chunk = get_model_chunk_id(k, forward=False)
        mb = input_tensors[chunk].pop(0)
        ops.append("B%d.%d" % (mb, chunk))

    # Run warmup forward passes.
    for k in range(num_warmup_microbatches):
        forward_step_helper(k)
    # Run 1F1B in steady state.
    for k in range(num_microbatches_remaining):
        forward_k = k + num_warmup_microbatches
        forward_step_helper(forward_k)
        backward_k = k
        backward_step_helper(backward_k)
    # Run cooldown backward passes (flush out pipeline).
    for k in range(num_microbatches_remaining, total_num_microbatches):
        backward_step_helper(k)
    return ops


def order(p, r, m, v):
    if v == 1:
        return without_interleaving(p, r, m)
    return with_interleaving(p, r, m, v)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        binary = sys.argv[2]
        cases = 0
        for p in range(1, 5):
            for m in range(1, 10):
                for v in range(1, 4):
                    if v > 1 and m % p != 0:
                        continue
                    for r in range(p):
                        want = " ".join(order(p, r, m, v))
                        got = subprocess.run([binary, "order", str(p), str(r), str(m), str(v)],
                                             check=True, capture_output=True,
                                             text=True).stdout.strip()
                        if got != want:
                            print("p=%d r=%d m=%d v=%d:\n  megatron: %s\n  oslo:     %s" %
                                  (p, r, m, v, want, got))
                            return 1
                        cases += 1
        print("%d (p, rank, m, v) orders equal to Megatron's" % cases)
        return 0
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    p, m, v = (int(a) for a in sys.argv[1:])
    for r in range(p):
        print("rank %d: %s" % (r, " ".join(order(p, r, m, v))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
