// `oslo serve`'s OpenAI dialect (serve_openai.hpp): bodies checked field by
// field into engine requests, and responses and chunks built back.
#include "tools/oslo/serve_openai.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

namespace oslo_cli {
namespace serve {

using json = nlohmann::json;

namespace {

// The fields each endpoint takes: OpenAI's, then the extensions vLLM and
// Hugging Face users pass (top_k, repetition_penalty, min_tokens,
// ignore_eos; chat: the chat template's variables and generation-prompt
// switches). Anything else is refused by name, as OpenAI does.
const std::set<std::string> kCompletionKeys = {"model",
                                               "prompt",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "n",
                                               "stream",
                                               "stream_options",
                                               "logprobs",
                                               "echo",
                                               "stop",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "best_of",
                                               "logit_bias",
                                               "user",
                                               "seed",
                                               "suffix",
                                               "top_k",
                                               "repetition_penalty",
                                               "min_tokens",
                                               "ignore_eos"};
const std::set<std::string> kChatKeys = {"model",
                                         "messages",
                                         "max_tokens",
                                         "max_completion_tokens",
                                         "temperature",
                                         "top_p",
                                         "n",
                                         "stream",
                                         "stream_options",
                                         "stop",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "logit_bias",
                                         "logprobs",
                                         "top_logprobs",
                                         "user",
                                         "seed",
                                         "response_format",
                                         "tools",
                                         "tool_choice",
                                         "parallel_tool_calls",
                                         "top_k",
                                         "repetition_penalty",
                                         "min_tokens",
                                         "ignore_eos",
                                         "chat_template_kwargs",
                                         "add_generation_prompt",
                                         "continue_final_message"};

constexpr size_t kMaxChoices = 128;
constexpr size_t kMaxStops = 16;

// The field `k` of `o` when present and not null.
const json* field(const json& o, const char* k) {
  auto it = o.find(k);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
  throw ApiError(400, msg, param);
}

int64_t get_int(const json& o, const char* k, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(o, k);
  if (!v) return def;
  if (!v->is_number_integer() &&
      !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
        std::fabs(v->get<double>()) < 9.0e15))
    bad(k, std::string("'") + k + "' must be an integer, not " + v->dump());
  const int64_t x =
      v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
          ? INT64_MAX
          : (v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(v->get<double>()));
  if (x < lo || x > hi)
    bad(k, std::string("'") + k + "' must be in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "], not " + std::to_string(x));
  return x;
}

double get_num(const json& o, const char* k, double def, double lo, double hi, bool lo_open) {
  const json* v = field(o, k);
  if (!v) return def;
  if (!v->is_number()) bad(k, std::string("'") + k + "' must be a number, not " + v->dump());
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi) || (lo_open && x == lo)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "'%s' must be in %c%g, %g], not %g", k, lo_open ? '(' : '[', lo,
                  hi, x);
    bad(k, buf);
  }
  return x;
}

bool get_bool(const json& o, const char* k, bool def) {
  const json* v = field(o, k);
  if (!v) return def;
  if (!v->is_boolean()) bad(k, std::string("'") + k + "' must be a boolean, not " + v->dump());
  return v->get<bool>();
}

std::vector<int64_t> encode(const oslo_tokenizer* tok, const std::string& text, bool special,
                            const char* param) {
  size_t n = 0;
  if (oslo_tokenizer_encode(tok, text.data(), text.size(), special ? 1 : 0, nullptr, 0, &n) !=
      OSLO_OK)
    bad(param, std::string("'") + param + "' could not be tokenized: " + oslo_last_error());
  std::vector<int64_t> ids(n);
  if (n && oslo_tokenizer_encode(tok, text.data(), text.size(), special ? 1 : 0, ids.data(), n,
                                 &n) != OSLO_OK)
    bad(param, std::string("'") + param + "' could not be tokenized: " + oslo_last_error());
  return ids;
}

std::string decode(const oslo_tokenizer* tok, const std::vector<int64_t>& ids) {
  size_t n = 0;
  if (oslo_tokenizer_decode(tok, ids.data(), ids.size(), 0, nullptr, 0, &n) != OSLO_OK)
    throw ApiError(500, std::string("decoding the prompt failed: ") + oslo_last_error());
  std::string s(n + 1, '\0');
  oslo_tokenizer_decode(tok, ids.data(), ids.size(), 0, &s[0], s.size(), &n);
  s.resize(n);
  return s;
}

// A prompt of token ids: every id inside the vocabulary.
std::vector<int64_t> id_prompt(const json& arr, const Served& s) {
  std::vector<int64_t> ids;
  ids.reserve(arr.size());
  for (const auto& v : arr) {
    if (!v.is_number_integer())
      bad("prompt", "'prompt' token lists must hold integers, not " + v.dump());
    const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                           ? INT64_MAX
                           : v.get<int64_t>();
    if (id < 0 || id >= s.vocab_size)
      bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(s.vocab_size) + ")");
    ids.push_back(id);
  }
  return ids;
}

// /v1/completions' prompt: a string, a list of ids, or a list of either.
std::vector<Prompt> completion_prompts(const json& b, const Served& s) {
  const json* p = field(b, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  std::vector<Prompt> out;
  auto add_text = [&](const std::string& text) {
    if (text.empty()) bad("prompt", "'prompt' must not be empty");
    out.push_back({encode(s.tokenizer, text, true, "prompt"), text});
  };
  auto add_ids = [&](const json& arr) {
    if (arr.empty()) bad("prompt", "'prompt' must not be empty");
    Prompt pr;
    pr.ids = id_prompt(arr, s);
    pr.echo_text = decode(s.tokenizer, pr.ids);
    out.push_back(std::move(pr));
  };
  if (p->is_string()) {
    add_text(p->get<std::string>());
  } else if (p->is_array() && !p->empty() && p->front().is_number()) {
    add_ids(*p);
  } else if (p->is_array() && !p->empty()) {
    if (p->size() > kMaxChoices)
      bad("prompt", "at most " + std::to_string(kMaxChoices) + " prompts per request");
    for (const auto& e : *p) {
      if (e.is_string())
        add_text(e.get<std::string>());
      else if (e.is_array())
        add_ids(e);
      else
        bad("prompt", "each prompt must be a string or a list of token ids, not " + e.dump());
    }
  } else {
    bad("prompt", "'prompt' must be a non-empty string, list of token ids, or list of those");
  }
  return out;
}

// A chat message's content as the template sees it: a string (text parts
// joined by newlines, as vLLM does).
json message_content(const json& c, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (c.is_null() || c.is_string()) return c;
  if (!c.is_array()) bad(where, "'" + where + "' must be a string or a list of content parts");
  std::string text;
  for (const auto& part : c) {
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (!type || !type->is_string())
      bad(where, "each part of '" + where + "' must be an object with a \"type\"");
    if (*type != "text")
      bad(where, "content parts of type " + type->dump() +
                     " are not supported (only \"text\": oslo serves text models)");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) bad(where, "a text part of '" + where + "' needs a string \"text\"");
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

// /v1/chat/completions' messages rendered with the chat template.
std::string chat_prompt(const json& b, const Served& s) {
  const json* m = field(b, "messages");
  if (!m || !m->is_array() || m->empty())
    bad("messages", "'messages' must be a non-empty list of message objects");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  json msgs = json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& in = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!in.is_object()) bad(where, "'" + where + "' must be an object");
    const json* role = field(in, "role");
    if (!role || !role->is_string() || !roles.count(role->get<std::string>()))
      bad(where + ".role",
          "'" + where + ".role' must be one of system, developer, user, assistant, tool");
    json out = in;
    // "developer" is the newer name of "system"; templates know "system".
    if (*role == "developer") out["role"] = "system";
    if (in.contains("content"))
      out["content"] = message_content(in["content"], i);
    else if (*role != "assistant")
      bad(where + ".content", "'" + where + ".content' is required");
    msgs.push_back(std::move(out));
  }
  if (!s.has_chat_template)
    throw ApiError(400,
                   "this model has no chat template: use /v1/completions, or start the server "
                   "with --chat-template FILE",
                   "messages", "chat_template_missing");
  oslo_chat_template_options o;
  oslo_chat_template_options_init(&o, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION);
  o.add_generation_prompt = get_bool(b, "add_generation_prompt", true) ? 1 : 0;
  o.continue_final_message = get_bool(b, "continue_final_message", false) ? 1 : 0;
  if (o.continue_final_message && o.add_generation_prompt)
    bad("continue_final_message", "'continue_final_message' needs 'add_generation_prompt': false");
  if (!s.chat_template.empty()) o.chat_template = s.chat_template.c_str();
  std::string vars;
  if (const json* kw = field(b, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    vars = kw->dump();
    o.variables_json = vars.c_str();
  }
  const std::string text = msgs.dump();
  size_t n = 0;
  oslo_status st = oslo_chat_template_apply(s.tokenizer, text.c_str(), &o, nullptr, 0, &n);
  std::string out;
  if (st == OSLO_OK) {
    out.resize(n + 1);
    st = oslo_chat_template_apply(s.tokenizer, text.c_str(), &o, &out[0], out.size(), &n);
    out.resize(n);
  }
  if (st == OSLO_ERR_INVALID_ARGUMENT)
    bad("messages", std::string("the chat template refused the messages: ") + oslo_last_error());
  if (st != OSLO_OK)
    throw ApiError(500, std::string("the chat template failed: ") + oslo_status_string(st) + ": " +
                            oslo_last_error());
  return out;
}

// "stop": a string or a list of non-empty strings.
std::vector<std::string> stops(const json& b) {
  const json* v = field(b, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  auto one = [&](const json& e) {
    if (!e.is_string() || e.get<std::string>().empty())
      bad("stop", "'stop' must be a non-empty string or a list of them, not " + e.dump());
    out.push_back(e.get<std::string>());
  };
  if (v->is_array()) {
    if (v->size() > kMaxStops)
      bad("stop", "at most " + std::to_string(kMaxStops) + " stop strings");
    for (const auto& e : *v) one(e);
  } else {
    one(*v);
  }
  return out;
}

// Fields accepted only at their neutral value: features oslo does not have
// are refused by name rather than silently ignored.
void unsupported(const json& b) {
  auto zero = [&](const char* k) {
    if (get_num(b, k, 0, -2, 2, false) != 0)
      bad(k, std::string("'") + k +
                 "' is not supported (use 'repetition_penalty' for Hugging Face's penalty)");
  };
  zero("presence_penalty");
  zero("frequency_penalty");
  if (const json* v = field(b, "logit_bias"))
    if (!v->is_object() || !v->empty()) bad("logit_bias", "'logit_bias' is not supported");
  if (const json* v = field(b, "logprobs"))
    if (!(v->is_boolean() && !v->get<bool>()) && !(v->is_number_integer() && v->get<int>() == 0))
      bad("logprobs", "'logprobs' is not supported");
  if (const json* v = field(b, "top_logprobs"))
    if (!(v->is_number_integer() && v->get<int>() == 0))
      bad("top_logprobs", "'top_logprobs' is not supported");
  if (field(b, "suffix")) bad("suffix", "'suffix' is not supported");
  if (get_int(b, "best_of", 1, 1, 1) != 1) bad("best_of", "'best_of' must be 1");
  if (field(b, "tools") || field(b, "parallel_tool_calls"))
    bad("tools", "tool calling is not supported");
  if (const json* v = field(b, "tool_choice"))
    if (*v != "none") bad("tool_choice", "tool calling is not supported");
  if (const json* v = field(b, "response_format"))
    if (!v->is_object() || field(*v, "type") == nullptr || (*v)["type"] != "text")
      bad("response_format", "only 'response_format': {\"type\": \"text\"} is supported");
  if (const json* v = field(b, "user"))
    if (!v->is_string()) bad("user", "'user' must be a string");
}

}  // namespace

json ApiError::body() const {
  json e = {{"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

GenRequest parse_request(Endpoint endpoint, const std::string& text, const Served& s) {
  json b;
  try {
    b = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!b.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_json");
  const auto& keys = endpoint == Endpoint::kChat ? kChatKeys : kCompletionKeys;
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!keys.count(it.key())) bad(it.key(), "Unrecognized request argument supplied: " + it.key());
  const json* model = field(b, "model");
  if (!model || !model->is_string()) bad("model", "'model' is required (a string)");
  if (model->get<std::string>() != s.model_name)
    throw ApiError(404,
                   "The model '" + model->get<std::string>() + "' does not exist (this server " +
                       "serves '" + s.model_name + "')",
                   "model", "model_not_found");
  unsupported(b);

  GenRequest r;
  r.endpoint = endpoint;
  r.stream = get_bool(b, "stream", false);
  if (const json* so = field(b, "stream_options")) {
    if (!r.stream) bad("stream_options", "'stream_options' needs 'stream': true");
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    for (auto it = so->begin(); it != so->end(); ++it)
      if (it.key() != "include_usage")
        bad("stream_options", "Unrecognized stream option: " + it.key());
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  r.stop = stops(b);
  const int64_t n = get_int(b, "n", 1, 1, kMaxChoices);

  std::vector<Prompt> prompts;
  if (endpoint == Endpoint::kChat) {
    Prompt p;
    p.echo_text = chat_prompt(b, s);
    p.ids = encode(s.tokenizer, p.echo_text, false, "messages");
    if (p.ids.empty()) bad("messages", "the chat template rendered an empty prompt");
    prompts.push_back(std::move(p));
  } else {
    r.echo = get_bool(b, "echo", false);
    prompts = completion_prompts(b, s);
  }
  if (prompts.size() * static_cast<size_t>(n) > kMaxChoices)
    bad("n", "prompts x n must be at most " + std::to_string(kMaxChoices));
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.ids.size());
  const int64_t room = s.max_positions - static_cast<int64_t>(longest);
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (room < 1)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(s.max_positions) +
                       " tokens, but the prompt has " + std::to_string(longest) + " tokens",
                   prompt_field, "context_length_exceeded");

  oslo_generate_options& o = r.options;
  oslo_generate_options_init(&o, OSLO_GENERATE_OPTIONS_VERSION);
  // OpenAI's defaults: 16 new tokens for completions, the rest of the
  // context for chat.
  const char* mt = endpoint == Endpoint::kChat && field(b, "max_completion_tokens")
                       ? "max_completion_tokens"
                       : "max_tokens";
  if (endpoint == Endpoint::kChat && field(b, "max_completion_tokens") && field(b, "max_tokens"))
    bad("max_tokens", "give 'max_tokens' or 'max_completion_tokens', not both");
  const int64_t def = endpoint == Endpoint::kChat ? room : std::min<int64_t>(16, room);
  o.max_new_tokens = get_int(b, mt, def, 1, INT64_MAX);
  if (o.max_new_tokens > room)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(s.max_positions) +
                       " tokens. However, you requested " +
                       std::to_string(static_cast<int64_t>(longest) + o.max_new_tokens) +
                       " tokens (" + std::to_string(longest) + " in the " + prompt_field + ", " +
                       std::to_string(o.max_new_tokens) +
                       " in the completion). Please reduce the length of the " + prompt_field +
                       " or '" + mt + "'.",
                   mt, "context_length_exceeded");
  // temperature 0 is greedy (OpenAI's and vLLM's convention); top_k is off
  // unless asked for (-1 or 0: off).
  const double temperature = get_num(b, "temperature", 1.0, 0.0, 2.0, false);
  o.do_sample = temperature > 0 ? 1 : 0;
  o.temperature = o.do_sample ? static_cast<float>(temperature) : 1.0f;
  o.top_p = static_cast<float>(get_num(b, "top_p", 1.0, 0.0, 1.0, true));
  const int64_t top_k = get_int(b, "top_k", 0, -1, s.vocab_size);
  o.top_k = top_k < 0 ? 0 : top_k;
  o.repetition_penalty = static_cast<float>(get_num(b, "repetition_penalty", 1.0, 0.0, 1e4, true));
  o.min_new_tokens = get_int(b, "min_tokens", 0, 0, o.max_new_tokens);
  r.ignore_eos = get_bool(b, "ignore_eos", false);
  if (r.ignore_eos && o.min_new_tokens)
    bad("min_tokens", "'min_tokens' has no effect with 'ignore_eos'");
  if (r.ignore_eos) {
    // A list of no EOS ids (NULL would mean the model's).
    static const int64_t kNoEos[1] = {0};
    o.eos_token_ids = kNoEos;
    o.num_eos_token_ids = 0;
  }
  r.seeded = field(b, "seed") != nullptr;
  if (r.seeded) {
    const json* sd = field(b, "seed");
    if (!sd->is_number_integer()) bad("seed", "'seed' must be an integer, not " + sd->dump());
    o.seed =
        sd->is_number_unsigned() ? sd->get<uint64_t>() : static_cast<uint64_t>(sd->get<int64_t>());
  }
  for (const auto& p : prompts)
    for (int64_t i = 0; i < n; ++i) r.prompts.push_back(p);
  return r;
}

std::string new_response_id(Endpoint endpoint) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx%08llx",
                endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(salt), static_cast<unsigned long long>(++counter));
  return buf;
}

json finish_reason(oslo_finish_reason f) {
  switch (f) {
    case OSLO_FINISH_LENGTH: return "length";
    case OSLO_FINISH_EOS:
    case OSLO_FINISH_STOP: return "stop";
    case OSLO_FINISH_CANCELLED: return "abort";
    case OSLO_FINISH_ERROR: return "error";
    default: return nullptr;
  }
}

namespace {

json usage(int64_t prompt, int64_t completion) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json head(const GenRequest& r, const std::string& id, int64_t created, const std::string& model,
          bool chunk) {
  const bool chat = r.endpoint == Endpoint::kChat;
  return {
      {"id", id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", created},
      {"model", model}};
}

}  // namespace

json response(const GenRequest& r, const std::string& id, int64_t created, const std::string& model,
              const std::vector<std::string>& texts,
              const std::vector<oslo_finish_reason>& finishes, int64_t prompt_tokens,
              int64_t completion_tokens) {
  json j = head(r, id, created, model, false);
  json choices = json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    json c = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", finish_reason(finishes[i])}};
    if (r.endpoint == Endpoint::kChat)
      c["message"] = {{"role", "assistant"}, {"content", texts[i]}};
    else
      c["text"] = r.echo ? r.prompts[i].echo_text + texts[i] : texts[i];
    choices.push_back(std::move(c));
  }
  j["choices"] = std::move(choices);
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return j;
}

json chunk(const GenRequest& r, const std::string& id, int64_t created, const std::string& model,
           size_t index, const std::string& text, oslo_finish_reason finish, bool first) {
  json j = head(r, id, created, model, true);
  json c = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_reason(finish)}};
  if (r.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    c["delta"] = std::move(delta);
  } else {
    c["text"] = first && r.echo ? r.prompts[index].echo_text + text : text;
  }
  j["choices"] = json::array({std::move(c)});
  if (r.include_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk(const GenRequest& r, const std::string& id, int64_t created,
                 const std::string& model, int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head(r, id, created, model, true);
  j["choices"] = json::array();
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return j;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace serve
}  // namespace oslo_cli
