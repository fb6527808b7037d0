#include "core/tokenizer/precompiled.hpp"

#include "core/common/error.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tok {

bool base64_decode(std::string_view in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  if (in.size() % 4 != 0) return false;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int pad = 0;
    if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int d = 0;
      if (k < 4 - pad) {
        d = value(in[i + k]);
        if (d < 0) return false;
      }
      v = v << 6 | static_cast<uint32_t>(d);
    }
    // Canonical: the bits a padded group drops are zero.
    if ((pad == 1 && (v & 0xFF)) || (pad == 2 && (v & 0xFFFF))) return false;
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>(v >> 8 & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return true;
}

namespace {
// darts-clone's unit layout.
bool has_leaf(uint32_t u) {
  return (u >> 8) & 1;
}
uint32_t value_of(uint32_t u) {
  return u & 0x7FFFFFFFu;
}
uint32_t label_of(uint32_t u) {
  return u & (0x80000000u | 0xFFu);
}
uint32_t offset_of(uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}
}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& what) {
  auto bad = [&what](auto&&... parts) {
    fail(OSLO_ERR_FORMAT, what, ": corrupt precompiled charsmap: ", parts...);
  };
  if (blob.size() < 4) bad("", blob.size(), " bytes, fewer than its 4-byte header");
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const uint64_t trie_bytes =
      uint64_t{b[0]} | uint64_t{b[1]} << 8 | uint64_t{b[2]} << 16 | uint64_t{b[3]} << 24;
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    bad("trie size ", trie_bytes, " does not fit the ", blob.size(), "-byte blob");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const unsigned char* p = b + 4 + 4 * i;
    units_[i] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  strings_.assign(blob.substr(4 + trie_bytes));
  if (size_t at = invalid_utf8_at(strings_); at != std::string::npos)
    bad("its replacement strings are not valid UTF-8 (byte ", at, ")");

  // Every node reachable from the root: its leaf value must be a character
  // boundary of the strings. (Children out of the array are no children.)
  const size_t n = units_.size();
  std::vector<uint8_t> seen(n, 0);
  std::vector<size_t> stack;  // positions whose children are to be visited
  stack.push_back(offset_of(units_[0]));
  while (!stack.empty()) {
    const size_t base = stack.back();
    stack.pop_back();
    for (uint32_t c = 1; c < 256; ++c) {
      const size_t pos = base ^ c;
      if (pos >= n || seen[pos] || label_of(units_[pos]) != c) continue;
      seen[pos] = 1;
      const size_t next = pos ^ offset_of(units_[pos]);
      if (has_leaf(units_[pos])) {
        if (next >= n) bad("a leaf of the trie lies outside it");
        const uint32_t v = value_of(units_[next]);
        if (v > strings_.size() ||
            (v < strings_.size() && (static_cast<unsigned char>(strings_[v]) & 0xC0) == 0x80))
          bad("a replacement offset (", v, ") is not a character boundary of the ", strings_.size(),
              " bytes of strings");
      }
      stack.push_back(next);
    }
  }
}

bool PrecompiledCharsmap::transform(std::string_view chunk, std::string_view* replacement) const {
  const size_t n = units_.size();
  size_t pos = offset_of(units_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) return false;
    pos ^= c;
    if (pos >= n || label_of(units_[pos]) != c) return false;
    const uint32_t u = units_[pos];
    pos ^= offset_of(u);
    if (has_leaf(u)) {
      // Checked at load: pos < n and the value is a boundary in strings_.
      const size_t from = value_of(units_[pos]);
      size_t to = strings_.find('\0', from);
      if (to == std::string::npos) to = strings_.size();
      *replacement = std::string_view(strings_).substr(from, to - from);
      return true;
    }
  }
  return false;
}

std::string PrecompiledCharsmap::normalize(std::string_view s) const {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  size_t start = 0;
  std::string_view rep;
  for (size_t end : grapheme_ends(s)) {
    const std::string_view g = s.substr(start, end - start);
    start = end;
    if (g.size() < 6 && transform(g, &rep)) {
      out += rep;
      continue;
    }
    for (size_t i = 0; i < g.size();) {
      const size_t a = i;
      next_cp(g, i);
      const std::string_view ch = g.substr(a, i - a);
      if (transform(ch, &rep))
        out += rep;
      else
        out += ch;
    }
  }
  return out;
}

}  // namespace tok
}  // namespace oslo
