// Chat templates: finding them in a model folder and rendering a
// conversation with them as transformers does.
#include "core/tokenizer/chat_template.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/common/error.hpp"
#include "core/template/strings.hpp"
#include "core/tokenizer/internal.hpp"

namespace oslo {

namespace {
// Largest messages / variables JSON accepted.
constexpr size_t kMaxJsonBytes = size_t(64) << 20;

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

void ChatTemplates::add(const std::string& name, std::string source) {
  Entry e;
  e.name = name;
  e.source = std::move(source);
  try {
    e.parsed = std::make_shared<const tmpl::Template>(e.source);
  } catch (const Error& err) {
    e.status = err.status();
    e.error = err.what();
  }
  for (auto& old : entries_)
    if (old.name == name) {
      old = std::move(e);
      return;
    }
  entries_.push_back(std::move(e));
}

ChatTemplates ChatTemplates::from_config_value(const nlohmann::json& v, const std::string& name) {
  ChatTemplates t;
  if (v.is_null()) return t;
  if (v.is_string()) {
    t.add("default", v.get<std::string>());
    return t;
  }
  if (!v.is_array())
    fail(OSLO_ERR_FORMAT, name,
         ": chat_template: expected a string or a list of {\"name\", "
         "\"template\"} objects");
  for (const auto& item : v) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string() ||
        !item.contains("template") || !item["template"].is_string())
      fail(OSLO_ERR_FORMAT, name,
           ": chat_template: each entry must be {\"name\": string, "
           "\"template\": string}");
    t.add(item["name"].get<std::string>(), item["template"].get<std::string>());
  }
  return t;
}

ChatTemplates ChatTemplates::load(const std::string& dir, std::string_view config_json) {
  ChatTemplates t;
  // Files first: they replace the config's entry (transformers 5).
  if (is_file(dir + "/chat_template.jinja"))
    t.add("default", tok::read_file(dir + "/chat_template.jinja"));
  const std::string extra = dir + "/additional_chat_templates";
  if (DIR* d = ::opendir(extra.c_str())) {
    std::vector<std::string> names;
    while (dirent* ent = ::readdir(d)) {
      const std::string f = ent->d_name;
      if (f.size() > 6 && f.compare(f.size() - 6, 6, ".jinja") == 0 && is_file(extra + "/" + f))
        names.push_back(f);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& f : names) t.add(f.substr(0, f.size() - 6), tok::read_file(extra + "/" + f));
  }
  if (!t.empty() || config_json.empty()) return t;
  const nlohmann::json c =
      nlohmann::json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (c.is_object() && c.contains("chat_template"))
    return from_config_value(c["chat_template"], quote_path(dir + "/tokenizer_config.json"));
  return t;
}

const ChatTemplates::Entry* ChatTemplates::select(const char* requested, bool has_tools) const {
  const bool single = entries_.size() == 1 && entries_[0].name == "default";
  if (requested) {
    if (!single)
      for (const auto& e : entries_)
        if (e.name == requested) return &e;
    return nullptr;
  }
  if (entries_.empty())
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "the tokenizer has no chat template (no chat_template in tokenizer_config.json, no "
         "chat_template.jinja): pass one");
  if (single) return &entries_[0];
  const Entry* dflt = nullptr;
  for (const auto& e : entries_) {
    if (has_tools && e.name == "tool_use") return &e;
    if (e.name == "default") dflt = &e;
  }
  if (!dflt) {
    std::string names;
    for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e.name;
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "the tokenizer has several chat templates and none named "
         "'default': name one (",
         names, ")");
  }
  return dflt;
}

namespace {
nlohmann::ordered_json parse_json(std::string_view text, const char* what) {
  if (text.size() > kMaxJsonBytes)
    fail(OSLO_ERR_INVALID_ARGUMENT, what, " is ", text.size(), " bytes; at most ", kMaxJsonBytes);
  tok::check_json_depth(text, what);
  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(OSLO_ERR_INVALID_ARGUMENT, what, " is not valid JSON: ", e.what());
  }
}

// transformers' _normalize_chat_messages and _alias_reasoning_fields.
tmpl::Value message_value(const nlohmann::ordered_json& m, size_t index) {
  if (!m.is_object())
    fail(OSLO_ERR_INVALID_ARGUMENT, "messages[", index, "] is not a JSON object (a message is ",
         "{\"role\": ..., \"content\": ...})");
  std::vector<std::pair<std::string, tmpl::Value>> items;
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* k : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = m.find(k);
    if (it != m.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning) items.emplace_back("thinking", tmpl::from_json(*reasoning));
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it->is_null()) continue;
    bool replaced = false;
    for (auto& kv : items)
      if (kv.first == it.key()) {
        kv.second = tmpl::from_json(*it);
        replaced = true;
      }
    if (!replaced) items.emplace_back(it.key(), tmpl::from_json(*it));
  }
  if (reasoning) {
    bool replaced = false;
    for (auto& kv : items)
      if (kv.first == "reasoning_content") {
        kv.second = tmpl::from_json(*reasoning);
        replaced = true;
      }
    if (!replaced) items.emplace_back("reasoning_content", tmpl::from_json(*reasoning));
  }
  return tmpl::Value::dict(std::move(items));
}
}  // namespace

namespace {
// transformers' continue_final_message: the tag appended to the last
// message's text before rendering, and where the render is cut after.
constexpr const char* kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// Appends kContinueTag to the last message's content (a string, or the last
// content block with a "text"); returns the content's text before it.
std::string tag_final_message(nlohmann::ordered_json& messages, const tmpl::Template& t) {
  nlohmann::ordered_json& last = messages.back();
  if (!last.is_object() || !last.contains("content") || last["content"].is_null())
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "continue_final_message is set but the final message has no \"content\" to continue");
  if (t.source().find("content") == std::string::npos)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "continue_final_message is set but the chat template never reads \"content\"");
  nlohmann::ordered_json& c = last["content"];
  if (c.is_string()) {
    std::string text = c.get<std::string>();
    c = text + kContinueTag;
    return text;
  }
  if (c.is_array())
    for (auto it = c.rbegin(); it != c.rend(); ++it)
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        std::string text = (*it)["text"].get<std::string>();
        (*it)["text"] = text + kContinueTag;
        return text;
      }
  fail(OSLO_ERR_INVALID_ARGUMENT,
       "continue_final_message is set but the final message has no text to continue");
}

std::string py_strip(const std::string& s, bool left) {
  return tmpl::pystr::strip(s, nullptr, left, true);
}

// Cuts the render at the tag, as transformers does.
std::string cut_at_tag(std::string rendered, const std::string& final_text) {
  const std::string tag = kContinueTag, bare = py_strip(tag, true);
  if (rendered.find(py_strip(final_text, true)) == std::string::npos ||
      rendered.find(bare) == std::string::npos)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "continue_final_message is set but the final message does not appear in the rendered "
         "chat (the template changes it)");
  const size_t at = rendered.rfind(bare);
  if (rendered.compare(at, tag.size(), tag) == 0) return rendered.substr(0, at);
  return py_strip(rendered.substr(0, at), false);
}
}  // namespace

std::string apply_chat_template(const tmpl::Template& t, const ChatTemplateInput& in) {
  nlohmann::ordered_json messages = parse_json(in.messages_json, "messages_json");
  if (!messages.is_array())
    fail(OSLO_ERR_INVALID_ARGUMENT, "messages_json must be a JSON array of message objects");
  if (messages.empty())
    fail(OSLO_ERR_INVALID_ARGUMENT, "cannot apply a chat template to an empty conversation");
  if (in.continue_final_message && in.add_generation_prompt)
    fail(OSLO_ERR_INVALID_ARGUMENT,
         "continue_final_message and add_generation_prompt are not compatible");
  std::string final_text;
  if (in.continue_final_message) final_text = tag_final_message(messages, t);
  std::vector<tmpl::Value> msgs;
  for (size_t i = 0; i < messages.size(); ++i) msgs.push_back(message_value(messages[i], i));

  std::vector<std::pair<std::string, tmpl::Value>> vars;
  auto put = [&](const std::string& k, tmpl::Value v) {
    for (auto& kv : vars)
      if (kv.first == k) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(k, std::move(v));
  };
  for (const auto& st : in.special_tokens) put(st.first, tmpl::Value::string(st.second));
  tmpl::Value tools = tmpl::Value::none(), documents = tmpl::Value::none();
  if (!in.variables_json.empty()) {
    const nlohmann::ordered_json v = parse_json(in.variables_json, "variables_json");
    if (!v.is_object()) fail(OSLO_ERR_INVALID_ARGUMENT, "variables_json must be a JSON object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& k = it.key();
      if (k == "messages" || k == "add_generation_prompt")
        fail(OSLO_ERR_INVALID_ARGUMENT, "variables_json may not set '", k,
             "' (pass it as its own argument)");
      if (k == "tools")
        tools = tmpl::from_json(*it);
      else if (k == "documents")
        documents = tmpl::from_json(*it);
      else
        put(k, tmpl::from_json(*it));
    }
  }
  put("messages", tmpl::Value::list(std::move(msgs)));
  put("tools", tools);
  put("documents", documents);
  put("add_generation_prompt", tmpl::Value::boolean(in.add_generation_prompt));
  std::string rendered = t.render(vars);
  if (in.continue_final_message) return cut_at_tag(std::move(rendered), final_text);
  return rendered;
}

}  // namespace oslo
