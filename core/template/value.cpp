// Values: construction, Python's str / repr / == / <, and json.dumps.
#include "core/template/value.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/common/unicode.hpp"

namespace oslo {
namespace tmpl {

void throw_error(oslo_status status, std::string message) {
  throw RenderError{status, std::move(message), RenderError::kNoPos};
}
void type_error(std::string message) {
  throw_error(OSLO_ERR_INVALID_ARGUMENT, std::move(message));
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* DictData::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void DictData::set(const std::string& key, Value v) {
  if (Value* old = find(key))
    *old = std::move(v);
  else
    items.emplace_back(key, std::move(v));
}

namespace {
void note_child(int& depth, bool& has_ns, const Value& v) {
  depth = std::max(depth, v.depth() + 1);
  if (v.type() == Value::Type::kNamespace || v.has_namespace()) has_ns = true;
}
void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw_error(OSLO_ERR_INVALID_ARGUMENT,
                "a list or dict nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}
}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  if (!name.empty()) v.p_ = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.u_.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.u_.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.u_.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.p_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
  auto d = std::make_shared<ListData>();
  for (const Value& x : items) note_child(d->depth, d->has_namespace, x);
  check_depth(d->depth);
  d->items = std::move(items);
  Value v;
  v.type_ = Type::kList;
  v.tuple_ = tuple;
  v.p_ = std::move(d);
  return v;
}
Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<DictData>();
  for (const auto& kv : items) note_child(d->depth, d->has_namespace, kv.second);
  check_depth(d->depth);
  d->items = std::move(items);
  return dict(std::shared_ptr<const DictData>(std::move(d)));
}
Value Value::dict(std::shared_ptr<const DictData> d) {
  Value v;
  v.type_ = Type::kDict;
  v.p_ = std::move(d);
  return v;
}
Value Value::ns(std::shared_ptr<DictData> d) {
  Value v;
  v.type_ = Type::kNamespace;
  v.p_ = std::move(d);
  return v;
}
Value Value::function(std::shared_ptr<const Function> f) {
  Value v;
  v.type_ = Type::kFunction;
  v.p_ = std::move(f);
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kEmpty;
  return p_ ? *static_cast<const std::string*>(p_.get()) : kEmpty;
}
int Value::depth() const {
  if (type_ == Type::kList) return static_cast<const ListData*>(p_.get())->depth;
  if (type_ == Type::kDict || type_ == Type::kNamespace)
    return static_cast<const DictData*>(p_.get())->depth;
  return 0;
}
bool Value::has_namespace() const {
  if (type_ == Type::kList) return static_cast<const ListData*>(p_.get())->has_namespace;
  if (type_ == Type::kDict || type_ == Type::kNamespace)
    return static_cast<const DictData*>(p_.get())->has_namespace;
  return false;
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return u_.b;
    case Type::kInt: return u_.i != 0;
    case Type::kFloat: return u_.f != 0.0;
    case Type::kString: return !str().empty();
    case Type::kList: return !items().empty();
    case Type::kDict: return !dict().items.empty();
    case Type::kNamespace:
    case Type::kFunction: return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "NoneType";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return "str";
    case Value::Type::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Type::kDict: return "dict";
    case Value::Type::kNamespace: return "Namespace";
    case Value::Type::kFunction: return "function";
  }
  return "object";
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // The shortest %e form that reads back as f.
  char buf[40];
  for (int p = 0; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp10 = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int nd = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // digits are 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= nd) {
    out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
           digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

namespace {
bool printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

void append_hex(std::string& out, const char* prefix, uint32_t cp, int width) {
  char b[16];
  std::snprintf(b, sizeof b, "%s%0*x", prefix, width, cp);
  out += b;
}

void append_str_repr(std::string& out, const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  out += q;
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t cp = tok::next_cp(s, i);
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7f) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x7f || printable(cp)) {
      out.append(s, start, i - start);
    } else if (cp <= 0xff) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp <= 0xffff) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  out += q;
}

void append_repr(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::kString: append_str_repr(out, v.str()); return;
    case Value::Type::kList: {
      out += v.is_tuple() ? '(' : '[';
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, items[i]);
      }
      if (v.is_tuple() && items.size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      return;
    }
    case Value::Type::kDict:
    case Value::Type::kNamespace: {
      if (v.type() == Value::Type::kNamespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& kv : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        append_str_repr(out, kv.first);
        out += ": ";
        append_repr(out, kv.second);
      }
      out += '}';
      if (v.type() == Value::Type::kNamespace) out += '>';
      return;
    }
    case Value::Type::kUndefined: out += "Undefined"; return;
    default: append_str(out, v);
  }
}
}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return;
    case Value::Type::kNone: out += "None"; return;
    case Value::Type::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Type::kInt: out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: out += float_repr(v.as_float()); return;
    case Value::Type::kString: out += v.str(); return;
    case Value::Type::kFunction: out += v.fn().repr(); return;
    default: append_repr(out, v);
  }
}
std::string to_str(const Value& v) {
  std::string s;
  append_str(s, v);
  return s;
}
std::string repr(const Value& v) {
  std::string s;
  append_repr(s, v);
  return s;
}

bool equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.type() == T::kFloat || b.type() == T::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone: return true;
    case T::kString: return a.str() == b.str();
    case T::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case T::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& kv : a.dict().items) {
        const Value* o = b.dict().find(kv.first);
        if (!o || !equal(kv.second, *o)) return false;
      }
      return true;
    }
    case T::kNamespace: return &a.ns_data() == &b.ns_data();
    case T::kFunction: return &a.fn() == &b.fn();
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.type() == T::kFloat || b.type() == T::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 keeps code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  type_error(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
             type_name(b) + "'");
}

namespace {
void append_json_string(std::string& out, const std::string& s, bool ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t cp = tok::next_cp(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {
        const uint32_t c = cp - 0x10000;
        append_hex(out, "\\u", 0xd800 + (c >> 10), 4);
        append_hex(out, "\\u", 0xdc00 + (c & 0x3ff), 4);
      } else {
        append_hex(out, "\\u", cp, 4);
      }
    } else {
      out.append(s, start, i - start);
    }
  }
  out += '"';
}

void append_json_at(std::string& out, const Value& v, const JsonStyle& st, int level) {
  using T = Value::Type;
  switch (v.type()) {
    case T::kNone: out += "null"; return;
    case T::kBool: out += v.as_bool() ? "true" : "false"; return;
    case T::kInt: out += std::to_string(v.as_int()); return;
    case T::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f))
        out += "NaN";
      else if (std::isinf(f))
        out += f < 0 ? "-Infinity" : "Infinity";
      else
        out += float_repr(f);
      return;
    }
    case T::kString: append_json_string(out, v.str(), st.ensure_ascii); return;
    case T::kList:
    case T::kDict: {
      const bool is_list = v.type() == T::kList;
      const size_t n = is_list ? v.items().size() : v.dict().items.size();
      if (n == 0) {
        out += is_list ? "[]" : "{}";
        return;
      }
      out += is_list ? '[' : '{';
      std::string nl;
      if (st.has_indent) {
        nl = "\n";
        for (int i = 0; i <= level; ++i) nl += st.indent;
        out += nl;
      }
      std::vector<const std::pair<std::string, Value>*> kvs;
      if (!is_list) {
        for (const auto& kv : v.dict().items) kvs.push_back(&kv);
        if (st.sort_keys)
          std::sort(kvs.begin(), kvs.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      for (size_t i = 0; i < n; ++i) {
        if (i) out += st.item_sep + nl;
        if (is_list) {
          append_json_at(out, v.items()[i], st, level + 1);
        } else {
          append_json_string(out, kvs[i]->first, st.ensure_ascii);
          out += st.key_sep;
          append_json_at(out, kvs[i]->second, st, level + 1);
        }
      }
      if (st.has_indent) {
        out += '\n';
        for (int i = 0; i < level; ++i) out += st.indent;
      }
      out += is_list ? ']' : '}';
      return;
    }
    default:
      type_error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}
}  // namespace

void append_json(std::string& out, const Value& v, const JsonStyle& style) {
  append_json_at(out, v, style, 0);
}

Value from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::null: return Value::none();
    case J::boolean: return Value::boolean(j.get<bool>());
    case J::number_integer: return Value::integer(j.get<int64_t>());
    case J::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case J::number_float: return Value::number(j.get<double>());
    case J::string: return Value::string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case J::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(*it));
      return Value::dict(std::move(items));
    }
    default: type_error("unsupported JSON value");
  }
}

}  // namespace tmpl
}  // namespace oslo
