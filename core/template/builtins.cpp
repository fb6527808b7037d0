// Builtins: argument binding, tests, global functions and the methods of
// strings and dicts. The filters are in filters.cpp.
#include "core/template/builtins.hpp"

#include <ctime>

#include "core/template/lexer.hpp"
#include "core/template/render.hpp"
#include "core/template/strings.hpp"

namespace oslo {
namespace tmpl {

std::vector<Value> bind_args(const char* fn, const std::vector<Param>& params, CallArgs&& args) {
  if (args.pos.size() > params.size())
    type_error(std::string(fn) + "() takes at most " + std::to_string(params.size()) +
               " argument(s) (" + std::to_string(args.pos.size()) + " given)");
  std::vector<Value> out(params.size());
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.pos.size(); ++i) {
    out[i] = std::move(args.pos[i]);
    given[i] = true;
  }
  for (auto& kw : args.kw) {
    size_t k = 0;
    while (k < params.size() && kw.first != params[k].name) ++k;
    if (k == params.size())
      type_error(std::string(fn) + "() got an unexpected keyword argument '" + kw.first + "'");
    if (given[k]) type_error(std::string(fn) + "() got multiple values for '" + kw.first + "'");
    out[k] = std::move(kw.second);
    given[k] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    if (params[i].required)
      type_error(std::string(fn) + "() missing required argument '" + params[i].name + "'");
    out[i] = params[i].default_value;
  }
  return out;
}

namespace {

const std::string& need_str(const Value& v, const char* fn, const char* what) {
  if (!v.is_string())
    type_error(std::string(fn) + "(): " + what + " must be a string, not '" + type_name(v) + "'");
  return v.str();
}
int64_t need_int(const Value& v, const char* fn, const char* what) {
  if (v.type() != Value::Type::kInt && v.type() != Value::Type::kBool)
    type_error(std::string(fn) + "(): " + what + " must be an integer, not '" + type_name(v) + "'");
  return v.as_int();
}
Value str_list(Renderer& r, const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  uint64_t bytes = 0;
  for (const auto& p : parts) {
    bytes += p.size() + sizeof(Value);
    items.push_back(Value::string(p));
  }
  r.charge(bytes);
  return Value::list(std::move(items));
}

// ---- tests ----
using TestFn = bool (*)(Renderer&, const Value&, std::vector<Value>&);
struct TestDef {
  const char* name;
  std::vector<Param> params;
  TestFn fn;
};
bool int_like(const Value& v) {
  return v.type() == Value::Type::kInt;
}
const std::vector<TestDef>& tests() {
  using T = Value::Type;
  auto one = [] { return std::vector<Param>{{"other", Value(), true}}; };
  static const std::vector<TestDef> kTests = {
      {"defined",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) { return !v.is_undefined(); }},
      {"undefined",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) { return v.is_undefined(); }},
      {"none", {}, [](Renderer&, const Value& v, std::vector<Value>&) { return v.is_none(); }},
      {"boolean",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) { return v.type() == T::kBool; }},
      {"true",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.type() == T::kBool && v.as_bool();
       }},
      {"false",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.type() == T::kBool && !v.as_bool();
       }},
      {"integer", {}, [](Renderer&, const Value& v, std::vector<Value>&) { return int_like(v); }},
      {"float",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) { return v.type() == T::kFloat; }},
      {"number", {}, [](Renderer&, const Value& v, std::vector<Value>&) { return v.is_number(); }},
      {"string", {}, [](Renderer&, const Value& v, std::vector<Value>&) { return v.is_string(); }},
      {"mapping", {}, [](Renderer&, const Value& v, std::vector<Value>&) { return v.is_dict(); }},
      {"iterable",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"callable",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) { return v.type() == T::kFunction; }},
      {"odd",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return need_int(v, "odd", "value") % 2 != 0;
       }},
      {"even",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return need_int(v, "even", "value") % 2 == 0;
       }},
      {"divisibleby",
       {{"num", Value(), true}},
       [](Renderer&, const Value& v, std::vector<Value>& a) {
         const int64_t n = need_int(a[0], "divisibleby", "num");
         if (n == 0) type_error("integer division or modulo by zero");
         return need_int(v, "divisibleby", "value") % n == 0;
       }},
      {"lower",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.is_string() && pystr::is_lower(v.str());
       }},
      {"upper",
       {},
       [](Renderer&, const Value& v, std::vector<Value>&) {
         return v.is_string() && pystr::is_upper(v.str());
       }},
      {"sameas", one(),
       [](Renderer&, const Value& v, std::vector<Value>& a) {
         if (v.type() != a[0].type()) return false;
         if (v.is_none() || v.type() == T::kBool) return equal(v, a[0]);
         if (v.type() == T::kNamespace) return &v.ns_data() == &a[0].ns_data();
         return equal(v, a[0]) && (int_like(v) || v.is_string());
       }},
      {"eq", one(),
       [](Renderer&, const Value& v, std::vector<Value>& a) { return equal(v, a[0]); }},
      {"ne", one(),
       [](Renderer&, const Value& v, std::vector<Value>& a) { return !equal(v, a[0]); }},
      {"lt", one(), [](Renderer&, const Value& v, std::vector<Value>& a) { return less(v, a[0]); }},
      {"gt", one(), [](Renderer&, const Value& v, std::vector<Value>& a) { return less(a[0], v); }},
      {"le", one(),
       [](Renderer&, const Value& v, std::vector<Value>& a) { return !less(a[0], v); }},
      {"ge", one(),
       [](Renderer&, const Value& v, std::vector<Value>& a) { return !less(v, a[0]); }},
      {"in",
       {{"seq", Value(), true}},
       [](Renderer& r, const Value& v, std::vector<Value>& a) {
         if (a[0].is_string()) {
           if (!v.is_string()) type_error("'in <string>' requires string as left operand");
           return a[0].str().find(v.str()) != std::string::npos;
         }
         if (a[0].is_dict()) return v.is_string() && a[0].dict().find(v.str()) != nullptr;
         for (const Value& x : r.iterate(a[0]))
           if (equal(v, x)) return true;
         return false;
       }},
  };
  return kTests;
}
struct Alias {
  const char* alias;
  const char* name;
};
const Alias kTestAliases[] = {{"equalto", "eq"},  {"==", "eq"}, {"!=", "ne"},
                              {"lessthan", "lt"}, {"<", "lt"},  {"greaterthan", "gt"},
                              {">", "gt"},        {"<=", "le"}, {">=", "ge"}};

}  // namespace

int find_test(std::string_view name) {
  for (const Alias& a : kTestAliases)
    if (name == a.alias) name = a.name;
  const auto& t = tests();
  for (size_t i = 0; i < t.size(); ++i)
    if (name == t[i].name) return static_cast<int>(i);
  return -1;
}

bool apply_test(Renderer& r, int index, const Value& v, CallArgs args) {
  const TestDef& t = tests()[static_cast<size_t>(index)];
  std::vector<Value> a = bind_args(t.name, t.params, std::move(args));
  return t.fn(r, v, a);
}

// ---- global functions ----
namespace {
struct Builtin : Function {
  const char* name;
  Value (*fn)(Renderer&, CallArgs&);
  Builtin(const char* n, Value (*f)(Renderer&, CallArgs&)) : name(n), fn(f) {}
  Value call(Renderer& r, CallArgs args) const override { return fn(r, args); }
  std::string repr() const override { return std::string("<function ") + name + ">"; }
};

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value g_range(Renderer& r, CallArgs& args) {
  if (!args.kw.empty()) type_error("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    type_error("range expected 1 to 3 arguments, got " + std::to_string(args.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (args.pos.size() == 1) {
    stop = need_int(args.pos[0], "range", "stop");
  } else {
    start = need_int(args.pos[0], "range", "start");
    stop = need_int(args.pos[1], "range", "stop");
    if (args.pos.size() == 3) step = need_int(args.pos[2], "range", "step");
  }
  if (step == 0) type_error("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange)
      type_error("range too big: the sandbox blocks ranges longer than " +
                 std::to_string(kMaxRange));
    items.push_back(Value::integer(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  r.charge(items.size() * sizeof(Value));
  return Value::list(std::move(items));
}

std::vector<std::pair<std::string, Value>> dict_args(const char* fn, CallArgs& args) {
  std::vector<std::pair<std::string, Value>> items;
  if (args.pos.size() > 1) type_error(std::string(fn) + "() takes at most 1 positional argument");
  auto put = [&](const std::string& k, const Value& v) {
    for (auto& kv : items)
      if (kv.first == k) {
        kv.second = v;
        return;
      }
    items.emplace_back(k, v);
  };
  if (!args.pos.empty()) {
    const Value& m = args.pos[0];
    if (m.is_dict()) {
      for (const auto& kv : m.dict().items) put(kv.first, kv.second);
    } else if (m.is_list()) {
      for (const Value& pair : m.items()) {
        if (!pair.is_list() || pair.items().size() != 2 || !pair.items()[0].is_string())
          type_error(std::string(fn) + "(): expected (string key, value) pairs");
        put(pair.items()[0].str(), pair.items()[1]);
      }
    } else {
      type_error(std::string(fn) + "(): '" + type_name(m) + "' object is not a mapping");
    }
  }
  for (auto& kw : args.kw) put(kw.first, kw.second);
  return items;
}

Value g_namespace(Renderer&, CallArgs& args) {
  auto d = std::make_shared<DictData>();
  for (auto& kv : dict_args("namespace", args)) {
    if (!kv.first.empty() && kv.first[0] == '_')
      type_error("a namespace attribute may not start with '_' ('" + kv.first + "')");
    if (kv.second.type() == Value::Type::kNamespace || kv.second.has_namespace())
      throw_error(OSLO_ERR_NOT_SUPPORTED, "storing a namespace inside a namespace");
    d->depth = std::max(d->depth, kv.second.depth() + 1);
    d->items.push_back(std::move(kv));
  }
  if (d->depth > kMaxValueDepth) type_error("a namespace nested too deep");
  return Value::ns(std::move(d));
}
Value g_dict(Renderer&, CallArgs& args) {
  return Value::dict(dict_args("dict", args));
}

Value g_raise_exception(Renderer&, CallArgs& args) {
  std::vector<Value> a =
      bind_args("raise_exception", {{"message", Value(), true}}, std::move(args));
  throw RenderError{OSLO_ERR_INVALID_ARGUMENT, "raise_exception: " + to_str(a[0]),
                    RenderError::kNoPos};
}

Value g_strftime_now(Renderer& r, CallArgs& args) {
  std::vector<Value> a = bind_args("strftime_now", {{"format", Value(), true}}, std::move(args));
  const std::string& fmt = need_str(a[0], "strftime_now", "format");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string buf(256 + fmt.size() * 8, '\0');
  const size_t n = std::strftime(&buf[0], buf.size(), fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) type_error("strftime_now(): the formatted date is too long");
  buf.resize(n);
  return r.make_string(std::move(buf));
}

const Builtin kGlobals[] = {{"range", g_range},
                            {"namespace", g_namespace},
                            {"dict", g_dict},
                            {"raise_exception", g_raise_exception},
                            {"strftime_now", g_strftime_now}};
}  // namespace

Value global_function(std::string_view name) {
  for (const Builtin& b : kGlobals)
    if (name == b.name)
      return Value::function(
          std::shared_ptr<const Function>(std::shared_ptr<const Function>(), &b));
  return Value();
}

// ---- methods ----
namespace {
Value call_str_method(Renderer& r, const std::string& s, const std::string& m, CallArgs& args) {
  const char* fn = m.c_str();
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto a = bind_args(fn, {{"chars", Value::none()}}, std::move(args));
    const std::string* chars = a[0].is_none() ? nullptr : &need_str(a[0], fn, "chars");
    return r.make_string(pystr::strip(s, chars, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    auto a =
        bind_args(fn, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}}, std::move(args));
    const std::string* sep = a[0].is_none() ? nullptr : &need_str(a[0], fn, "sep");
    return str_list(r, pystr::split(s, sep, need_int(a[1], fn, "maxsplit"), m == "rsplit"));
  }
  if (m == "splitlines") {
    bind_args(fn, {}, std::move(args));
    return str_list(r, pystr::splitlines(s));
  }
  if (m == "startswith" || m == "endswith") {
    auto a = bind_args(fn, {{"prefix", Value(), true}}, std::move(args));
    std::vector<Value> options = a[0].is_list() ? a[0].items() : std::vector<Value>{a[0]};
    for (const Value& o : options) {
      const std::string& p = need_str(o, fn, "prefix");
      if (p.size() <= s.size() &&
          s.compare(m == "startswith" ? 0 : s.size() - p.size(), p.size(), p) == 0)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize") {
    bind_args(fn, {}, std::move(args));
    return r.make_string(m == "upper"   ? pystr::upper(s)
                         : m == "lower" ? pystr::lower(s)
                         : m == "title" ? pystr::title(s)
                                        : pystr::capitalize(s));
  }
  if (m == "replace") {
    auto a = bind_args(
        fn, {{"old", Value(), true}, {"new", Value(), true}, {"count", Value::integer(-1)}},
        std::move(args));
    const std::string& old = need_str(a[0], fn, "old");
    const std::string& repl = need_str(a[1], fn, "new");
    const int64_t count = need_int(a[2], fn, "count");
    if (!old.empty())
      r.charge(s.size() / old.size() * repl.size());
    else
      r.charge((s.size() + 1) * repl.size());
    return r.make_string(pystr::replace(s, old, repl, count));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    auto a = bind_args(fn, {{"sub", Value(), true}}, std::move(args));
    const std::string& sub = need_str(a[0], fn, "sub");
    return Value::integer(m == "count" ? pystr::count(s, sub) : pystr::find(s, sub, m == "rfind"));
  }
  if (m == "join") {
    auto a = bind_args(fn, {{"iterable", Value(), true}}, std::move(args));
    std::string out;
    size_t i = 0;
    for (const Value& x : r.iterate(a[0])) {
      if (!x.is_string())
        type_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                   type_name(x) + " found");
      if (i++) out += s;
      out += x.str();
      if (out.size() > (size_t(1) << 31)) type_error("join(): the result is too long");
    }
    return r.make_string(std::move(out));
  }
  if (m == "isdigit" || m == "isspace" || m == "islower" || m == "isupper") {
    bind_args(fn, {}, std::move(args));
    if (m == "islower") return Value::boolean(pystr::is_lower(s));
    if (m == "isupper") return Value::boolean(pystr::is_upper(s));
    const auto cps = pystr::decode(s);
    bool ok = !cps.empty();
    for (uint32_t c : cps) ok = ok && (m == "isdigit" ? (c >= '0' && c <= '9') : is_py_space(c));
    return Value::boolean(ok);
  }
  if (m == "format") throw_error(OSLO_ERR_NOT_SUPPORTED, "str.format() in chat templates");
  type_error("'str' object has no attribute '" + m + "'");
}

Value call_dict_method(Renderer& r, const Value& d, const std::string& m, CallArgs& args) {
  const char* fn = m.c_str();
  if (m == "get") {
    auto a = bind_args(fn, {{"key", Value(), true}, {"default", Value::none()}}, std::move(args));
    if (a[0].is_string())
      if (const Value* v = d.dict().find(a[0].str())) return *v;
    return a[1];
  }
  bind_args(fn, {}, std::move(args));
  std::vector<Value> items;
  for (const auto& kv : d.dict().items) {
    if (m == "keys")
      items.push_back(Value::string(kv.first));
    else if (m == "values")
      items.push_back(kv.second);
    else
      items.push_back(Value::list({Value::string(kv.first), kv.second}, true));
  }
  r.charge(items.size() * sizeof(Value));
  return Value::list(std::move(items));
}

struct BoundMethod : Function {
  Value obj;
  std::string name;
  Value call(Renderer& r, CallArgs args) const override {
    if (obj.is_string()) return call_str_method(r, obj.str(), name, args);
    return call_dict_method(r, obj, name, args);
  }
  std::string repr() const override {
    return "<built-in method " + name + " of " + type_name(obj) + " object>";
  }
};

const char* const kStrMethods[] = {
    "strip", "lstrip",  "rstrip",  "split",      "rsplit",  "splitlines", "startswith", "endswith",
    "upper", "lower",   "title",   "capitalize", "replace", "find",       "rfind",      "count",
    "join",  "isdigit", "isspace", "islower",    "isupper", "format"};
const char* const kDictMethods[] = {"items", "keys", "values", "get"};
}  // namespace

Value bound_method(const Value& obj, const std::string& name) {
  bool found = false;
  if (obj.is_string()) {
    for (const char* m : kStrMethods) found = found || name == m;
  } else if (obj.is_dict()) {
    for (const char* m : kDictMethods) found = found || name == m;
  }
  if (!found) return Value();
  auto b = std::make_shared<BoundMethod>();
  b->obj = obj;
  b->name = name;
  return Value::function(std::move(b));
}

}  // namespace tmpl
}  // namespace oslo
