// The values a template computes with: Python's None, bool, int, float, str,
// list / tuple and dict, plus Jinja's Undefined, namespace() objects and
// callables (macros, builtins, bound methods). Strings, lists and dicts are
// immutable and shared (copying a Value is cheap); a namespace is the one
// mutable object, shared by reference as in Python.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oslo.h"

namespace oslo {
namespace tmpl {

class Value;
class Renderer;

// A failure while rendering. `pos` is a byte offset into the template source
// (kNoPos until the innermost expression being evaluated fills it in).
struct RenderError {
  static constexpr uint32_t kNoPos = UINT32_MAX;
  oslo_status status;
  std::string message;
  uint32_t pos = kNoPos;
};
[[noreturn]] void throw_error(oslo_status status, std::string message);
// A Python TypeError / ValueError-like failure: OSLO_ERR_INVALID_ARGUMENT.
[[noreturn]] void type_error(std::string message);

// The deepest a list / dict may nest (values built by a template included).
constexpr int kMaxValueDepth = 64;

struct ListData {
  std::vector<Value> items;
  int depth = 1;
  bool has_namespace = false;
};
struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python
  int depth = 1;
  bool has_namespace = false;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Function {
 public:
  virtual ~Function() = default;
  virtual Value call(Renderer& r, CallArgs args) const = 0;
  virtual std::string repr() const = 0;
};

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };
  Value() = default;  // Undefined
  static Value undefined(std::string name);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::vector<std::pair<std::string, Value>> items);
  static Value dict(std::shared_ptr<const DictData> d);
  static Value ns(std::shared_ptr<DictData> d);
  static Value function(std::shared_ptr<const Function> f);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  // bool, int or float (Python's numbers.Number: bool is an int).
  bool is_number() const {
    return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat;
  }
  bool is_tuple() const { return tuple_; }

  bool as_bool() const { return u_.b; }
  int64_t as_int() const { return type_ == Type::kBool ? (u_.b ? 1 : 0) : u_.i; }
  double as_float() const { return type_ == Type::kFloat ? u_.f : static_cast<double>(as_int()); }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  const std::vector<Value>& items() const { return static_cast<const ListData*>(p_.get())->items; }
  const DictData& dict() const { return *static_cast<const DictData*>(p_.get()); }
  DictData& ns_data() const {
    return *const_cast<DictData*>(static_cast<const DictData*>(p_.get()));
  }
  const Function& fn() const { return *static_cast<const Function*>(p_.get()); }
  // The name an Undefined stands for ("" when none), for error messages.
  const std::string& undefined_name() const;
  // Nesting depth of a list / dict (0 for anything else).
  int depth() const;
  bool has_namespace() const;

  bool truthy() const;

 private:
  Type type_ = Type::kUndefined;
  bool tuple_ = false;
  union {
    bool b;
    int64_t i;
    double f;
  } u_{};
  std::shared_ptr<const void> p_;
};

// Python's type name of a value ('str', 'int', 'NoneType', ...).
const char* type_name(const Value& v);
// Python's str(v) appended to out (Undefined: nothing).
void append_str(std::string& out, const Value& v);
std::string to_str(const Value& v);
// Python's repr(v).
std::string repr(const Value& v);
// Python's repr of a float ('0.1', '2.0', '1e+16', 'inf').
std::string float_repr(double f);
// Python's == (1 == 1.0 == True; containers compared item by item).
bool equal(const Value& a, const Value& b);
// Python's < on numbers, strings and lists; a TypeError otherwise.
bool less(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit when has_indent
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
void append_json(std::string& out, const Value& v, const JsonStyle& style);

// JSON (already depth-checked) to a Value; keys keep their order.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace tmpl
}  // namespace oslo
