// The renderer: walks the statement trees with Jinja2's scoping (a for-loop
// iteration and a macro call each open a scope; if-blocks do not), Python's
// operators and the limits of a Limits.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/template/ast.hpp"
#include "core/template/template.hpp"

namespace oslo {
namespace tmpl {

class Renderer {
 public:
  Renderer(const Limits& limits, const std::vector<std::pair<std::string, Value>>& vars);

  // Renders a body into the output; returns the text.
  std::string run(const Body& body);

  // For the builtins.
  Value make_string(std::string s);  // checks the size limit, charges the work budget
  void charge(uint64_t bytes);
  void count_iterations(uint64_t n);
  Value call(const Value& callee, CallArgs args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // The items a for-loop over v visits (dict: keys; str: characters).
  std::vector<Value> iterate(const Value& v);
  // A macro's rendered text for a call.
  Value call_macro(const Stmt& macro, CallArgs args);

 private:
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    Scope* parent;
    Value* find(const std::string& name);
    void set(const std::string& name, Value v);
  };
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard {
    Renderer& r;
    explicit DepthGuard(Renderer& rr);
    ~DepthGuard() { --r.depth_; }
  };

  const Limits& limits_;
  Scope globals_;
  Scope* scope_;
  std::string* out_;
  uint64_t steps_ = 0, iterations_ = 0, work_ = 0;
  int depth_ = 0;

  void step();
  void emit(const std::string& s);
  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void assign(const std::vector<std::string>& targets, const Value& v, uint32_t pos);
  std::string capture(const Body& body, Scope* scope);
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value lookup(const std::string& name);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  CallArgs eval_args(const Expr& e, size_t first);
};

// Raises Jinja's UndefinedError for an Undefined used as a value.
[[noreturn]] void undefined_error(const Value& v);

}  // namespace tmpl
}  // namespace oslo
