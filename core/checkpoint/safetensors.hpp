// A reader and writer for the safetensors format, written for oslo (the
// official implementation is Rust). The reader validates a header exactly as
// the reference parser does (see FORMAT.md, "safetensors"): it reads only the
// 8-byte length and the JSON header, never the whole file, and then reads any
// byte range of a tensor with pread, so a rank that needs a slice reads only
// its bytes. The writer produces files byte-identical to the reference
// serializer (same tensor order, same compact JSON, header padded with spaces
// to 8 bytes) and replaces its target atomically.
//
// Every violation of the format throws oslo::Error(OSLO_ERR_FORMAT) with a
// message naming the file and the tensor or field; a failing open, read or
// write throws OSLO_ERR_IO with the errno text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "oslo.h"

namespace oslo {
namespace safetensors {

// Element types, in the reference implementation's declaration order (which
// its writer sorts by). Sizes are in bits: F4 is 4, F6_* are 6.
enum class Dtype : uint8_t {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};
constexpr int kDtypeCount = static_cast<int>(Dtype::U64) + 1;

const char* dtype_name(Dtype dt);  // "F32", ...
// Parses an exact (case-sensitive) dtype name; false if unknown.
bool parse_dtype(const std::string& name, Dtype* out);
unsigned dtype_bits(Dtype dt);
// oslo's dtypes map to F32, F16, BF16, I32, I64.
Dtype from_oslo(oslo_dtype dt);
// False for safetensors dtypes oslo has no equivalent of.
bool to_oslo(Dtype dt, oslo_dtype* out);

// Largest header the reference parser accepts.
constexpr uint64_t kMaxHeaderSize = 100000000;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // [begin, end) relative to the start of the data buffer
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
  uint64_t numel() const;  // product of shape (validated not to overflow)
};

struct Header {
  uint64_t header_size = 0;         // N, the JSON length (including padding)
  uint64_t data_size = 0;           // bytes of the data buffer
  std::vector<TensorInfo> tensors;  // sorted by data offsets, as in the file
  bool has_metadata = false;        // "__metadata__" present and not null
  std::map<std::string, std::string> metadata;

  uint64_t data_start() const { return 8 + header_size; }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent

  std::unordered_map<std::string, size_t> index;  // name -> position in tensors
};

// Parses and validates the N JSON bytes of the header of a file of file_size
// bytes in total (so that the data buffer can be checked to end at EOF).
// `source` names the file in error messages.
Header parse_header(const char* json, size_t n, uint64_t file_size, const std::string& source);

// Validates a whole file held in memory (length, header, data).
Header parse_buffer(const void* data, size_t size, const std::string& source);

// An open safetensors file whose header has been validated.
class Reader {
 public:
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  Reader(Reader&& other) noexcept;
  Reader& operator=(Reader&& other) noexcept;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(const std::string& name) const { return header_.find(name); }
  // Like find, but a missing tensor is OSLO_ERR_FORMAT naming it and the file.
  const TensorInfo& at(const std::string& name) const;

  // Copies bytes [offset, offset + bytes) of tensor t (relative to the
  // tensor's first byte) into dst with pread. OSLO_ERR_INVALID_ARGUMENT if
  // the range is outside the tensor; OSLO_ERR_IO on a read error;
  // OSLO_ERR_FORMAT if the file became shorter since it was opened.
  void read(const TensorInfo& t, uint64_t offset, uint64_t bytes, void* dst) const;

  // Tensor-data bytes and pread calls made through read() (for tests and
  // statistics; the header read is not counted).
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t read_calls() const { return read_calls_; }

 private:
  std::string path_;
  int fd_ = -1;
  Header header_;
  mutable uint64_t bytes_read_ = 0;
  mutable uint64_t read_calls_ = 0;
};

// One tensor to write: `data` holds nbytes(dtype, shape) bytes, row-major,
// little-endian (may be null when that is 0).
struct WriteEntry {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
  const void* data = nullptr;
};

// Bytes of a tensor of this dtype and shape; OSLO_ERR_INVALID_ARGUMENT on
// overflow or a sub-byte dtype whose size is not a whole number of bytes.
uint64_t tensor_nbytes(Dtype dt, const std::vector<uint64_t>& shape);

// The file's first 8 + N bytes (length and padded JSON header) and, in
// *order, the entries in the order their data follows. Throws
// OSLO_ERR_INVALID_ARGUMENT on duplicate or reserved names, invalid UTF-8 in
// names or metadata, or sizes that cannot be represented.
std::string serialize_header(const std::vector<WriteEntry>& entries,
                             const std::map<std::string, std::string>* metadata,
                             std::vector<size_t>* order);

// The whole file in memory (tests and fuzzing).
std::string serialize(const std::vector<WriteEntry>& entries,
                      const std::map<std::string, std::string>* metadata = nullptr);

// Writes the file atomically: `<path>.tmp.<pid>.<random>`, fsync, rename
// over `path`, fsync of the directory. On failure the temporary is removed
// and `path` is untouched.
void write_file(const std::string& path, const std::vector<WriteEntry>& entries,
                const std::map<std::string, std::string>* metadata = nullptr);

// True if [data, data + n) is valid UTF-8 (the rules of Rust's str::from_utf8).
bool valid_utf8(const char* data, size_t n);

}  // namespace safetensors
}  // namespace oslo
