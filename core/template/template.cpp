// Template: parse once, render many times.
#include "core/template/template.hpp"

#include "core/common/error.hpp"
#include "core/template/lexer.hpp"
#include "core/template/parser.hpp"
#include "core/template/render.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tmpl {

std::string source_location(const std::string& source, uint32_t pos) {
  size_t line = 1, col = 1;
  const size_t end = std::min<size_t>(pos, source.size());
  for (size_t i = 0; i < end; ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

Template::Template(std::string_view source) {
  if (source.size() > kMaxSourceBytes)
    fail(OSLO_ERR_FORMAT, "the template is ", source.size(), " bytes; at most ", kMaxSourceBytes);
  const size_t bad = tok::invalid_utf8_at(source);
  if (bad != std::string_view::npos)
    fail(OSLO_ERR_FORMAT, "the template is not valid UTF-8 (byte ", bad, ")");
  source_ = normalize_source(source);
  try {
    body_ = parse(lex(source_));
  } catch (const RenderError& e) {
    fail(e.status, source_location(source_, e.pos), ": ", e.message);
  }
}

Template::~Template() = default;

std::string Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                             const Limits& limits) const {
  Renderer r(limits, vars);
  try {
    return r.run(body_);
  } catch (const RenderError& e) {
    if (e.pos == RenderError::kNoPos) fail(e.status, e.message);
    fail(e.status, source_location(source_, e.pos), ": ", e.message);
  }
}

}  // namespace tmpl
}  // namespace oslo
