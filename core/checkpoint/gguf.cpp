#include "core/checkpoint/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {
namespace gguf {

namespace {

// "GGUF" as the first four bytes.
constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};

// The fewest bytes a metadata pair (8-byte key length, type, a u8 value) and
// a tensor info (name length, n_dims, type, offset) can take: a count larger
// than the rest of the file divided by these is refused before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

const char* const kValueTypeNames[kValueTypeCount] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

// Bytes of a scalar value type; 0 for STRING and ARRAY.
uint64_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
    default: return 0;
  }
}

// The fewest bytes one element of this type takes in an array.
uint64_t min_elem_bytes(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 4 + 8;
  return scalar_bytes(t);
}

// A bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& source)
      : p_(data), size_(size), source_(source) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  // Throws unless n more bytes are there; `what` says what was being read.
  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      fail(OSLO_ERR_FORMAT, source_, ": truncated: ", what, " at offset ", pos_, " needs ", n,
           " bytes, the file has ", left(), " left");
  }
  uint64_t uint(unsigned bytes, const std::string& what) {
    need(bytes, what);
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += bytes;
    return v;
  }
  uint32_t u32(const std::string& what) { return static_cast<uint32_t>(uint(4, what)); }
  uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string string(const std::string& what) {
    const uint64_t start = pos_;
    const uint64_t n = u64(what + " length");
    if (n > left())
      fail(OSLO_ERR_FORMAT, source_, ": ", what, " at offset ", start, ": length ", n,
           " runs past the end of the file (", left(), " bytes left)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& source_;
};

int64_t sign_extend(uint64_t v, unsigned bytes) {
  const unsigned shift = 64 - 8 * bytes;
  return static_cast<int64_t>(v << shift) >> shift;
}

ValueType value_type(uint32_t raw, Cursor& c, const std::string& source, const std::string& what) {
  if (raw >= kValueTypeCount)
    fail(OSLO_ERR_FORMAT, source, ": ", what, " at offset ", c.pos() - 4, ": unknown value type ",
         raw, " (GGUF defines 0..12)");
  return static_cast<ValueType>(raw);
}

// Reads one value of type t (the type field already read).
// *budget counts down the array elements the file may still hold.
void read_value(Cursor& c, ValueType t, Value* out, int depth, uint64_t* budget,
                const std::string& source, const std::string& what) {
  out->type = t;
  switch (t) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64: out->u = c.uint(static_cast<unsigned>(scalar_bytes(t)), what); return;
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: {
      const unsigned n = static_cast<unsigned>(scalar_bytes(t));
      out->i = sign_extend(c.uint(n, what), n);
      return;
    }
    case ValueType::F32: {
      const uint32_t bits = static_cast<uint32_t>(c.uint(4, what));
      float f;
      std::memcpy(&f, &bits, 4);
      out->f = f;
      return;
    }
    case ValueType::F64: {
      const uint64_t bits = c.uint(8, what);
      std::memcpy(&out->f, &bits, 8);
      return;
    }
    case ValueType::BOOL: {
      out->u = c.uint(1, what);
      if (out->u > 1)
        fail(OSLO_ERR_FORMAT, source, ": ", what, " at offset ", c.pos() - 1, ": bool value ",
             out->u, " is neither 0 nor 1");
      return;
    }
    case ValueType::STRING: out->s = c.string(what); return;
    case ValueType::ARRAY: {
      const uint64_t start = c.pos();
      if (depth >= kMaxArrayDepth)
        fail(OSLO_ERR_FORMAT, source, ": ", what, " at offset ", start,
             ": arrays nested deeper than ", kMaxArrayDepth, " levels");
      out->elem_type = value_type(c.u32(what + " element type"), c, source, what);
      const uint64_t n = c.u64(what + " element count");
      const uint64_t min = min_elem_bytes(out->elem_type);
      if (n > c.left() / min)
        fail(OSLO_ERR_FORMAT, source, ": ", what, " at offset ", start, ": ", n, " elements of ",
             value_type_name(out->elem_type), " cannot fit in the ", c.left(),
             " bytes left in the file");
      if (n > *budget)
        fail(OSLO_ERR_FORMAT, source, ": ", what, " at offset ", start, ": ", n,
             " elements exceed the limit of ", kMaxMetadataValues, " metadata values in a file");
      *budget -= n;
      out->array.resize(static_cast<size_t>(n));
      // A nested array's elements carry their own element type and count.
      for (uint64_t k = 0; k < n; ++k)
        read_value(c, out->elem_type, &out->array[k], depth + 1, budget, source, what);
      return;
    }
  }
}

}  // namespace

const char* value_type_name(ValueType t) {
  const uint32_t i = static_cast<uint32_t>(t);
  return i < kValueTypeCount ? kValueTypeNames[i] : "unknown";
}

bool Value::is_unsigned() const {
  return type == ValueType::U8 || type == ValueType::U16 || type == ValueType::U32 ||
         type == ValueType::U64;
}
bool Value::is_signed() const {
  return type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 ||
         type == ValueType::I64;
}
bool Value::is_float() const {
  return type == ValueType::F32 || type == ValueType::F64;
}

std::vector<uint64_t> TensorInfo::shape() const {
  return {dims.rbegin(), dims.rend()};
}

uint64_t TensorInfo::rows() const {
  const uint64_t r = row_length();
  return r == 0 ? 0 : elements / r;
}

// --------------------------------------------------------------------------
// Parsing
// --------------------------------------------------------------------------

void File::parse_all() {
  const std::string& src = source_;
  Cursor c(data_, size_, src);
  c.need(4, "the magic \"GGUF\"");
  if (std::memcmp(data_, kMagic, 4) != 0) {
    std::string got(reinterpret_cast<const char*>(data_), 4);
    fail(OSLO_ERR_FORMAT, src, ": not a GGUF file: the magic is ", quote(got), ", not 'GGUF'");
  }
  c.u32("magic");
  version_ = c.u32("the version");
  if (version_ != 2 && version_ != 3) {
    if (version_ == 1)
      fail(OSLO_ERR_FORMAT, src,
           ": GGUF version 1 (32-bit counts, 2023) is not supported; "
           "oslo reads versions 2 and 3");
    if (version_ == 0x02000000u || version_ == 0x03000000u)
      fail(OSLO_ERR_FORMAT, src, ": a big-endian GGUF file; oslo reads little-endian ones");
    fail(OSLO_ERR_FORMAT, src, ": unsupported GGUF version ", version_,
         " (oslo reads versions 2 and 3)");
  }
  const uint64_t n_tensors = c.u64("the tensor count");
  const uint64_t n_kv = c.u64("the metadata count");
  // Neither count can exceed what the rest of the file could hold.
  if (n_kv > c.left() / kMinKvBytes)
    fail(OSLO_ERR_FORMAT, src, ": metadata count ", n_kv, " is more than the ", c.left(),
         " bytes after the header could hold");
  if (n_tensors > c.left() / kMinTensorInfoBytes)
    fail(OSLO_ERR_FORMAT, src, ": tensor count ", n_tensors, " is more than the ", c.left(),
         " bytes after the header could hold");

  keys_.reserve(static_cast<size_t>(n_kv));
  uint64_t budget = kMaxMetadataValues;
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = c.pos();
    const std::string label = "metadata pair " + std::to_string(k);
    std::string key = c.string(label + " key");
    const std::string what = "metadata " + quote(key);
    if (metadata_.count(key))
      fail(OSLO_ERR_FORMAT, src, ": duplicate metadata key ", quote(key), " at offset ", at);
    Value v;
    const ValueType t = value_type(c.u32(what + " type"), c, src, what);
    read_value(c, t, &v, 0, &budget, src, what);
    metadata_.emplace(key, std::move(v));
    keys_.push_back(std::move(key));
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::U32)
      fail(OSLO_ERR_FORMAT, src, ": metadata 'general.alignment' is ", value_type_name(a->type),
           ", not u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail(OSLO_ERR_FORMAT, src, ": general.alignment ", a->u, " is not a power of two");
    alignment_ = a->u;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = c.pos();
    TensorInfo t;
    t.name = c.string("tensor info " + std::to_string(k) + " name");
    const std::string who = "tensor " + quote(t.name);
    if (index_.count(t.name))
      fail(OSLO_ERR_FORMAT, src, ": duplicate tensor name ", quote(t.name), " at offset ", at);
    const uint32_t n_dims = c.u32(who + " n_dims");
    if (n_dims > kMaxDims)
      fail(OSLO_ERR_FORMAT, src, ": ", who, ": ", n_dims, " dimensions (at most ", kMaxDims, ")");
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(c.u64(who + " dims"));
    t.type_id = c.u32(who + " type");
    if (!quant::from_gguf_type_id(t.type_id, &t.format)) {
      std::string tn = quant::gguf_type_name(t.type_id);  // "Q5_K", or "type 1234"
      if (tn.rfind("type ", 0) != 0) tn = "type " + tn + " (" + std::to_string(t.type_id) + ")";
      fail(OSLO_ERR_FORMAT, src, ": ", who, " has ", tn,
           ", which oslo does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
    }
    t.offset = c.u64(who + " offset");
    try {
      t.nbytes = quant::tensor_bytes(t.format, t.shape(), t.name);
    } catch (const Error& e) {
      fail(OSLO_ERR_FORMAT, src, ": ", e.what(), " (dims ", shape_str(t.dims), ")");
    }
    if (t.offset % alignment_ != 0)
      fail(OSLO_ERR_FORMAT, src, ": ", who, ": offset ", t.offset,
           " is not a multiple of the alignment ", alignment_);
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; a file
  // without tensor bytes may end before it.
  const uint64_t end_of_infos = c.pos();
  data_start_ = end_of_infos + (alignment_ - end_of_infos % alignment_) % alignment_;
  const uint64_t data_size = data_start_ <= size_ ? size_ - data_start_ : 0;
  std::vector<size_t> order;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const TensorInfo& t = tensors_[k];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(OSLO_ERR_FORMAT, src, ": tensor ", quote(t.name), ": bytes [", t.offset, ", +", t.nbytes,
           ") of the data section run past the end of the file (data section of ", data_size,
           " bytes at offset ", data_start_, ")");
    if (t.nbytes) order.push_back(k);
    // nbytes fits in the file and every format holds at most 2 elements a
    // byte (or a dimension is 0): the product stays far from overflow.
    tensors_[k].elements = 1;
    for (uint64_t d : t.dims) tensors_[k].elements *= d;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& a = tensors_[order[k - 1]];
    const TensorInfo& b = tensors_[order[k]];
    if (b.offset < a.offset + a.nbytes)
      fail(OSLO_ERR_FORMAT, src, ": tensors ", quote(a.name), " [", a.offset, ", ",
           a.offset + a.nbytes, ") and ", quote(b.name), " [", b.offset, ", ", b.offset + b.nbytes,
           ") overlap");
  }
}

File File::parse(const void* data, size_t size, const std::string& source) {
  File f;
  f.source_ = source;
  f.data_ = static_cast<const uint8_t*>(data);
  f.size_ = size;
  f.parse_all();
  return f;
}

File File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open GGUF file ", quote_path(path), ": ", fsutil::errno_text(e));
  }
  File f;
  f.source_ = path;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(OSLO_ERR_IO, "cannot stat ", quote_path(path), ": ", fsutil::errno_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(OSLO_ERR_IO, quote_path(path), " is not a regular file");
  }
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(OSLO_ERR_IO, "cannot map ", quote_path(path), " (", f.size_,
           " bytes): ", fsutil::errno_text(e));
    }
    f.map_ = m;
    f.map_size_ = static_cast<size_t>(f.size_);
    f.data_ = static_cast<const uint8_t*>(m);
  } else {
    static const uint8_t kEmpty = 0;
    f.data_ = &kEmpty;
  }
  ::close(fd);    // the mapping stays valid
  f.parse_all();  // on error, ~File unmaps
  return f;
}

File::File(File&& o) noexcept {
  *this = std::move(o);
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, map_size_);
    source_ = std::move(o.source_);
    data_ = o.data_;
    size_ = o.size_;
    map_ = o.map_;
    map_size_ = o.map_size_;
    version_ = o.version_;
    alignment_ = o.alignment_;
    data_start_ = o.data_start_;
    metadata_ = std::move(o.metadata_);
    keys_ = std::move(o.keys_);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    o.map_ = nullptr;
    o.map_size_ = 0;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

File::~File() {
  if (map_) ::munmap(map_, map_size_);
}

// --------------------------------------------------------------------------
// Queries
// --------------------------------------------------------------------------

const Value* File::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
const Value& need_key(const File& f, const std::string& key) {
  const Value* v = f.find(key);
  if (!v) fail(OSLO_ERR_FORMAT, f.source(), ": metadata key ", quote(key), " is missing");
  return *v;
}
[[noreturn]] void wrong_type(const File& f, const std::string& key, const Value& v,
                             const char* want) {
  fail(OSLO_ERR_FORMAT, f.source(), ": metadata ", quote(key), " is ", value_type_name(v.type),
       ", not ", want);
}
}  // namespace

std::string File::get_string(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::STRING) wrong_type(*this, key, v, "a string");
  return v.s;
}

int64_t File::get_int(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.is_signed()) return v.i;
  if (!v.is_unsigned()) wrong_type(*this, key, v, "an integer");
  if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(OSLO_ERR_FORMAT, source_, ": metadata ", quote(key), " = ", v.u, " exceeds int64");
  return static_cast<int64_t>(v.u);
}

uint64_t File::get_uint(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.is_unsigned()) return v.u;
  if (!v.is_signed()) wrong_type(*this, key, v, "an integer");
  if (v.i < 0)
    fail(OSLO_ERR_FORMAT, source_, ": metadata ", quote(key), " = ", v.i, " is negative");
  return static_cast<uint64_t>(v.i);
}

double File::get_float(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (!v.is_float()) wrong_type(*this, key, v, "a float");
  return v.f;
}

bool File::get_bool(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::BOOL) wrong_type(*this, key, v, "a bool");
  return v.u != 0;
}

const std::vector<Value>& File::get_array(const std::string& key) const {
  const Value& v = need_key(*this, key);
  if (v.type != ValueType::ARRAY) wrong_type(*this, key, v, "an array");
  return v.array;
}

std::string File::get_string(const std::string& key, const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}
int64_t File::get_int(const std::string& key, int64_t fallback) const {
  return find(key) ? get_int(key) : fallback;
}
double File::get_float(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail(OSLO_ERR_FORMAT, source_, ": no tensor named ", quote(name));
  return *t;
}

TensorView File::view(const TensorInfo& t) const {
  TensorView v;
  v.data = data_ + data_start_ + t.offset;
  v.nbytes = t.nbytes;
  v.format = t.format;
  v.shape = t.shape();
  return v;
}

void File::dequantize(const TensorInfo& t, float* dst) const {
  if (t.elements == 0) return;
  quant::dequantize_rows(t.format, data_ + data_start_ + t.offset, dst, t.rows(), t.row_length());
}

}  // namespace gguf
}  // namespace oslo
