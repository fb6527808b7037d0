// Internal pieces shared by the tokenizer implementations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace oslo {
namespace tok {

// Leftmost-longest matching of a set of strings (Hugging Face matches added
// tokens with Aho-Corasick in MatchKind::LeftmostLongest): a byte trie.
class TokenTrie {
 public:
  void add(std::string_view s, int32_t value);
  bool empty() const { return nodes_.size() <= 1; }
  struct Match {
    size_t start, end;
    int32_t value;
  };
  // Successive non-overlapping matches: at each position the longest string
  // that starts there; the earliest position wins.
  std::vector<Match> find_all(std::string_view s) const;
  // Calls f(length, value) for each string that is a prefix of s, shortest
  // first (the Unigram model's lattice).
  template <typename F>
  void prefixes(std::string_view s, F&& f) const {
    int32_t node = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      node = child(node, static_cast<unsigned char>(s[i]));
      if (node < 0) return;
      const int32_t v = nodes_[static_cast<size_t>(node)].value;
      if (v >= 0) f(i + 1, v);
    }
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    int32_t value = -1;
  };
  std::vector<Node> nodes_{Node{}};
  int32_t child(int32_t node, unsigned char b) const;
};

// The key under which Tokenizer::load passes the folder's config.json
// model_type along with tokenizer_config.json's entries.
constexpr const char* kModelTypeKey = "oslo:config.json:model_type";

// Reads a whole file (at most kMaxFileBytes); OSLO_ERR_IO naming it.
std::string read_file(const std::string& path);
// Rejects JSON text nested deeper than kMaxJsonDepth (nlohmann's parser
// recurses) with OSLO_ERR_FORMAT naming `name`.
void check_json_depth(std::string_view text, const std::string& name);
// transformers' clean_up_tokenization (" ." -> "." ...).
std::string clean_up_tokenization(std::string s);
// Replaces every occurrence of `from` (non-empty) with `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

std::unique_ptr<Tokenizer> make_hf_tokenizer(std::string_view json_text, const std::string& name,
                                             std::string_view config_json);
// The tokenizer of a llama.cpp .gguf file's metadata (gguf_tokenizer.cpp).
std::unique_ptr<Tokenizer> make_gguf_tokenizer(const std::string& path);
std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& model_bytes,
                                             const std::string& name, std::string_view config_json);

}  // namespace tok
}  // namespace oslo
