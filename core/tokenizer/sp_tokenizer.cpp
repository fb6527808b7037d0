// SentencePiece tokenizer.model through libsentencepiece, with Hugging
// Face's LlamaTokenizer behaviour (transformers 5) around it: control and
// unknown pieces (<s>, </s>, <unk>) written in the text are matched as
// special tokens first; each remaining chunk is encoded by SentencePiece
// with its dummy prefix turned off and a "▁" put in front as the Metaspace
// pre-tokenizer does (prepend_scheme "first" by default: only a chunk at the
// start of the text; "always" with tokenizer_config.json's legacy: true;
// "never" with add_prefix_space: false; never when the chunk already starts
// with a space); BOS is added by default (add_bos_token / add_eos_token).
// Decoding is LlamaTokenizer's decoder chain: "▁" -> " ", <0xNN> byte
// pieces -> bytes (invalid sequences -> U+FFFD per byte), one leading space
// stripped.
//
// libsentencepiece is never linked into liboslo: it carries its own copy of
// protobuf-lite, which would clash with any libprotobuf in the process
// (libtorch's, an application's). It is reached through the shim
// liboslo_sentencepiece.so (spm_shim/, a C table), dlopen()ed with
// RTLD_LOCAL the first time a .model file is loaded.
#include <dlfcn.h>

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/common/error.hpp"
#include "core/common/own_dir.hpp"
#include "core/tokenizer/internal.hpp"
#include "core/tokenizer/spm_shim/oslo_spm.h"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tok {
namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581

#ifndef OSLO_SPM_INSTALL_LIBDIR
#define OSLO_SPM_INSTALL_LIBDIR ""
#endif
#ifndef OSLO_SPM_BUILD_DIR
#define OSLO_SPM_BUILD_DIR ""
#endif

// The shim, loaded once per process and kept loaded; its table, or why it
// could not be had.
struct SpmShim {
  const oslo_spm_api* api = nullptr;
  std::string error;
};

const oslo_spm_api* check_table(const oslo_spm_api* t, const std::string& path,
                                std::string& error) {
  if (!t) {
    error = path + " returned no table";
    return nullptr;
  }
  if (t->version != OSLO_SPM_API_VERSION || t->struct_size < sizeof(oslo_spm_api)) {
    error = str(path, " has table version ", t->version, " (", t->struct_size,
                " bytes); this liboslo needs version ", OSLO_SPM_API_VERSION, " (",
                sizeof(oslo_spm_api), " bytes)");
    return nullptr;
  }
  if (!t->load || !t->free_model || !t->piece_count || !t->piece_flags || !t->id_to_piece ||
      !t->piece_to_id || !t->bos_id || !t->eos_id || !t->pad_id || !t->unk_id || !t->encode) {
    error = path + " has an incomplete table";
    return nullptr;
  }
  return t;
}

SpmShim load_shim() {
  // liboslo's own folder (the installed libdir, wherever it was moved; the
  // build tree for liboslo.so), the configured install libdir, the build
  // tree (programs linking liboslo statically), then the loader's path.
  std::vector<std::string> paths;
  auto add = [&](const std::string& dir) {
    if (dir.empty()) return;
    std::string p = dir + "/" OSLO_SPM_LIBRARY;
    for (const auto& q : paths)
      if (q == p) return;
    paths.push_back(p);
  };
  add(own_directory());
  add(OSLO_SPM_INSTALL_LIBDIR);
  add(OSLO_SPM_BUILD_DIR);
  paths.push_back(OSLO_SPM_LIBRARY);
  SpmShim shim;
  std::string errors;
  for (const auto& path : paths) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      if (errors.size() < 2000) errors += str("\n  ", e ? e : path.c_str());
      continue;
    }
    auto fn = reinterpret_cast<oslo_spm_api_fn>(dlsym(h, OSLO_SPM_API_SYMBOL));
    if (!fn) {
      const char* e = dlerror();
      errors +=
          str("\n  ", path, " does not export " OSLO_SPM_API_SYMBOL, e ? ": " : "", e ? e : "");
      dlclose(h);
      continue;
    }
    std::string why;
    shim.api = check_table(fn(), path, why);
    if (shim.api) return shim;  // the handle stays open for the process
    errors += "\n  " + why;
    dlclose(h);
  }
  shim.error = errors;
  return shim;
}

const oslo_spm_api& spm_api() {
  static const SpmShim shim = load_shim();  // thread-safe, once per process
  OSLO_CHECK(shim.api, OSLO_ERR_NOT_SUPPORTED,
             "SentencePiece .model tokenizers need " OSLO_SPM_LIBRARY
             " (installed next to liboslo; built from core/tokenizer/spm_shim), which could "
             "not be loaded:",
             shim.error);
  return *shim.api;
}

// A model loaded through the shim, freed with it.
class SpmModel {
 public:
  SpmModel(const oslo_spm_api& api, const std::string& bytes, uint32_t flags,
           const std::string& name)
      : api_(&api) {
    const char* err = nullptr;
    m_ = api.load(bytes.data(), bytes.size(), flags, &err);
    if (!m_)
      fail(OSLO_ERR_FORMAT, name,
           ": not a SentencePiece model: ", clip(err ? err : "unknown error", 200));
  }
  ~SpmModel() { api_->free_model(m_); }
  SpmModel(const SpmModel&) = delete;
  SpmModel& operator=(const SpmModel&) = delete;

  int size() const { return api_->piece_count(m_); }
  uint32_t flags(int id) const { return api_->piece_flags(m_, id); }
  bool is_control(int id) const { return flags(id) & OSLO_SPM_PIECE_CONTROL; }
  bool is_unknown(int id) const { return flags(id) & OSLO_SPM_PIECE_UNKNOWN; }
  bool is_byte(int id) const { return flags(id) & OSLO_SPM_PIECE_BYTE; }
  std::string_view piece(int id) const {
    size_t n = 0;
    const char* p = api_->id_to_piece(m_, id, &n);
    return p ? std::string_view(p, n) : std::string_view();
  }
  int to_id(std::string_view piece) const {
    return api_->piece_to_id(m_, piece.data(), piece.size());
  }
  int bos_id() const { return api_->bos_id(m_); }
  int eos_id() const { return api_->eos_id(m_); }
  int pad_id() const { return api_->pad_id(m_); }
  int unk_id() const { return api_->unk_id(m_); }

  void encode(std::string_view text, std::vector<int64_t>& ids) const {
    std::vector<int32_t> buf(text.size() + 16);
    for (;;) {
      size_t n = 0;
      const char* err = nullptr;
      if (api_->encode(m_, text.data(), text.size(), buf.data(), buf.size(), &n, &err) != 0)
        fail(OSLO_ERR_INVALID_ARGUMENT,
             "SentencePiece could not encode the text: ", clip(err ? err : "unknown error", 200));
      if (n <= buf.size()) {
        ids.insert(ids.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
        return;
      }
      buf.resize(n);
    }
  }

 private:
  const oslo_spm_api* api_;
  oslo_spm_model* m_ = nullptr;
};

class SpTokenizer : public Tokenizer {
 public:
  SpTokenizer(const std::string& bytes, const std::string& name, std::string_view config)
      : sp_(spm_api(), bytes, 0, name),
        // The same model with normalizer_spec.add_dummy_prefix = false.
        raw_(spm_api(), bytes, OSLO_SPM_NO_DUMMY_PREFIX, name) {
    const int n = sp_.size();
    if (n <= 0) fail(OSLO_ERR_FORMAT, name, ": SentencePiece model has no pieces");
    for (int id = 0; id < n; ++id) {
      if (sp_.is_control(id) || sp_.is_unknown(id)) {
        std::string_view p = sp_.piece(id);
        if (p.empty()) continue;
        special_ids_.insert(id);
        trie_.add(p, id);
      }
    }
    special_[static_cast<int>(SpecialToken::kBos)] = sp_.bos_id();
    special_[static_cast<int>(SpecialToken::kEos)] = sp_.eos_id();
    special_[static_cast<int>(SpecialToken::kPad)] = sp_.pad_id();
    special_[static_cast<int>(SpecialToken::kUnk)] = sp_.unk_id();
    for (auto& s : special_)
      if (s >= n) s = -1;
    if (!config.empty()) {
      apply_special_config(config, name);
      auto c = nlohmann::json::parse(config.begin(), config.end(), nullptr, false);
      if (c.is_object()) {
        auto b = c.find("add_bos_token");
        if (b != c.end() && b->is_boolean()) add_bos_ = b->get<bool>();
        auto e = c.find("add_eos_token");
        if (e != c.end() && e->is_boolean()) add_eos_ = e->get<bool>();
        auto cl = c.find("clean_up_tokenization_spaces");
        if (cl != c.end() && cl->is_boolean()) clean_up_spaces_ = cl->get<bool>();
        auto ap = c.find("add_prefix_space");
        if (ap != c.end() && ap->is_boolean()) add_prefix_space_ = ap->get<bool>();
        auto lg = c.find("legacy");
        if (lg != c.end() && lg->is_boolean()) legacy_ = lg->get<bool>();
      }
    }
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    check_utf8(text, "text");
    std::vector<int64_t> ids;
    const int64_t bos = special_id(SpecialToken::kBos), eos = special_id(SpecialToken::kEos);
    if (add_special_tokens && add_bos_ && bos >= 0) ids.push_back(bos);
    size_t prev = 0;
    for (const auto& m : trie_.find_all(text)) {
      chunk(text.substr(prev, m.start - prev), prev == 0, ids);
      ids.push_back(m.value);
      prev = m.end;
    }
    chunk(text.substr(prev), prev == 0, ids);
    if (add_special_tokens && add_eos_ && eos >= 0) ids.push_back(eos);
    return ids;
  }

  std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens) const override {
    const int64_t size = sp_.size();
    // Replace("▁", " ") and ByteFallback, then Fuse and Strip(" ", 1, 0).
    std::string out, pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (invalid_utf8_at(pending) == std::string::npos)
        out += pending;
      else
        for (size_t k = 0; k < pending.size(); ++k) out += "\xEF\xBF\xBD";
      pending.clear();
    };
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0)
        fail(OSLO_ERR_INVALID_ARGUMENT, "decode: ids[", i, "] = ", ids[i], " is negative");
      if (ids[i] >= size) continue;
      const int id = static_cast<int>(ids[i]);
      if (skip_special_tokens && special_ids_.count(id)) continue;
      const int byte = sp_.is_byte(id) ? byte_value(sp_.piece(id)) : -1;
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        continue;
      }
      flush();
      out += replace_all(sp_.piece(id), kSpace, " ");
    }
    flush();
    if (add_prefix_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
    if (clean_up_spaces_) out = clean_up_tokenization(std::move(out));
    return out;
  }

  size_t vocab_size() const override { return static_cast<size_t>(sp_.size()); }
  std::optional<int64_t> token_to_id(std::string_view token) const override {
    int id = lookup(token);
    if (id < 0) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int64_t id) const override {
    if (id < 0 || id >= sp_.size()) return std::nullopt;
    return std::string(sp_.piece(static_cast<int>(id)));
  }

 private:
  // The byte of a "<0xNN>" piece, or -1.
  static int byte_value(std::string_view p) {
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
    const int h = hex(p[3]), l = hex(p[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }

  int lookup(std::string_view piece) const {
    int id = sp_.to_id(piece);
    if (id < 0 || (id == sp_.unk_id() && piece != sp_.piece(id))) return -1;
    return id;
  }

  void chunk(std::string_view c, bool first, std::vector<int64_t>& ids) const {
    if (c.empty()) return;
    const bool prepend = add_prefix_space_ && (legacy_ || first) && c[0] != ' ';
    std::string text = prepend ? " " + std::string(c) : std::string(c);
    raw_.encode(text, ids);
  }

  SpmModel sp_, raw_;  // raw_: no dummy prefix
  TokenTrie trie_;
  std::unordered_set<int> special_ids_;
  bool add_bos_ = true, add_eos_ = false, clean_up_spaces_ = false;
  bool add_prefix_space_ = true, legacy_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& model_bytes,
                                             const std::string& name,
                                             std::string_view config_json) {
  return std::make_unique<SpTokenizer>(model_bytes, name, config_json);
}

}  // namespace tok
}  // namespace oslo
