#include "core/common/unicode.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/common/error.hpp"

namespace oslo {
namespace tok {

uint32_t next_cp(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  uint32_t cp = c & (0x3F >> n);
  for (int k = 1; k <= n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n + 1;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// Length of the valid sequence at s[i] (1..4), or -k when the first k bytes
// are the maximal invalid subpart (k >= 1).
int sequence_at(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= n; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return -k;
    lo = 0x80;
    hi = 0xBF;
  }
  return n + 1;
}
}  // namespace

size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int n = sequence_at(s, i);
    if (n < 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view s, const char* what) {
  size_t at = invalid_utf8_at(s);
  if (at != std::string_view::npos)
    fail(OSLO_ERR_INVALID_ARGUMENT, what, " is not valid UTF-8 (byte ", at, " of ", s.size(), ")");
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = sequence_at(s, i);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += -n;
    }
  }
  return out;
}

std::string normalize(std::string_view s, NormForm form) {
  if (s.empty()) return std::string();
  int opts = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNFC: opts |= UTF8PROC_COMPOSE; break;
    case NormForm::kNFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NormForm::kNFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::kNFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(opts));
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    fail(OSLO_ERR_INVALID_ARGUMENT, "Unicode normalization failed: ", utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> guard(out, std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

namespace {
utf8proc_category_t cat(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_punctuation(uint32_t cp) {
  switch (cat(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

bool is_ascii_or_unicode_punctuation(uint32_t cp) {
  const bool ascii_punct = (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
                           (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  return ascii_punct || is_punctuation(cp);
}

bool is_mark_nonspacing(uint32_t cp) {
  return cat(cp) == UTF8PROC_CATEGORY_MN;
}

bool is_mark(uint32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool is_other(uint32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO;
}

bool is_other_but_tab_newline(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return is_other(cp);
}

bool is_numeric(uint32_t cp) {
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(uint32_t cp) {
  auto c = cat(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || is_numeric(cp);
}

bool is_word_char(uint32_t cp) {
  auto c = cat(cp);
  // Alphabetic is L*, Nl and Other_Alphabetic: marks, and the circled and
  // squared Latin letters (So) below.
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC || cp == 0x200C || cp == 0x200D ||
         (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
         (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
}

void append_lowercase(std::string& out, uint32_t cp) {
  // The only unconditional multi-character lowercase mapping of
  // SpecialCasing.txt: U+0130 -> i + U+0307.
  if (cp == 0x130) {
    out += "i\xCC\x87";
    return;
  }
  append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

std::vector<size_t> grapheme_ends(std::string_view s) {
  std::vector<size_t> ends;
  utf8proc_int32_t state = 0, prev = -1;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const auto cp = static_cast<utf8proc_int32_t>(next_cp(s, i));
    if (prev >= 0 && utf8proc_grapheme_break_stateful(prev, cp, &state)) ends.push_back(start);
    prev = cp;
  }
  if (!s.empty()) ends.push_back(s.size());
  return ends;
}

}  // namespace tok
}  // namespace oslo
