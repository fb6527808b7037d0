// pipeline_schedule_test megatron, invariants, bubble: the orders against
// Megatron-LM's, every schedule's invariants and its simulation, and the
// simulated bubble fractions.
#include "schedule_common.hpp"

using namespace oslo;

namespace sched_test {

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

}  // namespace sched_test
