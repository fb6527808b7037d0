// pipeline_schedule_test plan, headsplit: the plans (compute and transfers)
// complete with blocking sends and start ops when the simulation says they
// may; the head split's plans and bubbles.
#include "schedule_common.hpp"

using namespace oslo;

namespace sched_test {

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

}  // namespace sched_test
