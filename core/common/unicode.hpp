// UTF-8 and Unicode helpers of the tokenizers: decoding, validation,
// Rust's String::from_utf8_lossy, normalization forms and character classes
// (utf8proc), each defined the way Hugging Face tokenizers (Rust) defines it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oslo {
namespace tok {

// Decodes the code point at s[i] and advances i; s must be valid UTF-8.
uint32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
// Byte offset of the first invalid UTF-8 sequence, or npos if s is valid.
size_t invalid_utf8_at(std::string_view s);
// Throws OSLO_ERR_INVALID_ARGUMENT naming `what` and the offset if invalid.
void check_utf8(std::string_view s, const char* what);
// Rust's String::from_utf8_lossy: each maximal invalid subpart -> U+FFFD.
std::string utf8_lossy(std::string_view bytes);

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize(std::string_view s, NormForm form);

bool is_whitespace(uint32_t cp);                    // Rust char::is_whitespace (White_Space)
bool is_punctuation(uint32_t cp);                   // Unicode P* categories
bool is_ascii_or_unicode_punctuation(uint32_t cp);  // ASCII punctuation or P*
bool is_mark_nonspacing(uint32_t cp);               // Mn
bool is_mark(uint32_t cp);                          // M* (Mn, Mc, Me)
bool is_other(uint32_t cp);                         // Cc, Cf, Co (unicode_categories' is_other)
bool is_other_but_tab_newline(uint32_t cp);         // is_other, except \t \n \r
bool is_numeric(uint32_t cp);                       // N*
bool is_alphanumeric(uint32_t cp);                  // L*, N*
bool is_word_char(uint32_t cp);                     // regex \w: Alphabetic, M*, Nd, Pc, ZWNJ, ZWJ
// Rust char::to_lowercase (full mapping) appended to out.
void append_lowercase(std::string& out, uint32_t cp);
// Byte offsets where the extended grapheme clusters (UAX #29) of s (valid
// UTF-8) end, in order; the last is s.size(). Empty for an empty s.
std::vector<size_t> grapheme_ends(std::string_view s);

}  // namespace tok
}  // namespace oslo
