// SentencePiece's precompiled normalization rules (the "precompiled_charsmap"
// of a .model file's normalizer_spec, and of tokenizer.json's `Precompiled`
// normalizer, base64-encoded there): a darts-clone double-array trie over the
// UTF-8 bytes of the strings to replace, whose values are offsets of their
// replacements in a block of NUL-terminated strings. Applied the way Hugging
// Face tokenizers applies it (see normalize). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oslo {
namespace tok {

// Standard base64 (RFC 4648 alphabet, '=' padding required); false if `in`
// is not canonical base64.
bool base64_decode(std::string_view in, std::string& out);

class PrecompiledCharsmap {
 public:
  // Parses and checks the blob: a little-endian uint32 byte size of the
  // trie, the trie's 32-bit units, then the replacement strings (UTF-8).
  // Every trie node reachable from the root is checked, so that lookups
  // never leave the blob. Throws OSLO_ERR_FORMAT naming `what` if corrupt.
  PrecompiledCharsmap(std::string_view blob, const std::string& what);

  // The replacement of the shortest prefix of `chunk` the trie holds (not
  // necessarily all of chunk: Hugging Face replaces the whole chunk by it),
  // or false if no prefix is held. A NUL byte ends the search.
  bool transform(std::string_view chunk, std::string_view* replacement) const;

  // Hugging Face's Precompiled::normalize: for each extended grapheme
  // cluster, the replacement of the whole cluster if it is shorter than 6
  // bytes and transform finds one; else each character's replacement, or the
  // character itself. s must be valid UTF-8.
  std::string normalize(std::string_view s) const;

  size_t trie_units() const { return units_.size(); }

 private:
  std::vector<uint32_t> units_;
  std::string strings_;
};

}  // namespace tok
}  // namespace oslo
