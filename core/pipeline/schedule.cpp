// Pipeline layout, schedules and their simulation (schedule.hpp).
#include "core/pipeline/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <utility>

#include "core/common/error.hpp"

namespace oslo {

namespace {

void check_shape(int pipeline_size, int chunks, const char* what) {
  OSLO_CHECK(pipeline_size >= 1, OSLO_ERR_INVALID_ARGUMENT, what, ": pipeline size ", pipeline_size,
             " < 1");
  OSLO_CHECK(chunks >= 1, OSLO_ERR_INVALID_ARGUMENT, what, ": chunks per rank ", chunks, " < 1");
}

// The schedules index steps, stages and (stage, micro-batch) cells with int.
void check_size(long long a, long long b, const char* what, const char* name) {
  OSLO_CHECK(a * b <= std::numeric_limits<int>::max() / 2, OSLO_ERR_INVALID_ARGUMENT, what, ": ", a,
             " x ", b, " ", name, " is too many");
}

void check_rank(int rank, int pipeline_size, const char* what) {
  OSLO_CHECK(rank >= 0 && rank < pipeline_size, OSLO_ERR_INVALID_ARGUMENT, what, ": rank ", rank,
             " outside [0, ", pipeline_size, ")");
}

// "F3.1" or "F3".
std::string op_name(const PipeOp& op, bool with_chunk) {
  std::string s = op.kind == PipeOp::FORWARD ? "F" : op.kind == PipeOp::BACKWARD ? "B" : "H";
  s += std::to_string(op.microbatch);
  if (with_chunk) s += "." + std::to_string(op.chunk);
  return s;
}

PipelinePartition from_counts(int pipeline_size, int chunks, const std::vector<int>& counts) {
  PipelinePartition part;
  part.pipeline_size = pipeline_size;
  part.chunks = chunks;
  part.stages.reserve(counts.size());
  int at = 0;
  for (int c : counts) {
    part.stages.push_back({at, at + c});
    at += c;
  }
  return part;
}

}  // namespace

const LayerRange& PipelinePartition::at(int rank, int chunk) const {
  check_rank(rank, pipeline_size, "pipeline partition");
  OSLO_CHECK(chunk >= 0 && chunk < chunks, OSLO_ERR_INVALID_ARGUMENT, "pipeline partition: chunk ",
             chunk, " outside [0, ", chunks, ")");
  return stages.at(static_cast<size_t>(virtual_stage(rank, chunk, pipeline_size)));
}

PipelinePartition partition_uniform(int num_layers, int pipeline_size, int chunks) {
  check_shape(pipeline_size, chunks, "uniform pipeline partition");
  const long long stages = static_cast<long long>(pipeline_size) * chunks;
  OSLO_CHECK(num_layers >= stages, OSLO_ERR_INVALID_ARGUMENT,
             "uniform pipeline partition: ", num_layers, " layers for ", stages,
             " virtual stages (pipeline size ", pipeline_size, " x ", chunks,
             " chunks): every stage needs a layer");
  OSLO_CHECK(num_layers % chunks == 0, OSLO_ERR_INVALID_ARGUMENT,
             "uniform pipeline partition: ", num_layers, " layers are not a multiple of the ",
             chunks, " chunks per rank (give explicit layer counts)");
  const int per_chunk = num_layers / chunks;
  const int q = per_chunk / pipeline_size;
  const int first_long = pipeline_size - per_chunk % pipeline_size;  // ranks >= it get q + 1
  std::vector<int> counts;
  counts.reserve(static_cast<size_t>(stages));
  for (int c = 0; c < chunks; ++c)
    for (int r = 0; r < pipeline_size; ++r) counts.push_back(q + (r >= first_long ? 1 : 0));
  return from_counts(pipeline_size, chunks, counts);
}

PipelinePartition partition_counts(int num_layers, int pipeline_size, int chunks,
                                   const std::vector<int>& counts) {
  check_shape(pipeline_size, chunks, "pipeline partition");
  const long long stages = static_cast<long long>(pipeline_size) * chunks;
  OSLO_CHECK(static_cast<long long>(counts.size()) == stages, OSLO_ERR_INVALID_ARGUMENT,
             "pipeline partition: ", counts.size(), " layer counts for ", stages,
             " virtual stages (pipeline size ", pipeline_size, " x ", chunks, " chunks)");
  long long sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    const int rank = static_cast<int>(s) % pipeline_size,
              chunk = static_cast<int>(s) / pipeline_size;
    OSLO_CHECK(counts[s] >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline partition: layer count ",
               counts[s], " for virtual stage ", s, " (rank ", rank, " chunk ", chunk,
               "): every stage needs a layer");
    sum += counts[s];
  }
  OSLO_CHECK(sum == num_layers, OSLO_ERR_INVALID_ARGUMENT,
             "pipeline partition: layer counts sum to ", sum, ", the model has ", num_layers,
             " layers");
  return from_counts(pipeline_size, chunks, counts);
}

std::vector<PipeOp> pipeline_schedule(int pipeline_size, int rank, int microbatches, int chunks) {
  check_shape(pipeline_size, chunks, "pipeline schedule");
  check_rank(rank, pipeline_size, "pipeline schedule");
  OSLO_CHECK(microbatches >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: ", microbatches,
             " micro-batches < 1");
  check_size(microbatches, chunks, "pipeline schedule", "micro-batch steps");
  const int p = pipeline_size, m = microbatches, v = chunks;
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(m) * static_cast<size_t>(v));
  if (v == 1) {
    const int warmup = std::min(p - rank - 1, m);
    for (int i = 0; i < warmup; ++i) ops.push_back({PipeOp::FORWARD, i, 0});
    for (int i = 0; i < m - warmup; ++i) {
      ops.push_back({PipeOp::FORWARD, warmup + i, 0});
      ops.push_back({PipeOp::BACKWARD, i, 0});
    }
    for (int i = m - warmup; i < m; ++i) ops.push_back({PipeOp::BACKWARD, i, 0});
    return ops;
  }
  OSLO_CHECK(m % p == 0, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: the interleaved schedule (",
             v,
             " chunks per rank) needs the micro-batches to be a multiple of the pipeline size: ", m,
             " micro-batches, pipeline size ", p);
  const int total = m * v, group = p * v;
  const int warmup = m == p ? total : std::min(2 * (p - rank - 1) + (v - 1) * p, total);
  // Step k: chunk (k mod p v) / p, micro-batch (k / p v) p + k mod p.
  auto forward = [&](int k) {
    return PipeOp{PipeOp::FORWARD, (k / group) * p + k % p, (k % group) / p};
  };
  auto backward = [&](int k) {
    return PipeOp{PipeOp::BACKWARD, (k / group) * p + k % p, v - 1 - (k % group) / p};
  };
  for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(forward(warmup + k));
    ops.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  return ops;
}

std::string schedule_string(const std::vector<PipeOp>& ops, bool with_chunks) {
  std::string s;
  for (const PipeOp& op : ops) {
    if (!s.empty()) s += ' ';
    s += op_name(op, with_chunks);
  }
  return s;
}

void check_schedule(const std::vector<PipeOp>& ops, int microbatches, int chunks, bool head_ops) {
  OSLO_CHECK(microbatches >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: ", microbatches,
             " micro-batches < 1");
  OSLO_CHECK(chunks >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: chunks per rank ", chunks,
             " < 1");
  const size_t n = static_cast<size_t>(microbatches) * static_cast<size_t>(chunks);
  std::vector<char> fwd(n, 0), bwd(n, 0), head(static_cast<size_t>(microbatches), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    OSLO_CHECK(op.kind == PipeOp::FORWARD || op.kind == PipeOp::BACKWARD ||
                   (head_ops && op.kind == PipeOp::HEAD),
               OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " has kind ",
               static_cast<int>(op.kind));
    OSLO_CHECK(op.microbatch >= 0 && op.microbatch < microbatches, OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: op ", i, " (", op_name(op, true), "): micro-batch ",
               op.microbatch, " outside [0, ", microbatches, ")");
    OSLO_CHECK(op.chunk >= 0 && op.chunk < chunks, OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: op ", i, " (", op_name(op, true), "): chunk ", op.chunk,
               " outside [0, ", chunks, ")");
    const size_t at = static_cast<size_t>(op.chunk) * static_cast<size_t>(microbatches) +
                      static_cast<size_t>(op.microbatch);
    if (op.kind == PipeOp::HEAD) {
      OSLO_CHECK(op.chunk == 0 && fwd[at] && !bwd[at] && !head[static_cast<size_t>(op.microbatch)],
                 OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (", op_name(op, true),
                 ") is not the one head share between its forward and its backward");
      head[static_cast<size_t>(op.microbatch)] = 1;
    } else if (op.kind == PipeOp::FORWARD) {
      OSLO_CHECK(!fwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a forward a second time");
      fwd[at] = 1;
    } else {
      OSLO_CHECK(!head_ops || op.chunk != 0 || head[static_cast<size_t>(op.microbatch)],
                 OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (", op_name(op, true),
                 ") runs before its head share");
      OSLO_CHECK(fwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a backward before its forward");
      OSLO_CHECK(!bwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a backward a second time");
      bwd[at] = 1;
    }
  }
  for (int i = 0; head_ops && i < microbatches; ++i)
    OSLO_CHECK(head[static_cast<size_t>(i)], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: H", i,
               " (the head share of micro-batch ", i, ") is missing");
  for (size_t at = 0; at < n; ++at) {
    const PipeOp op{fwd[at] ? PipeOp::BACKWARD : PipeOp::FORWARD,
                    static_cast<int>(at % static_cast<size_t>(microbatches)),
                    static_cast<int>(at / static_cast<size_t>(microbatches))};
    OSLO_CHECK(fwd[at] && bwd[at], OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: ", op_name(op, true), " is missing");
  }
}

PipePeers pipe_op_peers(const PipeOp& op, int rank, int pipeline_size, int chunks) {
  check_shape(pipeline_size, chunks, "pipeline peers");
  check_rank(rank, pipeline_size, "pipeline peers");
  OSLO_CHECK(op.chunk >= 0 && op.chunk < chunks, OSLO_ERR_INVALID_ARGUMENT,
             "pipeline peers: chunk ", op.chunk, " outside [0, ", chunks, ")");
  const long long p = pipeline_size, s = op.chunk * p + rank, last = p * chunks - 1;
  const int prev = s > 0 ? static_cast<int>((s - 1) % p) : -1;
  const int next = s < last ? static_cast<int>((s + 1) % p) : -1;
  if (op.kind == PipeOp::FORWARD) return {prev, next};
  return {next, prev};
}

namespace {

// Rank `rank`'s steps for the ranks' orders `all`, timed by simulate_pipeline
// with `so` (see pipeline_plan). `split`: rank 0's list carries the HEAD ops
// of the head-split schedule.
std::vector<PipeStep> plan_from(const std::vector<std::vector<PipeOp>>& all, int rank, int m, int v,
                                const PipeSimOptions& so, bool split) {
  const int p = static_cast<int>(all.size());
  const PipeSimResult sim = simulate_pipeline(all, m, v, so);
  // When each (kind, micro-batch, virtual stage) op finishes: a message is
  // transferred at the moment its producer made it. (Timing it at its
  // consumer's start instead let the producer run whatever op it started
  // before that moment first: the interleaved plans ran with 2-4x the
  // schedule's bubble, docs/BENCHMARKS.md 12.)
  const int stages = p * v, last = stages - 1;
  std::vector<double> finish_of(static_cast<size_t>(2 * m * stages), 0),
      head_finish(static_cast<size_t>(m), 0);
  auto slot = [&](bool backward, int mb, int s) {
    return static_cast<size_t>((backward ? m * stages : 0) + mb * stages + s);
  };
  for (int q = 0; q < p; ++q)
    for (size_t k = 0; k < all[static_cast<size_t>(q)].size(); ++k) {
      const PipeOp& op = all[static_cast<size_t>(q)][k];
      const double t = sim.finish[static_cast<size_t>(q)][k];
      if (op.kind == PipeOp::HEAD)
        head_finish[static_cast<size_t>(op.microbatch)] = t;
      else
        finish_of[slot(op.kind == PipeOp::BACKWARD, op.microbatch, op.chunk * p + q)] = t;
    }
  struct Item {
    double time;
    int cls;  // 0 transfer, 1 compute
    PipeMessage msg;
    int send_first;  // 0 send, 1 receive (a send to itself precedes its receive)
    PipeStep step;
  };
  std::vector<Item> items;
  auto transfer = [&](PipeStep::Kind kind, int peer, const PipeMessage& msg, double t) {
    PipeStep st;
    st.kind = kind;
    st.peer = peer;
    st.message = msg;
    items.push_back({t, 0, msg, kind == PipeStep::SEND ? 0 : 1, st});
  };
  const std::vector<PipeOp>& mine = all[static_cast<size_t>(rank)];
  for (size_t k = 0; k < mine.size(); ++k) {
    const PipeOp& op = mine[k];
    const int i = op.microbatch;
    const double t = sim.start[static_cast<size_t>(rank)][k];
    PipeStep c;
    c.op = op;
    if (op.kind == PipeOp::HEAD) {  // rank 0: the hidden states in, their gradient out
      const PipeMessage in{false, i, last, true}, out{true, i, 0, true};
      transfer(PipeStep::RECV, p - 1, in, finish_of[slot(false, i, last)]);
      items.push_back({t, 1, PipeMessage{}, 0, c});
      transfer(PipeStep::SEND, p - 1, out, head_finish[static_cast<size_t>(i)]);
      continue;
    }
    const bool bwd = op.kind == PipeOp::BACKWARD;
    const int s = op.chunk * p + rank;
    const PipePeers peers = pipe_op_peers(op, rank, p, v);
    // At its producer's finish, which is no later than this op's start.
    if (peers.recv_from >= 0) {
      const PipeMessage msg{bwd, i, bwd ? s + 1 : s - 1};
      transfer(PipeStep::RECV, peers.recv_from, msg, finish_of[slot(bwd, i, msg.from_stage)]);
    }
    if (split && bwd && s == last)
      transfer(PipeStep::RECV, 0, PipeMessage{true, i, 0, true},
               head_finish[static_cast<size_t>(i)]);
    items.push_back({t, 1, PipeMessage{}, 0, c});
    // Timed when this op finishes: the same time as its receive.
    if (peers.send_to >= 0)
      transfer(PipeStep::SEND, peers.send_to, PipeMessage{bwd, i, s}, finish_of[slot(bwd, i, s)]);
    if (split && !bwd && s == last)
      transfer(PipeStep::SEND, 0, PipeMessage{false, i, last, true}, finish_of[slot(false, i, s)]);
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.cls != b.cls) return a.cls < b.cls;
    if (a.cls == 0 && !(a.msg == b.msg)) return a.msg < b.msg;
    return a.send_first < b.send_first;
  });
  std::vector<PipeStep> out;
  for (const Item& it : items) out.push_back(it.step);
  return out;
}

void check_costs(const std::vector<double>& cost, const char* what) {
  OSLO_CHECK(
      std::all_of(cost.begin(), cost.end(), [](double c) { return std::isfinite(c) && c > 0; }),
      OSLO_ERR_INVALID_ARGUMENT, what, ": stage costs must be finite and > 0");
}

}  // namespace

std::vector<PipeStep> pipeline_plan(int pipeline_size, int rank, int microbatches, int chunks,
                                    const std::vector<double>& stage_cost,
                                    const std::vector<double>& backward_cost) {
  const int p = pipeline_size, v = chunks, m = microbatches;
  check_rank(rank, p, "pipeline plan");  // the shape is checked by pipeline_schedule
  std::vector<std::vector<PipeOp>> all;
  for (int q = 0; q < p; ++q) all.push_back(pipeline_schedule(p, q, m, v));
  check_costs(stage_cost, "pipeline plan");
  check_costs(backward_cost, "pipeline plan");
  OSLO_CHECK(backward_cost.empty() || !stage_cost.empty(), OSLO_ERR_INVALID_ARGUMENT,
             "pipeline plan: backward costs without stage costs");
  PipeSimOptions so;
  so.t_forward = 1;
  so.t_backward = 2;
  so.stage_scale = stage_cost;
  for (double b : backward_cost) so.backward_scale.push_back(b / 2);
  return plan_from(all, rank, m, v, so, false);
}

std::vector<std::vector<PipeOp>> pipeline_schedule_head_split(
    int pipeline_size, int microbatches, int chunks, const std::vector<double>& stage_cost,
    double head_cost, const std::vector<double>& backward_cost) {
  const int p = pipeline_size, m = microbatches, v = chunks;
  OSLO_CHECK(p >= 2, OSLO_ERR_INVALID_ARGUMENT, "head-split schedule: pipeline size ", p,
             " (the head share goes from the last stage to the first: 2 stages or more)");
  OSLO_CHECK(m >= 1, OSLO_ERR_INVALID_ARGUMENT, "head-split schedule: ", m, " micro-batches < 1");
  OSLO_CHECK(v >= 1, OSLO_ERR_INVALID_ARGUMENT, "head-split schedule: chunks per rank ", v, " < 1");
  check_size(static_cast<long long>(p) * v, m, "head-split schedule",
             "(virtual stage, micro-batch) cells");
  const int S = p * v;
  OSLO_CHECK(static_cast<int>(stage_cost.size()) == S, OSLO_ERR_INVALID_ARGUMENT,
             "head-split schedule: ", stage_cost.size(), " stage costs for ", S, " virtual stages");
  check_costs(stage_cost, "head-split schedule");
  OSLO_CHECK(backward_cost.empty() || static_cast<int>(backward_cost.size()) == S,
             OSLO_ERR_INVALID_ARGUMENT, "head-split schedule: ", backward_cost.size(),
             " backward costs for ", S, " virtual stages");
  check_costs(backward_cost, "head-split schedule");
  OSLO_CHECK(std::isfinite(head_cost) && head_cost > 0, OSLO_ERR_INVALID_ARGUMENT,
             "head-split schedule: head cost ", head_cost, " (must be finite and > 0)");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const size_t M = static_cast<size_t>(m);
  // By virtual stage s (chunk c of rank r: s = c p + r) and micro-batch.
  std::vector<double> fdone(static_cast<size_t>(S) * M, nan), bdone(fdone), hdone(M, nan),
      free_at(static_cast<size_t>(p), 0.0);
  std::vector<int> next_f(static_cast<size_t>(S), 0), next_b(static_cast<size_t>(S), 0),
      alive(static_cast<size_t>(p), 0);
  int next_h = 0;
  std::vector<std::vector<PipeOp>> out(static_cast<size_t>(p));
  auto at = [M](int s, int i) { return static_cast<size_t>(s) * M + static_cast<size_t>(i); };
  const size_t total = 2 * static_cast<size_t>(S) * M + M;
  for (size_t done = 0; done < total; ++done) {
    // Each rank's pick: the earliest start; at a tie HEAD, then a forward,
    // then a backward, the deeper chunk first. The pick that starts first
    // runs (at a tie the lower rank).
    int best_rank = -1;
    PipeOp best_op;
    double best_start = 0;
    for (int r = 0; r < p; ++r) {
      const size_t R = static_cast<size_t>(r);
      auto consider = [&](PipeOp::Kind kind, int mb, int c, double ready) {
        if (std::isnan(ready)) return;
        const double start = std::max(free_at[R], ready);
        if (best_rank < 0 || start < best_start) {
          best_rank = r;
          best_op = PipeOp{kind, mb, c};
          best_start = start;
        }
      };
      if (r == 0 && next_h < m) consider(PipeOp::HEAD, next_h, 0, fdone[at(S - 1, next_h)]);
      for (int c = v - 1; c >= 0; --c) {
        const int s = c * p + r, i = next_f[static_cast<size_t>(s)];
        // A new micro-batch (chunk 0) only below the rank's limit.
        if (i < m && (c > 0 || alive[R] < p - r + 1 + v))
          consider(PipeOp::FORWARD, i, c, s == 0 ? 0.0 : fdone[at(s - 1, i)]);
      }
      for (int c = v - 1; c >= 0; --c) {
        const int s = c * p + r, i = next_b[static_cast<size_t>(s)];
        if (i < next_f[static_cast<size_t>(s)])
          consider(PipeOp::BACKWARD, i, c,
                   s == S - 1 ? hdone[static_cast<size_t>(i)] : bdone[at(s + 1, i)]);
      }
    }
    OSLO_CHECK(best_rank >= 0, OSLO_ERR_INTERNAL, "head-split schedule: no op can run");
    const size_t R = static_cast<size_t>(best_rank);
    const int i = best_op.microbatch, s = best_op.chunk * p + best_rank;
    const size_t si = static_cast<size_t>(s);
    const double c = best_op.kind == PipeOp::HEAD      ? 3 * head_cost
                     : best_op.kind == PipeOp::FORWARD ? stage_cost[si]
                     : backward_cost.empty()           ? 2 * stage_cost[si]
                                                       : backward_cost[si];
    const double end = best_start + c;
    free_at[R] = end;
    if (best_op.kind == PipeOp::HEAD) {
      hdone[static_cast<size_t>(i)] = end;
      ++next_h;
    } else if (best_op.kind == PipeOp::FORWARD) {
      fdone[at(s, i)] = end;
      ++next_f[static_cast<size_t>(s)];
      if (best_op.chunk == 0) ++alive[R];
    } else {
      bdone[at(s, i)] = end;
      ++next_b[static_cast<size_t>(s)];
      if (best_op.chunk == 0) --alive[R];
    }
    out[R].push_back(best_op);
  }
  return out;
}

std::vector<PipeStep> pipeline_plan_head_split(int pipeline_size, int rank, int microbatches,
                                               int chunks, const std::vector<double>& stage_cost,
                                               double head_cost,
                                               const std::vector<double>& backward_cost) {
  check_rank(rank, pipeline_size, "head-split plan");
  const std::vector<std::vector<PipeOp>> all = pipeline_schedule_head_split(
      pipeline_size, microbatches, chunks, stage_cost, head_cost, backward_cost);
  PipeSimOptions so;
  so.t_forward = 1;
  so.t_backward = 2;
  so.stage_scale = stage_cost;
  so.head_scale = head_cost;
  for (double b : backward_cost) so.backward_scale.push_back(b / 2);
  return plan_from(all, rank, microbatches, chunks, so, true);
}

int peak_live_microbatches(const std::vector<PipeOp>& ops) {
  std::set<std::pair<int, int>> live;  // (chunk, micro-batch)
  size_t peak = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    if (op.kind == PipeOp::HEAD) continue;
    const std::pair<int, int> key{op.chunk, op.microbatch};
    if (op.kind == PipeOp::FORWARD) {
      OSLO_CHECK(live.insert(key).second, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i,
                 " (", op_name(op, true), ") runs a forward again before its backward");
      peak = std::max(peak, live.size());
    } else {
      OSLO_CHECK(live.erase(key) == 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a backward without an outstanding forward");
    }
  }
  return static_cast<int>(peak);
}

PipeSimResult simulate_pipeline(const std::vector<std::vector<PipeOp>>& ops, int microbatches,
                                int chunks, const PipeSimOptions& o) {
  const int p = static_cast<int>(ops.size()), m = microbatches, v = chunks;
  check_shape(p, v, "pipeline simulation");
  OSLO_CHECK(m >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: ", m, " micro-batches < 1");
  check_size(static_cast<long long>(p) * v, m, "pipeline simulation",
             "(virtual stage, micro-batch) cells");
  const int stages = p * v;
  auto cost_ok = [](double t) { return std::isfinite(t) && t >= 0; };
  OSLO_CHECK(cost_ok(o.t_forward), OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: t_forward ",
             o.t_forward);
  OSLO_CHECK(cost_ok(o.t_backward), OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: t_backward ",
             o.t_backward);
  OSLO_CHECK(cost_ok(o.t_comm), OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: t_comm ",
             o.t_comm);
  OSLO_CHECK(o.stage_scale.empty() || static_cast<int>(o.stage_scale.size()) == stages,
             OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: ", o.stage_scale.size(),
             " stage scales for ", stages, " virtual stages");
  for (size_t s = 0; s < o.stage_scale.size(); ++s)
    OSLO_CHECK(cost_ok(o.stage_scale[s]), OSLO_ERR_INVALID_ARGUMENT,
               "pipeline simulation: stage scale ", o.stage_scale[s], " of virtual stage ", s);
  OSLO_CHECK(o.backward_scale.empty() || static_cast<int>(o.backward_scale.size()) == stages,
             OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: ", o.backward_scale.size(),
             " backward scales for ", stages, " virtual stages");
  for (size_t s = 0; s < o.backward_scale.size(); ++s)
    OSLO_CHECK(cost_ok(o.backward_scale[s]), OSLO_ERR_INVALID_ARGUMENT,
               "pipeline simulation: backward scale ", o.backward_scale[s], " of virtual stage ",
               s);
  OSLO_CHECK(std::isfinite(o.head_scale) && o.head_scale >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "pipeline simulation: head_scale ", o.head_scale);
  // Rank 0's list carries HEAD ops in the head-split schedule.
  const bool split = std::any_of(ops[0].begin(), ops[0].end(),
                                 [](const PipeOp& op) { return op.kind == PipeOp::HEAD; });
  OSLO_CHECK(!split || p >= 2, OSLO_ERR_INVALID_ARGUMENT,
             "pipeline simulation: head shares need two ranks or more");
  for (int r = 0; r < p; ++r) {
    try {
      check_schedule(ops[static_cast<size_t>(r)], m, v, split && r == 0);
    } catch (const Error& e) {
      fail(OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: rank ", r, ": ", e.what());
    }
  }

  // Finish times by (virtual stage, micro-batch); NaN until the op ran.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const size_t cells = static_cast<size_t>(stages) * static_cast<size_t>(m);
  std::vector<double> fwd_done(cells, nan), bwd_done(cells, nan),
      head_done(static_cast<size_t>(m), nan);
  auto cell = [m](int s, int mb) {
    return static_cast<size_t>(s) * static_cast<size_t>(m) + static_cast<size_t>(mb);
  };
  // The op (rank r's op) waits for: its kind, stage and whether it crosses ranks.
  struct Dep {
    bool any = false;
    PipeOp::Kind kind = PipeOp::FORWARD;
    int stage = 0, microbatch = 0;
  };
  auto dep_of = [&](const PipeOp& op, int s) {
    Dep d;
    if (op.kind == PipeOp::HEAD) {
      d = {true, PipeOp::FORWARD, stages - 1, op.microbatch};
    } else if (op.kind == PipeOp::FORWARD) {
      if (s > 0) d = {true, PipeOp::FORWARD, s - 1, op.microbatch};
    } else if (s < stages - 1) {
      d = {true, PipeOp::BACKWARD, s + 1, op.microbatch};
    } else if (split) {
      d = {true, PipeOp::HEAD, 0, op.microbatch};
    } else {
      d = {true, PipeOp::FORWARD, s, op.microbatch};
    }
    return d;
  };
  auto done_of = [&](const Dep& d) -> double& {
    if (d.kind == PipeOp::HEAD) return head_done[static_cast<size_t>(d.microbatch)];
    return (d.kind == PipeOp::FORWARD ? fwd_done : bwd_done)[cell(d.stage, d.microbatch)];
  };

  PipeSimResult res;
  res.busy.assign(static_cast<size_t>(p), 0.0);
  res.start.resize(static_cast<size_t>(p));
  res.finish.resize(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  for (int r = 0; r < p; ++r) {
    res.start[static_cast<size_t>(r)].assign(ops[static_cast<size_t>(r)].size(), 0.0);
    res.finish[static_cast<size_t>(r)].assign(ops[static_cast<size_t>(r)].size(), 0.0);
  }
  // Each pass runs every op whose input is there; the times do not depend
  // on the order the ranks are visited in (an op starts at the later of its
  // rank being free and its input arriving), so the result is the same as
  // that of an event queue.
  size_t left = 0;
  for (const auto& list : ops) left += list.size();
  while (left > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = ops[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      while (i < list.size()) {
        const PipeOp& op = list[i];
        const int s = virtual_stage(r, op.chunk, p);
        const Dep d = dep_of(op, s);
        double ready = 0;
        if (d.any) {
          const double t = done_of(d);
          if (std::isnan(t)) break;
          ready = t + (d.stage % p != r ? o.t_comm : 0.0);
        }
        const double scale = o.stage_scale.empty() ? 1.0 : o.stage_scale[static_cast<size_t>(s)];
        const double bscale =
            o.backward_scale.empty() ? scale : o.backward_scale[static_cast<size_t>(s)];
        const double dur = op.kind == PipeOp::HEAD ? (o.t_forward + o.t_backward) * o.head_scale
                           : op.kind == PipeOp::FORWARD ? o.t_forward * scale
                                                        : o.t_backward * bscale;
        const double start = std::max(free_at[static_cast<size_t>(r)], ready);
        const double end = start + dur;
        res.start[static_cast<size_t>(r)][i] = start;
        res.finish[static_cast<size_t>(r)][i] = end;
        res.busy[static_cast<size_t>(r)] += dur;
        free_at[static_cast<size_t>(r)] = end;
        if (op.kind == PipeOp::HEAD)
          head_done[static_cast<size_t>(op.microbatch)] = end;
        else
          (op.kind == PipeOp::FORWARD ? fwd_done : bwd_done)[cell(s, op.microbatch)] = end;
        res.makespan = std::max(res.makespan, end);
        ++i;
        --left;
        progress = true;
      }
    }
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < p; ++r) {
        const auto& list = ops[static_cast<size_t>(r)];
        const size_t i = next[static_cast<size_t>(r)];
        if (i >= list.size()) continue;
        const PipeOp& op = list[i];
        const Dep d = dep_of(op, virtual_stage(r, op.chunk, p));
        stuck += str(stuck.empty() ? "" : "; ", "rank ", r, " at op ", i, " (", op_name(op, true),
                     ") waits for ", op_name({d.kind, d.microbatch, d.stage / p}, true),
                     " on rank ", d.stage % p);
      }
      fail(OSLO_ERR_INVALID_ARGUMENT,
           "pipeline simulation: deadlock, the ranks' orders contradict "
           "each other: ",
           stuck);
    }
  }
  double busy = 0;
  for (double b : res.busy) busy += b;
  res.bubble_fraction = res.makespan > 0 ? 1.0 - busy / (p * res.makespan) : 0.0;
  return res;
}

}  // namespace oslo
