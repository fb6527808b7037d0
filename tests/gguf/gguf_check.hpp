// Shared by the GGUF tests and the fuzzer (tests/fuzz/fuzz_gguf.cpp):
// dump() writes a parsed file in a canonical text form (the one
// test_gguf_compat.py writes from the values it gave gguf-py's writer), and
// check_buffer() parses a buffer and, when it is accepted, checks the
// reader's invariants, aborting on any violation (so the fuzzer reports it).
#pragma once

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/checkpoint/gguf.hpp"
#include "core/common/error.hpp"
#include "core/quant/quant.hpp"

namespace gguf_check {

inline std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// "u8:255", "i32:-5", "f32:40490fdb" (bits), "f64:...", "bool:1",
// "string:<hex bytes>", "array:<elem type>[v,v,...]".
inline std::string value_text(const oslo::gguf::Value& v) {
  using oslo::gguf::ValueType;
  std::string out = std::string(oslo::gguf::value_type_name(v.type)) + ":";
  char buf[32];
  switch (v.type) {
    case ValueType::F32: {
      const float f = static_cast<float>(v.f);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      std::snprintf(buf, sizeof buf, "%08" PRIx32, bits);
      return out + buf;
    }
    case ValueType::F64: {
      uint64_t bits;
      std::memcpy(&bits, &v.f, 8);
      std::snprintf(buf, sizeof buf, "%016" PRIx64, bits);
      return out + buf;
    }
    case ValueType::STRING: return out + hex(v.s);
    case ValueType::ARRAY: {
      out += std::string(oslo::gguf::value_type_name(v.elem_type)) + "[";
      for (size_t k = 0; k < v.array.size(); ++k) {
        if (k) out += ",";
        out += value_text(v.array[k]);
      }
      return out + "]";
    }
    default: return out + (v.is_signed() ? std::to_string(v.i) : std::to_string(v.u));
  }
}

// version, alignment, each key in file order, each tensor (name, ggml type
// id, dims innermost first, bytes).
inline std::string dump(const oslo::gguf::File& f) {
  std::string out = "version " + std::to_string(f.version()) + "\nalignment " +
                    std::to_string(f.alignment()) + "\n";
  for (const std::string& k : f.keys()) out += "kv " + k + " " + value_text(*f.find(k)) + "\n";
  for (const auto& t : f.tensors()) {
    out += "tensor " + t.name + " " + std::to_string(t.type_id) + " ";
    for (size_t d = 0; d < t.dims.size(); ++d) out += (d ? "," : "") + std::to_string(t.dims[d]);
    out += " " + std::to_string(t.nbytes) + "\n";
  }
  return out;
}

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "GGUF reader invariant violated: %s\n", what);
  std::abort();
}

// Parses `size` bytes; on rejection checks the error is OSLO_ERR_FORMAT and
// names the buffer ("input: "), and returns false. On acceptance checks the
// layout (tensors inside the data section, aligned, sized by their format,
// not overlapping, found by name), dequantizes every tensor (so that a
// sanitizer sees any read past a tensor) and returns true.
inline bool check_buffer(const uint8_t* data, size_t size) {
  namespace gg = oslo::gguf;
  try {
    gg::File f = gg::File::parse(data, size, "input");
    if (f.version() != 2 && f.version() != 3) die("accepted version");
    if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1))) die("alignment");
    if (f.keys().size() != f.metadata().size()) die("keys and metadata differ");
    const uint8_t* base = data + f.data_start();
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const gg::TensorInfo& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) die("find_tensor");
      if (t.dims.size() > gg::kMaxDims) die("dims");
      if (t.offset % f.alignment()) die("misaligned tensor accepted");
      if (t.nbytes != oslo::quant::tensor_bytes(t.format, t.shape())) die("nbytes");
      if (t.nbytes && (f.data_start() > size || t.offset + t.nbytes > size - f.data_start()))
        die("tensor past the end");
      const gg::TensorView v = f.view(t);
      if (t.nbytes && v.data != base + t.offset) die("view pointer");
      if (v.nbytes != t.nbytes || v.shape != t.shape()) die("view");
      if (t.nbytes) spans.push_back({t.offset, t.offset + t.nbytes});
      if (t.elements <= (1u << 20)) {
        std::vector<float> out(t.elements);
        f.dequantize(t, out.data());
      }
    }
    for (size_t a = 0; a < spans.size(); ++a)
      for (size_t b = a + 1; b < spans.size(); ++b)
        if (spans[a].first < spans[b].second && spans[b].first < spans[a].second)
          die("overlapping tensors accepted");
    // Parsing is deterministic.
    if (dump(gg::File::parse(data, size, "again")) != dump(f)) die("parse not deterministic");
    return true;
  } catch (const oslo::Error& e) {
    if (e.status() != OSLO_ERR_FORMAT) {
      std::fprintf(stderr, "%s\n", e.what());
      die("an error other than OSLO_ERR_FORMAT");
    }
    if (std::strncmp(e.what(), "input: ", 7) != 0) die("error message does not name the file");
    return false;
  }
}

}  // namespace gguf_check
