// Pipeline parallelism as data: how the layers are cut into stages, the
// order in which each pipeline rank runs its forwards and backwards, whom
// each of them talks to, and a simulation of a whole pipeline to measure
// the bubble. Pure logic: nothing here touches a tensor, a backend or a
// communicator.
//
// Layout (Megatron-LM's interleaved layout). Pipeline size p, v model
// chunks per rank (v == 1: no interleaving): the model's layers are cut
// into p * v consecutive virtual stages; virtual stage s = chunk * p + rank
// runs on rank s % p as that rank's chunk s / p, so rank r holds virtual
// stages r, r + p, r + 2p, ... Virtual stage 0 holds the embeddings,
// virtual stage p * v - 1 the final norm and the head. A micro-batch's
// activation travels from virtual stage s to s + 1 (from rank p - 1 of
// chunk c to rank 0 of chunk c + 1 at the wrap), its gradient back.
//
// Schedules (Megatron-LM's megatron/core/pipeline_parallel/schedules.py,
// the classic interleaved rule of micro-batch groups of p, as it was up to
// commit 2e2bdf6238 of 2024-10-31; the same orders, no code taken). For
// rank r of p with m micro-batches:
//  - v == 1 (forward_backward_pipelining_without_interleaving, 1F1B):
//    w = min(p - r - 1, m) warm-up forwards F0 .. F(w-1); then m - w
//    steady steps of one forward and one backward (F(w+i), B(i)); then the
//    w cool-down backwards. Micro-batches run in order in both directions.
//  - v > 1 (forward_backward_pipelining_with_interleaving): m must be a
//    multiple of p. T = m * v virtual micro-batch steps k = 0 .. T-1; step
//    k's forward runs chunk (k mod p v) / p on micro-batch
//    (k / (p v)) * p + k mod p (micro-batches go through the chunks in
//    groups of p: chunk 0 of micro-batches 0..p-1, chunk 1 of the same,
//    ..., then the next group); step k's backward runs chunk v - 1 - that
//    on the same micro-batch number (Megatron takes the oldest activation
//    of the chunk, which is that one). Warm-up: w = T when m == p (all
//    forwards first), else w = min(2 (p - r - 1) + (v - 1) p, T) forwards
//    (steps 0 .. w-1); then T - w steady steps (forward of step w + i,
//    backward of step i); then the backwards of steps T - w .. T-1.
//    (Megatron since 2024-11 no longer treats m == p specially: there the
//    later ranks start the steady state before all forwards are done.)
//
// Every function is pure (no state, any thread); invalid arguments throw
// oslo::Error(OSLO_ERR_INVALID_ARGUMENT) naming the bad value.
#pragma once

#include <string>
#include <vector>

namespace oslo {

// ---------------------------------------------------------------- layout

// The layers [begin, end) of one virtual stage.
struct LayerRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};

// A model's layers cut into p * v virtual stages.
struct PipelinePartition {
  int pipeline_size = 1;  // p
  int chunks = 1;         // v: model chunks (virtual stages) per rank
  // By virtual stage chunk * p + rank: consecutive, covering [0, L).
  std::vector<LayerRange> stages;

  int num_layers() const { return stages.empty() ? 0 : stages.back().end; }
  // The layers of `chunk` on `rank`. Throws OSLO_ERR_INVALID_ARGUMENT when
  // rank is outside [0, p) or chunk outside [0, v).
  const LayerRange& at(int rank, int chunk) const;
};

// Colossal-AI's partition_uniform(num_items = L, pipeline_parallel_size =
// p, num_chunks = v) (colossalai/legacy/pipeline/utils.py): each chunk c
// gets the L / v layers [c L / v, (c + 1) L / v), cut over the p ranks into
// q = (L / v) / p layers each, and the remainder (L / v) mod p goes one
// layer each to the last ranks of the chunk: rank r of chunk c gets q + 1
// layers when r >= p - (L / v) mod p, else q. Example: 10 layers over p = 4
// (v = 1) gives 2, 2, 3, 3. Errors (OSLO_ERR_INVALID_ARGUMENT): p < 1, v <
// 1, L < p v (a stage without layers), and L not a multiple of v
// (Colossal-AI asserts it too; give explicit counts instead).
PipelinePartition partition_uniform(int num_layers, int pipeline_size, int chunks);

// Explicit layer counts: counts[s] layers for virtual stage s = chunk * p +
// rank, in that order. Errors (OSLO_ERR_INVALID_ARGUMENT): p < 1, v < 1,
// counts.size() != p v, a count < 1 (naming the virtual stage, its rank and
// chunk: every stage needs a layer, as Megatron requires), the counts not
// summing to num_layers.
PipelinePartition partition_counts(int num_layers, int pipeline_size, int chunks,
                                   const std::vector<int>& counts);

// The virtual stage of `chunk` on `rank`: chunk * p + rank. No checks.
inline int virtual_stage(int rank, int chunk, int pipeline_size) {
  return chunk * pipeline_size + rank;
}
// Whether (rank, chunk) is virtual stage 0, which holds the embeddings.
inline bool is_first_stage(int rank, int chunk) {
  return rank == 0 && chunk == 0;
}
// Whether (rank, chunk) is virtual stage p v - 1, which holds the final
// norm and the head.
inline bool is_last_stage(int rank, int chunk, int pipeline_size, int chunks) {
  return rank == pipeline_size - 1 && chunk == chunks - 1;
}

// ------------------------------------------------------------- schedules

// One compute step of a rank: the forward or backward of micro-batch
// `microbatch` through the rank's model chunk `chunk`, or (HEAD, rank 0,
// chunk 0, only in the head-split schedule) the first stage's share of the
// micro-batch's head: the final hidden states of its first tokens in, the
// logits, the loss and their gradient through the tied token table out.
struct PipeOp {
  enum Kind { FORWARD, BACKWARD, HEAD };
  Kind kind = FORWARD;
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const PipeOp& o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
  bool operator!=(const PipeOp& o) const { return !(*this == o); }
};

// The ordered compute steps of rank `rank` of a pipeline of p ranks over m
// micro-batches with v chunks per rank, in Megatron-LM's order (see the top
// of this file). Errors (OSLO_ERR_INVALID_ARGUMENT): p < 1, rank outside
// [0, p), m < 1, v < 1, v > 1 with m not a multiple of p.
std::vector<PipeOp> pipeline_schedule(int pipeline_size, int rank, int microbatches, int chunks);

// "F0 F1 B0 ..." (with_chunks false) or "F0.0 F1.0 B0.1 ..." (micro-batch
// dot chunk): the notation of the tests and of tests/pipeline/
// megatron_order.py.
std::string schedule_string(const std::vector<PipeOp>& ops, bool with_chunks);

// Throws OSLO_ERR_INVALID_ARGUMENT, naming the op's position and the
// problem, unless `ops` runs the forward and the backward of every
// (micro-batch, chunk) of [0, m) x [0, v) exactly once each, the backward
// after the forward. HEAD ops are allowed only with `head_ops`: then each
// micro-batch's HEAD exactly once, after its forward and before its
// backward (rank 0's list in the head-split schedule).
void check_schedule(const std::vector<PipeOp>& ops, int microbatches, int chunks,
                    bool head_ops = false);

// ---------------------------------------------------- head-split schedule
//
// A tied head is the heaviest piece of a small model (GPT-2 small's 50257 x
// 768 table is about 5.4 blocks of work), so whole blocks cannot make the
// stages equal: 9 + 3 blocks leave the first stage 4 % heavier, 8 + 4 the
// last 20 %. The first stage holds the same table (the tied embedding), so
// it can take the head and loss of the first tokens of every micro-batch:
// the last stage sends it their final hidden states after its forward and
// waits for their gradient before its backward (one HEAD op on rank 0 per
// micro-batch, no new weights, the table's gradient summed by the tied-
// weight exchange as before). With that share chosen by cost the stages
// are equal to a token.
//
// The order is not Megatron's: HEAD(i) must run on rank 0 between the last
// virtual stage's forward and backward of i, so the ranks' orders come from
// a list scheduling of the whole pipeline: whenever a rank is free it runs,
// among its ops whose input is there, a HEAD first, then a forward, then a
// backward (the deeper model chunk first within each kind; micro-batches in
// order within each chunk), starting a new micro-batch (chunk 0's forward)
// only while fewer than p - r + 1 + v are past it and not through their
// chunk-0 backward (1F1B keeps p - r). With equal stages the bubble of
// GPT-2's 6 + 6 blocks and half the head each at p = 2, m = 8 is 0.079
// (Megatron's 9 + 3: 0.128); at v = 2 with 3 blocks a chunk, 0.041 (the
// interleaved theory for equal chunks: 0.059).

// The ranks' orders (index r: rank r) for p ranks, m micro-batches, v
// chunks per rank, the virtual stages' forward costs `stage_cost` (p v
// values > 0, by virtual stage c p + r; the last one's without the share of
// the head it gives away) and `head_cost`, the forward cost of rank 0's
// share of the head (> 0: the whole HEAD op, forward and backward, costs 3
// head_cost), and backward_cost (empty: twice stage_cost) each virtual
// stage's backward. Deterministic: every rank computes the same orders from
// the same costs. Errors (OSLO_ERR_INVALID_ARGUMENT): p < 2, m < 1, v < 1,
// bad costs.
std::vector<std::vector<PipeOp>> pipeline_schedule_head_split(
    int pipeline_size, int microbatches, int chunks, const std::vector<double>& stage_cost,
    double head_cost, const std::vector<double>& backward_cost = {});

// The ranks an op exchanges with: its input arrives from recv_from and its
// output leaves for send_to (-1: none). A forward on virtual stage s
// receives the activation from the rank of s - 1 and sends its output to
// the rank of s + 1; a backward receives the output gradient from the rank
// of s + 1 and sends the input gradient to the rank of s - 1. Virtual stage
// 0 receives no activation and sends no gradient; stage p v - 1 sends no
// activation and receives no gradient (its backward starts from its own
// loss). The peer of stage s is rank s mod p, so with p == 1 it is the rank
// itself (a hand-over in memory). Errors (OSLO_ERR_INVALID_ARGUMENT): p <
// 1, v < 1, rank outside [0, p), op.chunk outside [0, v).
struct PipePeers {
  int recv_from = -1;
  int send_to = -1;
};
PipePeers pipe_op_peers(const PipeOp& op, int rank, int pipeline_size, int chunks);

// ------------------------------------------------------- transfer plan

// A micro-batch's activation (made by a forward) or gradient (made by a
// backward) leaving virtual stage from_stage.
// With `head` (head-split schedule): the final hidden states of the first
// stage's tokens (gradient false, from the last stage) or their gradient
// (gradient true, from_stage 0).
struct PipeMessage {
  bool gradient = false;
  int microbatch = 0;
  int from_stage = 0;
  bool head = false;
  bool operator==(const PipeMessage& o) const {
    return gradient == o.gradient && microbatch == o.microbatch && from_stage == o.from_stage &&
           head == o.head;
  }
  bool operator<(const PipeMessage& o) const {
    if (head != o.head) return head < o.head;
    if (gradient != o.gradient) return gradient < o.gradient;
    if (microbatch != o.microbatch) return microbatch < o.microbatch;
    return from_stage < o.from_stage;
  }
};

// One step of a rank's plan: receive a message from `peer`, run `op`, or
// send a message to `peer` (peer == the rank itself when both virtual
// stages are on it: p == 1 with v > 1).
struct PipeStep {
  enum Kind { RECV, COMPUTE, SEND };
  Kind kind = COMPUTE;
  PipeOp op;            // COMPUTE
  PipeMessage message;  // RECV, SEND
  int peer = -1;        // RECV, SEND
};

// Rank `rank`'s plan: its pipeline_schedule compute steps in that order,
// each input received just before its op and each output sent, in an
// order that cannot deadlock even when every send blocks until the peer
// receives it (and so with any mix of eager and rendezvous transfers).
// The transfers are placed by one global order: a simulation of the whole
// pipeline (simulate_pipeline, forward 1, backward 2, times stage_cost, no
// transfer time) times every transfer when the op that makes the message
// finishes (its send and its receive at the same point), and every rank
// runs its steps in (time, message) order, a transfer before a compute
// step of the same time and a send to itself before its receive. The
// transfer that comes first in that order always finds both ranks at it,
// so the plans complete (tests/pipeline checks it with a rendezvous
// simulation for p <= 5, v <= 3, m <= 12); with eager sends every op
// starts when the simulation says it may (tests/pipeline replays the plans
// in time). stage_cost: the relative forward cost of each
// virtual stage (empty: all equal; else p v values > 0, as
// PipeSimOptions::stage_scale): with the stages' real costs the plan's
// transfers are ordered as the pipeline will actually run (the interleaved
// schedules wait on the wrong transfer otherwise). backward_cost (empty:
// twice stage_cost; else p v values > 0, stage_cost needed too): each
// virtual stage's backward cost in the same units. Every rank must pass the
// same costs. Errors: as pipeline_schedule and simulate_pipeline.
std::vector<PipeStep> pipeline_plan(int pipeline_size, int rank, int microbatches, int chunks,
                                    const std::vector<double>& stage_cost = {},
                                    const std::vector<double>& backward_cost = {});

// The same for the head-split schedule (pipeline_schedule_head_split): the
// last virtual stage's forward of i also sends the head input to rank 0,
// rank 0's HEAD(i) receives it and sends back its gradient, which the last
// virtual stage receives before its backward of i; all placed by the same global
// order, so the plans complete with blocking sends. Errors: as
// pipeline_schedule_head_split.
std::vector<PipeStep> pipeline_plan_head_split(int pipeline_size, int rank, int microbatches,
                                               int chunks, const std::vector<double>& stage_cost,
                                               double head_cost,
                                               const std::vector<double>& backward_cost = {});

// -------------------------------------------------------------- analysis

// The most (micro-batch, chunk) forwards of `ops` whose backward has not
// run yet, at any point of the list: the activations the rank keeps at its
// peak. 1F1B keeps min(p - r, m) on rank r. Throws
// OSLO_ERR_INVALID_ARGUMENT for a backward without an outstanding forward
// or a forward run twice before its backward.
int peak_live_microbatches(const std::vector<PipeOp>& ops);

// Costs of a simulated pipeline. An op on virtual stage s takes
// t_forward (or t_backward) times stage_scale[s] (1 when stage_scale is
// empty); an activation or gradient that crosses to another rank arrives
// t_comm after the op that made it finished (0 within a rank).
// A HEAD op (rank 0's share of the head) takes (t_forward + t_backward)
// times head_scale.
// backward_scale (empty: stage_scale): a backward on stage s takes
// t_backward times backward_scale[s] instead (a stage whose backward is not
// twice its forward: the head's forward also takes the cross-entropy).
struct PipeSimOptions {
  double t_forward = 1.0;
  double t_backward = 2.0;
  double t_comm = 0.0;
  std::vector<double> stage_scale;  // empty, or p v factors >= 0
  double head_scale = 0.0;
  std::vector<double> backward_scale;  // empty, or p v factors >= 0
};

struct PipeSimResult {
  double makespan = 0;         // when the last op finished (the first starts at 0)
  std::vector<double> busy;    // per rank: the sum of its ops' durations
  double bubble_fraction = 0;  // 1 - sum(busy) / (p makespan); 0 when makespan is 0
  // Per rank, per op of its list: when it started and finished.
  std::vector<std::vector<double>> start, finish;
};

// A deterministic discrete-event simulation of a whole pipeline: rank r
// runs ops[r] strictly in order, each op as soon as the rank is free and
// its input is there: the forward of micro-batch i on virtual stage s > 0
// needs the forward of i on s - 1; the backward on s < p v - 1 needs the
// backward of i on s + 1; the backward on the last stage needs the forward
// of i there (with HEAD ops on rank 0: the HEAD of i, which needs that
// forward). p = ops.size(). Errors (OSLO_ERR_INVALID_ARGUMENT): p < 1, m
// < 1, v < 1, a rank's list failing check_schedule (naming the rank), bad
// costs (negative or not finite, stage_scale of the wrong size); and a
// deadlock, when the lists' orders contradict each other so that no rank
// can go on: the error names each stuck rank's next op and the op it waits
// for. With equal stages and t_comm 0, Megatron's schedules come out with a
// bubble fraction of exactly (p - 1) / (v m + p - 1) (1F1B: (p - 1) / (m +
// p - 1)), the Megatron paper's bubble (p - 1) / v per m micro-batches of
// work; tests/pipeline checks it for p <= 4, t_b / t_f in {1, 2, 3}.
PipeSimResult simulate_pipeline(const std::vector<std::vector<PipeOp>>& ops, int microbatches,
                                int chunks, const PipeSimOptions& options = {});

}  // namespace oslo
