// The parser: tokens to statement trees, with Jinja2's grammar and operator
// precedence (parser.py).
#pragma once

#include <vector>

#include "core/template/ast.hpp"
#include "core/template/lexer.hpp"

namespace oslo {
namespace tmpl {

// Deepest nesting of blocks and expressions the parser accepts (the
// renderer recurses along it).
constexpr int kMaxParseDepth = 100;

// Parses the tokens of lex(). Throws RenderError (OSLO_ERR_FORMAT with the
// position) on a syntax error, an unknown filter or test, a statement oslo
// does not implement (extends, include, import, call, filter, ...), or
// nesting deeper than kMaxParseDepth.
Body parse(const std::vector<Token>& tokens);

}  // namespace tmpl
}  // namespace oslo
