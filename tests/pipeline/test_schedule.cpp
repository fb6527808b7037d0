// Pipeline layouts, schedules and their simulation (core/pipeline/schedule.hpp).
//
//   pipeline_schedule_test megatron
//       Every rank's order for (p, m, v) = (2, 4, 1), (4, 8, 1), (4, 8, 2)
//       equals Megatron-LM's, as tests/pipeline/megatron_order.py (a
//       transcription of Megatron's loops) printed it.
//   pipeline_schedule_test invariants
//       Every schedule for p in 1..4, m in 1..9, v in 1..3 (v > 1 only
//       when p divides m): each (micro-batch, chunk) forward and backward
//       exactly once, the backward after the forward; the activations kept
//       at the peak (1F1B: exactly min(p - r, m)); the simulation of the
//       whole pipeline finishes, every op starting as soon as its rank is
//       free and its input there.
//   pipeline_schedule_test bubble
//       The simulated bubble fraction: 1F1B (p - 1) / (m + p - 1) and
//       interleaved (p - 1) / (v m + p - 1), smaller than 1F1B's; a
//       hand-computed pipeline with communication time and one with
//       unequal stages.
//   pipeline_schedule_test partition
//       Uniform cuts as Colossal-AI's partition_uniform makes them, explicit
//       counts, first and last stages.
//   pipeline_schedule_test peers
//       Whom each op receives from and sends to (p = 4, v = 2 by hand;
//       every send matched by the receive of the next stage).
//   pipeline_schedule_test errors
//       Every invalid argument refused with OSLO_ERR_INVALID_ARGUMENT and a
//       message naming it; a deadlocked set of orders reported, not looped
//       on.
//   pipeline_schedule_test order P R M V
//       Prints rank R's order (for megatron_order.py --check, which compares
//       every p in 1..4, m in 1..9, v in 1..3 with Megatron's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/common/error.hpp"
#include "core/pipeline/schedule.hpp"
#include "tests/common/expect.hpp"

using namespace oslo;

namespace {

using oslo_test::g_fail;

std::vector<std::vector<PipeOp>> all_ranks(int p, int m, int v) {
  std::vector<std::vector<PipeOp>> ops;
  for (int r = 0; r < p; ++r) ops.push_back(pipeline_schedule(p, r, m, v));
  return ops;
}

// ------------------------------------------------------------- megatron

// Produced by `python3 tests/pipeline/megatron_order.py P M V`, a
// transcription of the warm-up / steady / cool-down loops of Megatron-LM's
// schedules.py at commit 2e2bdf6238 (get_model_chunk_id,
// get_microbatch_id_in_model_chunk, and the backward taking the oldest
// activation of its chunk, input_tensors[chunk].pop(0)); pasted here.
//
// By hand, (2, 4, 1): rank 0 warms up with min(2 - 0 - 1, 4) = 1 forward
// (F0), runs 3 steady steps (F1 B0, F2 B1, F3 B2) and cools down with B3;
// rank 1 has no warm-up and runs 4 steady steps F0 B0 ... F3 B3.
struct Expected {
  int p, m, v;
  std::vector<const char*> ranks;
};
const Expected kMegatron[] = {
    {2, 4, 1, {"F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"}},
    {4,
     8,
     1,
     {"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"}},
    {4,
     8,
     2,
     {"F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 "
      "F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 "
      "F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 "
      "F4.1 B2.0 F5.1 B3.0 F6.1 B4.1 F7.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0",
      "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 "
      "F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0"}},
};

void test_megatron() {
  for (const Expected& e : kMegatron) {
    for (int r = 0; r < e.p; ++r) {
      const std::string got = schedule_string(pipeline_schedule(e.p, r, e.m, e.v), e.v > 1);
      EXPECT(got == e.ranks[static_cast<size_t>(r)],
             "p=%d m=%d v=%d rank %d:\n  got  %s\n  want %s", e.p, e.m, e.v, r, got.c_str(),
             e.ranks[static_cast<size_t>(r)]);
    }
  }
}

// ----------------------------------------------------------- invariants

// Checks, independently of the simulation's own code, that its times honour
// the dependencies and the per-rank order, and that each op starts at the
// later of its rank being free and its input arriving.
void check_times(const std::vector<std::vector<PipeOp>>& ops, const PipeSimResult& res, int p,
                 int m, int v, const PipeSimOptions& o, const char* what) {
  const int stages = p * v;
  std::vector<double> fdone(static_cast<size_t>(stages * m), -1), bdone(fdone);
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < ops[r].size(); ++i) {
      const PipeOp& op = ops[r][i];
      const int s = op.chunk * p + r;
      (op.kind == PipeOp::FORWARD ? fdone : bdone)[static_cast<size_t>(s * m + op.microbatch)] =
          res.finish[r][i];
    }
  double makespan = 0;
  for (int r = 0; r < p; ++r) {
    double free_at = 0, busy = 0;
    for (size_t i = 0; i < ops[r].size(); ++i) {
      const PipeOp& op = ops[r][i];
      const int s = op.chunk * p + r;
      double ready = 0;
      int from = -1;
      if (op.kind == PipeOp::FORWARD && s > 0) {
        from = s - 1;
        ready = fdone[static_cast<size_t>(from * m + op.microbatch)];
      } else if (op.kind == PipeOp::BACKWARD && s < stages - 1) {
        from = s + 1;
        ready = bdone[static_cast<size_t>(from * m + op.microbatch)];
      } else if (op.kind == PipeOp::BACKWARD) {
        from = s;
        ready = fdone[static_cast<size_t>(s * m + op.microbatch)];
      }
      if (from >= 0 && from % p != r) ready += o.t_comm;
      const double scale = o.stage_scale.empty() ? 1.0 : o.stage_scale[static_cast<size_t>(s)];
      const double dur = (op.kind == PipeOp::FORWARD ? o.t_forward : o.t_backward) * scale;
      const double want_start = std::max(free_at, ready);
      EXPECT(std::fabs(res.start[r][i] - want_start) < 1e-9 &&
                 std::fabs(res.finish[r][i] - (want_start + dur)) < 1e-9,
             "%s: rank %d op %zu runs [%g, %g], want [%g, %g]", what, r, i, res.start[r][i],
             res.finish[r][i], want_start, want_start + dur);
      free_at = res.finish[r][i];
      busy += dur;
    }
    EXPECT(std::fabs(res.busy[r] - busy) < 1e-9, "%s: rank %d busy %g, want %g", what, r,
           res.busy[r], busy);
    makespan = std::max(makespan, free_at);
  }
  EXPECT(std::fabs(res.makespan - makespan) < 1e-9, "%s: makespan %g, want %g", what, res.makespan,
         makespan);
}

void test_invariants() {
  int schedules = 0;
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 9; ++m)
      for (int v = 1; v <= 3; ++v) {
        if (v > 1 && m % p != 0) continue;
        char what[64];
        std::snprintf(what, sizeof what, "p=%d m=%d v=%d", p, m, v);
        const auto ops = all_ranks(p, m, v);
        for (int r = 0; r < p; ++r) {
          const auto& list = ops[static_cast<size_t>(r)];
          EXPECT(list.size() == static_cast<size_t>(2 * m * v), "%s rank %d: %zu ops", what, r,
                 list.size());
          // Position of each forward and backward, -1: not run.
          std::vector<int> fpos(static_cast<size_t>(m * v), -1), bpos(fpos);
          bool ranges = true;
          for (size_t i = 0; i < list.size(); ++i) {
            const PipeOp& op = list[i];
            if (op.microbatch < 0 || op.microbatch >= m || op.chunk < 0 || op.chunk >= v) {
              ranges = false;
              continue;
            }
            auto& pos = op.kind == PipeOp::FORWARD ? fpos : bpos;
            int& at = pos[static_cast<size_t>(op.chunk * m + op.microbatch)];
            EXPECT(at < 0, "%s rank %d: %c%d.%d runs twice", what, r,
                   op.kind == PipeOp::FORWARD ? 'F' : 'B', op.microbatch, op.chunk);
            at = static_cast<int>(i);
          }
          EXPECT(ranges, "%s rank %d: an op outside the micro-batches or chunks", what, r);
          for (int c = 0; c < v; ++c)
            for (int mb = 0; mb < m; ++mb) {
              const int f = fpos[static_cast<size_t>(c * m + mb)],
                        b = bpos[static_cast<size_t>(c * m + mb)];
              EXPECT(f >= 0 && b >= 0 && b > f,
                     "%s rank %d: micro-batch %d chunk %d F at %d B at %d", what, r, mb, c, f, b);
            }
          // 1F1B keeps min(p - r, m) activations; interleaved the warm-up's
          // forwards plus the first steady one (all of them when m == p).
          const int peak = peak_live_microbatches(list);
          const int want = v == 1   ? std::min(p - r, m)
                           : m == p ? m * v
                                    : std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
          EXPECT(peak == want, "%s rank %d: peak of %d live micro-batches, want %d", what, r, peak,
                 want);
          EXPECT(v > 1 || peak <= p, "%s rank %d: 1F1B peak %d > p", what, r, peak);
          try {
            check_schedule(list, m, v);
          } catch (const Error& e) {
            EXPECT(false, "%s rank %d: check_schedule: %s", what, r, e.what());
          }
        }
        for (double t_comm : {0.0, 0.25}) {
          PipeSimOptions o;
          o.t_comm = t_comm;
          try {
            const PipeSimResult res = simulate_pipeline(ops, m, v, o);
            check_times(ops, res, p, m, v, o, what);
          } catch (const Error& e) {
            EXPECT(false, "%s: simulation failed: %s", what, e.what());
          }
        }
        ++schedules;
      }
  std::printf("%d (p, m, v) schedules checked\n", schedules);
}

// --------------------------------------------------------------- bubble

void test_bubble() {
  const int p = 2;
  for (int m : {4, 8}) {
    PipeSimOptions o;  // t_b = 2 t_f, no communication time
    const PipeSimResult one = simulate_pipeline(all_ranks(p, m, 1), m, 1, o);
    const double want1 = static_cast<double>(p - 1) / (m + p - 1);
    // 1F1B: makespan (m + p - 1)(t_f + t_b), each rank busy m (t_f + t_b).
    EXPECT(std::fabs(one.bubble_fraction - want1) < 1e-12 &&
               std::fabs(one.makespan - (m + p - 1) * 3.0) < 1e-12,
           "p=%d m=%d 1F1B: bubble %.9f makespan %g, want %.9f and %g", p, m, one.bubble_fraction,
           one.makespan, want1, (m + p - 1) * 3.0);
    const int v = 2;
    // Each chunk holds half the layers: half the cost per op.
    o.t_forward = 0.5;
    o.t_backward = 1.0;
    const PipeSimResult two = simulate_pipeline(all_ranks(p, m, v), m, v, o);
    const double want2 = static_cast<double>(p - 1) / (v * m + p - 1);
    std::printf(
        "p=%d m=%d: 1F1B bubble %.6f (formula %.6f), interleaved v=%d %.6f (formula %.6f)\n", p, m,
        one.bubble_fraction, want1, v, two.bubble_fraction, want2);
    EXPECT(two.bubble_fraction < one.bubble_fraction, "p=%d m=%d: interleaved bubble %.6f >= %.6f",
           p, m, two.bubble_fraction, one.bubble_fraction);
    // The Megatron paper's (p - 1) / v bubble per m micro-batches, as a
    // fraction of the whole time: (p - 1) / (v m + p - 1). With equal
    // stages and no communication time it comes out exact here; assert
    // within 1e-9 relative (10% was the budget).
    EXPECT(std::fabs(two.bubble_fraction - want2) <= 1e-9 * want2,
           "p=%d m=%d v=%d: bubble %.9f, formula %.9f (%.3g relative)", p, m, v,
           two.bubble_fraction, want2, (two.bubble_fraction - want2) / want2);
  }
  // The same formulas for the larger shapes (and t_b = t_f, 3 t_f), also
  // exact with equal stages.
  for (double tb : {1.0, 2.0, 3.0})
    for (int pp : {3, 4})
      for (int m : {4, 8, 12})
        for (int v : {1, 2, 3}) {
          if (v > 1 && m % pp != 0) continue;
          PipeSimOptions o;
          o.t_backward = tb;
          const PipeSimResult res = simulate_pipeline(all_ranks(pp, m, v), m, v, o);
          const double want = static_cast<double>(pp - 1) / (v * m + pp - 1);
          EXPECT(std::fabs(res.bubble_fraction - want) <= 1e-9 * want,
                 "t_b=%g p=%d m=%d v=%d: bubble %.9f, formula %.9f", tb, pp, m, v,
                 res.bubble_fraction, want);
        }

  // By hand: p = 2, m = 1, t_f 1, t_b 2, t_comm 0.5. Rank 0 F0 [0, 1];
  // rank 1 F0 [1.5, 2.5], B0 [2.5, 4.5]; rank 0 B0 [5, 7]. Busy 3 + 3 of
  // 2 x 7.
  {
    PipeSimOptions o;
    o.t_comm = 0.5;
    const auto ops = all_ranks(2, 1, 1);
    const PipeSimResult res = simulate_pipeline(ops, 1, 1, o);
    EXPECT(res.makespan == 7.0 && res.start[1][0] == 1.5 && res.start[0][1] == 5.0 &&
               std::fabs(res.bubble_fraction - 4.0 / 7.0) < 1e-12,
           "t_comm 0.5: makespan %g, rank 1 F0 at %g, rank 0 B0 at %g, bubble %g", res.makespan,
           res.start[1][0], res.start[0][1], res.bubble_fraction);
  }
  // By hand: p = 2, m = 2, rank 1's stage twice as slow. Rank 0 F0 [0, 1],
  // F1 [1, 2]; rank 1 F0 [1, 3], B0 [3, 7]; rank 0 B0 [7, 9]; rank 1 F1
  // [7, 9], B1 [9, 13]; rank 0 B1 [13, 15]. Busy 6 + 12 of 2 x 15.
  {
    PipeSimOptions o;
    o.stage_scale = {1.0, 2.0};
    const PipeSimResult res = simulate_pipeline(all_ranks(2, 2, 1), 2, 1, o);
    EXPECT(res.makespan == 15.0 && res.busy[0] == 6.0 && res.busy[1] == 12.0 &&
               std::fabs(res.bubble_fraction - 0.4) < 1e-12,
           "unequal stages: makespan %g busy %g %g bubble %g", res.makespan, res.busy[0],
           res.busy[1], res.bubble_fraction);
  }
}

// ------------------------------------------------------------ partition

std::string ranges(const PipelinePartition& part) {
  std::string s;
  for (const LayerRange& r : part.stages)
    s += (s.empty() ? "" : " ") + std::to_string(r.begin) + "-" + std::to_string(r.end);
  return s;
}

void test_partition() {
  // Expected: Colossal-AI's partition_uniform(L, p, v) run on these
  // arguments (its [(begin, end)] per rank, per chunk), rewritten by
  // virtual stage chunk * p + rank as "begin-end".
  struct Case {
    int layers, p, v;
    const char* want;
  };
  const Case cases[] = {
      {12, 4, 1, "0-3 3-6 6-9 9-12"},
      {10, 4, 1, "0-2 2-4 4-7 7-10"},  // remainder 2: the last two ranks
      {7, 3, 1, "0-2 2-4 4-7"},
      {16, 2, 2, "0-4 4-8 8-12 12-16"},
      {24, 4, 2, "0-3 3-6 6-9 9-12 12-15 15-18 18-21 21-24"},
      {22, 4, 2, "0-2 2-5 5-8 8-11 11-13 13-16 16-19 19-22"},  // 11 per chunk
      {9, 2, 3, "0-1 1-3 3-4 4-6 6-7 7-9"},
      {5, 1, 1, "0-5"},
      {8, 8, 1, "0-1 1-2 2-3 3-4 4-5 5-6 6-7 7-8"},
  };
  for (const Case& c : cases) {
    const PipelinePartition part = partition_uniform(c.layers, c.p, c.v);
    const std::string got = ranges(part);
    EXPECT(got == c.want, "uniform %d over p=%d v=%d: %s, want %s", c.layers, c.p, c.v, got.c_str(),
           c.want);
    EXPECT(part.pipeline_size == c.p && part.chunks == c.v && part.num_layers() == c.layers,
           "uniform %d over p=%d v=%d: shape %d x %d, %d layers", c.layers, c.p, c.v,
           part.pipeline_size, part.chunks, part.num_layers());
  }
  // Rank 1 of p = 2, v = 2 over 16 layers: chunks 4-8 and 12-16.
  const PipelinePartition p16 = partition_uniform(16, 2, 2);
  EXPECT(p16.at(1, 0).begin == 4 && p16.at(1, 0).end == 8 && p16.at(1, 1).begin == 12 &&
             p16.at(1, 1).end == 16 && p16.at(0, 1).size() == 4,
         "16 over p=2 v=2: rank 1 holds %d-%d and %d-%d", p16.at(1, 0).begin, p16.at(1, 0).end,
         p16.at(1, 1).begin, p16.at(1, 1).end);

  const PipelinePartition expl = partition_counts(10, 2, 2, {1, 4, 3, 2});
  EXPECT(ranges(expl) == "0-1 1-5 5-8 8-10" && expl.at(0, 1).begin == 5 && expl.at(1, 1).end == 10,
         "explicit 1 4 3 2: %s", ranges(expl).c_str());

  EXPECT(is_first_stage(0, 0) && !is_first_stage(0, 1) && !is_first_stage(1, 0), "is_first_stage");
  EXPECT(is_last_stage(3, 1, 4, 2) && !is_last_stage(3, 0, 4, 2) && !is_last_stage(2, 1, 4, 2) &&
             is_last_stage(0, 0, 1, 1) && is_first_stage(0, 0),
         "is_last_stage");
  EXPECT(virtual_stage(3, 1, 4) == 7 && virtual_stage(0, 1, 4) == 4, "virtual_stage");
}

// ---------------------------------------------------------------- peers

void test_peers() {
  const int p = 4, v = 2;
  struct Case {
    PipeOp::Kind kind;
    int rank, chunk, recv, send;
    const char* what;
  };
  const Case cases[] = {
      {PipeOp::FORWARD, 0, 0, -1, 1, "stage 0 forward: input from the data"},
      {PipeOp::FORWARD, 3, 0, 2, 0, "stage 3 forward: sends to rank 0 chunk 1"},
      {PipeOp::FORWARD, 0, 1, 3, 1, "stage 4 forward: from rank 3 chunk 0"},
      {PipeOp::FORWARD, 3, 1, 2, -1, "stage 7 forward: the loss, nothing sent"},
      {PipeOp::BACKWARD, 3, 1, -1, 2, "stage 7 backward: from its own loss"},
      {PipeOp::BACKWARD, 0, 1, 1, 3, "stage 4 backward: gradient to rank 3 chunk 0"},
      {PipeOp::BACKWARD, 3, 0, 0, 2, "stage 3 backward: gradient from rank 0 chunk 1"},
      {PipeOp::BACKWARD, 0, 0, 1, -1, "stage 0 backward: nothing to send"},
      {PipeOp::FORWARD, 1, 0, 0, 2, "stage 1 forward"},
  };
  for (const Case& c : cases) {
    const PipePeers got = pipe_op_peers({c.kind, 0, c.chunk}, c.rank, p, v);
    EXPECT(got.recv_from == c.recv && got.send_to == c.send, "%s: recv %d send %d, want %d %d",
           c.what, got.recv_from, got.send_to, c.recv, c.send);
  }
  // p = 1: the peers of the middle stages are the rank itself.
  const PipePeers one = pipe_op_peers({PipeOp::FORWARD, 0, 1}, 0, 1, 3);
  EXPECT(one.recv_from == 0 && one.send_to == 0, "p=1 v=3 chunk 1: recv %d send %d", one.recv_from,
         one.send_to);
  const PipePeers single = pipe_op_peers({PipeOp::BACKWARD, 0, 0}, 0, 1, 1);
  EXPECT(single.recv_from == -1 && single.send_to == -1, "p=1 v=1: recv %d send %d",
         single.recv_from, single.send_to);
  // Every activation sent by stage s is received by stage s + 1 from s's
  // rank, every gradient the same way back.
  for (int pp = 1; pp <= 4; ++pp)
    for (int vv = 1; vv <= 3; ++vv)
      for (int s = 0; s + 1 < pp * vv; ++s) {
        const int r = s % pp, c = s / pp, r2 = (s + 1) % pp, c2 = (s + 1) / pp;
        const PipePeers f = pipe_op_peers({PipeOp::FORWARD, 0, c}, r, pp, vv);
        const PipePeers f2 = pipe_op_peers({PipeOp::FORWARD, 0, c2}, r2, pp, vv);
        const PipePeers b = pipe_op_peers({PipeOp::BACKWARD, 0, c}, r, pp, vv);
        const PipePeers b2 = pipe_op_peers({PipeOp::BACKWARD, 0, c2}, r2, pp, vv);
        EXPECT(f.send_to == r2 && f2.recv_from == r && b2.send_to == r && b.recv_from == r2,
               "p=%d v=%d stages %d -> %d: F send %d recv %d, B send %d recv %d", pp, vv, s, s + 1,
               f.send_to, f2.recv_from, b2.send_to, b.recv_from);
      }
}

// ----------------------------------------------------------------- plan

// Runs every rank's plan with sends that block until the peer is at the
// matching receive (a send to itself is buffered): true when every plan
// completes; each rank's compute steps must be its schedule, and every
// transfer must match one on the peer.
bool blocking_complete(const std::vector<std::vector<PipeStep>>& plans, int v, bool split,
                       std::string* why);

bool plans_complete(int p, int m, int v, std::string* why, const std::vector<double>& cost = {}) {
  std::vector<std::vector<PipeStep>> plans;
  for (int r = 0; r < p; ++r) {
    plans.push_back(pipeline_plan(p, r, m, v, cost));
    std::vector<PipeOp> ops;
    for (const PipeStep& st : plans.back())
      if (st.kind == PipeStep::COMPUTE) ops.push_back(st.op);
    if (ops != pipeline_schedule(p, r, m, v)) {
      *why = "rank " + std::to_string(r) + "'s compute steps are not its schedule";
      return false;
    }
  }
  return blocking_complete(plans, v, false, why);
}

// Runs the ranks' plans with sends that block until the peer is at the
// matching receive (a send to itself is buffered): true when every plan
// completes, every transfer matching one on the peer, every op after its
// inputs arrived (with `split`: a HEAD after the head input, the last
// stage's backward after the head gradient) and every send after its
// message was made.
bool blocking_complete(const std::vector<std::vector<PipeStep>>& plans_in, int v, bool split,
                       std::string* why) {
  std::vector<std::vector<PipeStep>> plans = plans_in;
  const int p = static_cast<int>(plans.size());
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<std::vector<PipeMessage>> self(static_cast<size_t>(p));
  // A step that consumed an input before it was received, or sent an output
  // before it was made, is caught by tracking what each rank holds.
  using Key = std::tuple<bool, bool, int, int>;
  std::vector<std::set<Key>> made(static_cast<size_t>(p)), held(static_cast<size_t>(p));
  auto key = [](const PipeMessage& msg) {
    return std::make_tuple(msg.head, msg.gradient, msg.microbatch, msg.from_stage);
  };
  const int last = p * v - 1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& plan = plans[static_cast<size_t>(r)];
      size_t& i = pc[static_cast<size_t>(r)];
      while (i < plan.size()) {
        const PipeStep& st = plan[i];
        if (st.kind == PipeStep::COMPUTE) {
          const PipeOp& op = st.op;
          auto& h = held[static_cast<size_t>(r)];
          if (op.kind == PipeOp::HEAD) {
            if (r != 0 || !h.count(Key{true, false, op.microbatch, last})) {
              *why = "rank " + std::to_string(r) + " runs a head share without its input";
              return false;
            }
            made[0].insert(Key{true, true, op.microbatch, 0});
            ++i;
            progress = true;
            continue;
          }
          const bool bwd = op.kind == PipeOp::BACKWARD;
          const int s = op.chunk * p + r;
          if ((!bwd && s > 0) || (bwd && s < last)) {
            if (!h.count(Key{false, bwd, op.microbatch, bwd ? s + 1 : s - 1})) {
              *why = "rank " + std::to_string(r) + " computes before receiving its input";
              return false;
            }
          }
          if (split && bwd && s == last && !h.count(Key{true, true, op.microbatch, 0})) {
            *why = "the last stage's backward runs before the head gradient came";
            return false;
          }
          made[static_cast<size_t>(r)].insert(Key{false, bwd, op.microbatch, s});
          if (split && !bwd && s == last)
            made[static_cast<size_t>(r)].insert(Key{true, false, op.microbatch, last});
          ++i;
          progress = true;
          continue;
        }
        if (st.kind == PipeStep::SEND) {
          if (!made[static_cast<size_t>(r)].count(key(st.message))) {
            *why = "rank " + std::to_string(r) + " sends before making the message";
            return false;
          }
          if (st.peer == r) {
            self[static_cast<size_t>(r)].push_back(st.message);
            ++i;
            progress = true;
            continue;
          }
          auto& other = plans[static_cast<size_t>(st.peer)];
          size_t& j = pc[static_cast<size_t>(st.peer)];
          if (j < other.size() && other[j].kind == PipeStep::RECV && other[j].peer == r &&
              other[j].message == st.message) {
            held[static_cast<size_t>(st.peer)].insert(key(st.message));
            ++i;
            ++j;
            progress = true;
            continue;
          }
          break;
        }
        // RECV: only from itself here (others complete in their sender's turn).
        auto& q = self[static_cast<size_t>(r)];
        if (st.peer == r && !q.empty() && q.front() == st.message) {
          q.erase(q.begin());
          held[static_cast<size_t>(r)].insert(key(st.message));
          ++i;
          progress = true;
          continue;
        }
        break;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[static_cast<size_t>(r)] != plans[static_cast<size_t>(r)].size()) {
      *why = "deadlock: rank " + std::to_string(r) + " stuck at step " +
             std::to_string(pc[static_cast<size_t>(r)]);
      return false;
    }
  return true;
}

// Runs the ranks' plans in time with eager sends (a send never waits; a
// receive waits for its message), forward t = cost[s], backward 2 cost[s],
// a HEAD 3 head_cost, no transfer time: returns the bubble fraction, and
// clears *on_time when an op starts later than simulate_pipeline says it
// may for the same costs and the ranks' orders `ops`.
double eager_bubble(const std::vector<std::vector<PipeStep>>& plans,
                    const std::vector<std::vector<PipeOp>>& ops, int m, int v,
                    const std::vector<double>& cost, double head_cost, bool* on_time,
                    const std::vector<double>& bcost = {}) {
  const int p = static_cast<int>(plans.size());
  PipeSimOptions so;
  so.stage_scale = cost;
  so.head_scale = head_cost;
  for (double b : bcost) so.backward_scale.push_back(b / 2);
  const PipeSimResult sim = simulate_pipeline(ops, m, v, so);
  std::vector<size_t> pc(static_cast<size_t>(p), 0), done(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0);
  std::map<std::tuple<bool, bool, int, int>, double> sent;
  double busy = 0;
  *on_time = true;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& plan = plans[static_cast<size_t>(r)];
      size_t& i = pc[static_cast<size_t>(r)];
      double& t = clock[static_cast<size_t>(r)];
      while (i < plan.size()) {
        const PipeStep& st = plan[i];
        const auto key = std::make_tuple(st.message.head, st.message.gradient,
                                         st.message.microbatch, st.message.from_stage);
        if (st.kind == PipeStep::COMPUTE) {
          const size_t k = done[static_cast<size_t>(r)]++;
          if (t > sim.start[static_cast<size_t>(r)][k] + 1e-9) *on_time = false;
          const size_t si = static_cast<size_t>(st.op.chunk * p + r);
          const double c = cost.empty() ? 1.0 : cost[si];
          const double d = st.op.kind == PipeOp::HEAD       ? 3 * head_cost
                           : st.op.kind == PipeOp::BACKWARD ? (bcost.empty() ? 2 * c : bcost[si])
                                                            : c;
          t += d;
          busy += d;
        } else if (st.kind == PipeStep::SEND) {
          sent[key] = t;
        } else {
          auto it = sent.find(key);
          if (it == sent.end()) break;
          t = std::max(t, it->second);
        }
        ++i;
        progress = true;
      }
    }
  }
  double makespan = 0;
  for (int r = 0; r < p; ++r) {
    if (pc[static_cast<size_t>(r)] != plans[static_cast<size_t>(r)].size()) return -1;
    makespan = std::max(makespan, clock[static_cast<size_t>(r)]);
  }
  return 1 - busy / (p * makespan);
}

// eager_bubble for Megatron's schedules, the plans made with plan_cost.
double executed_bubble(int p, int m, int v, const std::vector<double>& cost,
                       const std::vector<double>& plan_cost, bool* on_time) {
  std::vector<std::vector<PipeStep>> plans;
  std::vector<std::vector<PipeOp>> ops;
  for (int r = 0; r < p; ++r) {
    plans.push_back(pipeline_plan(p, r, m, v, plan_cost));
    ops.push_back(pipeline_schedule(p, r, m, v));
  }
  return eager_bubble(plans, ops, m, v, cost, 0, on_time);
}

void test_plan() {
  int cases = 0;
  // With eager sends the plans run exactly as simulated: every op starts
  // when the simulation starts it, for equal and for unequal stages (the
  // plan made with the same costs). Made with equal costs for unequal
  // stages, the interleaved plans wait longer (what GPT-2's 4 + 3 + 4 + 1
  // blocks and head measured: docs/BENCHMARKS.md 12).
  for (int v = 1; v <= 2; ++v)
    for (int p = 2; p <= 4; ++p)
      for (int m : {4, 6, 8}) {
        if (v > 1 && m % p != 0) continue;
        std::vector<double> equal, skewed;
        for (int s = 0; s < p * v; ++s)
          skewed.push_back(1.0 + 0.7 * ((s * 5) % 3) + (s == p * v - 1 ? 2.5 : 0));
        for (const auto& cost : {equal, skewed}) {
          bool on_time = false;
          const double b = executed_bubble(p, m, v, cost, cost, &on_time);
          std::vector<std::vector<PipeOp>> ops;
          for (int r = 0; r < p; ++r) ops.push_back(pipeline_schedule(p, r, m, v));
          PipeSimOptions so;
          so.stage_scale = cost;
          const double want = simulate_pipeline(ops, m, v, so).bubble_fraction;
          EXPECT(on_time && std::fabs(b - want) < 1e-9,
                 "p %d m %d v %d %s stages: executed bubble %.4f, simulated %.4f, on time %d", p, m,
                 v, cost.empty() ? "equal" : "unequal", b, want, on_time);
          std::string why;
          EXPECT(plans_complete(p, m, v, &why, cost), "p %d m %d v %d with costs: %s", p, m, v,
                 why.c_str());
          // Backward costs of their own (1.2x the forward): on time too.
          if (!cost.empty()) {
            std::vector<double> back;
            for (double x : cost) back.push_back(1.2 * x);
            std::vector<std::vector<PipeStep>> plans;
            std::vector<std::vector<PipeOp>> ops;
            for (int r = 0; r < p; ++r) {
              plans.push_back(pipeline_plan(p, r, m, v, cost, back));
              ops.push_back(pipeline_schedule(p, r, m, v));
            }
            EXPECT(blocking_complete(plans, v, false, &why), "p %d m %d v %d backward costs: %s", p,
                   m, v, why.c_str());
            bool late_ok = false;
            eager_bubble(plans, ops, m, v, cost, 0, &late_ok, back);
            EXPECT(late_ok, "p %d m %d v %d backward costs: eager replay late", p, m, v);
          }
        }
      }
  {
    bool on_time = true;
    const double blind = executed_bubble(2, 8, 2, {4, 3, 4, 6.45}, {}, &on_time);
    const double told = executed_bubble(2, 8, 2, {4, 3, 4, 6.45}, {4, 3, 4, 6.45}, &on_time);
    std::printf(
        "GPT-2 4+3+4+1 blocks + head, p 2 v 2 m 8: bubble %.3f with a plan for equal "
        "stages, %.3f with the stages' costs\n",
        blind, told);
    EXPECT(told < blind - 0.02, "the plan with the stages' costs (%.3f) beats the blind one (%.3f)",
           told, blind);
  }
  for (int v = 1; v <= 3; ++v)
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 12; ++m) {
        if (v > 1 && m % p != 0) continue;
        std::string why;
        EXPECT(plans_complete(p, m, v, &why), "p %d m %d v %d: %s", p, m, v, why.c_str());
        ++cases;
      }
  // v == 1: every message is received as soon as its producer made it: in
  // the steady state a middle rank takes its next input (made during its
  // previous forward's send) before the gradient of the backward it runs
  // next, and sends that backward's gradient before its next forward.
  const std::vector<PipeStep> plan = pipeline_plan(3, 1, 4, 1);
  std::string seq;
  for (const PipeStep& st : plan) {
    if (!seq.empty()) seq += ' ';
    if (st.kind == PipeStep::COMPUTE)
      seq += (st.op.kind == PipeOp::FORWARD ? "F" : "B") + std::to_string(st.op.microbatch);
    else
      seq += std::string(st.kind == PipeStep::SEND ? "s" : "r") +
             (st.message.gradient ? "g" : "a") + std::to_string(st.message.microbatch);
  }
  const std::string want =
      "ra0 F0 sa0 ra1 F1 sa1 ra2 rg0 B0 sg0 F2 sa2 rg1 B1 ra3 sg1 F3 sa3 rg2 B2 sg2 rg3 B3 sg3";
  EXPECT(seq == want, "plan(3, 1, 4, 1): %s\n  want %s", seq.c_str(), want.c_str());
  std::printf("pipeline plans: %d (p, m, v) cases complete with blocking sends\n", cases);
}

// ------------------------------------------------------------ head split

void test_head_split() {
  int cases = 0;
  // Costs (forward, by virtual stage): equal stages with a small share;
  // skewed stages; GPT-2 small (a block 1, the head 5.4) at 6 + 6 blocks
  // with half the head each, at 7 + 5 with 0.315 of it on the first stage,
  // and at v = 2 with 3 blocks a chunk and half the head each.
  for (int v = 1; v <= 2; ++v)
    for (int p = 2; p <= 5; ++p)
      for (int m = 1; m <= 12; ++m) {
        const int S = p * v;
        std::vector<std::pair<std::vector<double>, double>> costs;
        costs.push_back({std::vector<double>(static_cast<size_t>(S), 1.0), 0.2});
        std::vector<double> skewed;
        for (int s = 0; s < S; ++s) skewed.push_back(1.0 + 0.7 * ((s * 5) % 3));
        costs.push_back({skewed, 1.3});
        if (p == 2 && v == 1) {
          costs.push_back({{6, 6 + 2.7}, 2.7});
          costs.push_back({{7, 5 + 5.4 * 0.685}, 5.4 * 0.315});
        }
        if (p == 2 && v == 2) costs.push_back({{3, 3, 3, 3 + 2.7}, 2.7});
        for (const auto& c : costs) {
          const auto ops = pipeline_schedule_head_split(p, m, v, c.first, c.second);
          std::vector<std::vector<PipeStep>> plans;
          for (int r = 0; r < p; ++r) {
            const auto& mine = ops[static_cast<size_t>(r)];
            // At most p - r + 1 + v micro-batches alive on rank r (each in
            // up to v chunks).
            const int peak = peak_live_microbatches(mine);
            EXPECT(peak <= v * std::min(p - r + 1 + v, m), "p %d v %d m %d rank %d: %d alive", p, v,
                   m, r, peak);
            plans.push_back(pipeline_plan_head_split(p, r, m, v, c.first, c.second));
            std::vector<PipeOp> computes;
            for (const PipeStep& st : plans.back())
              if (st.kind == PipeStep::COMPUTE) computes.push_back(st.op);
            EXPECT(computes == mine,
                   "p %d v %d m %d rank %d: the plan's computes are not its order", p, v, m, r);
          }
          std::string why;
          EXPECT(blocking_complete(plans, v, true, &why), "p %d v %d m %d: %s", p, v, m,
                 why.c_str());
          bool on_time = false;
          const double b = eager_bubble(plans, ops, m, v, c.first, c.second, &on_time);
          EXPECT(on_time && b >= 0, "p %d v %d m %d: eager replay late (bubble %.4f)", p, v, m, b);
          // Backwards that are not twice the forwards (1.3x here, the
          // last stage's 1.1x: the head's cross-entropy in its forward).
          std::vector<double> back;
          for (int s = 0; s < S; ++s)
            back.push_back(c.first[static_cast<size_t>(s)] * (s == S - 1 ? 1.1 : 1.3));
          const auto ops2 = pipeline_schedule_head_split(p, m, v, c.first, c.second, back);
          std::vector<std::vector<PipeStep>> plans2;
          for (int r = 0; r < p; ++r)
            plans2.push_back(pipeline_plan_head_split(p, r, m, v, c.first, c.second, back));
          EXPECT(blocking_complete(plans2, v, true, &why), "p %d v %d m %d backward costs: %s", p,
                 v, m, why.c_str());
          const double b2 = eager_bubble(plans2, ops2, m, v, c.first, c.second, &on_time, back);
          EXPECT(on_time && b2 >= 0, "p %d v %d m %d backward costs: eager replay late (%.4f)", p,
                 v, m, b2);
          ++cases;
        }
      }
  // GPT-2 small's stages at p = 2: Megatron's best whole-block cut (9 + 3)
  // against the head split at 6 + 6, half the head each; interleaved, its
  // 4 + 3 + 4 + 1 blocks against 3 blocks a chunk with the split.
  for (int m : {4, 8}) {
    PipeSimOptions so;
    so.stage_scale = {9, 3 + 5.4};
    std::vector<std::vector<PipeOp>> mega{pipeline_schedule(2, 0, m, 1),
                                          pipeline_schedule(2, 1, m, 1)};
    const PipeSimResult a = simulate_pipeline(mega, m, 1, so);
    so.stage_scale = {6, 6 + 2.7};
    so.head_scale = 2.7;
    const PipeSimResult b =
        simulate_pipeline(pipeline_schedule_head_split(2, m, 1, {6, 6 + 2.7}, 2.7), m, 1, so);
    PipeSimOptions si;
    si.stage_scale = {4, 3, 4, 1 + 5.4};
    std::vector<std::vector<PipeOp>> inter{pipeline_schedule(2, 0, m, 2),
                                           pipeline_schedule(2, 1, m, 2)};
    const PipeSimResult c = simulate_pipeline(inter, m, 2, si);
    si.stage_scale = {3, 3, 3, 3 + 2.7};
    si.head_scale = 2.7;
    const PipeSimResult d =
        simulate_pipeline(pipeline_schedule_head_split(2, m, 2, {3, 3, 3, 3 + 2.7}, 2.7), m, 2, si);
    std::printf(
        "GPT-2 small, p 2, m %d: 1F1B 9 + 3 blocks bubble %.3f makespan %.1f; head split 6 + 6 "
        "bubble %.3f makespan %.1f (1F1B theory %.3f); interleaved 4+3+4+1 bubble %.3f makespan "
        "%.1f; head split 3+3+3+3 bubble %.3f makespan %.1f (interleaved theory %.3f)\n",
        m, a.bubble_fraction, a.makespan, b.bubble_fraction, b.makespan, 1.0 / (m + 1),
        c.bubble_fraction, c.makespan, d.bubble_fraction, d.makespan, 1.0 / (2 * m + 1));
    EXPECT(b.makespan < a.makespan - 1, "m %d: the head split (%.1f) beats 9 + 3 (%.1f)", m,
           b.makespan, a.makespan);
    EXPECT(b.bubble_fraction <= 1.0 / (m + 1), "m %d: bubble %.3f above 1F1B's theory", m,
           b.bubble_fraction);
    EXPECT(d.makespan < c.makespan - 1 && d.bubble_fraction <= 1.0 / (2 * m + 1),
           "m %d: interleaved with the head split (%.1f, bubble %.3f) against without (%.1f)", m,
           d.makespan, d.bubble_fraction, c.makespan);
  }
  // Rank 0 of p = 2, m = 4 for 6 + 6 blocks and half the head.
  const auto o = pipeline_schedule_head_split(2, 4, 1, {6, 8.7}, 2.7);
  const std::string got0 = schedule_string(o[0], false), got1 = schedule_string(o[1], false);
  std::printf("head split p 2 m 4: rank 0 %s | rank 1 %s\n", got0.c_str(), got1.c_str());
  std::printf("head-split schedules: %d (p, v, m, costs) cases complete with blocking sends\n",
              cases);
}

// --------------------------------------------------------------- errors

// Expects `fn` to throw OSLO_ERR_INVALID_ARGUMENT with every one of `parts`
// in the message.
void expect_error(const char* what, const std::function<void()>& fn,
                  const std::vector<const char*>& parts) {
  try {
    fn();
    EXPECT(false, "%s: accepted", what);
  } catch (const Error& e) {
    bool named = true;
    for (const char* part : parts) named = named && std::strstr(e.what(), part) != nullptr;
    EXPECT(e.status() == OSLO_ERR_INVALID_ARGUMENT && named, "%s: status %d, message '%s'", what,
           static_cast<int>(e.status()), e.what());
  }
}

void test_errors() {
  // Partitions.
  expect_error("uniform p 0", [] { partition_uniform(8, 0, 1); }, {"pipeline size 0"});
  expect_error("uniform v 0", [] { partition_uniform(8, 2, 0); }, {"chunks per rank 0"});
  expect_error("uniform v -1", [] { partition_uniform(8, 2, -1); }, {"chunks per rank -1"});
  expect_error("uniform too few layers", [] { partition_uniform(7, 4, 2); },
               {"7 layers", "8 virtual stages"});
  expect_error("uniform layers % v", [] { partition_uniform(9, 2, 2); },
               {"9 layers", "multiple of the 2 chunks"});
  expect_error("counts length",
               [] {
                 partition_counts(8, 2, 2, {2, 2, 4});
               },
               {"3 layer counts", "4 virtual stages"});
  expect_error("counts zero",
               [] {
                 partition_counts(8, 2, 2, {2, 0, 3, 3});
               },
               {"layer count 0", "virtual stage 1", "rank 1 chunk 0"});
  expect_error("counts negative",
               [] {
                 partition_counts(8, 2, 2, {2, 3, -1, 4});
               },
               {"layer count -1", "virtual stage 2", "rank 0 chunk 1"});
  expect_error("counts sum",
               [] {
                 partition_counts(9, 2, 2, {2, 2, 2, 2});
               },
               {"sum to 8", "9 layers"});
  expect_error("counts p 0", [] { partition_counts(8, 0, 2, {}); }, {"pipeline size 0"});
  const PipelinePartition part = partition_uniform(8, 2, 2);
  expect_error("at rank", [&] { part.at(2, 0); }, {"rank 2", "[0, 2)"});
  expect_error("at chunk", [&] { part.at(0, -1); }, {"chunk -1", "[0, 2)"});

  // Schedules.
  expect_error("schedule p 0", [] { pipeline_schedule(0, 0, 4, 1); }, {"pipeline size 0"});
  expect_error("schedule rank -1", [] { pipeline_schedule(2, -1, 4, 1); }, {"rank -1"});
  expect_error("schedule rank p", [] { pipeline_schedule(2, 2, 4, 1); }, {"rank 2", "[0, 2)"});
  expect_error("schedule m 0", [] { pipeline_schedule(2, 0, 0, 1); }, {"0 micro-batches"});
  expect_error("schedule v 0", [] { pipeline_schedule(2, 0, 4, 0); }, {"chunks per rank 0"});
  expect_error("schedule too many steps", [] { pipeline_schedule(2, 0, 1 << 30, 3); },
               {"1073741824 x 3 micro-batch steps", "too many"});
  expect_error("schedule m % p", [] { pipeline_schedule(4, 1, 6, 2); },
               {"6 micro-batches", "pipeline size 4", "multiple"});

  // check_schedule and peak_live_microbatches.
  using K = PipeOp;
  // HEAD ops (the head split's): only where allowed, once per micro-batch,
  // between the chunk-0 forward and backward; the head-split schedule's
  // arguments.
  expect_error("head op not allowed",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::HEAD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1);
               },
               {"has kind 2"});
  expect_error("head op missing",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1, true);
               },
               {"runs before its head share"});
  expect_error(
      "head op before forward",
      [] {
        check_schedule({{K::HEAD, 0, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1, true);
      },
      {"H0.0", "not the one head share"});
  expect_error("head ops on rank 1",
               [] {
                 simulate_pipeline({{{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}},
                                    {{K::FORWARD, 0, 0}, {K::HEAD, 0, 0}, {K::BACKWARD, 0, 0}}},
                                   1, 1);
               },
               {"rank 1", "has kind 2"});
  expect_error("head split p 1", [] { pipeline_schedule_head_split(1, 4, 1, {1}, 1); },
               {"pipeline size 1"});
  expect_error("head split costs", [] { pipeline_schedule_head_split(2, 4, 1, {1}, 1); },
               {"1 stage costs for 2 virtual stages"});
  expect_error("head split head cost",
               [] {
                 pipeline_schedule_head_split(2, 4, 1, {1, 1}, 0);
               },
               {"head cost 0"});
  expect_error("head split backward costs",
               [] {
                 pipeline_schedule_head_split(2, 4, 1, {1, 1}, 1, {1, -1});
               },
               {"finite and > 0"});
  expect_error("check missing",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 2, 1);
               },
               {"F1.0 is missing"});
  expect_error("check missing backward",
               [] {
                 check_schedule({{K::FORWARD, 0, 0}}, 1, 1);
               },
               {"B0.0 is missing"});
  expect_error("check backward first",
               [] {
                 check_schedule({{K::BACKWARD, 0, 0}, {K::FORWARD, 0, 0}}, 1, 1);
               },
               {"op 0", "B0.0", "before its forward"});
  expect_error(
      "check twice",
      [] {
        check_schedule({{K::FORWARD, 0, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}, 1, 1);
      },
      {"op 1", "F0.0", "second time"});
  expect_error("check micro-batch range",
               [] {
                 check_schedule({{K::FORWARD, 3, 0}}, 2, 1);
               },
               {"op 0", "micro-batch 3", "[0, 2)"});
  expect_error("check chunk range",
               [] {
                 check_schedule({{K::FORWARD, 0, 2}}, 2, 2);
               },
               {"op 0", "chunk 2", "[0, 2)"});
  expect_error("peak backward without forward",
               [] {
                 peak_live_microbatches({{K::FORWARD, 0, 0}, {K::BACKWARD, 1, 0}});
               },
               {"op 1", "B1.0", "without an outstanding forward"});
  expect_error("peak forward twice",
               [] {
                 peak_live_microbatches({{K::FORWARD, 0, 1}, {K::FORWARD, 0, 1}});
               },
               {"op 1", "F0.1", "again"});

  // Peers.
  expect_error("peers chunk",
               [] {
                 pipe_op_peers({K::FORWARD, 0, 2}, 0, 4, 2);
               },
               {"chunk 2", "[0, 2)"});
  expect_error("peers rank",
               [] {
                 pipe_op_peers({K::FORWARD, 0, 0}, 4, 4, 2);
               },
               {"rank 4", "[0, 4)"});

  // Simulation.
  expect_error("simulate no ranks", [] { simulate_pipeline({}, 1, 1); }, {"pipeline size 0"});
  expect_error("simulate m 0", [] { simulate_pipeline(all_ranks(2, 1, 1), 0, 1); },
               {"0 micro-batches"});
  expect_error("simulate bad rank list",
               [] {
                 auto ops = all_ranks(2, 2, 1);
                 ops[1].pop_back();
                 simulate_pipeline(ops, 2, 1);
               },
               {"rank 1", "B1.0 is missing"});
  expect_error("simulate negative cost",
               [] {
                 PipeSimOptions o;
                 o.t_backward = -1;
                 simulate_pipeline(all_ranks(2, 2, 1), 2, 1, o);
               },
               {"t_backward -1"});
  expect_error("simulate nan comm",
               [] {
                 PipeSimOptions o;
                 o.t_comm = std::nan("");
                 simulate_pipeline(all_ranks(2, 2, 1), 2, 1, o);
               },
               {"t_comm nan"});
  expect_error("simulate scale size",
               [] {
                 PipeSimOptions o;
                 o.stage_scale = {1, 1, 1};
                 simulate_pipeline(all_ranks(2, 2, 2), 2, 2, o);
               },
               {"3 stage scales", "4 virtual stages"});
  // Rank 0 runs micro-batch 0's backward before micro-batch 1's forward,
  // rank 1 micro-batch 1's forward before micro-batch 0's: each waits for
  // the other.
  expect_error(
      "simulate deadlock",
      [] {
        std::vector<std::vector<PipeOp>> ops = {
            {{K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}, {K::FORWARD, 1, 0}, {K::BACKWARD, 1, 0}},
            {{K::FORWARD, 1, 0}, {K::BACKWARD, 1, 0}, {K::FORWARD, 0, 0}, {K::BACKWARD, 0, 0}}};
        simulate_pipeline(ops, 2, 1);
      },
      {"deadlock", "rank 0 at op 1 (B0.0) waits for B0.0 on rank 1",
       "rank 1 at op 0 (F1.0) waits for F1.0 on rank 0"});
  // A deadlock through the wrap between chunks: rank 0 does chunk 1 of
  // micro-batch 0 before chunk 0, which stage 1 (rank 1) must run first.
  expect_error("simulate deadlock across chunks",
               [] {
                 auto ops = all_ranks(2, 2, 2);
                 std::vector<PipeOp>& r0 = ops[0];
                 const PipeOp f01{K::FORWARD, 0, 1};
                 r0.erase(std::find(r0.begin(), r0.end(), f01));
                 r0.insert(r0.begin(), f01);
                 simulate_pipeline(ops, 2, 2);
               },
               {"deadlock", "rank 0 at op 0 (F0.1) waits for F0.0 on rank 1",
                "rank 1 at op 0 (F0.0) waits for F0.0 on rank 0"});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "order" && argc == 6) {
      const int p = std::atoi(argv[2]), r = std::atoi(argv[3]), m = std::atoi(argv[4]),
                v = std::atoi(argv[5]);
      std::printf("%s\n", schedule_string(pipeline_schedule(p, r, m, v), v > 1).c_str());
      return 0;
    } else if (mode == "megatron") {
      test_megatron();
    } else if (mode == "invariants") {
      test_invariants();
    } else if (mode == "bubble") {
      test_bubble();
    } else if (mode == "partition") {
      test_partition();
    } else if (mode == "peers") {
      test_peers();
    } else if (mode == "errors") {
      test_errors();
    } else if (mode == "plan") {
      test_plan();
    } else if (mode == "headsplit") {
      test_head_split();
    } else {
      std::fprintf(stderr,
                   "usage: pipeline_schedule_test "
                   "megatron|invariants|bubble|partition|peers|errors|plan|headsplit"
                   "\n       pipeline_schedule_test order P R M V\n");
      return 2;
    }
  } catch (const Error& e) {
    std::printf("FAIL: unexpected error: %s\n", e.what());
    return 1;
  }
  if (g_fail) {
    std::printf("%d failure(s)\n", g_fail.load());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
