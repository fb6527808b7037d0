// C shims: tokenizers.
#include <cstring>

#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"
#include "core/tokenizer/batch.hpp"
#include "core/tokenizer/chat_template.hpp"
#include "core/tokenizer/tokenizer.hpp"

using oslo::capi::guard;
using oslo::capi::need;

namespace {
// Copies s into out (at most capacity bytes, NUL-terminated when it fits).
void copy_out(const std::string& s, char* out, size_t capacity, size_t* length) {
  *length = s.size();
  if (capacity == 0) return;
  const size_t n = s.size() < capacity ? s.size() : capacity;
  std::memcpy(out, s.data(), n);
  if (s.size() < capacity) out[s.size()] = '\0';
}

OSLO_OPTIONS(
    kEncodeBatchOptions, oslo_tokenizer_encode_batch_options,
    OSLO_TOKENIZER_ENCODE_BATCH_OPTIONS_VERSION,
    [](oslo_tokenizer_encode_batch_options& o) {
      o.add_special_tokens = 1;
      o.padding_side = OSLO_SIDE_RIGHT;
      o.pad_id = -1;
      o.truncation_side = OSLO_SIDE_RIGHT;
    },
    OSLO_OPTIONS_END(oslo_tokenizer_encode_batch_options, pad_to_max_length));

OSLO_OPTIONS(
    kPadBatchOptions, oslo_pad_batch_options, OSLO_PAD_BATCH_OPTIONS_VERSION,
    [](oslo_pad_batch_options& o) {
      o.padding_side = OSLO_SIDE_RIGHT;
      o.pad_id = -1;
      o.truncation_side = OSLO_SIDE_RIGHT;
    },
    OSLO_OPTIONS_END(oslo_pad_batch_options, pad_to_max_length));

OSLO_OPTIONS(
    kChatTemplateOptions, oslo_chat_template_options, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION,
    [](oslo_chat_template_options&) {},
    OSLO_OPTIONS_END(oslo_chat_template_options, continue_final_message));

// The special tokens a template sees: transformers' special_tokens_map.
std::vector<std::pair<std::string, std::string>> special_tokens(const oslo::Tokenizer& t) {
  static const char* kNames[] = {"bos_token", "eos_token", "pad_token", "unk_token",
                                 "cls_token", "sep_token", "mask_token"};
  std::vector<std::pair<std::string, std::string>> out;
  for (int k = 0; k < static_cast<int>(oslo::SpecialToken::kCount); ++k) {
    std::string text = t.special_token_text(static_cast<oslo::SpecialToken>(k));
    if (!text.empty()) out.emplace_back(kNames[k], std::move(text));
  }
  return out;
}

const oslo::tmpl::Template& parsed(const oslo::ChatTemplates::Entry& e) {
  if (!e.parsed) oslo::fail(e.status, "chat template '", e.name, "' does not parse: ", e.error);
  return *e.parsed;
}

// Renders for oslo_tokenizer_apply_chat_template / oslo_chat_template_apply.
std::string render_chat(const char* fn, const oslo_tokenizer* tok, const char* messages_json,
                        const oslo_chat_template_options& o) {
  oslo::ChatTemplateInput in;
  in.messages_json = messages_json;
  in.add_generation_prompt = o.add_generation_prompt != 0;
  in.continue_final_message = o.continue_final_message != 0;
  if (o.variables_json) in.variables_json = o.variables_json;
  if (tok) in.special_tokens = special_tokens(*tok->impl);
  bool has_tools = false;
  if (o.variables_json) {
    const auto v = nlohmann::json::parse(o.variables_json, nullptr, false);
    has_tools = v.is_object() && v.contains("tools") && !v["tools"].is_null();
  }
  try {
    const oslo::ChatTemplates::Entry* e =
        tok ? tok->impl->chat_templates().select(o.chat_template, has_tools) : nullptr;
    if (e) return oslo::apply_chat_template(parsed(*e), in);
    const oslo::tmpl::Template t(o.chat_template);
    return oslo::apply_chat_template(t, in);
  } catch (const oslo::Error& err) {
    oslo::fail(err.status(), fn, ": ", err.what());
  }
}

oslo::Side side(oslo_side s, const char* fn, const char* field) {
  if (s == OSLO_SIDE_RIGHT) return oslo::Side::kRight;
  if (s == OSLO_SIDE_LEFT) return oslo::Side::kLeft;
  oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": options.", field, " is ", static_cast<int>(s),
             ", not OSLO_SIDE_RIGHT (0) or OSLO_SIDE_LEFT (1)");
}

// The padding fields both options structs share (same names, same meaning).
template <typename Options>
oslo::PadOptions pad_options(const Options& o, const char* fn) {
  oslo::PadOptions p;
  p.padding_side = side(o.padding_side, fn, "padding_side");
  p.pad_id = o.pad_id;
  p.max_length = o.max_length;
  p.truncation = o.truncation != 0;
  p.truncation_side = side(o.truncation_side, fn, "truncation_side");
  p.pad_to_max_length = o.pad_to_max_length != 0;
  return p;
}
// Writes e to the caller's arrays by oslo_tokenizer_encode_batch's sizing
// rule: *length always, ids and mask only when all n * L fit.
void write_batch(const oslo::BatchEncoding& e, int64_t* ids, int64_t* mask, size_t capacity,
                 size_t* length) {
  *length = e.length;
  if (e.ids.size() > capacity || e.ids.empty()) return;
  std::memcpy(ids, e.ids.data(), e.ids.size() * sizeof(int64_t));
  if (mask) std::memcpy(mask, e.mask.data(), e.mask.size() * sizeof(int64_t));
}
}  // namespace

extern "C" {

oslo_status oslo_tokenizer_load(const char* path, oslo_tokenizer** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tokenizer_load", "out");
    need(path, "oslo_tokenizer_load", "path");
    auto h = std::make_unique<oslo_tokenizer>();
    h->impl = oslo::Tokenizer::load(path);
    *out = h.release();
  });
}

void oslo_tokenizer_destroy(oslo_tokenizer* tok) {
  delete tok;
}

oslo_status oslo_tokenizer_encode(const oslo_tokenizer* tok, const char* text, size_t text_len,
                                  int add_special_tokens, int64_t* ids, size_t capacity,
                                  size_t* count) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_encode";
    need(tok, fn, "tok");
    need(count, fn, "count");
    if (text_len > 0) need(text, fn, "text");
    if (capacity > 0) need(ids, fn, "ids");
    std::vector<int64_t> v =
        tok->impl->encode(std::string_view(text ? text : "", text_len), add_special_tokens != 0);
    *count = v.size();
    const size_t n = v.size() < capacity ? v.size() : capacity;
    if (n) std::memcpy(ids, v.data(), n * sizeof(int64_t));
  });
}

oslo_status oslo_tokenizer_encode_batch_options_init(oslo_tokenizer_encode_batch_options* options,
                                                     unsigned int version) {
  return kEncodeBatchOptions.init(options, version);
}

oslo_status oslo_tokenizer_encode_batch(const oslo_tokenizer* tok, const char* const* texts,
                                        const size_t* text_lens, size_t n,
                                        const oslo_tokenizer_encode_batch_options* options,
                                        int64_t* ids, int64_t* mask, size_t capacity,
                                        size_t* length) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_encode_batch";
    need(tok, fn, "tok");
    need(length, fn, "length");
    if (n == 0) oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": n is 0; pass at least one text");
    need(texts, fn, "texts");
    if (capacity > 0) need(ids, fn, "ids");
    const oslo_tokenizer_encode_batch_options o =
        kEncodeBatchOptions.read_or_defaults(options, fn, "options");
    oslo::BatchEncodeOptions b;
    b.add_special_tokens = o.add_special_tokens != 0;
    b.pad = pad_options(o, fn);
    std::vector<std::string_view> views(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t len = text_lens ? text_lens[i] : 0;
      if (!texts[i] && (!text_lens || len > 0))
        oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": texts[", i, "] is NULL",
                   text_lens ? " with a nonzero length" : " (no text_lens: NUL-terminated texts)");
      views[i] = texts[i] ? std::string_view(texts[i], text_lens ? len : std::strlen(texts[i]))
                          : std::string_view();
    }
    oslo::BatchEncoding e;
    try {
      e = oslo::encode_batch(*tok->impl, views, b);
    } catch (const oslo::Error& err) {
      oslo::fail(err.status(), fn, ": ", err.what());
    }
    write_batch(e, ids, mask, capacity, length);
  });
}

oslo_status oslo_pad_batch_options_init(oslo_pad_batch_options* options, unsigned int version) {
  return kPadBatchOptions.init(options, version);
}

oslo_status oslo_pad_batch(const int64_t* const* rows, const size_t* row_lens, size_t n,
                           const oslo_pad_batch_options* options, int64_t* ids, int64_t* mask,
                           size_t capacity, size_t* length) {
  return guard([&] {
    const char* fn = "oslo_pad_batch";
    need(length, fn, "length");
    if (n == 0) oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": n is 0; pass at least one row");
    need(rows, fn, "rows");
    need(row_lens, fn, "row_lens");
    if (capacity > 0) need(ids, fn, "ids");
    const oslo_pad_batch_options o = kPadBatchOptions.read_or_defaults(options, fn, "options");
    const oslo::PadOptions p = pad_options(o, fn);
    std::vector<oslo::IdRow> views(n);
    for (size_t i = 0; i < n; ++i) {
      if (!rows[i] && row_lens[i] > 0)
        oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": rows[", i, "] is NULL with length ",
                   row_lens[i]);
      views[i] = oslo::IdRow{rows[i], row_lens[i]};
    }
    oslo::BatchEncoding e;
    try {
      e = oslo::pad_batch(views, p);
    } catch (const oslo::Error& err) {
      oslo::fail(err.status(), fn, ": ", err.what());
    }
    write_batch(e, ids, mask, capacity, length);
  });
}

oslo_status oslo_tokenizer_decode(const oslo_tokenizer* tok, const int64_t* ids, size_t n,
                                  int skip_special_tokens, char* out, size_t capacity,
                                  size_t* length) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_decode";
    need(tok, fn, "tok");
    need(length, fn, "length");
    if (n > 0) need(ids, fn, "ids");
    if (capacity > 0) need(out, fn, "out");
    copy_out(tok->impl->decode(ids, n, skip_special_tokens != 0), out, capacity, length);
  });
}

oslo_status oslo_tokenizer_vocab_size(const oslo_tokenizer* tok, size_t* size) {
  return guard([&] {
    need(tok, "oslo_tokenizer_vocab_size", "tok");
    need(size, "oslo_tokenizer_vocab_size", "size");
    *size = tok->impl->vocab_size();
  });
}

oslo_status oslo_tokenizer_token_to_id(const oslo_tokenizer* tok, const char* token,
                                       size_t token_len, int64_t* id) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_token_to_id";
    need(tok, fn, "tok");
    need(id, fn, "id");
    if (token_len > 0) need(token, fn, "token");
    *id = tok->impl->token_to_id(std::string_view(token ? token : "", token_len)).value_or(-1);
  });
}

oslo_status oslo_tokenizer_id_to_token(const oslo_tokenizer* tok, int64_t id, char* out,
                                       size_t capacity, size_t* length) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_id_to_token";
    need(tok, fn, "tok");
    need(length, fn, "length");
    if (capacity > 0) need(out, fn, "out");
    auto t = tok->impl->id_to_token(id);
    if (!t) oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": id ", id, " names no token");
    copy_out(*t, out, capacity, length);
  });
}

oslo_status oslo_tokenizer_special_id(const oslo_tokenizer* tok, oslo_special_token which,
                                      int64_t* id) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_special_id";
    need(tok, fn, "tok");
    need(id, fn, "id");
    const int w = static_cast<int>(which);
    if (w < 0 || w >= static_cast<int>(oslo::SpecialToken::kCount))
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": unknown special token ", w);
    *id = tok->impl->special_id(static_cast<oslo::SpecialToken>(w));
  });
}

oslo_status oslo_tokenizer_has_chat_template(const oslo_tokenizer* tok, int* has) {
  return guard([&] {
    need(tok, "oslo_tokenizer_has_chat_template", "tok");
    need(has, "oslo_tokenizer_has_chat_template", "has");
    *has = tok->impl->chat_templates().empty() ? 0 : 1;
  });
}

oslo_status oslo_tokenizer_get_chat_template(const oslo_tokenizer* tok, const char* name, char* out,
                                             size_t capacity, size_t* length) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_get_chat_template";
    need(tok, fn, "tok");
    need(length, fn, "length");
    if (capacity > 0) need(out, fn, "out");
    const oslo::ChatTemplates& all = tok->impl->chat_templates();
    const oslo::ChatTemplates::Entry* e = nullptr;
    if (name) {
      for (const auto& x : all.entries())
        if (x.name == name) e = &x;
      if (!e)
        oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": the tokenizer has no chat template named ",
                   oslo::quote(name));
    } else {
      try {
        e = all.select(nullptr, false);
      } catch (const oslo::Error& err) {
        oslo::fail(err.status(), fn, ": ", err.what());
      }
    }
    copy_out(e->source, out, capacity, length);
  });
}

oslo_status oslo_tokenizer_apply_chat_template(const oslo_tokenizer* tok, const char* messages_json,
                                               int add_generation_prompt, char* out,
                                               size_t capacity, size_t* length) {
  return guard([&] {
    const char* fn = "oslo_tokenizer_apply_chat_template";
    need(tok, fn, "tok");
    need(messages_json, fn, "messages_json");
    need(length, fn, "length");
    if (capacity > 0) need(out, fn, "out");
    oslo_chat_template_options o = kChatTemplateOptions.read_or_defaults(nullptr, fn, "options");
    o.add_generation_prompt = add_generation_prompt;
    copy_out(render_chat(fn, tok, messages_json, o), out, capacity, length);
  });
}

oslo_status oslo_chat_template_options_init(oslo_chat_template_options* options,
                                            unsigned int version) {
  return kChatTemplateOptions.init(options, version);
}

oslo_status oslo_chat_template_apply(const oslo_tokenizer* tok, const char* messages_json,
                                     const oslo_chat_template_options* options, char* out,
                                     size_t capacity, size_t* length) {
  return guard([&] {
    const char* fn = "oslo_chat_template_apply";
    need(messages_json, fn, "messages_json");
    need(length, fn, "length");
    if (capacity > 0) need(out, fn, "out");
    const oslo_chat_template_options o =
        kChatTemplateOptions.read_or_defaults(options, fn, "options");
    if (!tok && !o.chat_template)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn,
                 ": tok is NULL and options->chat_template is NULL: pass a tokenizer or a "
                 "template");
    copy_out(render_chat(fn, tok, messages_json, o), out, capacity, length);
  });
}

}  // extern "C"
