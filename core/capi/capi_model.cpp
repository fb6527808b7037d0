// C shims: models (load, info, forward, embed).
#include <algorithm>
#include <cstring>

#include "core/capi/generate_options.hpp"
#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/generate/generate.hpp"
#include "core/model/model.hpp"
#include "core/model/sharding.hpp"

using oslo::capi::check_batch;
using oslo::capi::guard;
using oslo::capi::need;

namespace {

// The options structs (core/capi/options.hpp): history, defaults, _init.
OSLO_OPTIONS(
    kModelOptions, oslo_model_options, OSLO_MODEL_OPTIONS_VERSION,
    [](oslo_model_options& o) {
      o.dtype = -1;
      o.pipeline_virtual_stages = 1;
    },
    OSLO_OPTIONS_END(oslo_model_options, dtype),
    OSLO_OPTIONS_END(oslo_model_options, pipeline_layers_count));

OSLO_OPTIONS(
    kGenerateOptions, oslo_generate_options, OSLO_GENERATE_OPTIONS_VERSION,
    [](oslo_generate_options& o) {
      o.max_new_tokens = 20;
      o.temperature = 1.0f;
      o.top_k = 50;
      o.top_p = 1.0f;
      o.num_beams = 1;
      o.length_penalty = 1.0f;
      o.eos_token_ids = nullptr;
      o.pad_token_id = -1;
      o.repetition_penalty = 1.0f;
      o.kv_cache_dtype = OSLO_DTYPE_F32;
    },
    OSLO_OPTIONS_END(oslo_generate_options, pad_token_id),
    OSLO_OPTIONS_END(oslo_generate_options, min_new_tokens),
    OSLO_OPTIONS_END(oslo_generate_options, kv_cache_dtype));

OSLO_OPTIONS(
    kMergeOptions, oslo_merge_options, OSLO_MERGE_OPTIONS_VERSION,
    [](oslo_merge_options& o) { o.dtype = -1; }, OSLO_OPTIONS_END(oslo_merge_options, overwrite));

std::vector<int64_t> copy_of(const int64_t* p, size_t n) {
  return p ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>();
}

void write_out(const char* fn, const std::vector<float>& v, float* out, size_t capacity) {
  need(out, fn, "out");
  if (capacity < v.size())
    oslo::fail(OSLO_ERR_SHAPE, fn, ": out holds ", capacity, " floats but ", v.size(),
               " are needed");
  std::memcpy(out, v.data(), v.size() * sizeof(float));
}

}  // namespace

namespace oslo {
namespace capi {

GenerateOptions read_generate_options(const oslo_generate_options* given, const ModelConfig& c,
                                      const char* fn) {
  oslo_generate_options o = kGenerateOptions.read_or_defaults(given, fn, "options");
  GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.do_sample = o.do_sample != 0;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.seed = o.seed;
  g.num_beams = o.num_beams;
  g.length_penalty = o.length_penalty;
  if (o.early_stopping == 0)
    g.early_stopping = EarlyStopping::kFalse;
  else if (o.early_stopping == 1)
    g.early_stopping = EarlyStopping::kTrue;
  else if (o.early_stopping == -1)
    g.early_stopping = EarlyStopping::kNever;
  else
    fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": early_stopping must be 0, 1 or -1, got ",
         o.early_stopping);
  if (o.eos_token_ids) {
    if (o.num_eos_token_ids > 1024)
      fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", o.num_eos_token_ids, " EOS ids (at most 1024)");
    g.eos_token_ids.assign(o.eos_token_ids, o.eos_token_ids + o.num_eos_token_ids);
  } else {
    g.eos_token_ids = c.eos_token_ids;
  }
  g.pad_token_id = o.pad_token_id >= 0 ? o.pad_token_id : c.pad_token_id;
  g.repetition_penalty = o.repetition_penalty;
  g.min_new_tokens = o.min_new_tokens;
  g.kv_dtype = o.kv_cache_dtype;
  return g;
}

}  // namespace capi
}  // namespace oslo

extern "C" {

oslo_status oslo_generate_options_init(oslo_generate_options* options, unsigned int version) {
  return kGenerateOptions.init(options, version);
}

oslo_status oslo_merge_options_init(oslo_merge_options* options, unsigned int version) {
  return kMergeOptions.init(options, version);
}

oslo_status oslo_model_generate(oslo_model* model, const int64_t* prompt_ids,
                                const int64_t* prompt_lengths, int64_t batch,
                                const oslo_generate_options* options, int64_t* out_tokens,
                                int64_t* out_lengths, float* out_scores) {
  return guard([&] {
    const char* fn = "oslo_model_generate";
    need(model, fn, "model");
    need(prompt_ids, fn, "prompt_ids");
    need(prompt_lengths, fn, "prompt_lengths");
    need(out_tokens, fn, "out_tokens");
    need(out_lengths, fn, "out_lengths");
    if (batch <= 0 || batch > (1 << 20))
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": batch must be in [1, 2^20], got ", batch);
    oslo::Model& m = *model->impl;
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch));
    int64_t off = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = prompt_lengths[b];
      if (n <= 0 || n > (int64_t{1} << 24))
        oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": prompt ", b, " has length ", n,
                   " (must be >= 1)");
      prompts[static_cast<size_t>(b)].assign(prompt_ids + off, prompt_ids + off + n);
      off += n;
    }
    const oslo::GenerateOptions g = oslo::capi::read_generate_options(options, m.config(), fn);
    const int64_t max_new = g.max_new_tokens;
    oslo::GenerateResult r =
        oslo::generate(m.inference(), prompts, g, &m.context().control(OSLO_GROUP_TENSOR));
    for (int64_t b = 0; b < batch; ++b) {
      const auto& t = r.tokens[static_cast<size_t>(b)];
      int64_t* row = out_tokens + b * max_new;
      for (int64_t i = 0; i < max_new; ++i)
        row[i] = i < static_cast<int64_t>(t.size()) ? t[static_cast<size_t>(i)] : -1;
      out_lengths[b] = static_cast<int64_t>(t.size());
      if (out_scores)
        out_scores[b] = r.sequence_scores.empty() ? 0.f : r.sequence_scores[static_cast<size_t>(b)];
    }
  });
}

oslo_status oslo_model_save(oslo_model* model, const char* dir) {
  return guard([&] {
    need(model, "oslo_model_save", "model");
    need(dir, "oslo_model_save", "dir");
    model->impl->save(dir);
  });
}

oslo_status oslo_model_merge(const char* src, const char* dst, const oslo_merge_options* options) {
  return guard([&] {
    const char* fn = "oslo_model_merge";
    need(src, fn, "src");
    need(dst, fn, "dst");
    oslo_merge_options o = kMergeOptions.read_or_defaults(options, fn, "options");
    oslo::MergeOptions m;
    m.max_shard_bytes = o.max_shard_bytes;
    m.overwrite = o.overwrite != 0;
    if (o.dtype >= 0) {
      const auto dt = static_cast<oslo_dtype>(o.dtype);
      if (dt != OSLO_DTYPE_F32 && dt != OSLO_DTYPE_F16 && dt != OSLO_DTYPE_BF16)
        oslo::fail(OSLO_ERR_DTYPE, fn, ": dtype must be -1, f32, f16 or bf16, got ", o.dtype);
      m.convert = true;
      m.dtype = dt;
    }
    oslo::merge(src, dst, m);
  });
}

oslo_status oslo_model_reshard(const char* src, const char* dst, int tensor_parallel_size) {
  return guard([&] {
    const char* fn = "oslo_model_reshard";
    need(src, fn, "src");
    need(dst, fn, "dst");
    if (tensor_parallel_size < 1 || tensor_parallel_size > 4096)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": tensor_parallel_size must be in [1, 4096], got ",
                 tensor_parallel_size);
    oslo::reshard(src, dst, tensor_parallel_size, oslo::model_planner(src));
  });
}

oslo_status oslo_checkpoint_inspect(const char* path, int json, char* out, size_t capacity,
                                    size_t* length) {
  return guard([&] {
    const char* fn = "oslo_checkpoint_inspect";
    need(path, fn, "path");
    need(length, fn, "length");
    if (capacity > 0) need(out, fn, "out");
    const oslo::Inspection in = oslo::inspect(path);
    const std::string text = json ? oslo::render_json(in) : oslo::render_text(in);
    *length = text.size();
    if (capacity > 0) {
      const size_t n = std::min(capacity - 1, text.size());
      std::memcpy(out, text.data(), n);
      out[n] = '\0';
    }
  });
}

oslo_status oslo_model_options_init(oslo_model_options* options, unsigned int version) {
  return kModelOptions.init(options, version);
}

oslo_status oslo_model_load(oslo_context* ctx, const char* path, const oslo_model_options* options,
                            oslo_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_model_load";
    need(out, fn, "out");
    need(ctx, fn, "ctx");
    need(path, fn, "path");
    oslo_model_options o = kModelOptions.read_or_defaults(options, fn, "options");
    oslo::ModelLoadOptions lo;
    lo.dtype = o.dtype;
    if (o.pipeline_layers_count < 0 || (o.pipeline_layers_count > 0 && !o.pipeline_layers) ||
        o.pipeline_layers_count > (1 << 20))
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": options.pipeline_layers_count ",
                 o.pipeline_layers_count, " with pipeline_layers ",
                 o.pipeline_layers ? "set" : "NULL");
    lo.pipeline_layers.assign(o.pipeline_layers, o.pipeline_layers + o.pipeline_layers_count);
    lo.virtual_stages = o.pipeline_virtual_stages;
    auto h = std::make_unique<oslo_model>();
    h->impl = oslo::capi::share_model(oslo::Model::load(*ctx->impl, path, lo), ctx->impl);
    *out = h.release();
  });
}

void oslo_model_destroy(oslo_model* model) {
  delete model;
}

oslo_status oslo_model_get_info(const oslo_model* model, oslo_model_info* info,
                                const char** model_type) {
  return guard([&] {
    const char* fn = "oslo_model_get_info";
    need(model, fn, "model");
    need(info, fn, "info");
    const oslo::ModelConfig& c = model->impl->config();
    info->vocab_size = c.vocab_size;
    info->hidden_size = c.hidden_size;
    info->num_layers = c.num_layers;
    info->num_heads = c.num_heads;
    info->num_kv_heads = c.num_kv_heads;
    info->max_positions = c.max_positions;
    info->is_causal = model->impl->causal() ? 1 : 0;
    info->dtype = model->impl->dtype();
    info->eos_token_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0];
    info->pad_token_id = c.pad_token_id;
    if (model_type) *model_type = c.model_type.c_str();
  });
}

oslo_status oslo_model_forward(oslo_model* model, const int64_t* ids, const int64_t* mask,
                               const int64_t* token_type_ids, int64_t batch, int64_t seq,
                               oslo_model_output output, float* out, size_t capacity) {
  return guard([&] {
    const char* fn = "oslo_model_forward";
    need(model, fn, "model");
    check_batch(fn, ids, batch, seq);
    need(out, fn, "out");
    if (output != OSLO_MODEL_OUTPUT_LOGITS && output != OSLO_MODEL_OUTPUT_HIDDEN)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown output ", static_cast<int>(output));
    const size_t n = static_cast<size_t>(batch * seq);
    const auto& c = model->impl->config();
    const size_t need_floats =
        n * static_cast<size_t>(output == OSLO_MODEL_OUTPUT_LOGITS ? c.vocab_size : c.hidden_size);
    if (capacity < need_floats)
      oslo::fail(OSLO_ERR_SHAPE, fn, ": out holds ", capacity, " floats but ", need_floats,
                 " are needed");
    std::vector<float> v;
    if (token_type_ids && !c.traits.token_types)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", c.model_type,
                 " has no token types: pass token_type_ids = NULL");
    model->impl->inference().forward(copy_of(ids, n), copy_of(mask, n), copy_of(token_type_ids, n),
                                     batch, seq, output == OSLO_MODEL_OUTPUT_LOGITS, &v);
    write_out(fn, v, out, capacity);
  });
}

oslo_status oslo_model_embed(oslo_model* model, const int64_t* ids, const int64_t* mask,
                             int64_t batch, int64_t seq, int normalize, float* out,
                             size_t capacity) {
  return guard([&] {
    const char* fn = "oslo_model_embed";
    need(model, fn, "model");
    check_batch(fn, ids, batch, seq);
    need(out, fn, "out");
    const size_t n = static_cast<size_t>(batch * seq);
    const size_t need_floats =
        static_cast<size_t>(batch) * static_cast<size_t>(model->impl->config().hidden_size);
    if (capacity < need_floats)
      oslo::fail(OSLO_ERR_SHAPE, fn, ": out holds ", capacity, " floats but ", need_floats,
                 " are needed");
    std::vector<float> v;
    model->impl->inference().embed(copy_of(ids, n), copy_of(mask, n), batch, seq, normalize != 0,
                                   &v);
    write_out(fn, v, out, capacity);
  });
}

}  // extern "C"
