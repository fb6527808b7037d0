#include "core/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/checkpoint/fs_util.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {
namespace safetensors {

namespace {

struct DtypeDesc {
  const char* name;
  unsigned bits;
};

// Indexed by Dtype.
constexpr DtypeDesc kDtypes[kDtypeCount] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// Quotes a name for an error message, escaping control characters and
// shortening very long names.
std::string quote(const std::string& name) {
  std::string out = "'";
  size_t n = std::min<size_t>(name.size(), 200);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < name.size()) out += "...";
  return out + "'";
}

// ------------------------------------------------------------------------
// Header parsing: an nlohmann SAX handler that accepts exactly the structure
// the reference parser (serde) accepts and stops at the first violation, so
// a hostile header never builds a large DOM.
// ------------------------------------------------------------------------

using json = nlohmann::json;

class HeaderSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit HeaderSax(Header* out) : out_(out) {}

  bool done() const { return state_ == State::Done; }
  const std::string& error() const { return error_; }

  bool null() {
    if (state_ == State::MetaValue) {  // "__metadata__": null is no metadata
      out_->has_metadata = false;
      state_ = State::Top;
      return true;
    }
    return unexpected("null");
  }
  bool boolean(bool v) { return unexpected(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) {  // only negative integers (and -0) arrive here
    return unexpected("the negative number " + (v == 0 ? std::string("-0") : std::to_string(v)));
  }
  bool number_unsigned(number_unsigned_t v) {
    if (state_ == State::ShapeArray) {
      cur_.shape.push_back(v);
      return true;
    }
    if (state_ == State::OffsetsArray) {
      if (n_offsets_ >= 2) return fail_entry("data_offsets has more than 2 elements");
      (n_offsets_ == 0 ? cur_.begin : cur_.end) = v;
      ++n_offsets_;
      return true;
    }
    return unexpected("the number " + std::to_string(v));
  }
  bool number_float(number_float_t, const string_t& text) {
    return unexpected("the non-integer number " + text);
  }
  bool string(string_t& s) {
    switch (state_) {
      case State::MetaEntryValue:
        out_->metadata[meta_key_] = s;  // a repeated key: the last one wins (as serde)
        state_ = State::MetaObject;
        return true;
      case State::DtypeValue:
        if (!parse_dtype(s, &cur_.dtype)) return fail_entry("unknown dtype " + quote(s));
        state_ = State::EntryObject;
        return true;
      default: return unexpected("the string " + quote(s));
    }
  }
  bool binary(binary_t&) { return unexpected("binary data"); }

  bool start_object(std::size_t) {
    switch (state_) {
      case State::Start: state_ = State::Top; return true;
      case State::MetaValue:
        out_->has_metadata = true;
        out_->metadata.clear();
        state_ = State::MetaObject;
        return true;
      case State::EntryValue:
        cur_.dtype = Dtype::F32;
        cur_.shape.clear();
        cur_.begin = cur_.end = 0;
        have_dtype_ = have_shape_ = have_offsets_ = false;
        n_offsets_ = 0;
        state_ = State::EntryObject;
        return true;
      default: return unexpected("an object");
    }
  }
  bool key(string_t& k) {
    switch (state_) {
      case State::Top:
        if (k == "__metadata__") {
          if (seen_metadata_) return fail("duplicate field '__metadata__'");
          seen_metadata_ = true;
          state_ = State::MetaValue;
        } else {
          cur_.name = k;
          state_ = State::EntryValue;
        }
        return true;
      case State::MetaObject:
        meta_key_ = k;
        state_ = State::MetaEntryValue;
        return true;
      case State::EntryObject: {
        bool* seen = nullptr;
        if (k == "dtype") {
          seen = &have_dtype_;
          state_ = State::DtypeValue;
        } else if (k == "shape") {
          seen = &have_shape_;
          state_ = State::ShapeValue;
        } else if (k == "data_offsets") {
          seen = &have_offsets_;
          state_ = State::OffsetsValue;
        } else {
          return fail_entry("unknown field " + quote(k) +
                            " (an entry holds only dtype, shape and data_offsets)");
        }
        if (*seen) return fail_entry("duplicate field " + quote(k));
        *seen = true;
        return true;
      }
      default: return fail("unexpected key " + quote(k));  // not reachable with a valid parser
    }
  }
  bool end_object() {
    switch (state_) {
      case State::Top: state_ = State::Done; return true;
      case State::MetaObject: state_ = State::Top; return true;
      case State::EntryObject: {
        if (!have_dtype_) return fail_entry("missing field 'dtype'");
        if (!have_shape_) return fail_entry("missing field 'shape'");
        if (!have_offsets_) return fail_entry("missing field 'data_offsets'");
        auto it = seen_names_.find(cur_.name);
        if (it != seen_names_.end()) {
          out_->tensors[it->second] = cur_;  // a repeated name: the last one wins (as serde)
        } else {
          seen_names_.emplace(cur_.name, out_->tensors.size());
          out_->tensors.push_back(cur_);
        }
        state_ = State::Top;
        return true;
      }
      default: return fail("unexpected end of object");
    }
  }
  bool start_array(std::size_t) {
    if (state_ == State::ShapeValue) {
      state_ = State::ShapeArray;
      return true;
    }
    if (state_ == State::OffsetsValue) {
      state_ = State::OffsetsArray;
      return true;
    }
    return unexpected("an array");
  }
  bool end_array() {
    if (state_ == State::ShapeArray) {
      state_ = State::EntryObject;
      return true;
    }
    if (state_ == State::OffsetsArray) {
      if (n_offsets_ != 2) return fail_entry("data_offsets has fewer than 2 elements");
      state_ = State::EntryObject;
      return true;
    }
    return fail("unexpected end of array");
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    // ex.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = ex.what();
    size_t p = what.find("] ");
    if (p != std::string::npos) what = what.substr(p + 2);
    // The message quotes input bytes ("last read: ..."): keep it printable.
    std::string clean;
    for (char ch : what) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c >= 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        clean += buf;
      } else {
        clean += ch;
      }
    }
    error_ = "header is not valid JSON: " + clean;
    return false;
  }

 private:
  enum class State {
    Start,
    Top,
    MetaValue,
    MetaObject,
    MetaEntryValue,
    EntryValue,
    EntryObject,
    DtypeValue,
    ShapeValue,
    ShapeArray,
    OffsetsValue,
    OffsetsArray,
    Done
  };

  bool fail(const std::string& msg) {
    error_ = msg;
    return false;
  }
  bool fail_entry(const std::string& msg) {
    return fail("tensor " + quote(cur_.name) + ": " + msg);
  }
  // A value of the wrong type for the current position.
  bool unexpected(const std::string& what) {
    switch (state_) {
      case State::Start: return fail("header is not a JSON object (found " + what + ")");
      case State::MetaValue:
        return fail("__metadata__ must be an object of strings, found " + what);
      case State::MetaEntryValue:
        return fail("__metadata__ value of " + quote(meta_key_) + " must be a string, found " +
                    what);
      case State::EntryValue: return fail_entry("entry must be an object, found " + what);
      case State::DtypeValue: return fail_entry("dtype must be a string, found " + what);
      case State::ShapeValue: return fail_entry("shape must be an array, found " + what);
      case State::ShapeArray:
        return fail_entry("shape must hold non-negative integers, found " + what);
      case State::OffsetsValue:
        return fail_entry("data_offsets must be an array of 2 integers, found " + what);
      case State::OffsetsArray:
        return fail_entry("data_offsets must hold non-negative integers, found " + what);
      default: return fail("unexpected " + what);
    }
  }

  Header* out_;
  State state_ = State::Start;
  std::string error_;
  bool seen_metadata_ = false;
  std::string meta_key_;
  TensorInfo cur_;
  bool have_dtype_ = false, have_shape_ = false, have_offsets_ = false;
  int n_offsets_ = 0;
  std::unordered_map<std::string, size_t> seen_names_;
};

// Checks what serde's JSON grammar would not see: nlohmann skips a UTF-8 byte
// order mark at the start, serde_json rejects it.
bool starts_with_bom(const char* p, size_t n) {
  return n >= 3 && static_cast<unsigned char>(p[0]) == 0xEF &&
         static_cast<unsigned char>(p[1]) == 0xBB && static_cast<unsigned char>(p[2]) == 0xBF;
}

// Validates offsets, sizes and the end of the buffer. Tensors are first sorted
// by their offsets (the reference accepts entries in any order).
void validate_layout(Header* h, uint64_t file_size, const std::string& source) {
  auto& ts = h->tensors;
  std::stable_sort(ts.begin(), ts.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t start = 0;
  for (const TensorInfo& t : ts) {
    if (t.end < t.begin)
      fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": data_offsets [", t.begin, ", ",
           t.end, "] end before they begin");
    if (t.begin != start) {
      if (start == 0)
        fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": data_offsets [", t.begin, ", ",
             t.end, "]: the data buffer must start at offset 0");
      if (t.begin > start)
        fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": data_offsets [", t.begin, ", ",
             t.end, "] leave a hole after byte ", start, " of the data buffer");
      fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": data_offsets [", t.begin, ", ",
           t.end, "] overlap the previous tensor, which ends at ", start);
    }
    start = t.end;
    uint64_t numel = 1;
    for (uint64_t d : t.shape)
      if (mul_overflows(numel, d, &numel))
        fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": shape ", shape_str(t.shape),
             " overflows when multiplied out");
    uint64_t bits;
    if (mul_overflows(numel, dtype_bits(t.dtype), &bits))
      fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": shape ", shape_str(t.shape),
           " of ", dtype_name(t.dtype), " overflows when multiplied out");
    if (bits % 8 != 0)
      fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": ", numel, " elements of ",
           dtype_name(t.dtype), " are not a whole number of bytes");
    if (t.end - t.begin != bits / 8)
      fail(OSLO_ERR_FORMAT, source, ": tensor ", quote(t.name), ": data_offsets [", t.begin, ", ",
           t.end, "] hold ", t.end - t.begin, " bytes but dtype ", dtype_name(t.dtype),
           " and shape ", shape_str(t.shape), " need ", bits / 8);
  }
  h->data_size = start;
  const uint64_t room = file_size - 8 - h->header_size;  // callers checked 8 + N <= file_size
  if (start != room) {
    if (start > room)
      fail(OSLO_ERR_FORMAT, source, ": the data buffer is ", start, " bytes but only ", room,
           " follow the header (truncated file?)");
    fail(OSLO_ERR_FORMAT, source, ": ", room - start, " trailing bytes after the data buffer (",
         start, " bytes) at the end of the file");
  }
  h->index.clear();
  h->index.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) h->index.emplace(ts[i].name, i);
}

// serde_json's string escaping: ", \ and control characters; everything else
// (including DEL and non-ASCII UTF-8) as is.
void append_json_string(std::string* out, const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

const char* dtype_name(Dtype dt) {
  int i = static_cast<int>(dt);
  return i >= 0 && i < kDtypeCount ? kDtypes[i].name : "unknown";
}

bool parse_dtype(const std::string& name, Dtype* out) {
  for (int i = 0; i < kDtypeCount; ++i)
    if (name == kDtypes[i].name) {
      *out = static_cast<Dtype>(i);
      return true;
    }
  return false;
}

unsigned dtype_bits(Dtype dt) {
  int i = static_cast<int>(dt);
  OSLO_CHECK(i >= 0 && i < kDtypeCount, OSLO_ERR_INTERNAL, "bad safetensors dtype ", i);
  return kDtypes[i].bits;
}

Dtype from_oslo(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return Dtype::F32;
    case OSLO_DTYPE_F16: return Dtype::F16;
    case OSLO_DTYPE_BF16: return Dtype::BF16;
    case OSLO_DTYPE_I32: return Dtype::I32;
    case OSLO_DTYPE_I64: return Dtype::I64;
    default: break;
  }
  fail(OSLO_ERR_DTYPE, "unknown dtype ", static_cast<int>(dt));
}

bool to_oslo(Dtype dt, oslo_dtype* out) {
  switch (dt) {
    case Dtype::F32: *out = OSLO_DTYPE_F32; return true;
    case Dtype::F16: *out = OSLO_DTYPE_F16; return true;
    case Dtype::BF16: *out = OSLO_DTYPE_BF16; return true;
    case Dtype::I32: *out = OSLO_DTYPE_I32; return true;
    case Dtype::I64: *out = OSLO_DTYPE_I64; return true;
    default: return false;
  }
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated by the parser
  return n;
}

const TensorInfo* Header::find(const std::string& name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &tensors[it->second];
}

bool valid_utf8(const char* data, size_t n) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    i += len;
  }
  return true;
}

Header parse_header(const char* json_text, size_t n, uint64_t file_size,
                    const std::string& source) {
  OSLO_CHECK(n <= kMaxHeaderSize, OSLO_ERR_FORMAT, source, ": header length ", n,
             " exceeds the limit of ", kMaxHeaderSize, " bytes");
  OSLO_CHECK(file_size >= 8 && n <= file_size - 8, OSLO_ERR_FORMAT, source, ": header length ", n,
             " exceeds the ", file_size < 8 ? 0 : file_size - 8,
             " bytes that follow the length field");
  OSLO_CHECK(valid_utf8(json_text, n), OSLO_ERR_FORMAT, source, ": header is not valid UTF-8");
  OSLO_CHECK(!starts_with_bom(json_text, n), OSLO_ERR_FORMAT, source,
             ": header is not valid JSON: it starts with a byte order mark");
  // nlohmann's lexer takes a NUL byte for the end of the input (and would
  // accept "{}\0garbage"); in JSON a raw NUL is never valid.
  if (const void* nul = std::memchr(json_text, 0, n))
    fail(OSLO_ERR_FORMAT, source, ": header is not valid JSON: NUL byte at offset ",
         static_cast<const char*>(nul) - json_text);
  Header h;
  h.header_size = n;
  HeaderSax sax(&h);
  bool ok = json::sax_parse(json_text, json_text + n, &sax, json::input_format_t::json,
                            /*strict=*/true, /*ignore_comments=*/false);
  if (!ok || !sax.done()) {
    fail(OSLO_ERR_FORMAT, source, ": ",
         sax.error().empty() ? std::string("header is not valid JSON") : sax.error());
  }
  validate_layout(&h, file_size, source);
  return h;
}

Header parse_buffer(const void* data, size_t size, const std::string& source) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  OSLO_CHECK(size >= 8, OSLO_ERR_FORMAT, source, ": file is ", size,
             " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  OSLO_CHECK(n <= kMaxHeaderSize, OSLO_ERR_FORMAT, source, ": header length ", n,
             " exceeds the limit of ", kMaxHeaderSize, " bytes");
  OSLO_CHECK(n <= size - 8, OSLO_ERR_FORMAT, source, ": header length ", n, " exceeds the ",
             size - 8, " bytes that follow the length field");
  return parse_header(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(n), size, source);
}

// --------------------------------------------------------------------------
// Reader
// --------------------------------------------------------------------------

Reader::Reader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd_ < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open safetensors file ", quote_path(path), ": ",
         fsutil::errno_text(e));
  }
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot stat ", quote_path(path), ": ", fsutil::errno_text(e));
    }
    OSLO_CHECK(S_ISREG(st.st_mode), OSLO_ERR_IO, quote_path(path), " is not a regular file");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    OSLO_CHECK(size >= 8, OSLO_ERR_FORMAT, path, ": file is ", size,
               " bytes, too short for the 8-byte header length");
    unsigned char len[8];
    OSLO_CHECK(fsutil::pread_full(fd_, len, 8, 0, path) == 8, OSLO_ERR_FORMAT, path,
               ": file shrank while being read");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    OSLO_CHECK(n <= kMaxHeaderSize, OSLO_ERR_FORMAT, path, ": header length ", n,
               " exceeds the limit of ", kMaxHeaderSize, " bytes");
    OSLO_CHECK(n <= size - 8, OSLO_ERR_FORMAT, path, ": header length ", n, " exceeds the ",
               size - 8, " bytes that follow the length field (truncated file?)");
    std::string text(static_cast<size_t>(n), '\0');
    OSLO_CHECK(fsutil::pread_full(fd_, &text[0], text.size(), 8, path) == text.size(),
               OSLO_ERR_FORMAT, path, ": file shrank while being read");
    header_ = parse_header(text.data(), text.size(), size, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

Reader::Reader(Reader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      header_(std::move(other.header_)),
      bytes_read_(other.bytes_read_),
      read_calls_(other.read_calls_) {
  other.fd_ = -1;
}

Reader& Reader::operator=(Reader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    header_ = std::move(other.header_);
    bytes_read_ = other.bytes_read_;
    read_calls_ = other.read_calls_;
    other.fd_ = -1;
  }
  return *this;
}

const TensorInfo& Reader::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  OSLO_CHECK(t, OSLO_ERR_FORMAT, path_, ": no tensor ", quote(name), " in the file");
  return *t;
}

void Reader::read(const TensorInfo& t, uint64_t offset, uint64_t bytes, void* dst) const {
  OSLO_CHECK(offset <= t.nbytes() && bytes <= t.nbytes() - offset, OSLO_ERR_INVALID_ARGUMENT, path_,
             ": read of bytes [", offset, ", ", offset + bytes, ") is outside tensor ",
             quote(t.name), " of ", t.nbytes(), " bytes");
  if (bytes == 0) return;
  OSLO_CHECK(fd_ >= 0, OSLO_ERR_INTERNAL, "read from a moved-from safetensors reader");
  const uint64_t pos = header_.data_start() + t.begin + offset;
  size_t got = fsutil::pread_full(fd_, dst, static_cast<size_t>(bytes), pos, path_);
  ++read_calls_;
  bytes_read_ += got;
  OSLO_CHECK(got == bytes, OSLO_ERR_FORMAT, path_, ": unexpected end of file reading tensor ",
             quote(t.name), " (the file was truncated after it was opened)");
}

// --------------------------------------------------------------------------
// Writer
// --------------------------------------------------------------------------

uint64_t tensor_nbytes(Dtype dt, const std::vector<uint64_t>& shape) {
  uint64_t numel = 1;
  for (uint64_t d : shape)
    OSLO_CHECK(!mul_overflows(numel, d, &numel), OSLO_ERR_INVALID_ARGUMENT, "shape ",
               shape_str(shape), " overflows");
  uint64_t bits;
  OSLO_CHECK(!mul_overflows(numel, dtype_bits(dt), &bits), OSLO_ERR_INVALID_ARGUMENT, "shape ",
             shape_str(shape), " of ", dtype_name(dt), " overflows");
  OSLO_CHECK(bits % 8 == 0, OSLO_ERR_INVALID_ARGUMENT, numel, " elements of ", dtype_name(dt),
             " are not a whole number of bytes");
  return bits / 8;
}

std::string serialize_header(const std::vector<WriteEntry>& entries,
                             const std::map<std::string, std::string>* metadata,
                             std::vector<size_t>* order_out) {
  std::vector<uint64_t> sizes(entries.size());
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const WriteEntry& e = entries[i];
    OSLO_CHECK(static_cast<int>(e.dtype) < kDtypeCount, OSLO_ERR_INVALID_ARGUMENT, "tensor ",
               quote(e.name), ": bad dtype");
    OSLO_CHECK(valid_utf8(e.name.data(), e.name.size()), OSLO_ERR_INVALID_ARGUMENT, "tensor name ",
               quote(e.name), " is not valid UTF-8");
    OSLO_CHECK(e.name != "__metadata__", OSLO_ERR_INVALID_ARGUMENT,
               "'__metadata__' is reserved and cannot name a tensor");
    OSLO_CHECK(seen.emplace(e.name, i).second, OSLO_ERR_INVALID_ARGUMENT, "duplicate tensor name ",
               quote(e.name));
    try {
      sizes[i] = tensor_nbytes(e.dtype, e.shape);
    } catch (const Error& err) {
      fail(OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(e.name), ": ", err.what());
    }
    OSLO_CHECK(sizes[i] == 0 || e.data != nullptr, OSLO_ERR_INVALID_ARGUMENT, "tensor ",
               quote(e.name), ": data is NULL");
  }
  // The reference writer's order: larger dtypes first (keeps every tensor
  // aligned to its element size), then by name.
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (entries[a].dtype != entries[b].dtype) return entries[a].dtype > entries[b].dtype;
    return entries[a].name < entries[b].name;
  });

  std::string js = "{";
  bool first = true;
  if (metadata) {
    js += "\"__metadata__\":{";
    bool mfirst = true;
    for (const auto& kv : *metadata) {
      OSLO_CHECK(valid_utf8(kv.first.data(), kv.first.size()) &&
                     valid_utf8(kv.second.data(), kv.second.size()),
                 OSLO_ERR_INVALID_ARGUMENT, "metadata entry ", quote(kv.first),
                 " is not valid UTF-8");
      if (!mfirst) js += ',';
      mfirst = false;
      append_json_string(&js, kv.first);
      js += ':';
      append_json_string(&js, kv.second);
    }
    js += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const WriteEntry& e = entries[i];
    if (!first) js += ',';
    first = false;
    append_json_string(&js, e.name);
    js += ":{\"dtype\":\"";
    js += dtype_name(e.dtype);
    js += "\",\"shape\":[";
    for (size_t k = 0; k < e.shape.size(); ++k) {
      if (k) js += ',';
      js += std::to_string(e.shape[k]);
    }
    uint64_t end;
    OSLO_CHECK(!__builtin_add_overflow(offset, sizes[i], &end), OSLO_ERR_INVALID_ARGUMENT,
               "total tensor size overflows");
    js += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  js += '}';
  js.append((8 - js.size() % 8) % 8, ' ');
  OSLO_CHECK(js.size() <= kMaxHeaderSize, OSLO_ERR_INVALID_ARGUMENT, "safetensors header of ",
             js.size(), " bytes exceeds the limit of ", kMaxHeaderSize);
  std::string out(8, '\0');
  uint64_t n = js.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += js;
  if (order_out) *order_out = std::move(order);
  return out;
}

std::string serialize(const std::vector<WriteEntry>& entries,
                      const std::map<std::string, std::string>* metadata) {
  std::vector<size_t> order;
  std::string out = serialize_header(entries, metadata, &order);
  for (size_t i : order) {
    uint64_t n = tensor_nbytes(entries[i].dtype, entries[i].shape);
    if (n) out.append(static_cast<const char*>(entries[i].data), static_cast<size_t>(n));
  }
  return out;
}

void write_file(const std::string& path, const std::vector<WriteEntry>& entries,
                const std::map<std::string, std::string>* metadata) {
  std::vector<size_t> order;
  const std::string head = serialize_header(entries, metadata, &order);
  fsutil::write_atomically(path, [&](int fd) {
    fsutil::write_all(fd, head.data(), head.size(), path);
    for (size_t i : order) {
      uint64_t n = tensor_nbytes(entries[i].dtype, entries[i].shape);
      if (n) fsutil::write_all(fd, entries[i].data, static_cast<size_t>(n), path);
    }
  });
}

}  // namespace safetensors
}  // namespace oslo
