// Jinja2 templates, the subset Hugging Face chat templates use, rendered
// exactly as transformers renders them (a sandboxed jinja2 Environment with
// trim_blocks and lstrip_blocks, raise_exception, strftime_now, namespace,
// its own tojson). See core/template/README.md for what is supported.
//
// A Template is immutable once parsed: render may run on any number of
// threads at once. Every failure throws oslo::Error whose message starts
// with "line L, column C: " (the position in the template source, columns
// counted in characters): OSLO_ERR_FORMAT for a template that does not parse
// (or is not UTF-8, or larger than kMaxSourceBytes); OSLO_ERR_INVALID_ARGUMENT
// for a failure while rendering (raise_exception(msg), an undefined value
// used, a type error, a limit of Limits passed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/template/value.hpp"

namespace oslo {
namespace tmpl {

struct Stmt;

// Bounds on one render, so that no template (a hostile one included) can
// hang, exhaust memory or overflow the stack.
struct Limits {
  uint64_t max_steps = 20'000'000;              // expressions and statements evaluated
  uint64_t max_loop_iterations = 1'000'000;     // for-loop iterations, all loops together
  int max_depth = 250;                          // nesting of evaluation, macro calls included
  size_t max_output_bytes = size_t(64) << 20;   // the rendered text (and any one string)
  uint64_t max_work_bytes = uint64_t(1) << 30;  // bytes of strings built, all together
};

class Template {
 public:
  static constexpr size_t kMaxSourceBytes = size_t(4) << 20;

  // Parses `source`.
  explicit Template(std::string_view source);
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with the variables `vars` (names to values).
  std::string render(const std::vector<std::pair<std::string, Value>>& vars,
                     const Limits& limits = Limits()) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;  // normalised (newlines), what positions refer to
  std::vector<std::unique_ptr<Stmt>> body_;
};

// "line L, column C" of byte offset `pos` in `source`.
std::string source_location(const std::string& source, uint32_t pos);

}  // namespace tmpl
}  // namespace oslo
