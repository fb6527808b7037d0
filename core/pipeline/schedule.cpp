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
  std::string s = op.kind == PipeOp::FORWARD ? "F" : "B";
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

void check_schedule(const std::vector<PipeOp>& ops, int microbatches, int chunks) {
  OSLO_CHECK(microbatches >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: ", microbatches,
             " micro-batches < 1");
  OSLO_CHECK(chunks >= 1, OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: chunks per rank ", chunks,
             " < 1");
  const size_t n = static_cast<size_t>(microbatches) * static_cast<size_t>(chunks);
  std::vector<char> fwd(n, 0), bwd(n, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    OSLO_CHECK(op.kind == PipeOp::FORWARD || op.kind == PipeOp::BACKWARD, OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: op ", i, " has kind ", static_cast<int>(op.kind));
    OSLO_CHECK(op.microbatch >= 0 && op.microbatch < microbatches, OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: op ", i, " (", op_name(op, true), "): micro-batch ",
               op.microbatch, " outside [0, ", microbatches, ")");
    OSLO_CHECK(op.chunk >= 0 && op.chunk < chunks, OSLO_ERR_INVALID_ARGUMENT,
               "pipeline schedule: op ", i, " (", op_name(op, true), "): chunk ", op.chunk,
               " outside [0, ", chunks, ")");
    const size_t at = static_cast<size_t>(op.chunk) * static_cast<size_t>(microbatches) +
                      static_cast<size_t>(op.microbatch);
    if (op.kind == PipeOp::FORWARD) {
      OSLO_CHECK(!fwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a forward a second time");
      fwd[at] = 1;
    } else {
      OSLO_CHECK(fwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a backward before its forward");
      OSLO_CHECK(!bwd[at], OSLO_ERR_INVALID_ARGUMENT, "pipeline schedule: op ", i, " (",
                 op_name(op, true), ") runs a backward a second time");
      bwd[at] = 1;
    }
  }
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

std::vector<PipeStep> pipeline_plan(int pipeline_size, int rank, int microbatches, int chunks,
                                    const std::vector<double>& stage_cost) {
  const int p = pipeline_size, v = chunks, m = microbatches;
  check_rank(rank, p, "pipeline plan");  // the shape is checked by pipeline_schedule
  std::vector<std::vector<PipeOp>> all;
  for (int q = 0; q < p; ++q) all.push_back(pipeline_schedule(p, q, m, v));
  PipeSimOptions so;
  so.t_forward = 1;
  so.t_backward = 2;
  so.stage_scale = stage_cost;
  OSLO_CHECK(std::all_of(stage_cost.begin(), stage_cost.end(), [](double c) { return c > 0; }),
             OSLO_ERR_INVALID_ARGUMENT, "pipeline plan: stage costs must be > 0");
  const PipeSimResult sim = simulate_pipeline(all, m, v, so);
  // When each (kind, micro-batch, virtual stage) op finishes: a message is
  // transferred at the moment its producer made it. (Timing it at its
  // consumer's start instead let the producer run whatever op it started
  // before that moment first: the interleaved plans ran with 2-4x the
  // schedule's bubble, docs/BENCHMARKS.md 12.)
  const int stages = p * v;
  std::vector<double> finish_of(static_cast<size_t>(2 * m * stages), 0);
  auto slot = [&](bool backward, int mb, int s) {
    return static_cast<size_t>((backward ? m * stages : 0) + mb * stages + s);
  };
  for (int q = 0; q < p; ++q)
    for (size_t k = 0; k < all[static_cast<size_t>(q)].size(); ++k) {
      const PipeOp& op = all[static_cast<size_t>(q)][k];
      finish_of[slot(op.kind == PipeOp::BACKWARD, op.microbatch, op.chunk * p + q)] =
          sim.finish[static_cast<size_t>(q)][k];
    }
  struct Item {
    double time;
    int cls;  // 0 transfer, 1 compute
    PipeMessage msg;
    int send_first;  // 0 send, 1 receive (a send to itself precedes its receive)
    PipeStep step;
  };
  std::vector<Item> items;
  const std::vector<PipeOp>& mine = all[static_cast<size_t>(rank)];
  for (size_t k = 0; k < mine.size(); ++k) {
    const PipeOp& op = mine[k];
    const bool bwd = op.kind == PipeOp::BACKWARD;
    const int s = op.chunk * p + rank;
    const PipePeers peers = pipe_op_peers(op, rank, p, v);
    const double t = sim.start[static_cast<size_t>(rank)][k];
    if (peers.recv_from >= 0) {
      PipeStep st;
      st.kind = PipeStep::RECV;
      st.peer = peers.recv_from;
      st.message = PipeMessage{bwd, op.microbatch, bwd ? s + 1 : s - 1};
      // At its producer's finish, which is no later than this op's start.
      items.push_back(
          {finish_of[slot(bwd, op.microbatch, st.message.from_stage)], 0, st.message, 1, st});
    }
    PipeStep c;
    c.op = op;
    items.push_back({t, 1, PipeMessage{}, 0, c});
    if (peers.send_to >= 0) {
      PipeStep st;
      st.kind = PipeStep::SEND;
      st.peer = peers.send_to;
      st.message = PipeMessage{bwd, op.microbatch, s};
      // Timed when this op finishes: the same time as its receive.
      items.push_back({finish_of[slot(bwd, op.microbatch, s)], 0, st.message, 0, st});
    }
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

int peak_live_microbatches(const std::vector<PipeOp>& ops) {
  std::set<std::pair<int, int>> live;  // (chunk, micro-batch)
  size_t peak = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
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
  for (int r = 0; r < p; ++r) {
    try {
      check_schedule(ops[static_cast<size_t>(r)], m, v);
    } catch (const Error& e) {
      fail(OSLO_ERR_INVALID_ARGUMENT, "pipeline simulation: rank ", r, ": ", e.what());
    }
  }

  // Finish times by (virtual stage, micro-batch); NaN until the op ran.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const size_t cells = static_cast<size_t>(stages) * static_cast<size_t>(m);
  std::vector<double> fwd_done(cells, nan), bwd_done(cells, nan);
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
    if (op.kind == PipeOp::FORWARD) {
      if (s > 0) d = {true, PipeOp::FORWARD, s - 1, op.microbatch};
    } else if (s < stages - 1) {
      d = {true, PipeOp::BACKWARD, s + 1, op.microbatch};
    } else {
      d = {true, PipeOp::FORWARD, s, op.microbatch};
    }
    return d;
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
          const double t =
              (d.kind == PipeOp::FORWARD ? fwd_done : bwd_done)[cell(d.stage, d.microbatch)];
          if (std::isnan(t)) break;
          ready = t + (d.stage % p != r ? o.t_comm : 0.0);
        }
        const double scale = o.stage_scale.empty() ? 1.0 : o.stage_scale[static_cast<size_t>(s)];
        const double dur = (op.kind == PipeOp::FORWARD ? o.t_forward : o.t_backward) * scale;
        const double start = std::max(free_at[static_cast<size_t>(r)], ready);
        const double end = start + dur;
        res.start[static_cast<size_t>(r)][i] = start;
        res.finish[static_cast<size_t>(r)][i] = end;
        res.busy[static_cast<size_t>(r)] += dur;
        free_at[static_cast<size_t>(r)] = end;
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
