// Python's binary operators and comparisons on template values.
#include <cmath>

#include "core/template/render.hpp"

namespace oslo {
namespace tmpl {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}
[[noreturn]] void overflow() {
  type_error("integer overflow (oslo's integers are 64-bit)");
}

bool is_int(const Value& v) {
  return v.type() == Value::Type::kInt || v.type() == Value::Type::kBool;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double py_fmod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

Value Renderer::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s;
    append_str(s, a);
    append_str(s, b);
    return make_string(std::move(s));
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && is_int(a) && is_int(b);
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return make_string(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      charge(items.size() * sizeof(Value));
      return Value::list(std::move(items), a.is_tuple());
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_float() - b.as_float());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_float() * b.as_float());
    const Value* seq = is_int(a) ? &b : &a;
    const Value* count = is_int(a) ? &a : &b;
    if (is_int(*count) && (seq->is_string() || seq->is_list())) {
      const int64_t n = count->as_int() < 0 ? 0 : count->as_int();
      const size_t unit =
          seq->is_string() ? seq->str().size() : seq->items().size() * sizeof(Value);
      if (unit && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit)
        type_error("a repetition of more than " + std::to_string(limits_.max_output_bytes) +
                   " bytes");
      charge(unit * static_cast<uint64_t>(n));
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        return make_string(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items), seq->is_tuple());
    }
    unsupported(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.is_string())
      throw_error(OSLO_ERR_NOT_SUPPORTED, "printf-style string formatting ('...' % x)");
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.as_float() == 0) type_error("division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (ints) {
      if (b.as_int() == 0) type_error("integer division or modulo by zero");
      return Value::integer(floor_div(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0) type_error("float floor division by zero");
    return Value::number(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (ints) {
      if (b.as_int() == 0) type_error("integer division or modulo by zero");
      return Value::integer(py_mod(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0) type_error("float modulo");
    return Value::number(py_fmod(a.as_float(), b.as_float()));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value::integer(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0)
      type_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  unsupported(op, a, b);
}

bool Renderer::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    switch (b.type()) {
      case Value::Type::kUndefined: break;
      case Value::Type::kString:
        if (!a.is_string())
          type_error(std::string("'in <string>' requires string as left operand, not ") +
                     type_name(a));
        found = b.str().find(a.str()) != std::string::npos;
        break;
      case Value::Type::kList:
        for (const Value& x : b.items())
          if (equal(a, x)) {
            found = true;
            break;
          }
        break;
      case Value::Type::kDict: found = a.is_string() && b.dict().find(a.str()) != nullptr; break;
      default: type_error(std::string("argument of type '") + type_name(b) + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || (equal(a, b) && (a.is_number() || a.type() == b.type()));
  if (op == ">=") return less(b, a) || (equal(a, b) && (a.is_number() || a.type() == b.type()));
  type_error("unknown comparison " + op);
}

}  // namespace tmpl
}  // namespace oslo
