// GPTQ and AWQ checkpoints seen through a WeightSource: a Hugging Face
// folder whose config.json has a quantization_config with quant_method
// "gptq" or "awq" lists each quantized linear as ONE tensor
// "<prefix>.weight" of shape [out_features, in_features] with quant =
// OSLO_DTYPE_Q4_G128 (stored dtype U8) in place of its <prefix>.qweight,
// .qzeros, .scales and .g_idx; other tensors (embeddings, norms, biases,
// layers the quantizer skipped) are listed as they are. Reading such a
// tensor converts its checkpoint tensors (core/quant/gptq_awq.hpp): U8 gives
// the Q4_G128 block bytes, F32/F16/BF16 the dequantized values (q - z) * d.
// docs/QUANTIZATION.md describes the layouts and the config fields read.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/quant/gptq_awq.hpp"

namespace oslo {

class WeightSource;

// The converted view of a GPTQ/AWQ folder's quantized linears. Owned by its
// WeightSource; not thread-safe (as the source).
class GptqAdapter {
 public:
  // Null unless config_json (config.json's text) has a quantization_config
  // whose quant_method is "gptq" or "awq". Otherwise replaces in `tensors`
  // every "<p>.qweight" and its companions by "<p>.weight" (see above).
  // Errors, naming `where` and the field or tensor: OSLO_ERR_NOT_SUPPORTED
  // for bits other than 4, a group size other than 128 (named), GPTQ
  // checkpoint formats other than "gptq" / "gptq_v2" (marlin, bitblas,
  // ...), AWQ versions other than "gemm" (gemv, exllama, marlin, ...), AWQ
  // without zero points; OSLO_ERR_FORMAT for a malformed config, a linear
  // missing a companion tensor, a companion of the wrong dtype, or a
  // "<p>.weight" present beside "<p>.qweight"; OSLO_ERR_SHAPE for shapes
  // that disagree (quant::check_packed).
  static std::unique_ptr<GptqAdapter> open(const std::string& config_json, const std::string& where,
                                           std::vector<ManifestTensor>& tensors);

  // Whether `t` is one of the converted tensors.
  bool owns(const ManifestTensor& t) const;

  // WeightSource::read_box for an owned tensor: the box [start, start +
  // len) along dim (-1: whole; 0: rows = outputs; 1: inputs, at multiples of
  // 128 for U8) in dtype `out` (U8: block bytes, rows x len / 128 x 68;
  // F32/F16/BF16: values). Reads the linear's checkpoint tensors whole.
  // Errors: OSLO_ERR_INVALID_ARGUMENT (box outside the tensor, a U8 box
  // splitting a group), OSLO_ERR_DTYPE (another out dtype),
  // OSLO_ERR_NOT_SUPPORTED (U8 of an act-order linear: its blocks hold the
  // inputs sorted by group, a permutation a weight source cannot hand on;
  // F32/F16/BF16 reads give its values in input order), the errors of
  // quant::packed_to_q4_g128, and those of reading the checkpoint tensors.
  void read_box(WeightSource& src, const ManifestTensor& t, int dim, int64_t start, int64_t len,
                safetensors::Dtype out, void* dst);

  // WeightSource::check_tensor for an owned tensor: its checkpoint tensors'
  // files and headers.
  void check_tensor(WeightSource& src, const ManifestTensor& t);

  quant::PackedKind kind() const { return kind_; }

 private:
  struct Linear {
    ManifestTensor qweight, qzeros, scales, g_idx;
    bool has_g_idx = false;
    int64_t in_features = 0, out_features = 0;
  };
  const Linear& linear(const ManifestTensor& t) const;

  quant::PackedKind kind_ = quant::PackedKind::Gptq;
  bool zeros_minus_one_ = true;
  int64_t group_size_ = 128;
  std::map<std::string, Linear> linears_;  // by the listed "<p>.weight"
};

}  // namespace oslo
