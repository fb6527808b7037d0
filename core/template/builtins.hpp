// Builtin filters, tests, global functions and methods of strings, dicts and
// lists (the subset chat templates use; see core/template/README.md).
#pragma once

#include <string>
#include <string_view>

#include "core/template/value.hpp"

namespace oslo {
namespace tmpl {

// Index of a filter / test by name, or -1 if there is none.
int find_filter(std::string_view name);
int find_test(std::string_view name);
// Applies filter / test `index` to v with the call's arguments.
Value apply_filter(Renderer& r, int index, const Value& v, CallArgs args);
bool apply_test(Renderer& r, int index, const Value& v, CallArgs args);
// A global function (range, namespace, dict, raise_exception,
// strftime_now) as a Value, or Undefined.
Value global_function(std::string_view name);
// obj.name as a bound method of a string, dict or list (items, strip, ...),
// or Undefined when obj's type has no such method.
Value bound_method(const Value& obj, const std::string& name);

// Binds a call's arguments to parameter names as Python does (positional
// first, then keywords, then defaults); `fn` names the callee in errors.
struct Param {
  const char* name;
  Value default_value;  // Undefined: required
  bool required = false;
};
std::vector<Value> bind_args(const char* fn, const std::vector<Param>& params, CallArgs&& args);

}  // namespace tmpl
}  // namespace oslo
