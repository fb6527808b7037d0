#include "core/pipeline/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/common/error.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

PipelineCosts pipeline_costs(const std::vector<double>& stage_cost, double V, double H,
                             double share) {
  // Each virtual stage's blocks (their backward twice their forward) and
  // the head's, whose forward also takes the cross-entropy over the
  // vocabulary: about 800 multiply-adds of work per logit (measured on an
  // AVX-512 CPU in f32), so that its backward (two products) costs about
  // what its forward does.
  PipelineCosts c;
  if (stage_cost.empty()) return c;  // one stage without virtual stages
  const double head_fwd = (H + 768.0) * V, head_bwd = 2.0 * H * V;
  c.forward = stage_cost;
  for (double x : stage_cost) c.backward.push_back(2 * x);
  c.forward.back() += head_fwd * (1 - share);
  c.backward.back() += head_bwd * (1 - share);
  for (double& x : c.forward) x = std::max(x, 1.0);
  for (double& x : c.backward) x = std::max(x, 1.0);
  c.head = (head_fwd + head_bwd) * share / 3;
  return c;
}

int64_t pipeline_head_rows(double f, const std::vector<double>& stage_cost, double V, double H,
                           int pp, int v, int64_t per) {
  if (f == 0) return 0;
  if (f < 0) {
    const double head = 3 * pipeline_costs(stage_cost, V, H, 1).head;  // forward and backward
    double first = 0, last = head;
    for (int c = 0; c < v; ++c) {
      first += 3 * stage_cost[static_cast<size_t>(c * pp)];
      last += 3 * stage_cost[static_cast<size_t>(c * pp + pp - 1)];
    }
    f = (last - first) / (2 * head);
  }
  return std::clamp<int64_t>(std::llround(std::clamp(f, 0.0, 1.0) * static_cast<double>(per)), 0,
                             per);
}

PipelineStats run_pipeline(Context& ctx, const PipelineRun& run) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const int pp = group_size(ctx, OSLO_GROUP_PIPELINE), rank = group_rank(ctx, OSLO_GROUP_PIPELINE);
  const int mb = run.micro_batches, v = run.chunks;
  const int64_t n0 = run.head_rows, H = run.hidden;
  Backend& be = ctx.backend();
  const int last_vs = pp * v - 1;
  // One piece of work per micro-batch, alive from its first forward to its
  // last backward; the messages received and the outputs waiting to be sent.
  std::vector<std::unique_ptr<PipelineMicroBatch>> live(static_cast<size_t>(mb));
  std::map<PipeMessage, Tensor> inbox, outbox;
  double loss_sum = 0, compute = 0;
  int alive = 0, peak = 0;
  for (const PipeStep& st : run.plan) {
    if (st.kind == PipeStep::RECV) {
      if (st.peer == rank) continue;  // handed over in memory by the send
      Tensor t = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {st.message.head ? n0 : run.tokens, H});
      recv(ctx, OSLO_GROUP_PIPELINE, t.data(), t.nbytes(), st.peer);
      inbox[st.message] = t;
      continue;
    }
    if (st.kind == PipeStep::SEND) {
      auto it = outbox.find(st.message);
      OSLO_CHECK(it != outbox.end(), OSLO_ERR_INTERNAL, "pipeline: a send before its output");
      if (st.peer == rank) {
        inbox[st.message] = it->second;
      } else {
        send(ctx, OSLO_GROUP_PIPELINE, it->second.data(), it->second.nbytes(), st.peer);
      }
      outbox.erase(it);
      continue;
    }
    const PipeOp& op = st.op;
    const int i = op.microbatch, c = op.chunk, vs = c * pp + rank;
    std::unique_ptr<PipelineMicroBatch>& slot = live[static_cast<size_t>(i)];
    auto take = [&](bool gradient, int from, bool head_msg = false) {
      auto it = inbox.find(PipeMessage{gradient, i, from, head_msg});
      OSLO_CHECK(it != inbox.end(), OSLO_ERR_INTERNAL, "pipeline: an op before its input");
      Tensor t = it->second;
      inbox.erase(it);
      return t;
    };
    if (op.kind == PipeOp::HEAD) {  // the first stage's share of the head
      OSLO_CHECK(slot, OSLO_ERR_INTERNAL, "pipeline: head share of micro-batch ", i,
                 " before its forward");
      const Tensor h = take(false, last_vs, true);
      const auto c0 = Clock::now();
      Tensor dh;
      loss_sum += slot->head_share(h, &dh);
      compute += seconds(c0, Clock::now());
      outbox[PipeMessage{true, i, 0, true}] = dh;
      continue;
    }
    const bool first = vs == 0, last = vs == last_vs;
    if (op.kind == PipeOp::FORWARD) {
      if (!slot) {
        slot = run.make(i);
        peak = std::max(peak, ++alive);
      }
      Tensor in;
      if (!first) in = take(false, vs - 1);
      const auto c0 = Clock::now();
      float loss = 0.f;
      Tensor head_out;
      Tensor out = slot->forward(c, first, last, in, &loss, &head_out);
      if (last) loss_sum += loss;
      compute += seconds(c0, Clock::now());
      if (last && n0 > 0) outbox[PipeMessage{false, i, last_vs, true}] = head_out;
      if (!last) outbox[PipeMessage{false, i, vs}] = out;
    } else {
      OSLO_CHECK(slot, OSLO_ERR_INTERNAL, "pipeline: backward of micro-batch ", i,
                 " before its forward");
      if (run.before_backward) run.before_backward(i == mb - 1);
      Tensor grad, head_grad;
      if (!last) grad = take(true, vs + 1);
      if (last && n0 > 0) head_grad = take(true, 0, true);
      const auto c0 = Clock::now();
      Tensor dx = slot->backward(c, first, last, grad, head_grad);
      compute += seconds(c0, Clock::now());
      if (!first) outbox[PipeMessage{true, i, vs}] = dx;
      if (c == 0) {  // the micro-batch's last op on this rank
        slot.reset();
        --alive;
      }
    }
  }
  // Every stage learns the last stage's mean loss and every stage's times.
  const double wall = seconds(t0, Clock::now());
  const float mine[3] = {static_cast<float>(loss_sum / mb), static_cast<float>(compute),
                         static_cast<float>(wall)};
  Tensor t = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {3});
  Tensor all = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {pp, 3});
  be.copy(t.data(), mine, sizeof mine, CopyKind::HostToDevice);
  gather_first_dim(ctx, OSLO_GROUP_PIPELINE, view(t), view(all));
  std::vector<float> got(static_cast<size_t>(3 * pp));
  be.copy(got.data(), all.data(), got.size() * sizeof(float), CopyKind::DeviceToHost);
  // A non-finite loss is returned, not thrown: with data parallelism the
  // caller first finishes the gradient reduction every data rank takes
  // part in (Trainer::train_step), then fails on every rank. The last
  // stage's loss, plus the first stage's share with the head split (the
  // other stages report 0).
  PipelineStats stats;
  double busy = 0, longest = 0;
  for (int q = 0; q < pp; ++q) {
    stats.loss += got[static_cast<size_t>(3 * q)];
    busy += got[static_cast<size_t>(3 * q + 1)];
    longest = std::max<double>(longest, got[static_cast<size_t>(3 * q + 2)]);
  }
  stats.micro_batches = mb;
  stats.peak_live = peak;
  stats.compute_s = compute;
  stats.wall_s = wall;
  stats.bubble = longest > 0 ? std::max(0.0, 1.0 - busy / (pp * longest)) : 0.0;
  stats.head_rows = n0;
  return stats;
}

}  // namespace oslo
