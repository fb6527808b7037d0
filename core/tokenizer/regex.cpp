#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer/regex.hpp"

#include <pcre2.h>

#include "core/common/error.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tok {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  std::string what;
};

std::string Regex::onig_compat(const std::string& p) {
  // Oniguruma's Unicode \w (UTS #18's): Alphabetic (letters, letter
  // numbers such as U+216B, circled letters ...), marks, decimal digits,
  // connector punctuation, ZWNJ and ZWJ.
  static const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else if (e == 'w') {
        out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(kWord) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& what) : impl_(new Impl) {
  impl_->what = what;
  const std::string p = onig_compat(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    fail(OSLO_ERR_FORMAT, what, ": invalid regex ", quote(pattern), " at offset ", off, ": ",
         reinterpret_cast<const char*>(buf));
  }
  // JIT when available; the interpreter otherwise.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (s.empty()) return out;
  check_utf8(s, "regex subject");
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc =
        pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMEMORY) throw std::bad_alloc();
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      fail(OSLO_ERR_INVALID_ARGUMENT, impl_->what, ": regex matching failed on a text of ",
           s.size(), " bytes: ", reinterpret_cast<const char*>(buf));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t a = ov[0], b = ov[1];
    if (b < a) b = a;  // \K tricks; not in tokenizer patterns
    out.emplace_back(a, b);
    if (b > a) {
      pos = b;
    } else {
      if (a >= s.size()) break;
      size_t i = a;
      next_cp(s, i);
      pos = i;
    }
  }
  return out;
}

}  // namespace tok
}  // namespace oslo
