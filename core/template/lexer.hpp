// The template lexer: Jinja2's, with the settings transformers renders chat
// templates with (trim_blocks, lstrip_blocks, keep_trailing_newline off,
// newlines normalised to \n). Comments are dropped here; {% raw %} becomes
// text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oslo {
namespace tmpl {

struct Token {
  enum Kind : uint8_t {
    kText,        // template data between tags (text holds it)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text holds the unescaped value
    kInt,     // text holds the digits (underscores removed, prefix kept)
    kFloat,
    kOp,  // text holds the operator
    kEof
  };
  Kind kind;
  uint32_t pos;  // byte offset in the normalised source
  std::string text;
};

// Jinja2's source preparation: \r\n and \r become \n, one trailing newline
// is dropped.
std::string normalize_source(std::string_view source);
// Tokens of a normalised source, ending with kEof. Throws RenderError
// (OSLO_ERR_FORMAT, with the position) on an unterminated tag, comment or
// string, an unexpected character or unbalanced brackets.
std::vector<Token> lex(const std::string& source);

// Python's str.isspace for one code point.
bool is_py_space(uint32_t cp);

}  // namespace tmpl
}  // namespace oslo
