// Tokenizer loading (folder or file) and the helpers shared by the
// implementations.
#include "core/tokenizer/tokenizer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/common/error.hpp"
#include "core/tokenizer/chat_template.hpp"
#include "core/tokenizer/internal.hpp"

namespace oslo {
namespace tok {

int32_t TokenTrie::child(int32_t node, unsigned char b) const {
  const auto& next = nodes_[static_cast<size_t>(node)].next;
  auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t(-1)));
  return it != next.end() && it->first == b ? it->second : -1;
}

void TokenTrie::add(std::string_view s, int32_t value) {
  if (s.empty()) return;
  int32_t node = 0;
  for (unsigned char b : s) {
    int32_t c = child(node, b);
    if (c < 0) {
      c = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& next = nodes_[static_cast<size_t>(node)].next;
      next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t(-1))),
                  {b, c});
    }
    node = c;
  }
  // A later token with the same content replaces the earlier one.
  nodes_[static_cast<size_t>(node)].value = value;
}

std::vector<TokenTrie::Match> TokenTrie::find_all(std::string_view s) const {
  std::vector<Match> out;
  size_t i = 0;
  while (i < s.size()) {
    int32_t node = 0;
    size_t best_end = 0;
    int32_t best = -1;
    for (size_t k = i; k < s.size(); ++k) {
      node = child(node, static_cast<unsigned char>(s[k]));
      if (node < 0) break;
      if (nodes_[static_cast<size_t>(node)].value >= 0) {
        best = nodes_[static_cast<size_t>(node)].value;
        best_end = k + 1;
      }
    }
    if (best >= 0) {
      out.push_back({i, best_end, best});
      i = best_end;
    } else {
      ++i;
    }
  }
  return out;
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    fail(OSLO_ERR_IO, "cannot open ", quote_path(path), ": ", std::strerror(e));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail(OSLO_ERR_IO, quote_path(path), " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes)
    fail(OSLO_ERR_IO, quote_path(path), " is too large (", st.st_size, " bytes; at most ",
         kMaxFileBytes, ")");
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, &data[got], data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      fail(OSLO_ERR_IO, "cannot read ", quote_path(path), ": ", std::strerror(e));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

void check_json_depth(std::string_view text, const std::string& name) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        fail(OSLO_ERR_FORMAT, name, ": JSON nested deeper than ", kMaxJsonDepth, " levels (byte ",
             i, ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(s);
  out.reserve(s.size());
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, prev)) {
    out.append(s.data() + prev, pos - prev);
    out.append(to.data(), to.size());
    prev = pos + from.size();
  }
  out.append(s.data() + prev, s.size() - prev);
  return out;
}

std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto& [a, b] : kRules) s = replace_all(s, a, b);
  return s;
}

}  // namespace tok

void Tokenizer::apply_special_config(std::string_view config_json, const std::string& name) {
  using json = nlohmann::json;
  tok::check_json_depth(config_json, name);
  json c;
  try {
    c = json::parse(config_json.begin(), config_json.end());
  } catch (const json::exception& e) {
    fail(OSLO_ERR_FORMAT, name, ": invalid JSON: ", e.what());
  }
  if (!c.is_object()) fail(OSLO_ERR_FORMAT, name, ": expected a JSON object");
  static const char* kKeys[] = {"bos_token", "eos_token", "pad_token", "unk_token",
                                "cls_token", "sep_token", "mask_token"};
  for (int k = 0; k < static_cast<int>(SpecialToken::kCount); ++k) {
    auto it = c.find(kKeys[k]);
    if (it == c.end()) continue;
    if (it->is_null()) {  // an explicit null: no such token (transformers' None)
      special_[k] = -1;
      special_text_[k].clear();
      special_cleared_[k] = true;
      continue;
    }
    const json* v = &*it;
    if (v->is_object()) {
      auto ct = v->find("content");
      if (ct == v->end()) fail(OSLO_ERR_FORMAT, name, ": ", kKeys[k], ": missing 'content'");
      v = &*ct;
    }
    if (!v->is_string())
      fail(OSLO_ERR_FORMAT, name, ": ", kKeys[k], ": expected a string or {\"content\": ...}");
    auto id = token_to_id(v->get_ref<const std::string&>());
    special_[k] = id ? *id : -1;
    special_text_[k] = v->get<std::string>();
    special_cleared_[k] = false;
  }
}

std::string Tokenizer::special_token_text(SpecialToken which) const {
  const int k = static_cast<int>(which);
  if (!special_text_[k].empty() || special_cleared_[k]) return special_text_[k];
  if (special_[k] < 0) return std::string();
  return id_to_token(special_[k]).value_or(std::string());
}

const ChatTemplates& Tokenizer::chat_templates() const {
  static const ChatTemplates kNone;
  return chat_ ? *chat_ : kNone;
}

namespace {
bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
// tokenizer_config.json with special_tokens_map.json's entries where the
// config lacks them, as one JSON object text ("" if neither exists).
std::string folder_config(const std::string& dir) {
  using json = nlohmann::json;
  json merged = json::object();
  bool any = false;
  for (const char* f : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const std::string p = dir + "/" + f;
    if (!is_file(p)) continue;
    const std::string text = tok::read_file(p);
    tok::check_json_depth(text, quote_path(p));
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      fail(OSLO_ERR_FORMAT, quote_path(p), ": invalid JSON: ", e.what());
    }
    if (!j.is_object()) fail(OSLO_ERR_FORMAT, quote_path(p), ": expected a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) merged[it.key()] = it.value();
    any = true;
  }
  // transformers chooses some tokenizer classes by the model's type.
  const std::string cfg = dir + "/config.json";
  if (is_file(cfg)) {
    const std::string text = tok::read_file(cfg);
    tok::check_json_depth(text, quote_path(cfg));
    json c = json::parse(text, nullptr, false);
    if (c.is_object() && c.contains("model_type") && c["model_type"].is_string()) {
      merged[tok::kModelTypeKey] = c["model_type"];
      any = true;
    }
  }
  return any ? merged.dump() : std::string();
}
}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::string file = path, config;
  if (is_dir(path)) {
    if (is_file(path + "/tokenizer.json"))
      file = path + "/tokenizer.json";
    else if (is_file(path + "/tokenizer.model"))
      file = path + "/tokenizer.model";
    else
      fail(OSLO_ERR_IO, "no tokenizer.json or tokenizer.model in ", quote_path(path));
    config = folder_config(path);
  } else if (!is_file(path)) {
    fail(OSLO_ERR_IO, "no tokenizer at ", quote_path(path), " (no such file or folder)");
  } else if (ends_with(path, ".gguf") || ends_with(path, ".GGUF")) {
    return tok::make_gguf_tokenizer(path);
  }
  const std::string bytes = tok::read_file(file);
  const std::string name = quote_path(file);
  // A .model file is a SentencePiece protobuf; anything else must be JSON.
  std::unique_ptr<Tokenizer> t = ends_with(file, ".model")
                                     ? tok::make_sp_tokenizer(bytes, name, config)
                                     : tok::make_hf_tokenizer(bytes, name, config);
  if (is_dir(path))
    t->chat_ = std::make_shared<const ChatTemplates>(ChatTemplates::load(path, config));
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& name,
                                                std::string_view config_json) {
  std::unique_ptr<Tokenizer> t = tok::make_hf_tokenizer(json_text, name, config_json);
  if (!config_json.empty()) {
    const nlohmann::json c =
        nlohmann::json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (c.is_object() && c.contains("chat_template"))
      t->chat_ = std::make_shared<const ChatTemplates>(
          ChatTemplates::from_config_value(c["chat_template"], name + " (config)"));
  }
  return t;
}

}  // namespace oslo
