#include "core/model/model.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <type_traits>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

namespace {

std::string join_path(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "/" + b;
}

// The weights of the blocks' products: what a block-quantized dtype applies to.
bool is_linear_weight_role(const std::string& role) {
  static const char* const roles[] = {"qkv_w", "q_w",    "k_w",       "v_w",   "o_w",
                                      "up_w",  "gate_w", "gate_up_w", "down_w"};
  for (const char* r : roles)
    if (role == r) return true;
  return false;
}

// The token table and the LM head: kept block-quantized only when the source
// holds them so and no dtype was asked for.
bool is_table_role(const std::string& role) {
  return role == "wte" || role == "lm_head";
}

// A block-quantized local tensor holds whole blocks in every row.
void check_quantized_placement(const Placement& p, oslo_dtype q, int tp, int rank) {
  const std::vector<int64_t> ls = p.local_shape();
  int64_t be, bb;
  dtype_block(q, &be, &bb);
  OSLO_CHECK(ls.size() == 2 && ls[1] % be == 0, OSLO_ERR_SHAPE, "model: tensor \"", p.name,
             "\": this rank's slice ", shape_str(ls), " (tensor-parallel rank ", rank, " of ", tp,
             ") has rows that are not whole blocks of ", be, " elements of ", dtype_name(q),
             "; use a tensor-parallel size that cuts rows at multiples of ", be,
             ", or a float dtype");
}

oslo_dtype dtype_from_torch(const std::string& s) {
  if (s == "bfloat16") return OSLO_DTYPE_BF16;
  if (s == "float16") return OSLO_DTYPE_F16;
  return OSLO_DTYPE_F32;
}

}  // namespace

Model::Model(Context& ctx, ModelConfig cfg, oslo_dtype dtype)
    : ctx_(ctx), cfg_(std::move(cfg)), dtype_(dtype), stack_(new BlockStack(ctx, cfg_)) {}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(Context& ctx, const std::string& path,
                                   const ModelLoadOptions& o) {
  std::unique_ptr<Model> m;
  std::vector<PlannedTensor> plan;
  // Everything a rank can fail on (files, config, shapes) happens inside one
  // agreement over the world group: all ranks return the same status.
  run_agreed(ctx.control(OSLO_GROUP_WORLD), "model load from \"" + path + "\"", [&] {
    WeightSource src(path);
    OSLO_CHECK(!src.config_json().empty(), OSLO_ERR_FORMAT, path,
               ": no model config (config.json, or model_config in the checkpoint manifest)");
    ModelConfig cfg = ModelConfig::parse(src.config_json(), path + "/config.json");
    oslo_dtype dt = dtype_from_torch(cfg.torch_dtype);
    // Block-quantized dtypes apply to the linear weights of the blocks
    // (quantized at load unless the source holds them so); the other
    // matrices (embeddings, head) keep the source's float dtype. Without a
    // dtype, weights a source holds quantized (GGUF) stay as they are, the
    // token table and the head included.
    oslo_dtype quant = OSLO_DTYPE_F32;
    bool keep_quantized = o.dtype < 0;
    if (o.dtype >= 0) {
      const oslo_dtype want = static_cast<oslo_dtype>(o.dtype);
      OSLO_CHECK((dtype_valid(want) && dtype_is_float(want)) || dtype_is_block(want),
                 OSLO_ERR_DTYPE,
                 "model: dtype must be f32, f16, bf16 or a block-quantized one (q8_0, q4_0, q4_k, "
                 "q6_k), got ",
                 o.dtype);
      if (dtype_is_block(want))
        quant = want;
      else
        dt = want;
    }
    m.reset(new Model(ctx, std::move(cfg), dtype_is_block(quant) ? quant : dt));
    BlockStack& S = *m->stack_;
    m->source_ = path;
    S.tp = ctx.topology().tp_size();
    S.rank = ctx.topology().tp_rank();
    S.pp = ctx.topology().pp_size();
    S.pp_rank = ctx.topology().pp_rank();
    for (const std::string& f : src.extra_files())
      m->extra_files_.push_back(join_path(src.folder(), f));
    plan = plan_model(m->cfg_, S.tp, S.rank);
    // This stage's blocks, chunk by chunk (the caller's counts, or
    // Colossal-AI's uniform partition over pp x virtual stages) and, on the
    // first and last stage, the embeddings and the head: no rank reads or
    // holds another stage's weights.
    const int L = static_cast<int>(m->cfg_.num_layers);
    OSLO_CHECK(o.virtual_stages >= 1 && o.virtual_stages <= L, OSLO_ERR_INVALID_ARGUMENT,
               "model: virtual_stages ", o.virtual_stages, " must lie in [1, ", L,
               "] (the model's blocks)");
    S.vstages = o.virtual_stages;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (S.pp > 1 || S.vstages > 1 || !o.pipeline_layers.empty()) {
      const PipelinePartition part = o.pipeline_layers.empty()
                                         ? partition_uniform(L, S.pp, S.vstages)
                                         : partition_counts(L, S.pp, S.vstages, o.pipeline_layers);
      for (int c = 0; c < S.vstages; ++c) {
        const LayerRange r = part.at(S.pp_rank, c);
        ranges.emplace_back(r.begin, r.end);
      }
      // Products per token of each virtual stage's blocks: their
      // projections and MLP (the same on every rank: TP divides them all
      // alike). run_pipeline adds the head.
      const ModelConfig& c = m->cfg_;
      const double H = static_cast<double>(c.hidden_size), D = static_cast<double>(c.head_dim);
      const double block =
          H * D * static_cast<double>(2 * c.num_heads + 2 * c.num_kv_heads) +
          H * static_cast<double>(c.intermediate_size) * (c.traits.gated_mlp ? 3.0 : 2.0);
      for (const LayerRange& r : part.stages)
        S.stage_cost.push_back(std::max(block * (r.end - r.begin), 1.0));
    } else {
      ranges.emplace_back(0, L);
    }
    if (S.pp > 1) plan = plan_stage(plan, m->cfg_, ranges, S.pp_rank == 0, S.pp_rank == S.pp - 1);
    for (const auto& r : ranges) {
      S.chunks.emplace_back(S.global_layer.size(), S.global_layer.size() + (r.second - r.first));
      for (int64_t l = r.first; l < r.second; ++l) S.global_layer.push_back(l);
    }
    auto be = ctx.backend_ptr();
    resolve_names(src, plan);
    for (auto& pt : plan) {
      const Placement& p = pt.placement;
      PlacedTensor t;
      t.placement = p;
      oslo_dtype tdt = pt.f32 ? OSLO_DTYPE_F32 : dt;
      if (pt.layer >= 0 && is_linear_weight_role(pt.role)) {
        const SourceTensor* st = src.find(p.name);
        if (dtype_is_block(quant))
          tdt = quant;
        else if (keep_quantized && st && st->quantized())
          tdt = st->quant;
        if (dtype_is_block(tdt)) {
          if (!dtype_is_block(m->dtype_)) m->dtype_ = tdt;
          check_quantized_placement(p, tdt, S.tp, S.rank);
        }
      } else if (pt.layer < 0 && is_table_role(pt.role) && keep_quantized) {
        // The token table and the head of a source that holds them
        // block-quantized (GGUF, a quantized oslo checkpoint) stay so: the
        // head multiplies through matmul_quant, the lookup dequantizes only
        // the rows it reads. Both are split by vocabulary rows, which never
        // cut a block.
        const SourceTensor* st = src.find(p.name);
        if (st && st->quantized()) {
          tdt = st->quant;
          check_quantized_placement(p, tdt, S.tp, S.rank);
        }
      }
      t.tensor = Tensor::zeros(be, tdt, t.placement.local_shape());
      m->params_.push_back(std::move(t));
    }
    load_placed(src, m->params_, *be);
    // Small tensors held in f32 are saved back in the dtype they came in.
    for (const PlacedTensor& t : m->params_) {
      oslo_dtype dt = t.tensor.dtype();
      const SourceTensor* st = src.find(t.placement.name);
      if (st && !safetensors::to_oslo(st->dtype, &dt)) dt = t.tensor.dtype();
      if (dtype_is_block(t.tensor.dtype())) dt = t.tensor.dtype();
      m->stored_dtype_.push_back(dt);
    }
  });
  std::vector<std::string> roles;
  std::vector<int> layers;
  for (auto& pt : plan) {
    roles.push_back(pt.role);
    layers.push_back(pt.layer);
  }
  m->stack_->bind(m->params_, roles, layers);
  m->inference_ = std::make_unique<InferenceRunner>(*m->stack_);
  m->training_ = std::make_unique<TrainingPass>(*m->stack_, m->params_);
  // Packed weight copies (the backend's layout for its products) are made
  // once here; parameters_changed() drops them and the next run makes them
  // again.
  m->stack_->make_packs();
  return m;
}

void Model::save(const std::string& dir) {
  stack_->check_whole("Model::save");
  stack_->restore_plain();  // released again at the next inference run
  const Topology& t = ctx_.topology();
  const CheckpointLayout layout = layout_of(t);
  // Tensors held in f32 for precision (norms, biases) go back in their
  // stored dtype (exact: they were widened from it).
  std::vector<PlacedTensor> out = params_;
  for (size_t i = 0; i < out.size(); ++i) {
    const oslo_dtype dt = stored_dtype_[i];
    if (out[i].tensor.dtype() == OSLO_DTYPE_F32 && dt != OSLO_DTYPE_F32 && dtype_is_float(dt)) {
      Tensor c = Tensor::empty_like_shape(ctx_.backend_ptr(), dt, out[i].tensor.shape());
      ctx_.backend().convert(view(c), view(out[i].tensor));
      out[i].tensor = c;
    }
  }
  save_placed(dir, out, cfg_.json_text, extra_files_, layout, ctx_.control(OSLO_GROUP_WORLD));
}

void Model::parameters_changed() {
  stack_->parameters_changed(params_);
}

}  // namespace oslo
