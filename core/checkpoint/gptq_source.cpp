// GPTQ/AWQ folders through a WeightSource (gptq_source.hpp).
#include "core/checkpoint/gptq_source.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checkpoint/weight_source.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/quant/quant.hpp"

namespace oslo {

namespace st = safetensors;
using json = nlohmann::json;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// An integer field of the quantization config, the first of `keys`
// present; `fallback` when none is.
int64_t int_field(const json& q, std::initializer_list<const char*> keys, int64_t fallback,
                  const std::string& where) {
  for (const char* k : keys) {
    if (!q.contains(k) || q[k].is_null()) continue;
    OSLO_CHECK(q[k].is_number_integer(), OSLO_ERR_FORMAT, where, ": quantization_config.", k,
               " must be an integer");
    return q[k].get<int64_t>();
  }
  return fallback;
}

std::string string_field(const json& q, std::initializer_list<const char*> keys,
                         const std::string& fallback, const std::string& where) {
  for (const char* k : keys) {
    if (!q.contains(k) || q[k].is_null()) continue;
    OSLO_CHECK(q[k].is_string(), OSLO_ERR_FORMAT, where, ": quantization_config.", k,
               " must be a string");
    return q[k].get<std::string>();
  }
  return fallback;
}

}  // namespace

std::unique_ptr<GptqAdapter> GptqAdapter::open(const std::string& config_json,
                                               const std::string& where,
                                               std::vector<ManifestTensor>& tensors) {
  if (config_json.empty()) return nullptr;
  json cfg = json::parse(config_json, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("quantization_config"))
    return nullptr;  // the model config's own parser reports malformed JSON
  const json& q = cfg["quantization_config"];
  if (!q.is_object() || !q.contains("quant_method") || !q["quant_method"].is_string())
    return nullptr;
  const std::string method = lower(q["quant_method"].get<std::string>());
  if (method != "gptq" && method != "awq") return nullptr;
  const std::string who = where + ": quantization_config (" + method + ")";

  std::unique_ptr<GptqAdapter> a(new GptqAdapter());
  a->kind_ = method == "gptq" ? quant::PackedKind::Gptq : quant::PackedKind::Awq;
  const int64_t bits = int_field(q, {"bits", "w_bit"}, -1, who);
  OSLO_CHECK(bits == 4, OSLO_ERR_NOT_SUPPORTED, who, ": bits ", bits,
             " is not supported (oslo reads 4-bit GPTQ/AWQ checkpoints only)");
  a->group_size_ = int_field(q, {"group_size", "q_group_size"}, -1, who);
  OSLO_CHECK(a->group_size_ == 128, OSLO_ERR_NOT_SUPPORTED, who, ": group_size ", a->group_size_,
             " is not supported: oslo's q4_g128 holds groups of 128 inputs only");
  if (a->kind_ == quant::PackedKind::Gptq) {
    const std::string fmt = lower(string_field(q, {"checkpoint_format", "format"}, "gptq", who));
    OSLO_CHECK(fmt == "gptq" || fmt == "gptq_v2", OSLO_ERR_NOT_SUPPORTED, who,
               ": checkpoint_format ", quote(fmt),
               " is not supported (oslo reads the \"gptq\" and \"gptq_v2\" packings; "
               "marlin, bitblas and other kernel-specific layouts are not)");
    a->zeros_minus_one_ = fmt == "gptq";
  } else {
    const std::string ver = lower(string_field(q, {"version"}, "gemm", who));
    OSLO_CHECK(ver == "gemm", OSLO_ERR_NOT_SUPPORTED, who, ": version ", quote(ver),
               " is not supported (oslo reads AWQ's \"gemm\" packing only)");
    OSLO_CHECK(
        !q.contains("zero_point") || !q["zero_point"].is_boolean() || q["zero_point"].get<bool>(),
        OSLO_ERR_NOT_SUPPORTED, who, ": zero_point false is not supported");
  }

  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].name] = i;
  std::vector<bool> drop(tensors.size(), false);
  std::vector<ManifestTensor> added;
  const bool gptq = a->kind_ == quant::PackedKind::Gptq;
  for (const ManifestTensor& t : tensors) {
    if (!ends_with(t.name, ".qweight")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 8);
    auto take = [&](const char* part, st::Dtype want, bool required) -> const ManifestTensor* {
      auto it = by_name.find(prefix + part);
      if (it == by_name.end()) {
        OSLO_CHECK(!required, OSLO_ERR_FORMAT, where, ": ", method, " linear ", quote(prefix),
                   " has qweight but no ", quote(prefix + part));
        return nullptr;
      }
      const ManifestTensor& c = tensors[it->second];
      OSLO_CHECK(c.dtype == want && !c.quantized(), OSLO_ERR_FORMAT, where, ": tensor ",
                 quote(c.name), " is ", st::dtype_name(c.dtype), ", ", method, " stores it as ",
                 st::dtype_name(want));
      drop[it->second] = true;
      return &c;
    };
    Linear L;
    L.qweight = *take(".qweight", st::Dtype::I32, true);
    L.qzeros = *take(".qzeros", st::Dtype::I32, true);
    L.scales = *take(".scales", st::Dtype::F16, true);
    const ManifestTensor* gi = gptq ? take(".g_idx", st::Dtype::I32, false) : nullptr;
    if (gi) {
      L.g_idx = *gi;
      L.has_g_idx = true;
    }
    OSLO_CHECK(L.qweight.shape.size() == 2, OSLO_ERR_SHAPE, where, ": tensor ", quote(t.name),
               " is ", shape_str(L.qweight.shape), ", not 2-D");
    L.in_features = gptq ? L.qweight.shape[0] * 8 : L.qweight.shape[0];
    L.out_features = gptq ? L.qweight.shape[1] : L.qweight.shape[1] * 8;
    quant::PackedLinear p;
    p.kind = a->kind_;
    p.name = prefix;
    p.in_features = L.in_features;
    p.out_features = L.out_features;
    p.group_size = a->group_size_;
    p.qweight_shape = L.qweight.shape;
    p.qzeros_shape = L.qzeros.shape;
    p.scales_shape = L.scales.shape;
    if (L.has_g_idx) p.g_idx_shape = L.g_idx.shape;
    quant::check_packed(p);
    const std::string wname = prefix + ".weight";
    OSLO_CHECK(!by_name.count(wname), OSLO_ERR_FORMAT, where, ": ", quote(wname),
               " is stored beside ", quote(t.name), ": a linear is either dense or ", method);
    ManifestTensor w;
    w.name = wname;
    w.dtype = st::Dtype::U8;
    w.quant = OSLO_DTYPE_Q4_G128;
    w.shape = {L.out_features, L.in_features};
    w.shards = L.qweight.shards;  // where its bytes come from (inspect shows them)
    a->linears_[wname] = L;
    added.push_back(std::move(w));
  }
  std::vector<ManifestTensor> kept;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(tensors[i]));
  for (ManifestTensor& w : added) kept.push_back(std::move(w));
  tensors = std::move(kept);
  return a;
}

bool GptqAdapter::owns(const ManifestTensor& t) const {
  return t.quant == OSLO_DTYPE_Q4_G128 && linears_.count(t.name) != 0;
}

const GptqAdapter::Linear& GptqAdapter::linear(const ManifestTensor& t) const {
  auto it = linears_.find(t.name);
  OSLO_CHECK(it != linears_.end(), OSLO_ERR_INTERNAL, "tensor ", quote(t.name),
             " is not a converted GPTQ/AWQ linear");
  return it->second;
}

void GptqAdapter::check_tensor(WeightSource& src, const ManifestTensor& t) {
  const Linear& L = linear(t);
  src.check_tensor(L.qweight);
  src.check_tensor(L.qzeros);
  src.check_tensor(L.scales);
  if (L.has_g_idx) src.check_tensor(L.g_idx);
}

void GptqAdapter::read_box(WeightSource& src, const ManifestTensor& t, int dim, int64_t start,
                           int64_t len, st::Dtype out, void* dst) {
  const Linear& L = linear(t);
  const int64_t N = L.out_features, K = L.in_features;
  const std::string who = "tensor " + quote(t.name);
  OSLO_CHECK(dim >= -1 && dim <= 1, OSLO_ERR_INVALID_ARGUMENT, who, ": box dimension ", dim,
             " is out of range for 2 dimensions");
  if (dim >= 0)
    OSLO_CHECK(start >= 0 && len >= 0 && start <= t.shape[dim] && len <= t.shape[dim] - start,
               OSLO_ERR_INVALID_ARGUMENT, who, ": box [", start, ", ", start + len,
               ") along dimension ", dim, " is outside its extent ", t.shape[dim]);
  const bool raw = out == st::Dtype::U8;
  oslo_dtype fdt = OSLO_DTYPE_F32;
  OSLO_CHECK(raw || (st::to_oslo(out, &fdt) && dtype_is_float(fdt)), OSLO_ERR_DTYPE, who,
             ": a q4_g128 tensor reads as U8 (its blocks) or F32/F16/BF16, not ",
             st::dtype_name(out));
  const int64_t r0 = dim == 0 ? start : 0, nr = dim == 0 ? len : N;
  const int64_t c0 = dim == 1 ? start : 0, nc = dim == 1 ? len : K;
  if (nr == 0 || nc == 0) return;
  if (raw)
    OSLO_CHECK(c0 % 128 == 0 && nc % 128 == 0, OSLO_ERR_INVALID_ARGUMENT, who, ": the box [", c0,
               ", ", c0 + nc, ") along its rows would split a q4_g128 group of 128");

  std::vector<int32_t> qw(static_cast<size_t>(L.qweight.nbytes() / 4));
  std::vector<int32_t> qz(static_cast<size_t>(L.qzeros.nbytes() / 4));
  std::vector<uint16_t> sc(static_cast<size_t>(L.scales.nbytes() / 2));
  std::vector<int32_t> gi(L.has_g_idx ? static_cast<size_t>(L.g_idx.nbytes() / 4) : 0);
  src.read_box(L.qweight, -1, 0, 0, st::Dtype::I32, qw.data());
  src.read_box(L.qzeros, -1, 0, 0, st::Dtype::I32, qz.data());
  src.read_box(L.scales, -1, 0, 0, st::Dtype::F16, sc.data());
  if (L.has_g_idx) src.read_box(L.g_idx, -1, 0, 0, st::Dtype::I32, gi.data());
  quant::PackedLinear p;
  p.kind = kind_;
  p.name = t.name.substr(0, t.name.size() - 7);
  p.in_features = K;
  p.out_features = N;
  p.group_size = group_size_;
  p.zeros_minus_one = zeros_minus_one_;
  p.qweight = qw.data();
  p.qweight_shape = L.qweight.shape;
  p.qzeros = qz.data();
  p.qzeros_shape = L.qzeros.shape;
  p.scales = sc.data();
  p.scales_shape = L.scales.shape;
  if (L.has_g_idx) {
    p.g_idx = gi.data();
    p.g_idx_shape = L.g_idx.shape;
  }
  // Act-order: the blocks hold the inputs sorted by group (perm), which a
  // q4_g128 weight cannot carry; the values are read back in input order.
  const std::vector<int64_t> perm = quant::act_order_permutation(p);
  OSLO_CHECK(perm.empty() || !raw, OSLO_ERR_NOT_SUPPORTED, who,
             ": the checkpoint is act-order (desc_act: g_idx is not k / group_size), so its "
             "q4_g128 blocks would need the activations permuted; load the model with a float "
             "dtype (f32, bf16 or f16) to read its linears dequantized in input order");
  const size_t rb = quant::row_bytes(quant::Format::Q4_G128, static_cast<uint64_t>(K), t.name);
  std::vector<uint8_t> blocks(rb * static_cast<size_t>(nr));
  quant::packed_to_q4_g128(p, perm, r0, nr, blocks.data());
  uint8_t* d8 = static_cast<uint8_t*>(dst);
  if (raw) {
    const size_t ob = static_cast<size_t>(c0 / 128) * 68, nb = static_cast<size_t>(nc / 128) * 68;
    for (int64_t r = 0; r < nr; ++r)
      std::memcpy(d8 + static_cast<size_t>(r) * nb,
                  blocks.data() + static_cast<size_t>(r) * rb + ob, nb);
    return;
  }
  std::vector<float> row(static_cast<size_t>(K)), sorted(perm.empty() ? 0 : static_cast<size_t>(K));
  const size_t es = dtype_size(fdt);
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* b = blocks.data() + static_cast<size_t>(r) * rb;
    if (perm.empty()) {
      quant::dequantize_row(quant::Format::Q4_G128, b, row.data(), static_cast<uint64_t>(K));
    } else {  // position j holds input perm[j]
      quant::dequantize_row(quant::Format::Q4_G128, b, sorted.data(), static_cast<uint64_t>(K));
      for (int64_t j = 0; j < K; ++j)
        row[static_cast<size_t>(perm[static_cast<size_t>(j)])] = sorted[static_cast<size_t>(j)];
    }
    from_f32(fdt, row.data() + c0, d8 + static_cast<size_t>(r * nc) * es, static_cast<size_t>(nc));
  }
}

}  // namespace oslo
