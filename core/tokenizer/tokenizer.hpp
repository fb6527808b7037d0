// Tokenizers: text <-> token ids as Hugging Face does it, in C++.
//
// Tokenizer::load reads a folder (tokenizer.json preferred, else
// tokenizer.model, plus tokenizer_config.json / special_tokens_map.json when
// present), a single tokenizer.json / tokenizer.model file, or a llama.cpp
// .gguf file (the tokenizer its metadata describes, gguf_tokenizer.cpp). See
// docs/TOKENIZERS.md for what is supported and how it matches Hugging Face.
//
// A loaded tokenizer is immutable: every method is const and may be called
// from any number of threads at once. Every failure throws oslo::Error:
// OSLO_ERR_IO (unreadable file), OSLO_ERR_FORMAT (invalid or inconsistent
// file, naming the file and the field), OSLO_ERR_NOT_SUPPORTED (a valid
// configuration oslo does not implement, naming the component),
// OSLO_ERR_INVALID_ARGUMENT (text that is not UTF-8, negative ids).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oslo {

class ChatTemplates;

// Which special token special_id() returns. Values match oslo_special_token.
enum class SpecialToken { kBos = 0, kEos, kPad, kUnk, kCls, kSep, kMask, kCount };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads from a folder or a file (see above).
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // Parses tokenizer.json text; `name` names it in errors. `config_json`
  // (tokenizer_config.json text, may be empty) adds special tokens and
  // clean_up_tokenization_spaces.
  static std::unique_ptr<Tokenizer> from_json(std::string_view json_text, const std::string& name,
                                              std::string_view config_json = {});

  // Text (UTF-8, any bytes including NUL) to ids; with add_special_tokens the
  // post-processor's tokens ([CLS] ... [SEP], BOS) are added.
  virtual std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Ids to text. Ids that name no token are skipped (as Hugging Face does);
  // negative ids are an error.
  virtual std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens) const = 0;
  // Number of tokens, added tokens included (Hugging Face's len(tokenizer)).
  virtual size_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int64_t id) const = 0;

  // The id of a special token, or -1 if the tokenizer defines none.
  int64_t special_id(SpecialToken which) const { return special_[static_cast<int>(which)]; }
  // The text of a special token as transformers' special_tokens_map gives it
  // (the config's string, else the token's spelling), or "" if there is none.
  std::string special_token_text(SpecialToken which) const;
  // The chat templates found with the tokenizer (see chat_template.hpp);
  // empty when there are none.
  const ChatTemplates& chat_templates() const;

 protected:
  int64_t special_[static_cast<int>(SpecialToken::kCount)] = {-1, -1, -1, -1, -1, -1, -1};
  // The config's text of each special token ("" if the config names none).
  std::string special_text_[static_cast<int>(SpecialToken::kCount)];
  bool special_cleared_[static_cast<int>(SpecialToken::kCount)] = {};
  std::shared_ptr<const ChatTemplates> chat_;
  // Reads bos_token, eos_token, ... from tokenizer_config.json-like JSON
  // text (a string or {"content": ...}) and sets the ids of those found.
  void apply_special_config(std::string_view config_json, const std::string& name);
};

namespace tok {
// Largest tokenizer file read (tokenizer.json, tokenizer.model, configs).
constexpr size_t kMaxFileBytes = size_t(1) << 30;
// Deepest JSON nesting accepted in a tokenizer file.
constexpr int kMaxJsonDepth = 64;
}  // namespace tok

}  // namespace oslo
