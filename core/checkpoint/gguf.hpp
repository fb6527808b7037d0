// A reader for llama.cpp's GGUF files (versions 2 and 3, little-endian):
// the header, every metadata value type (kept in a queryable map, unknown
// keys included), the tensor infos, and a view of each tensor's bytes in the
// file, which is mapped read-only (never read whole). Tensor formats are
// those of core/quant (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K).
//
// Layout (docs/QUANTIZATION.md has the details): "GGUF", u32 version, u64
// tensor count, u64 metadata count; the metadata as (string key, u32 type,
// value); the tensor infos as (string name, u32 n_dims, u64 dims[n_dims]
// innermost first, u32 ggml type, u64 offset); padding to general.alignment
// (default 32); the data section, where each tensor starts at its offset (a
// multiple of the alignment). A string is a u64 length and that many bytes;
// an array is a u32 element type, a u64 count and the elements.
//
// Every check is made before anything is used or allocated: counts larger
// than the rest of the file could hold, strings and arrays past the end,
// unknown value or tensor types (named, e.g. "Q5_K"), more than 4 dims,
// sizes that overflow, rows that are not whole blocks, offsets that are
// misaligned, past the end of the file or overlapping another tensor,
// duplicate keys or tensor names. Each throws oslo::Error(OSLO_ERR_FORMAT)
// with a message starting "<file>: " and naming the key, tensor or field and
// the offset; failing to open, stat or map the file is OSLO_ERR_IO with the
// errno text.
//
// Thread-safety: a parsed File is immutable; any number of threads may
// query it and read its tensors concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/quant/quant.hpp"

namespace oslo {
namespace gguf {

// Metadata value types (GGUF's gguf_type).
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
constexpr uint32_t kValueTypeCount = 13;

// "u8", "i8", ..., "string", "array", "f64"; "unknown" for other values.
const char* value_type_name(ValueType t);

// Arrays nested deeper than this are refused (a nested array of strings is
// depth 2).
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;
// Array elements in all the metadata of a file, at most (a value takes about
// 100 bytes in memory: this bounds what a hostile file can make oslo
// allocate to under 1 GB; a 256k-token vocabulary takes under 1M).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;
constexpr uint64_t kDefaultAlignment = 32;

// One metadata value. Unsigned integers are in u, signed ones in i, floats
// in f (a float32 widened exactly), bools in u (0 or 1), strings in s
// (bytes as in the file, not checked to be UTF-8); an array has elem_type
// and its elements in array (each of type elem_type).
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  ValueType elem_type = ValueType::U8;
  std::vector<Value> array;

  bool is_unsigned() const;  // U8, U16, U32, U64
  bool is_signed() const;    // I8, I16, I32, I64
  bool is_float() const;     // F32, F64
};

struct TensorInfo {
  std::string name;
  quant::Format format = quant::Format::F32;
  uint32_t type_id = 0;        // the ggml type id in the file
  std::vector<uint64_t> dims;  // as in the file: dims[0] is the row (ne[0])
  uint64_t offset = 0;         // relative to the data section
  uint64_t nbytes = 0;         // from the format and the dims
  uint64_t elements = 0;

  // Outermost first, the row last (row-major, as numpy and oslo write
  // shapes): dims reversed.
  std::vector<uint64_t> shape() const;
  uint64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  uint64_t rows() const;  // elements / row_length (1 for an empty dims)
};

// A tensor's bytes in the mapped file (valid while the File lives).
struct TensorView {
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  quant::Format format = quant::Format::F32;
  std::vector<uint64_t> shape;  // outermost first
};

// A parsed GGUF file: over a read-only mapping of a file (open) or over
// memory the caller keeps alive (parse).
class File {
 public:
  // Maps `path` read-only and parses it. OSLO_ERR_IO if it cannot be
  // opened, is not a regular file or cannot be mapped; OSLO_ERR_FORMAT for
  // any violation of the format. A file truncated by someone else after it
  // was opened makes later reads of its tensors fault (SIGBUS), as any
  // mapping does.
  static File open(const std::string& path);
  // Parses size bytes at data, which must outlive the File (not copied).
  // `source` names the buffer in error messages.
  static File parse(const void* data, size_t size, const std::string& source);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }  // offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata, by key, and the keys in file order.
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const std::vector<std::string>& keys() const { return keys_; }
  const Value* find(const std::string& key) const;  // nullptr if absent

  // Typed getters: OSLO_ERR_FORMAT naming the file and key when the key is
  // missing or has another type. get_int accepts every integer type (a u64
  // above INT64_MAX is an error), get_uint the unsigned ones and
  // non-negative signed ones, get_float F32 and F64.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::vector<Value>& get_array(const std::string& key) const;
  // The same, with `fallback` when the key is absent (a wrong type is still
  // an error).
  std::string get_string(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;

  // Tensors in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;  // nullptr if absent
  // Like find_tensor; a missing tensor is OSLO_ERR_FORMAT naming it.
  const TensorInfo& tensor(const std::string& name) const;
  TensorView view(const TensorInfo& t) const;
  // Dequantizes the whole tensor into t.elements floats at dst.
  void dequantize(const TensorInfo& t, float* dst) const;

 private:
  File() = default;
  void parse_all();

  std::string source_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // the mapping, when this File owns one
  size_t map_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_start_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<std::string> keys_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace gguf
}  // namespace oslo
