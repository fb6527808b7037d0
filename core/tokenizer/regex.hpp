// Unicode regular expressions for the tokenizers: PCRE2 in UTF + UCP mode
// (JIT-compiled when the platform allows), with the pattern rewritten where
// Oniguruma (what Hugging Face tokenizers uses) differs from PCRE2: \s also
// matches U+0085; \w is Alphabetic, marks, decimal digits, connector
// punctuation and Join_Control (PCRE2's: letters and all numbers).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oslo {
namespace tok {

class Regex {
 public:
  // Throws OSLO_ERR_FORMAT naming `what` if the pattern does not compile.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [start, end) of the successive non-overlapping matches in s
  // (valid UTF-8), left to right; after an empty match the search resumes one
  // character later. Safe to call from several threads at once.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  // The pattern rewritten for PCRE2 (exposed for tests).
  static std::string onig_compat(const std::string& pattern);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tok
}  // namespace oslo
