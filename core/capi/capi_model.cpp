// C shims: models (load, info, forward, embed).
#include <cstring>

#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"
#include "core/model/model.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::OptionsHistory;

struct oslo_model {
  std::unique_ptr<oslo::Model> impl;
};

namespace {

const OptionsHistory<oslo_model_options, 1> kModelHistory = {
    "oslo_model_options", "OSLO_MODEL_OPTIONS_VERSION", {OSLO_OPTIONS_END(oslo_model_options, dtype)}};
OSLO_OPTIONS_LAST_FIELD(oslo_model_options, dtype);
static_assert(OSLO_MODEL_OPTIONS_VERSION == 1, "add the new version to kModelHistory");

oslo_model_options model_defaults() {
  oslo_model_options o;
  std::memset(&o, 0, sizeof o);
  o.version = OSLO_MODEL_OPTIONS_VERSION;
  o.dtype = -1;
  return o;
}

// ids/mask arrays of batch*seq entries, validated.
void check_batch(const char* fn, const int64_t* ids, int64_t batch, int64_t seq) {
  need(ids, fn, "ids");
  if (batch <= 0 || seq <= 0 || batch > (int64_t{1} << 31) / seq)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": batch (", batch, ") and seq (", seq,
               ") must be positive and batch * seq at most 2^31");
}

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

extern "C" {

oslo_status oslo_model_options_init(oslo_model_options* options, unsigned int version) {
  return guard([&] {
    oslo::capi::init_options(kModelHistory, model_defaults(), options, version,
                             "oslo_model_options_init");
  });
}

oslo_status oslo_model_load(oslo_context* ctx, const char* path, const oslo_model_options* options,
                            oslo_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_model_load";
    need(out, fn, "out");
    need(ctx, fn, "ctx");
    need(path, fn, "path");
    oslo_model_options o = model_defaults();
    if (options) o = oslo::capi::read_options(kModelHistory, model_defaults(), options, fn, "options");
    oslo::ModelLoadOptions lo;
    lo.dtype = o.dtype;
    auto h = std::make_unique<oslo_model>();
    h->impl = oslo::Model::load(*ctx->impl, path, lo);
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
                               int64_t batch, int64_t seq, oslo_model_output output, float* out,
                               size_t capacity) {
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
    model->impl->forward(copy_of(ids, n), copy_of(mask, n), {}, batch, seq,
                         output == OSLO_MODEL_OUTPUT_LOGITS, &v);
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
    model->impl->embed(copy_of(ids, n), copy_of(mask, n), batch, seq, normalize != 0, &v);
    write_out(fn, v, out, capacity);
  });
}

}  // extern "C"
