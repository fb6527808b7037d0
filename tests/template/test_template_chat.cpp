// Chat templates through the C ABI (oslo.h only; nlohmann reads the
// reference): every family render of reference.json (transformers'
// apply_chat_template of LLaMA-2/3/3.1, Mistral v0.1/v0.3, ChatML, Qwen2.5, Qwen3,
// Gemma 1/3, Phi-3 and Zephyr templates) through oslo_chat_template_apply;
// tokenizer folders (templates in tokenizer_config.json as a string or a
// named list, chat_template.jinja, special_tokens_map.json, none, broken)
// through oslo_tokenizer_load + oslo_tokenizer_apply_chat_template; the
// sizing rule, bad arguments and threads.
// Usage: test_template_chat path/to/tests/template
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "oslo.h"

using json = nlohmann::ordered_json;

namespace {
int g_failed = 0, g_passed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::cerr << "FAIL: " << what << "\n";
  }
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Out {
  oslo_status status;
  std::string text;
  std::string error;
};

// Calls fn(out, capacity, length) twice, as the sizing rule intends.
template <typename F>
Out sized(F fn) {
  Out o;
  size_t length = 0;
  o.status = fn(nullptr, 0, &length);
  if (o.status != OSLO_OK) {
    o.error = oslo_last_error();
    return o;
  }
  std::vector<char> buf(length + 1, '\x7f');
  size_t length2 = 0;
  o.status = fn(buf.data(), buf.size(), &length2);
  if (o.status != OSLO_OK || length2 != length || buf[length] != '\0') {
    o.status = OSLO_ERR_INTERNAL;
    o.error = "the second call disagrees with the first";
    return o;
  }
  o.text.assign(buf.data(), length);
  return o;
}

Out apply(const oslo_tokenizer* tok, const std::string& messages, const char* tmpl,
          const std::string& variables, bool agp, bool cont = false) {
  oslo_chat_template_options o;
  oslo_chat_template_options_init(&o, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION);
  o.add_generation_prompt = agp ? 1 : 0;
  o.continue_final_message = cont ? 1 : 0;
  o.chat_template = tmpl;
  o.variables_json = variables.empty() ? nullptr : variables.c_str();
  return sized([&](char* out, size_t cap, size_t* len) {
    return oslo_chat_template_apply(tok, messages.c_str(), &o, out, cap, len);
  });
}

void families(const std::string& dir, const json& ref) {
  size_t n = 0;
  for (const auto& c : ref["families"]) {
    const std::string src = read(dir + "/fixtures/" + c["template"].get<std::string>());
    json vars = c["special_tokens"];
    for (auto it = c["variables"].begin(); it != c["variables"].end(); ++it) vars[it.key()] = *it;
    const bool cont = c.value("continue_final_message", false);
    const Out r = apply(nullptr, c["messages"].dump(), src.c_str(), vars.dump(),
                        c["add_generation_prompt"].get<bool>(), cont);
    const std::string name =
        c["family"].get<std::string>() + "/" + c["conversation"].get<std::string>() +
        (c["add_generation_prompt"].get<bool>() ? " +gen" : "") + (cont ? " +continue" : "");
    if (c.contains("expected")) {
      check(r.status == OSLO_OK && r.text == c["expected"].get<std::string>(),
            name + "\n  want " + c["expected"].dump() + "\n  got  " +
                (r.status == OSLO_OK ? json(r.text).dump() : r.error));
    } else {
      check(r.status == OSLO_ERR_INVALID_ARGUMENT &&
                r.error.find(c["message"].get<std::string>()) != std::string::npos &&
                r.error.find("line ") != std::string::npos,
            name + ": want raise_exception's '" + c["message"].get<std::string>() + "', got " +
                std::to_string(r.status) + " " + r.error);
    }
    ++n;
  }
  std::cout << n << " family renders checked\n";
}

void folders(const std::string& dir, const json& ref) {
  for (const auto& c : ref["folders"]) {
    const std::string name = c["folder"].get<std::string>();
    const std::string path = dir + "/folders/" + name;
    oslo_tokenizer* tok = nullptr;
    if (oslo_tokenizer_load(path.c_str(), &tok) != OSLO_OK) {
      check(false, name + ": load: " + oslo_last_error());
      continue;
    }
    int has = -1;
    check(oslo_tokenizer_has_chat_template(tok, &has) == OSLO_OK &&
              has == (c["has_chat_template"].get<bool>() ? 1 : 0),
          name + ": has_chat_template");
    for (const auto& r : c["renders"]) {
      const bool agp = r["add_generation_prompt"].get<bool>();
      const std::string messages = r["messages"].dump();
      const bool plain = r["variables"].empty();
      const Out o = plain ? sized([&](char* out, size_t cap, size_t* len) {
        return oslo_tokenizer_apply_chat_template(tok, messages.c_str(), agp, out, cap, len);
      })
                          : apply(tok, messages, nullptr, r["variables"].dump(), agp);
      const std::string what = name + (agp ? " +gen" : "") + (plain ? "" : " +tools");
      if (r.contains("expected")) {
        check(o.status == OSLO_OK && o.text == r["expected"].get<std::string>(),
              what + "\n  want " + r["expected"].dump() + "\n  got  " +
                  (o.status == OSLO_OK ? json(o.text).dump() : o.error));
      } else {
        const oslo_status want =
            r["error"] == "TemplateSyntaxError" ? OSLO_ERR_FORMAT : OSLO_ERR_INVALID_ARGUMENT;
        check(o.status == want, what + ": want status " + std::to_string(want) + ", got " +
                                    std::to_string(o.status) + " " + o.error);
      }
    }
    oslo_tokenizer_destroy(tok);
  }
  // The source of a folder's templates.
  oslo_tokenizer* tok = nullptr;
  if (oslo_tokenizer_load((dir + "/folders/jinja_file").c_str(), &tok) == OSLO_OK) {
    const Out o = sized([&](char* out, size_t cap, size_t* len) {
      return oslo_tokenizer_get_chat_template(tok, nullptr, out, cap, len);
    });
    check(o.status == OSLO_OK && o.text == read(dir + "/folders/jinja_file/chat_template.jinja"),
          "get_chat_template gives chat_template.jinja");
    size_t len = 0;
    check(oslo_tokenizer_get_chat_template(tok, "tool_use", nullptr, 0, &len) ==
              OSLO_ERR_INVALID_ARGUMENT,
          "get_chat_template of an unknown name");
    oslo_tokenizer_destroy(tok);
  }
  if (oslo_tokenizer_load((dir + "/folders/cfg_list").c_str(), &tok) == OSLO_OK) {
    const Out o = sized([&](char* out, size_t cap, size_t* len) {
      return oslo_tokenizer_get_chat_template(tok, "tool_use", out, cap, len);
    });
    check(o.status == OSLO_OK && o.text.rfind("TOOLS ", 0) == 0, "get_chat_template by name");
    // A template chosen by name, and a caller's template instead of the tokenizer's.
    const Out named =
        apply(tok, R"([{"role": "user", "content": "x"}])", "tool_use", R"({"tools": [1]})", false);
    check(named.status == OSLO_OK && named.text == "TOOLS [1]\n[user] x\n", "template by name");
    const Out own = apply(tok, R"([{"role": "user", "content": "x"}])",
                          "{{ bos_token }}!{{ messages[0].content }}", "", false);
    check(own.status == OSLO_OK && own.text == "<|endoftext|>!x",
          "the caller's template: " + own.error);
    oslo_tokenizer_destroy(tok);
  }
}

void bad_input(const std::string& dir) {
  oslo_tokenizer* tok = nullptr;
  if (oslo_tokenizer_load((dir + "/folders/cfg_string").c_str(), &tok) != OSLO_OK) {
    check(false, "load cfg_string");
    return;
  }
  const char* msg = R"([{"role": "user", "content": "hi"}])";
  size_t len = 0;
  char buf[8];
  int has = 0;
  check(oslo_tokenizer_has_chat_template(nullptr, &has) == OSLO_ERR_INVALID_ARGUMENT,
        "has: NULL tok");
  check(oslo_tokenizer_has_chat_template(tok, nullptr) == OSLO_ERR_INVALID_ARGUMENT,
        "has: NULL has");
  check(oslo_tokenizer_apply_chat_template(nullptr, msg, 0, nullptr, 0, &len) ==
            OSLO_ERR_INVALID_ARGUMENT,
        "NULL tok");
  check(oslo_tokenizer_apply_chat_template(tok, nullptr, 0, nullptr, 0, &len) ==
            OSLO_ERR_INVALID_ARGUMENT,
        "NULL messages");
  check(oslo_tokenizer_apply_chat_template(tok, msg, 0, nullptr, 0, nullptr) ==
            OSLO_ERR_INVALID_ARGUMENT,
        "NULL length");
  check(oslo_tokenizer_apply_chat_template(tok, msg, 0, nullptr, 5, &len) ==
            OSLO_ERR_INVALID_ARGUMENT,
        "NULL out with capacity");
  struct Bad {
    const char* json;
    const char* needle;
  } bad[] = {{"[{\"role\": \"user\", \"content\": \"hi\"}", "not valid JSON"},
             {"{\"role\": \"user\"}", "JSON array"},
             {"[]", "empty conversation"},
             {"[\"hello\"]", "messages[0]"},
             {"[{\"role\": \"user\", \"content\": \"\xff\"}]", "not valid JSON"}};
  for (const Bad& b : bad) {
    const oslo_status s = oslo_tokenizer_apply_chat_template(tok, b.json, 0, nullptr, 0, &len);
    check(s == OSLO_ERR_INVALID_ARGUMENT && std::strstr(oslo_last_error(), b.needle),
          std::string("messages ") + b.json + ": " + oslo_last_error());
  }
  std::string deep = "[{\"role\": \"user\", \"content\": ";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}]";
  check(
      oslo_tokenizer_apply_chat_template(tok, deep.c_str(), 0, nullptr, 0, &len) == OSLO_ERR_FORMAT,
      "messages nested too deep");
  // Truncation: OSLO_OK, *length the full length, no NUL when it does not fit.
  std::memset(buf, 'z', sizeof buf);
  check(oslo_tokenizer_apply_chat_template(tok, msg, 0, buf, 4, &len) == OSLO_OK && len > 8 &&
            std::memcmp(buf, "<|en", 4) == 0 && buf[4] == 'z',
        "truncated output");
  // Options.
  oslo_chat_template_options o;
  check(oslo_chat_template_options_init(&o, 0) == OSLO_ERR_INVALID_ARGUMENT, "options version 0");
  check(oslo_chat_template_options_init(&o, 99) == OSLO_ERR_INVALID_ARGUMENT, "options version 99");
  check(oslo_chat_template_options_init(nullptr, 1) == OSLO_ERR_INVALID_ARGUMENT, "options NULL");
  oslo_chat_template_options_init(&o, OSLO_CHAT_TEMPLATE_OPTIONS_VERSION);
  check(oslo_chat_template_apply(nullptr, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT,
        "no tokenizer and no template");
  check(oslo_chat_template_apply(tok, msg, nullptr, nullptr, 0, &len) == OSLO_OK,
        "options NULL: the defaults");
  o.variables_json = "[1]";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT,
        "variables not an object");
  o.variables_json = "{\"messages\": []}";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT,
        "variables setting messages");
  o.variables_json = "{\"pad_token\": \"[P]\"}";
  const Out over = sized([&](char* out, size_t cap, size_t* l) {
    return oslo_chat_template_apply(tok, msg, &o, out, cap, l);
  });
  check(over.status == OSLO_OK && over.text.find("[[P]]") != std::string::npos,
        "variables replace special tokens");
  o.variables_json = nullptr;
  o.continue_final_message = 1;
  o.add_generation_prompt = 1;
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT &&
            std::strstr(oslo_last_error(), "not compatible"),
        "continue_final_message with add_generation_prompt");
  o.add_generation_prompt = 0;
  o.chat_template = "{% for m in messages %}{{ m.role }}{% endfor %}";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT,
        "continue_final_message with a template that never reads content");
  o.continue_final_message = 0;
  o.chat_template = "{% for m in messages %}{{ m.content }";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_FORMAT &&
            std::strstr(oslo_last_error(), "line 1"),
        "a template that does not parse");
  o.chat_template = "{{ raise_exception('nope') }}";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT &&
            std::strstr(oslo_last_error(), "nope"),
        "raise_exception");
  o.chat_template =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  check(oslo_chat_template_apply(tok, msg, &o, nullptr, 0, &len) == OSLO_ERR_INVALID_ARGUMENT &&
            std::strstr(oslo_last_error(), "loop iterations"),
        "a hostile template stops at a limit");

  // Threads: one tokenizer, many renders at once, all equal.
  const std::string conv =
      R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])";
  std::string want;
  {
    size_t l = 0;
    oslo_tokenizer_apply_chat_template(tok, conv.c_str(), 1, nullptr, 0, &l);
    want.resize(l);
    std::vector<char> b(l + 1);
    oslo_tokenizer_apply_chat_template(tok, conv.c_str(), 1, b.data(), b.size(), &l);
    want.assign(b.data(), l);
  }
  std::vector<int> ok(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::vector<char> b(want.size() + 1);
        size_t l = 0;
        if (oslo_tokenizer_apply_chat_template(tok, conv.c_str(), 1, b.data(), b.size(), &l) ==
                OSLO_OK &&
            std::string(b.data(), l) == want)
          ++ok[t];
      }
    });
  for (auto& th : threads) th.join();
  bool all = true;
  for (int v : ok) all = all && v == 50;
  check(all, "concurrent renders agree");
  oslo_tokenizer_destroy(tok);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " tests/template\n";
    return 2;
  }
  const std::string dir = argv[1];
  const json ref = json::parse(read(dir + "/reference.json"));
  families(dir, ref);
  folders(dir, ref);
  bad_input(dir);
  std::cout << g_passed << " passed, " << g_failed << " failed\n";
  return g_failed ? 1 : 0;
}
