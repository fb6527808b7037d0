// The format table of quant.hpp: names, GGUF type ids, block sizes, row and
// tensor sizes, and the shard-boundary check.
#include <cstring>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/quant.hpp"

namespace oslo {
namespace quant {

namespace {

// The gguf_id of a format GGUF does not have.
constexpr uint32_t kNoGguf = UINT32_MAX;

struct FormatDesc {
  const char* name;
  uint32_t gguf_id;
  size_t elems;
  size_t bytes;
  bool quantizable;
};

// Indexed by Format. Block sizes are llama.cpp's sizeof(block_*) (ggml-common.h).
constexpr FormatDesc kFormats[kFormatCount] = {
    {"f32", 0, 1, 4, true},                // f32
    {"f16", 1, 1, 2, true},                // f16
    {"bf16", 30, 1, 2, true},              // bf16
    {"q8_0", 8, 32, 34, true},             // f16 d, int8 qs[32]
    {"q4_0", 2, 32, 18, true},             // f16 d, uint8 qs[16]
    {"q4_k", 12, kSuperBlock, 144, true},  // f16 d, f16 dmin, scales[12], qs[128]
    {"q6_k", 14, kSuperBlock, 210, true},  // ql[128], qh[64], int8 scales[16], f16 d
    {"q4_g128", kNoGguf, 128, 68, true},   // f16 d, uint8 z, uint8 0, uint8 qs[64]
};

const FormatDesc& desc(Format f) {
  const int i = static_cast<int>(f);
  OSLO_CHECK(i >= 0 && i < kFormatCount, OSLO_ERR_INVALID_ARGUMENT, "unknown quant format ", i);
  return kFormats[i];
}

// ggml's type names by id (ggml.c's type_traits), for refusing a type by name.
const char* const kGgmlTypeNames[] = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
};

std::string named(const std::string& tensor) {
  return tensor.empty() ? std::string() : "tensor " + quote(tensor) + ": ";
}

}  // namespace

const char* format_name(Format f) {
  const int i = static_cast<int>(f);
  return i >= 0 && i < kFormatCount ? kFormats[i].name : "unknown";
}

Format format_of_dtype(int dtype) {
  switch (dtype) {
    case OSLO_DTYPE_F32: return Format::F32;
    case OSLO_DTYPE_F16: return Format::F16;
    case OSLO_DTYPE_BF16: return Format::BF16;
    case OSLO_DTYPE_Q8_0: return Format::Q8_0;
    case OSLO_DTYPE_Q4_0: return Format::Q4_0;
    case OSLO_DTYPE_Q4_K: return Format::Q4_K;
    case OSLO_DTYPE_Q6_K: return Format::Q6_K;
    case OSLO_DTYPE_Q4_G128: return Format::Q4_G128;
    default: break;
  }
  fail(OSLO_ERR_DTYPE, "no block format for dtype ", dtype_name(static_cast<oslo_dtype>(dtype)),
       " (", dtype, ")");
}

int dtype_of_format(Format f) {
  switch (f) {
    case Format::F32: return OSLO_DTYPE_F32;
    case Format::F16: return OSLO_DTYPE_F16;
    case Format::BF16: return OSLO_DTYPE_BF16;
    case Format::Q8_0: return OSLO_DTYPE_Q8_0;
    case Format::Q4_0: return OSLO_DTYPE_Q4_0;
    case Format::Q4_K: return OSLO_DTYPE_Q4_K;
    case Format::Q6_K: return OSLO_DTYPE_Q6_K;
    case Format::Q4_G128: return OSLO_DTYPE_Q4_G128;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown block format ", static_cast<int>(f));
}

bool parse_format(const std::string& name, Format* out) {
  for (int i = 0; i < kFormatCount; ++i) {
    if (name == kFormats[i].name) {
      *out = static_cast<Format>(i);
      return true;
    }
  }
  return false;
}

uint32_t gguf_type_id(Format f) {
  const FormatDesc& d = desc(f);
  OSLO_CHECK(d.gguf_id != kNoGguf, OSLO_ERR_NOT_SUPPORTED, d.name,
             " is oslo's own format (GPTQ/AWQ groups of 128 with zero points): GGUF has no type "
             "for it");
  return d.gguf_id;
}

bool has_gguf_type(Format f) {
  return desc(f).gguf_id != kNoGguf;
}

bool from_gguf_type_id(uint32_t id, Format* out) {
  if (id == kNoGguf) return false;
  for (int i = 0; i < kFormatCount; ++i) {
    if (kFormats[i].gguf_id == id) {
      *out = static_cast<Format>(i);
      return true;
    }
  }
  return false;
}

std::string gguf_type_name(uint32_t id) {
  const size_t n = sizeof(kGgmlTypeNames) / sizeof(kGgmlTypeNames[0]);
  // 4 and 5 (Q4_2, Q4_3) and 31..33, 36..38 (the repacked types) were
  // removed from ggml: named, but still refused.
  if (id < n) return kGgmlTypeNames[id];
  return "type " + std::to_string(id);
}

size_t block_elems(Format f) {
  return desc(f).elems;
}
size_t block_bytes(Format f) {
  return desc(f).bytes;
}
bool is_quantized(Format f) {
  return desc(f).elems > 1;
}
bool can_quantize(Format f) {
  return desc(f).quantizable;
}

uint64_t row_bytes(Format f, uint64_t n, const std::string& tensor) {
  const FormatDesc& d = desc(f);
  OSLO_CHECK(n % d.elems == 0, OSLO_ERR_INVALID_ARGUMENT, named(tensor), "row length ", n,
             " is not a multiple of the ", d.name, " block size ", d.elems);
  uint64_t bytes = 0;
  OSLO_CHECK(!__builtin_mul_overflow(n / d.elems, static_cast<uint64_t>(d.bytes), &bytes),
             OSLO_ERR_INVALID_ARGUMENT, named(tensor), "row of ", n, " ", d.name,
             " elements overflows 64 bits");
  return bytes;
}

uint64_t tensor_bytes(Format f, const std::vector<uint64_t>& shape, const std::string& tensor) {
  if (shape.empty()) {
    OSLO_CHECK(!is_quantized(f), OSLO_ERR_INVALID_ARGUMENT, named(tensor), "a scalar cannot be ",
               format_name(f), " (blocks of ", block_elems(f), ")");
    return block_bytes(f);
  }
  uint64_t total = row_bytes(f, shape.back(), tensor);
  for (size_t i = 0; i + 1 < shape.size(); ++i)
    OSLO_CHECK(!__builtin_mul_overflow(total, shape[i], &total), OSLO_ERR_INVALID_ARGUMENT,
               named(tensor), format_name(f), " tensor size overflows 64 bits");
  return total;
}

void check_shard_range(Format f, const std::string& tensor, const std::vector<uint64_t>& shape,
                       size_t dim, uint64_t begin, uint64_t end) {
  const std::string who = "tensor " + quote(tensor) + ": shard [" + std::to_string(begin) + ", " +
                          std::to_string(end) + ") of dimension " + std::to_string(dim);
  OSLO_CHECK(dim < shape.size(), OSLO_ERR_INVALID_ARGUMENT, who, ": the tensor has ", shape.size(),
             " dimensions");
  OSLO_CHECK(begin <= end && end <= shape[dim], OSLO_ERR_INVALID_ARGUMENT, who,
             ": outside the dimension's extent ", shape[dim]);
  if (dim + 1 != shape.size()) return;  // whole rows: blocks are never split
  const uint64_t b = block_elems(f);
  OSLO_CHECK(begin % b == 0 && end % b == 0, OSLO_ERR_INVALID_ARGUMENT, who, " would split a ",
             format_name(f), " block: ", format_name(f), " rows are cut only at multiples of ", b,
             " elements");
}

}  // namespace quant
}  // namespace oslo
