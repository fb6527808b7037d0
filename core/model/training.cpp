#include "core/model/training.hpp"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/common/crc32c.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/model/micro_pass.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

TrainingPass::TrainingPass(BlockStack& stack, const std::vector<PlacedTensor>& params)
    : s_(stack), params_(params) {}

TrainingPass::~TrainingPass() = default;

void TrainingPass::set_backward_hook(std::function<void(int stage)> hook, const void* owner) {
  backward_hook_ = std::move(hook);
  hook_owner_ = owner;
}

void TrainingPass::clear_backward_hook(const void* owner) {
  if (hook_owner_ == owner) set_backward_hook(nullptr, nullptr);
}

void TrainingPass::set_param_hook(std::function<void(int unit, bool acquire, int next)> hook,
                                  bool partitioned) {
  param_hook_ = std::move(hook);
  s_.partitioned = partitioned;
}

void TrainingPass::zero_grad() {
  Backend& be = s_.ctx.backend();
  if (grads_.empty())
    for (const PlacedTensor& p : params_)
      grads_.push_back(scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, p.tensor.shape()));
  for (Tensor& g : grads_)
    if (g.defined()) be.fill(view(g), 0.0);
}

void TrainingPass::release_grads(const std::vector<size_t>& params) {
  // Before any gradient exists: one slot per parameter, none allocated.
  if (grads_.empty()) grads_.resize(params_.size());
  for (size_t i : params) {
    OSLO_CHECK(i < grads_.size(), OSLO_ERR_INVALID_ARGUMENT, "model: gradient index ", i,
               " is out of range (", grads_.size(), " gradients)");
    grads_[i] = Tensor();
  }
}

std::vector<int> TrainingPass::grad_stages() const {
  const int L = static_cast<int>(s_.layers.size());
  std::vector<int> stage(params_.size(), 0);
  auto mark = [&](const Tensor& w, int st) {
    const int64_t i = s_.param_index(w);
    if (i >= 0) stage[static_cast<size_t>(i)] = std::max(stage[static_cast<size_t>(i)], st);
  };
  for (int li = 0; li < L; ++li)
    for (const Tensor* w : s_.layers[static_cast<size_t>(li)]->all()) mark(*w, L - li);
  // The token table (also the head when tied) is final after the
  // embeddings' backward.
  for (const Tensor* w : {&s_.wte, &s_.wpe, &s_.type, &s_.emb_ln_w, &s_.emb_ln_b}) mark(*w, L + 1);
  return stage;
}

Tensor& TrainingPass::grad_of(const Tensor& w) {
  const int64_t i = s_.param_index(w);
  OSLO_CHECK(i >= 0 && static_cast<size_t>(i) < grads_.size(), OSLO_ERR_INTERNAL,
             "model: a compute tensor without a parameter entry");
  Tensor& g = grads_[static_cast<size_t>(i)];
  if (!g.defined()) {  // released (ZeRO-2): made again, zero
    g = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32,
                params_[static_cast<size_t>(i)].tensor.shape());
    s_.ctx.backend().fill(view(g), 0.0);
  }
  return g;
}

float TrainingPass::loss_backward(const std::vector<int64_t>& ids,
                                  const std::vector<int64_t>& labels,
                                  const std::vector<int64_t>& mask, int64_t B, int64_t S,
                                  float grad_scale) {
  check_single_stage();
  OSLO_CHECK(s_.cfg.traits.causal && s_.lm_head.defined(), OSLO_ERR_NOT_SUPPORTED,
             s_.cfg.model_type,
             ": the causal-LM loss needs a causal language model (an encoder trains from a "
             "gradient of its hidden states: hidden_backward)");
  return train_pass(ids, &labels, mask, {}, nullptr, B, S, grad_scale);
}

void TrainingPass::hidden_backward(const std::vector<int64_t>& ids,
                                   const std::vector<int64_t>& mask,
                                   const std::vector<int64_t>& token_types, int64_t B, int64_t S,
                                   const std::vector<float>& grad_hidden, float grad_scale) {
  train_pass(ids, nullptr, mask, token_types, &grad_hidden, B, S, grad_scale);
}

void TrainingPass::check_single_stage() const {
  OSLO_CHECK(s_.pp == 1, OSLO_ERR_NOT_SUPPORTED, "model: training with pipeline_parallel_size ",
             s_.pp, " (> 1) is not supported yet: pipeline stages run inference only");
}

float TrainingPass::train_pass(const std::vector<int64_t>& ids,
                               const std::vector<int64_t>* labels_in,
                               const std::vector<int64_t>& mask0,
                               const std::vector<int64_t>& types0,
                               const std::vector<float>* grad_hidden, int64_t B, int64_t S,
                               float grad_scale, PipeRun* pipe) {
  if (!pipe) check_single_stage();
  const BlockTraits& tr = s_.cfg.traits;
  const bool post = tr.post_norm;
  OSLO_CHECK(!post || !tr.parallel_residual, OSLO_ERR_NOT_SUPPORTED, s_.cfg.model_type,
             ": post-norm blocks with a parallel residual are not supported in training");
  for (const PlacedTensor& p : params_) {
    const oslo_dtype dt = p.tensor.dtype();
    OSLO_CHECK(dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_BF16 || dt == OSLO_DTYPE_F16,
               OSLO_ERR_NOT_SUPPORTED, "model: training needs f32, bf16 or f16 weights (",
               p.placement.name, " is ", dtype_name(dt), ")");
  }
  // This rank's checks, then one exchange over the tensor group: every rank
  // learns whether any rank refused its batch and whether all hold the same
  // one, before the first collective of the step (no rank is left waiting).
  std::exception_ptr local_error;
  std::vector<int64_t> mask, types;
  static const std::vector<int64_t> kNone;
  const std::vector<int64_t>& labels = labels_in ? *labels_in : kNone;
  const int64_t H0 = s_.cfg.hidden_size;
  const size_t n = static_cast<size_t>(std::max<int64_t>(B, 0) * std::max<int64_t>(S, 0));
  try {
    OSLO_CHECK(B > 0 && S > 0, OSLO_ERR_INVALID_ARGUMENT, "loss: batch (", B, ") and sequence (", S,
               ") must be positive");
    if (pipe) {
      OSLO_CHECK(pipe->micro_batches >= 1 && B % pipe->micro_batches == 0,
                 OSLO_ERR_INVALID_ARGUMENT, "pipeline: ", pipe->micro_batches,
                 " micro-batches must be at least 1 and divide the batch of ", B, " rows");
      OSLO_CHECK(!param_hook_, OSLO_ERR_NOT_SUPPORTED,
                 "pipeline: ZeRO-3 with pipeline_parallel_size ", s_.pp,
                 " (ZeRO 0 or 1 with pipeline parallelism)");
      const double f = pipe->head_split;
      OSLO_CHECK(std::isfinite(f) && f <= 1 && (f >= 0 || f == -1), OSLO_ERR_INVALID_ARGUMENT,
                 "pipeline: pipeline_head_split ", f,
                 " must be 0 (off), a fraction in (0, 1] or -1 (by the stages' costs)");
      if (f != 0) {
        OSLO_CHECK(s_.pp > 1, OSLO_ERR_NOT_SUPPORTED, "pipeline: pipeline_head_split ", f,
                   " needs pipeline stages (pipeline_parallel_size is 1)");
        OSLO_CHECK(s_.cfg.tie_word_embeddings && labels_in, OSLO_ERR_NOT_SUPPORTED,
                   "pipeline: pipeline_head_split needs tied word embeddings (the first stage "
                   "computes its share of the head with its token table); ",
                   s_.cfg.model_type, " here has an untied head");
      }
    }
    OSLO_CHECK(ids.size() == n && (!labels_in || labels.size() == n), OSLO_ERR_SHAPE,
               "loss: ", ids.size(), " ids and ", labels.size(), " labels for [", B, ", ", S, "]");
    OSLO_CHECK(!grad_hidden || grad_hidden->size() == n * static_cast<size_t>(H0), OSLO_ERR_SHAPE,
               "backward: the hidden states' gradient has ", grad_hidden ? grad_hidden->size() : 0,
               " values for [", B, ", ", S, ", ", H0, "]");
    OSLO_CHECK(s_.type.defined() || types0.empty(), OSLO_ERR_INVALID_ARGUMENT,
               "backward: ", s_.cfg.model_type, " has no token types");
    types = types0.empty() ? std::vector<int64_t>(s_.type.defined() ? n : 0, 0) : types0;
    OSLO_CHECK(types.size() == (s_.type.defined() ? n : 0), OSLO_ERR_SHAPE,
               "backward: token types have ", types.size(), " entries for [", B, ", ", S, "]");
    for (size_t i = 0; i < types.size(); ++i)
      OSLO_CHECK(types[i] >= 0 && types[i] < s_.cfg.type_vocab_size, OSLO_ERR_INVALID_ARGUMENT,
                 "backward: token type ", types[i], " at position ", i, " is outside [0, ",
                 s_.cfg.type_vocab_size, ")");
    if (grad_hidden)
      for (size_t i = 0; i < grad_hidden->size(); ++i)
        OSLO_CHECK(std::isfinite((*grad_hidden)[i]), OSLO_ERR_INVALID_ARGUMENT,
                   "backward: the hidden states' gradient is ", (*grad_hidden)[i], " at ", i);
    mask = mask0.empty() ? std::vector<int64_t>(n, 1) : mask0;
    OSLO_CHECK(mask.size() == n, OSLO_ERR_SHAPE, "loss: attention mask has ", mask.size(),
               " entries for [", B, ", ", S, "]");
    OSLO_CHECK(s_.cfg.sliding_window == 0 || S <= s_.cfg.sliding_window, OSLO_ERR_NOT_SUPPORTED,
               s_.cfg.model_type, ": sequences longer than the sliding window (",
               s_.cfg.sliding_window, ") are not supported");
    for (size_t i = 0; i < n; ++i)
      OSLO_CHECK(ids[i] >= 0 && ids[i] < s_.cfg.vocab_size, OSLO_ERR_INVALID_ARGUMENT,
                 "loss: token ", ids[i], " at position ", i, " is outside [0, ", s_.cfg.vocab_size,
                 ")");
    if (labels_in)
      for (size_t i = 0; i < n; ++i)
        OSLO_CHECK(labels[i] == -100 || (labels[i] >= 0 && labels[i] < s_.cfg.vocab_size),
                   OSLO_ERR_INVALID_ARGUMENT, "loss: label ", labels[i], " at position ", i,
                   " is outside the vocabulary [0, ", s_.cfg.vocab_size,
                   ") and not -100 (ignored)");
  } catch (...) {
    local_error = std::current_exception();
  }
  // One exchange per group (the tensor group; the pipeline group when the
  // stages run the batch together; the data group with data parallelism):
  // every rank learns whether any rank refused its batch and whether the
  // ranks that must hold the same batch do. Every rank runs every exchange,
  // refused or not, so that none is left waiting in one.
  uint32_t h = 0;
  if (s_.tp > 1 || (pipe && s_.pp > 1)) {  // the exchanges that compare batches
    h = crc32c(h, &B, sizeof B);
    h = crc32c(h, &S, sizeof S);
    h = crc32c(h, &grad_scale, sizeof grad_scale);
    const std::vector<int64_t>* parts[] = {&ids, &labels, &mask, &types};
    for (const std::vector<int64_t>* v : parts)
      if (!v->empty()) h = crc32c(h, v->data(), v->size() * sizeof(int64_t));
    if (grad_hidden && !grad_hidden->empty())
      h = crc32c(h, grad_hidden->data(), grad_hidden->size() * sizeof(float));
    if (pipe) {
      h = crc32c(h, &pipe->micro_batches, sizeof pipe->micro_batches);
      h = crc32c(h, &pipe->head_split, sizeof pipe->head_split);
    }
  }
  std::exception_ptr verdict = local_error;
  auto agree = [&](oslo_group grp, const char* who, bool same_batch, const char* what) {
    const int np = group_size(s_.ctx, grp);
    const int64_t mine[4] = {verdict ? 1 : 0, B, S, static_cast<int64_t>(h)};
    Tensor t = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_I64, {4});
    Tensor all = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_I64, {np, 4});
    s_.ctx.backend().copy(t.data(), mine, sizeof mine, CopyKind::HostToDevice);
    gather_first_dim(s_.ctx, grp, view(t), view(all));
    std::vector<int64_t> got(static_cast<size_t>(4 * np));
    s_.ctx.backend().copy(got.data(), all.data(), got.size() * sizeof(int64_t),
                          CopyKind::DeviceToHost);
    if (verdict) return;
    try {
      for (int q = 0; q < np; ++q) {
        const int64_t* g = &got[static_cast<size_t>(4 * q)];
        OSLO_CHECK(g[0] == 0, OSLO_ERR_INVALID_ARGUMENT, "loss: ", who, " rank ", q,
                   " refused its batch (its error says why)");
        if (same_batch)
          OSLO_CHECK(g[1] == got[1] && g[2] == got[2] && g[3] == got[3], OSLO_ERR_INVALID_ARGUMENT,
                     "loss: the batch differs between ", who, " ranks: rank ", q, " has [", g[1],
                     ", ", g[2], "], rank 0 [", got[1], ", ", got[2], "] (", what, ")");
      }
    } catch (...) {
      verdict = std::current_exception();
    }
  };
  if (s_.tp > 1)
    agree(OSLO_GROUP_TENSOR, "tensor-parallel", true,
          "every rank of a tensor group must pass the same ids, labels, mask, token types, "
          "hidden-state gradient and grad_scale");
  if (pipe && s_.pp > 1)
    agree(OSLO_GROUP_PIPELINE, "pipeline", true,
          "every stage of a pipeline must pass the same ids, labels, mask, grad_scale, "
          "number of micro-batches and head split");
  // Data parallelism: the data-parallel ranks hold other batches; they
  // learn whether any of them refused its batch, so that none is left
  // waiting in the gradient reduction.
  if (agree_over_data_ && group_size(s_.ctx, OSLO_GROUP_DATA) > 1)
    agree(OSLO_GROUP_DATA, "data-parallel", false, "");
  if (verdict) std::rethrow_exception(verdict);
  if (!param_hook_) s_.check_whole("training without its ZeRO-3 optimizer");
  if (grads_.empty()) zero_grad();
  if (pipe) {
    run_pipeline(ids, labels, mask, B, S, grad_scale, *pipe);
    return pipe->stats.loss;
  }
  MicroPass p(*this, ids, labels_in, mask, types, grad_hidden, B, S, grad_scale);
  // ZeRO-3: the embeddings, final norm and head from the embedding to the
  // head's backward, each block while it runs (the last one from its
  // forward through its backward). Each acquisition names the unit the pass
  // needs next, which the hook may start gathering now.
  const int nl = static_cast<int>(s_.layers.size());
  if (param_hook_) param_hook_(0, true, nl > 0 ? 1 : -1);
  p.embed();
  // The head needs nothing of unit 0 that is partitioned when its weight
  // comes in row chunks or no loss is computed (only the final norm, kept
  // whole): unit 0 goes now, not after the head.
  if (param_hook_ && (p.chunked() || !labels_in)) param_hook_(0, false, -1);
  p.forward_blocks(0, s_.layers.size());
  p.head_forward();
  p.head_backward();
  p.backward_blocks(0, s_.layers.size());
  p.embed_backward();
  return p.loss;
}

PipelineStats TrainingPass::pipeline_loss_backward(const std::vector<int64_t>& ids,
                                                   const std::vector<int64_t>& labels,
                                                   const std::vector<int64_t>& mask, int64_t B,
                                                   int64_t S, int micro_batches, float grad_scale,
                                                   double head_split) {
  OSLO_CHECK(s_.cfg.traits.causal && (s_.lm_head.defined() || !s_.last_stage()),
             OSLO_ERR_NOT_SUPPORTED, s_.cfg.model_type,
             ": the causal-LM loss needs a causal language model (an encoder trains from a "
             "gradient of its hidden states: hidden_backward)");
  PipeRun run;
  run.micro_batches = micro_batches;
  run.head_split = head_split;
  train_pass(ids, &labels, mask, {}, nullptr, B, S, grad_scale, &run);
  return run.stats;  // the loss may be non-finite (see run_pipeline)
}

void TrainingPass::sync_tied_grads() {
  if (s_.pp == 1 || !s_.cfg.tie_word_embeddings || !s_.cfg.traits.causal) return;
  if (!s_.first_stage() && !s_.last_stage()) return;
  const Tensor& w = s_.first_stage() ? s_.wte : s_.lm_head;
  if (!w.defined()) return;
  if (grads_.empty()) zero_grad();
  Tensor& gr = grad_of(w);
  Backend& be = s_.ctx.backend();
  Tensor other = scratch(s_.ctx.backend_ptr(), OSLO_DTYPE_F32, gr.shape());
  // The first stage sends first, the last receives first.
  constexpr oslo_group kPipe = OSLO_GROUP_PIPELINE;
  if (s_.first_stage()) {
    send(s_.ctx, kPipe, gr.data(), gr.nbytes(), s_.pp - 1);
    recv(s_.ctx, kPipe, other.data(), other.nbytes(), s_.pp - 1);
  } else {
    recv(s_.ctx, kPipe, other.data(), other.nbytes(), 0);
    send(s_.ctx, kPipe, gr.data(), gr.nbytes(), 0);
  }
  // a + b == b + a in floating point: both stages hold the same bits.
  be.binary(OSLO_BK_ADD, view(gr), view(gr), view(other));
}

PipelineCosts TrainingPass::pipeline_costs(double share) const {
  return oslo::pipeline_costs(s_.stage_cost, static_cast<double>(s_.cfg.vocab_size),
                              static_cast<double>(s_.cfg.hidden_size), share);
}

// One micro-batch's pass as the pipeline executor drives it, chunk by chunk.
class PassMicroBatch : public PipelineMicroBatch {
 public:
  explicit PassMicroBatch(std::unique_ptr<MicroPass> p) : p_(std::move(p)) {}
  Tensor forward(int chunk, bool first, bool last, Tensor in, float* loss,
                 Tensor* head_out) override {
    MicroPass& p = *p_;
    const auto& ch = p.s.chunks[static_cast<size_t>(chunk)];
    if (!first) p.x = in;
    if (first) p.embed();
    p.forward_blocks(ch.first, ch.second);
    if (last) {
      p.head_forward();
      *loss = p.loss;
      *head_out = p.head_in;
      p.head_in = Tensor();
      return Tensor();
    }
    Tensor out = p.x;
    p.x = Tensor();  // the blocks kept what their backward needs
    return out;
  }
  Tensor backward(int chunk, bool first, bool last, Tensor grad, Tensor head_grad) override {
    MicroPass& p = *p_;
    const auto& ch = p.s.chunks[static_cast<size_t>(chunk)];
    if (!last) p.dx = grad;
    if (last) p.head_grad = head_grad;
    if (last) p.head_backward();
    p.backward_blocks(ch.first, ch.second);
    if (first) {
      p.embed_backward();
      return Tensor();
    }
    Tensor dx = p.dx;
    p.dx = Tensor();
    return dx;
  }
  float head_share(const Tensor& h, Tensor* dh) override { return p_->head_share(h, dh); }

 private:
  std::unique_ptr<MicroPass> p_;
};

void TrainingPass::run_pipeline(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                                const std::vector<int64_t>& mask, int64_t B, int64_t S,
                                float grad_scale, PipeRun& pipe) {
  const int mb = pipe.micro_batches, v = s_.vstages, pp = s_.pp;
  const int64_t rows = B / mb;
  const size_t per = static_cast<size_t>(rows * S);
  auto slice = [per](const std::vector<int64_t>& vec, int i) {
    return std::vector<int64_t>(vec.begin() + static_cast<std::ptrdiff_t>(i * per),
                                vec.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
  };
  const double V = static_cast<double>(s_.cfg.vocab_size),
               H = static_cast<double>(s_.cfg.hidden_size);
  PipelineRun run;
  run.micro_batches = mb;
  run.chunks = v;
  run.tokens = static_cast<int64_t>(per);
  run.hidden = s_.cfg.hidden_size;
  // The head split: the first stage's share of each micro-batch's tokens.
  run.head_rows =
      pipeline_head_rows(pipe.head_split, s_.stage_cost, V, H, pp, v, static_cast<int64_t>(per));
  const int64_t n0 = run.head_rows;
  const PipelineCosts cost = pipeline_costs(static_cast<double>(n0) / static_cast<double>(per));
  // Megatron's order for this rank (or the head split's), with the
  // transfers placed so that blocking sends cannot deadlock (pipeline_plan).
  run.plan = n0 > 0 ? pipeline_plan_head_split(pp, s_.pp_rank, mb, v, cost.forward, cost.head,
                                               cost.backward)
                    : pipeline_plan(pp, s_.pp_rank, mb, v, cost.forward, cost.backward);
  const float g = grad_scale / static_cast<float>(mb);
  run.make = [&, g, n0](int i) {
    const std::vector<int64_t> id = slice(ids, i), lab = slice(labels, i), mk = slice(mask, i);
    auto p = std::make_unique<MicroPass>(*this, id, &lab, mk, std::vector<int64_t>{}, nullptr, rows,
                                         S, g);
    p->defer_loss_check = true;
    p->head_rows0 = n0;
    return std::unique_ptr<PipelineMicroBatch>(new PassMicroBatch(std::move(p)));
  };
  // The backward hook (data parallelism) sees only the last micro-batch's
  // backward of each chunk; it is restored whatever happens.
  struct HookGuard {
    std::function<void(int)>& slot;
    std::function<void(int)> saved;
    ~HookGuard() { slot = std::move(saved); }
  } guard{backward_hook_, backward_hook_};
  run.before_backward = [&](bool last) { backward_hook_ = last ? guard.saved : nullptr; };
  pipe.stats = oslo::run_pipeline(s_.ctx, run);
}

}  // namespace oslo
