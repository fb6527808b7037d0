// Chat templates of a model folder, applied as transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, ...) does.
//
// Sources, as transformers 5 reads them: chat_template.jinja (the default)
// and additional_chat_templates/*.jinja (named by file) when present, else
// tokenizer_config.json's "chat_template" (a string, or a list of
// {"name", "template"}). Templates are parsed when the tokenizer loads; one
// that does not parse does not fail the load: applying it fails with the
// parse error.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/template/template.hpp"
#include "oslo.h"

namespace oslo {

class ChatTemplates {
 public:
  struct Entry {
    std::string name;  // "default" for the single / default template
    std::string source;
    std::shared_ptr<const tmpl::Template> parsed;  // null when it failed to parse
    oslo_status status = OSLO_OK;                  // the parse failure
    std::string error;
  };

  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  // Adds (or replaces) a template; parses it now.
  void add(const std::string& name, std::string source);

  // Reads tokenizer_config.json's "chat_template" value (`name` names the
  // file in errors: OSLO_ERR_FORMAT for a value of the wrong shape).
  static ChatTemplates from_config_value(const nlohmann::json& value, const std::string& name);
  // A folder's templates: its .jinja files, else `config_json`'s entry.
  static ChatTemplates load(const std::string& dir, std::string_view config_json);

  // transformers' get_chat_template: `requested` null: the default (or
  // "tool_use" when tools are given and there is one); the name of one of
  // these templates: that one; anything else: nullptr (the caller parses it
  // as a template's source). Throws OSLO_ERR_INVALID_ARGUMENT when there is
  // nothing to choose (no templates, several without "default").
  const Entry* select(const char* requested, bool has_tools) const;

 private:
  std::vector<Entry> entries_;
};

struct ChatTemplateInput {
  std::string_view messages_json;  // a JSON array of message objects
  bool add_generation_prompt = false;
  // transformers' continue_final_message=True: cut the render after the
  // last message's content.
  bool continue_final_message = false;
  std::string_view variables_json;  // empty, or a JSON object of more variables
  // bos_token, eos_token, ... (name, text) for the tokens the tokenizer has.
  std::vector<std::pair<std::string, std::string>> special_tokens;
};

// Renders `t` with the conversation as transformers does: messages with
// keys whose value is null dropped and reasoning fields aliased; variables
// messages, tools (variables' "tools" or None), documents,
// add_generation_prompt, the special tokens and the variables. Throws
// oslo::Error: OSLO_ERR_INVALID_ARGUMENT (messages not a non-empty JSON array
// of objects, variables not a JSON object or naming messages /
// add_generation_prompt, invalid JSON, continue_final_message with
// add_generation_prompt or a final message the render does not hold: the
// message says which, or any
// failure while rendering, raise_exception included), OSLO_ERR_FORMAT (JSON
// nested deeper than 64 levels).
std::string apply_chat_template(const tmpl::Template& t, const ChatTemplateInput& in);

}  // namespace oslo
