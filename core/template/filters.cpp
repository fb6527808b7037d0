// Builtin filters: Jinja2's (filters.py) that chat templates use, with
// transformers' own tojson.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/template/builtins.hpp"
#include "core/template/render.hpp"
#include "core/template/strings.hpp"

namespace oslo {
namespace tmpl {
namespace {

using Args = std::vector<Value>;
using FilterFn = Value (*)(Renderer&, const Value&, Args&, CallArgs&);
struct FilterDef {
  const char* name;
  std::vector<Param> params;
  FilterFn fn;
  bool raw = false;  // gets the CallArgs unbound (map, select, ...)
};

const std::string& need_str(const Value& v, const char* fn) {
  if (!v.is_string())
    type_error(std::string(fn) + ": expected a string, got '" + type_name(v) + "'");
  return v.str();
}
int64_t need_int(const Value& v, const char* fn) {
  if (v.type() != Value::Type::kInt && v.type() != Value::Type::kBool)
    type_error(std::string(fn) + ": expected an integer, got '" + type_name(v) + "'");
  return v.as_int();
}
std::string text_of(const Value& v) {
  return to_str(v);
}

Value length_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return Value::integer(0);
    case Value::Type::kString: return Value::integer(static_cast<int64_t>(pystr::length(v.str())));
    case Value::Type::kList: return Value::integer(static_cast<int64_t>(v.items().size()));
    case Value::Type::kDict: return Value::integer(static_cast<int64_t>(v.dict().items.size()));
    default: type_error(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

// Jinja's attribute paths ("a.b", "a.0") for map / selectattr / sort.
Value attribute_path(Renderer& r, const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t b = 0;
  for (;;) {
    const size_t e = path.find('.', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = r.getitem(cur, digits ? Value::integer(std::atoll(part.c_str())) : Value::string(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(pystr::lower(v.str()));
  return v;
}

Value f_tojson(Renderer& r, const Value& v, Args& a, CallArgs&) {
  JsonStyle st;
  st.ensure_ascii = a[0].truthy();
  if (!a[1].is_none()) {
    st.has_indent = true;
    if (a[1].is_string()) {
      st.indent = a[1].str();
    } else {
      const int64_t n = need_int(a[1], "tojson indent");
      st.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
    }
    st.item_sep = ",";
  }
  if (!a[2].is_none()) {
    if (!a[2].is_list() || a[2].items().size() != 2)
      type_error("tojson: separators must be an (item_separator, key_separator) pair");
    st.item_sep = need_str(a[2].items()[0], "tojson separators");
    st.key_sep = need_str(a[2].items()[1], "tojson separators");
  }
  st.sort_keys = a[3].truthy();
  std::string out;
  append_json(out, v, st);
  return r.make_string(std::move(out));
}

Value f_join(Renderer& r, const Value& v, Args& a, CallArgs&) {
  const std::string sep = text_of(a[0]);
  std::string out;
  bool first = true;
  for (const Value& x : r.iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, a[1].is_none() ? x : attribute_path(r, x, text_of(a[1])));
    r.charge(0);
    if (out.size() > (size_t(1) << 31)) type_error("join: the result is too long");
  }
  return r.make_string(std::move(out));
}

Value f_default(Renderer&, const Value& v, Args& a, CallArgs&) {
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return a[0];
  return v;
}

Value f_int(Renderer&, const Value& v, Args& a, CallArgs&) {
  switch (v.type()) {
    case Value::Type::kBool:
    case Value::Type::kInt: return Value::integer(v.as_int());
    case Value::Type::kFloat: {
      const double f = v.as_float();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return a[0];
      return Value::integer(static_cast<int64_t>(f));
    }
    case Value::Type::kString: {
      std::string s = pystr::strip(v.str(), nullptr, true, true);
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      const int base = static_cast<int>(need_int(a[1], "int base"));
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (!s.empty() && end && !*end && errno == 0) return Value::integer(i);
      errno = 0;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && !*end && errno == 0 && std::isfinite(f) && std::fabs(f) < 9.2e18)
        return Value::integer(static_cast<int64_t>(f));
      return a[0];
    }
    default: return a[0];
  }
}

Value f_float(Renderer&, const Value& v, Args& a, CallArgs&) {
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    const std::string s = pystr::strip(v.str(), nullptr, true, true);
    char* end = nullptr;
    const double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && !*end) return Value::number(f);
  }
  return a[0];
}

Value f_first_last(Renderer& r, const Value& v, bool last) {
  if (v.is_string()) {
    const auto cps = pystr::decode(v.str());
    if (cps.empty()) return Value::undefined("no first item, the string was empty");
    return Value::string(pystr::encode({last ? cps.back() : cps.front()}));
  }
  std::vector<Value> items = r.iterate(v);
  if (items.empty()) return Value::undefined("no first item, the sequence was empty");
  return last ? items.back() : items.front();
}

Value f_replace(Renderer& r, const Value& v, Args& a, CallArgs&) {
  const std::string s = text_of(v);
  const std::string old = text_of(a[0]), repl = text_of(a[1]);
  const int64_t count = a[2].is_none() ? -1 : need_int(a[2], "replace count");
  r.charge(old.empty() ? (s.size() + 1) * repl.size() : s.size() / old.size() * repl.size());
  return r.make_string(pystr::replace(s, old, repl, count));
}

Value f_indent(Renderer& r, const Value& v, Args& a, CallArgs&) {
  const std::string ind =
      a[0].is_string()
          ? a[0].str()
          : std::string(
                static_cast<size_t>(std::clamp<int64_t>(need_int(a[0], "indent width"), 0, 256)),
                ' ');
  std::vector<std::string> lines = pystr::splitlines(text_of(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (a[2].truthy() || !lines[i].empty())) out += ind;
    out += lines[i];
    r.charge(ind.size() + lines[i].size());
  }
  if (a[1].truthy()) out = ind + out;
  return r.make_string(std::move(out));
}

// select / reject / selectattr / rejectattr: [attr,] [test name, test args...]
Value select_impl(Renderer& r, const Value& v, CallArgs& call, bool with_attr, bool keep) {
  if (!call.kw.empty()) type_error("select filters take no keyword arguments");
  size_t k = 0;
  std::string attr;
  if (with_attr) {
    if (call.pos.empty()) type_error("selectattr / rejectattr need an attribute name");
    attr = text_of(call.pos[k++]);
  }
  int test = -1;
  if (k < call.pos.size()) {
    const std::string name = text_of(call.pos[k++]);
    test = find_test(name);
    if (test < 0) type_error("no test named '" + name + "'");
  }
  std::vector<Value> out;
  for (const Value& item : r.iterate(v)) {
    r.count_iterations(1);
    const Value x = with_attr ? attribute_path(r, item, attr) : item;
    bool ok;
    if (test < 0) {
      ok = x.truthy();
    } else {
      CallArgs targs;
      targs.pos.assign(call.pos.begin() + static_cast<long>(k), call.pos.end());
      ok = apply_test(r, test, x, std::move(targs));
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_map(Renderer& r, const Value& v, Args&, CallArgs& call) {
  std::vector<Value> out;
  const Value* attr = nullptr;
  const Value* dflt = nullptr;
  for (const auto& kw : call.kw) {
    if (kw.first == "attribute")
      attr = &kw.second;
    else if (kw.first == "default")
      dflt = &kw.second;
    else
      type_error("map: unexpected keyword argument '" + kw.first + "'");
  }
  if (attr) {
    for (const Value& item : r.iterate(v)) {
      r.count_iterations(1);
      Value x = attribute_path(r, item, text_of(*attr));
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (call.pos.empty()) type_error("map needs a filter name or attribute=");
  const std::string name = text_of(call.pos[0]);
  const int f = find_filter(name);
  if (f < 0) type_error("no filter named '" + name + "'");
  for (const Value& item : r.iterate(v)) {
    r.count_iterations(1);
    CallArgs fargs;
    fargs.pos.assign(call.pos.begin() + 1, call.pos.end());
    out.push_back(apply_filter(r, f, item, std::move(fargs)));
  }
  return Value::list(std::move(out));
}

std::vector<Value> sorted(Renderer& r, const Value& v, bool reverse, bool case_sensitive,
                          const Value& attribute) {
  std::vector<Value> items = r.iterate(v);
  r.count_iterations(items.size());
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items)
    keyed.emplace_back(sort_key(attribute.is_none() ? x : attribute_path(r, x, text_of(attribute)),
                                case_sensitive),
                       x);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
    return reverse ? less(q.first, p.first) : less(p.first, q.first);
  });
  std::vector<Value> out;
  for (auto& p : keyed) out.push_back(std::move(p.second));
  return out;
}

Value min_max(Renderer& r, const Value& v, Args& a, bool max) {
  std::vector<Value> s = sorted(r, v, false, a[0].truthy(), a[1]);
  if (s.empty()) return Value::undefined("no items in the sequence");
  return max ? s.back() : s.front();
}

const std::vector<FilterDef>& filters() {
  using P = std::vector<Param>;
  static const std::vector<FilterDef> kFilters = {
      {"tojson",
       P{{"ensure_ascii", Value::boolean(false)},
         {"indent", Value::none()},
         {"separators", Value::none()},
         {"sort_keys", Value::boolean(false)}},
       f_tojson},
      {"trim", P{{"chars", Value::none()}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) {
         const std::string chars = a[0].is_none() ? std::string() : text_of(a[0]);
         return r.make_string(
             pystr::strip(text_of(v), a[0].is_none() ? nullptr : &chars, true, true));
       }},
      {"length", P{}, [](Renderer&, const Value& v, Args&, CallArgs&) { return length_of(v); }},
      {"count", P{}, [](Renderer&, const Value& v, Args&, CallArgs&) { return length_of(v); }},
      {"upper", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return r.make_string(pystr::upper(text_of(v)));
       }},
      {"lower", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return r.make_string(pystr::lower(text_of(v)));
       }},
      {"title", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return r.make_string(pystr::jinja_title(text_of(v)));
       }},
      {"capitalize", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return r.make_string(pystr::capitalize(text_of(v)));
       }},
      {"string", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return v.is_string() ? v : r.make_string(text_of(v));
       }},
      {"safe", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         return v.is_string() ? v : r.make_string(text_of(v));
       }},
      {"join", P{{"d", Value::string("")}, {"attribute", Value::none()}}, f_join},
      {"default", P{{"default_value", Value::string("")}, {"boolean", Value::boolean(false)}},
       f_default},
      {"d", P{{"default_value", Value::string("")}, {"boolean", Value::boolean(false)}}, f_default},
      {"first", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) { return f_first_last(r, v, false); }},
      {"last", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) { return f_first_last(r, v, true); }},
      {"replace", P{{"old", Value(), true}, {"new", Value(), true}, {"count", Value::none()}},
       f_replace},
      {"int", P{{"default", Value::integer(0)}, {"base", Value::integer(10)}}, f_int},
      {"float", P{{"default", Value::number(0.0)}}, f_float},
      {"list", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) { return Value::list(r.iterate(v)); }},
      {"items", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict())
           type_error(std::string("items: expected a mapping, got '") + type_name(v) + "'");
         std::vector<Value> out;
         for (const auto& kv : v.dict().items)
           out.push_back(Value::list({Value::string(kv.first), kv.second}, true));
         r.charge(out.size() * sizeof(Value));
         return Value::list(std::move(out));
       }},
      {"reverse", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs&) {
         if (v.is_string()) {
           auto cps = pystr::decode(v.str());
           std::reverse(cps.begin(), cps.end());
           return r.make_string(pystr::encode(cps));
         }
         std::vector<Value> items = r.iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"abs", P{},
       [](Renderer&, const Value& v, Args&, CallArgs&) {
         if (!v.is_number())
           type_error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
         if (v.type() == Value::Type::kFloat) return Value::number(std::fabs(v.as_float()));
         if (v.as_int() == INT64_MIN) type_error("integer overflow");
         return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
       }},
      {"round", P{{"precision", Value::integer(0)}, {"method", Value::string("common")}},
       [](Renderer&, const Value& v, Args& a, CallArgs&) {
         if (!v.is_number()) type_error("round: expected a number");
         const double scale =
             std::pow(10.0, static_cast<double>(need_int(a[0], "round precision")));
         const std::string m = text_of(a[1]);
         const double x = v.as_float() * scale;
         double y;
         if (m == "common")
           y = std::nearbyint(x);
         else if (m == "floor")
           y = std::floor(x);
         else if (m == "ceil")
           y = std::ceil(x);
         else
           type_error("round: method must be 'common', 'ceil' or 'floor'");
         return Value::number(y / scale);
       }},
      {"indent",
       P{{"width", Value::integer(4)},
         {"first", Value::boolean(false)},
         {"blank", Value::boolean(false)}},
       f_indent},
      {"sort",
       P{{"reverse", Value::boolean(false)},
         {"case_sensitive", Value::boolean(false)},
         {"attribute", Value::none()}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) {
         return Value::list(sorted(r, v, a[0].truthy(), a[1].truthy(), a[2]));
       }},
      {"unique", P{{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) {
         std::vector<Value> out, seen;
         for (const Value& x : r.iterate(v)) {
           r.count_iterations(1);
           Value k =
               sort_key(a[1].is_none() ? x : attribute_path(r, x, text_of(a[1])), a[0].truthy());
           bool dup = false;
           for (const Value& s : seen) dup = dup || equal(s, k);
           if (!dup) {
             seen.push_back(k);
             out.push_back(x);
           }
         }
         return Value::list(std::move(out));
       }},
      {"min", P{{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) { return min_max(r, v, a, false); }},
      {"max", P{{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) { return min_max(r, v, a, true); }},
      {"sum", P{{"attribute", Value::none()}, {"start", Value::integer(0)}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) {
         Value total = a[1];
         for (const Value& x : r.iterate(v)) {
           const Value y = a[0].is_none() ? x : attribute_path(r, x, text_of(a[0]));
           if (!total.is_number() || !y.is_number()) type_error("sum: expected numbers");
           if (total.type() == Value::Type::kFloat || y.type() == Value::Type::kFloat) {
             total = Value::number(total.as_float() + y.as_float());
           } else {
             int64_t s;
             if (__builtin_add_overflow(total.as_int(), y.as_int(), &s))
               type_error("integer overflow");
             total = Value::integer(s);
           }
         }
         return total;
       }},
      {"dictsort",
       P{{"case_sensitive", Value::boolean(false)},
         {"by", Value::string("key")},
         {"reverse", Value::boolean(false)}},
       [](Renderer& r, const Value& v, Args& a, CallArgs&) {
         if (!v.is_dict()) type_error("dictsort: expected a mapping");
         const bool by_value = text_of(a[1]) == "value";
         std::vector<Value> pairs;
         for (const auto& kv : v.dict().items)
           pairs.push_back(Value::list({Value::string(kv.first), kv.second}, true));
         std::vector<std::pair<Value, Value>> keyed;
         for (Value& p : pairs)
           keyed.emplace_back(sort_key(p.items()[by_value ? 1 : 0], a[0].truthy()), p);
         std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
           return a[2].truthy() ? less(q.first, p.first) : less(p.first, q.first);
         });
         std::vector<Value> out;
         for (auto& p : keyed) out.push_back(p.second);
         r.count_iterations(out.size());
         return Value::list(std::move(out));
       }},
      {"map", P{}, f_map, true},
      {"select", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs& c) {
         return select_impl(r, v, c, false, true);
       },
       true},
      {"reject", P{},
       [](Renderer& r, const Value& v, Args&, CallArgs& c) {
         return select_impl(r, v, c, false, false);
       },
       true},
      {"selectattr", P{},
       [](Renderer& r, const Value& v, Args&,
          CallArgs& c) { return select_impl(r, v, c, true, true); },
       true},
      {"rejectattr", P{},
       [](Renderer& r, const Value& v, Args&,
          CallArgs& c) { return select_impl(r, v, c, true, false); },
       true},
  };
  return kFilters;
}

}  // namespace

int find_filter(std::string_view name) {
  const auto& f = filters();
  for (size_t i = 0; i < f.size(); ++i)
    if (name == f[i].name) return static_cast<int>(i);
  return -1;
}

Value apply_filter(Renderer& r, int index, const Value& v, CallArgs args) {
  const FilterDef& f = filters()[static_cast<size_t>(index)];
  if (f.raw) {
    Args none;
    return f.fn(r, v, none, args);
  }
  // Jinja's filters (except default and the tests of a select) fail on an
  // Undefined input the way Undefined's own methods do; the lenient ones:
  const std::string_view n = f.name;
  if (v.is_undefined() && n != "default" && n != "d" && n != "length" && n != "count" &&
      n != "list" && n != "items" && n != "join" && n != "string" && n != "safe" && n != "first" &&
      n != "last" && n != "trim" && n != "upper" && n != "lower" && n != "title" &&
      n != "capitalize" && n != "replace" && n != "int" && n != "float" && n != "indent" &&
      n != "unique" && n != "sort" && n != "reverse")
    undefined_error(v);
  Args a = bind_args(f.name, f.params, std::move(args));
  return f.fn(r, v, a, args);
}

}  // namespace tmpl
}  // namespace oslo
