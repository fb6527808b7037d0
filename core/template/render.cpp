// The renderer: statements, expressions, Python's operators.
#include "core/template/render.hpp"

#include <cmath>
#include <optional>

#include "core/template/builtins.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tmpl {

[[noreturn]] void undefined_error(const Value& v) {
  const std::string& n = v.undefined_name();
  type_error(n.empty() ? "a value is undefined" : n);
}

Value* Renderer::Scope::find(const std::string& name) {
  for (auto& kv : vars)
    if (kv.first == name) return &kv.second;
  return nullptr;
}
void Renderer::Scope::set(const std::string& name, Value v) {
  if (Value* old = find(name))
    *old = std::move(v);
  else
    vars.emplace_back(name, std::move(v));
}

Renderer::DepthGuard::DepthGuard(Renderer& rr) : r(rr) {
  if (++r.depth_ > r.limits_.max_depth) {
    --r.depth_;
    type_error("the template nests deeper than " + std::to_string(r.limits_.max_depth) +
               " levels while rendering (recursive macro calls?)");
  }
}

Renderer::Renderer(const Limits& limits, const std::vector<std::pair<std::string, Value>>& vars)
    : limits_(limits), globals_{vars, nullptr}, scope_(&globals_), out_(nullptr) {}

std::string Renderer::run(const Body& body) {
  return capture(body, scope_);
}

void Renderer::step() {
  if (++steps_ > limits_.max_steps)
    type_error("the template took more than " + std::to_string(limits_.max_steps) +
               " evaluation steps");
}
void Renderer::charge(uint64_t bytes) {
  work_ += bytes;
  if (work_ > limits_.max_work_bytes)
    type_error("the template built more than " + std::to_string(limits_.max_work_bytes) +
               " bytes of strings");
}
void Renderer::count_iterations(uint64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    type_error("the template ran more than " + std::to_string(limits_.max_loop_iterations) +
               " loop iterations");
}
Value Renderer::make_string(std::string s) {
  if (s.size() > limits_.max_output_bytes)
    type_error("a string of more than " + std::to_string(limits_.max_output_bytes) + " bytes");
  charge(s.size());
  return Value::string(std::move(s));
}
void Renderer::emit(const std::string& s) {
  if (out_->size() + s.size() > limits_.max_output_bytes)
    type_error("the output would pass " + std::to_string(limits_.max_output_bytes) + " bytes");
  charge(s.size());
  out_->append(s);
}

std::string Renderer::capture(const Body& body, Scope* scope) {
  std::string text;
  std::string* saved_out = out_;
  Scope* saved_scope = scope_;
  out_ = &text;
  scope_ = scope;
  try {
    exec(body);
  } catch (...) {
    out_ = saved_out;
    scope_ = saved_scope;
    throw;
  }
  out_ = saved_out;
  scope_ = saved_scope;
  return text;
}

Renderer::Flow Renderer::exec(const Body& body) {
  DepthGuard g(*this);
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s) {
  step();
  try {
    switch (s.kind) {
      case Stmt::kText: emit(s.text); break;
      case Stmt::kOutput: {
        std::string text;
        append_str(text, eval(*s.expr));
        emit(text);
        break;
      }
      case Stmt::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (eval(*s.conds[i]).truthy()) return exec(s.bodies[i]);
        return exec(s.else_body);
      case Stmt::kFor: return exec_for(s);
      case Stmt::kSet: {
        Value v = eval(*s.expr);
        if (s.attr.empty()) {
          assign(s.targets, v, s.pos);
          break;
        }
        Value ns = lookup(s.targets[0]);
        if (ns.type() != Value::Type::kNamespace)
          type_error("cannot assign attribute on non-namespace object");
        if (!s.attr.empty() && s.attr[0] == '_')
          type_error("a namespace attribute may not start with '_' ('" + s.attr + "')");
        if (v.type() == Value::Type::kNamespace || v.has_namespace())
          throw_error(OSLO_ERR_NOT_SUPPORTED, "storing a namespace inside a namespace");
        DictData& d = ns.ns_data();
        if (v.depth() + 1 > kMaxValueDepth)
          type_error("a list or dict nested deeper than " + std::to_string(kMaxValueDepth) +
                     " levels");
        d.depth = std::max(d.depth, v.depth() + 1);
        d.set(s.attr, std::move(v));
        break;
      }
      case Stmt::kSetBlock: scope_->set(s.targets[0], make_string(capture(s.body, scope_))); break;
      case Stmt::kMacro: {
        struct Macro : Function {
          const Stmt* def;
          Value call(Renderer& r, CallArgs args) const override {
            return r.call_macro(*def, std::move(args));
          }
          std::string repr() const override { return "<Macro '" + def->text + "'>"; }
        };
        auto m = std::make_shared<Macro>();
        m->def = &s;
        scope_->set(s.text, Value::function(std::move(m)));
        break;
      }
      case Stmt::kBreak: return Flow::kBreak;
      case Stmt::kContinue: return Flow::kContinue;
      case Stmt::kScope: {
        if (!s.new_scope) return exec(s.body);
        Scope inner{{}, scope_};
        for (const auto& p : s.params) inner.set(p.first, eval(*p.second));
        Scope* saved = scope_;
        scope_ = &inner;
        Flow f;
        try {
          f = exec(s.body);
        } catch (...) {
          scope_ = saved;
          throw;
        }
        scope_ = saved;
        return f;
      }
    }
  } catch (RenderError& e) {
    if (e.pos == RenderError::kNoPos) e.pos = s.pos;
    throw;
  }
  return Flow::kNormal;
}

void Renderer::assign(const std::vector<std::string>& targets, const Value& v, uint32_t) {
  if (targets.size() == 1) {
    scope_->set(targets[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != targets.size())
    type_error(items.size() > targets.size()
                   ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                   : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                         ", got " + std::to_string(items.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) scope_->set(targets[i], items[i]);
}

namespace {
struct LoopCycle : Function {
  std::shared_ptr<size_t> index;
  Value call(Renderer&, CallArgs args) const override {
    if (args.pos.empty()) type_error("no items for cycling given");
    return args.pos[*index % args.pos.size()];
  }
  std::string repr() const override { return "<bound method LoopContext.cycle>"; }
};
}  // namespace

Renderer::Flow Renderer::exec_for(const Stmt& s) {
  const Value seq = eval(*s.expr);
  std::vector<Value> items = iterate(seq);
  if (s.cond) {  // the loop filter sees each item in a scope of its own
    std::vector<Value> kept;
    for (const Value& item : items) {
      count_iterations(1);
      Scope inner{{}, scope_};
      Scope* saved = scope_;
      scope_ = &inner;
      bool keep;
      try {
        assign(s.targets, item, s.pos);
        keep = eval(*s.cond).truthy();
      } catch (...) {
        scope_ = saved;
        throw;
      }
      scope_ = saved;
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body);
  auto cycle = std::make_shared<LoopCycle>();
  cycle->index = std::make_shared<size_t>(0);
  const Value cycle_fn = Value::function(cycle);
  const size_t n = items.size();
  const Value length = Value::integer(static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) {
    count_iterations(1);
    *cycle->index = i;
    const int64_t k = static_cast<int64_t>(i);
    const int64_t left = static_cast<int64_t>(n - i);
    Value loop = Value::dict(
        {{"index", Value::integer(k + 1)},
         {"index0", Value::integer(k)},
         {"revindex", Value::integer(left)},
         {"revindex0", Value::integer(left - 1)},
         {"first", Value::boolean(i == 0)},
         {"last", Value::boolean(i + 1 == n)},
         {"length", length},
         {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
         {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
         {"depth", Value::integer(1)},
         {"depth0", Value::integer(0)},
         {"cycle", cycle_fn}});
    Scope inner{{}, scope_};
    Scope* saved = scope_;
    scope_ = &inner;
    Flow f;
    try {
      assign(s.targets, items[i], s.pos);
      inner.set("loop", std::move(loop));
      f = exec(s.body);
    } catch (...) {
      scope_ = saved;
      throw;
    }
    scope_ = saved;
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Renderer::call_macro(const Stmt& m, CallArgs args) {
  if (args.pos.size() > m.params.size())
    type_error("macro '" + m.text + "' takes not more than " + std::to_string(m.params.size()) +
               " argument(s)");
  Scope inner{{}, &globals_};
  Scope* saved = scope_;
  scope_ = &inner;
  try {
    for (const auto& kw : args.kw) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == kw.first;
      if (!known) type_error("macro '" + m.text + "' takes no keyword argument '" + kw.first + "'");
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto& p = m.params[i];
      Value v = Value::undefined("parameter '" + p.first + "' was not provided");
      bool given = i < args.pos.size();
      if (given) v = args.pos[i];
      for (auto& kw : args.kw)
        if (kw.first == p.first) {
          if (given) type_error("macro '" + m.text + "' got multiple values for '" + p.first + "'");
          v = kw.second;
          given = true;
        }
      if (!given && p.second) v = eval(*p.second);
      inner.set(p.first, std::move(v));
    }
  } catch (...) {
    scope_ = saved;
    throw;
  }
  scope_ = saved;
  return make_string(capture(m.body, &inner));
}

std::vector<Value> Renderer::iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kList: return v.items();
    case Value::Type::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      size_t i = 0;
      while (i < s.size()) {
        const size_t start = i;
        tok::next_cp(s, i);
        chars.push_back(Value::string(s.substr(start, i - start)));
      }
      charge(chars.size() * sizeof(Value));
      return chars;
    }
    default: type_error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

Value Renderer::lookup(const std::string& name) {
  for (Scope* s = scope_; s; s = s->parent)
    if (Value* v = s->find(name)) return *v;
  Value g = global_function(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Value Renderer::eval(const Expr& e) {
  step();
  DepthGuard g(*this);
  try {
    return eval_inner(e);
  } catch (RenderError& err) {
    if (err.pos == RenderError::kNoPos) err.pos = e.pos;
    throw;
  }
}

CallArgs Renderer::eval_args(const Expr& e, size_t first) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
  for (const auto& kw : e.kwargs) a.kw.emplace_back(kw.first, eval(*kw.second));
  return a;
}

Value Renderer::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::kLiteral: return e.value;
    case Expr::kName: return lookup(e.name);
    case Expr::kList:
    case Expr::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      charge(items.size() * sizeof(Value));
      return Value::list(std::move(items), e.kind == Expr::kTuple);
    }
    case Expr::kDict: {
      std::vector<std::pair<std::string, Value>> items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (!k.is_string())
          throw_error(OSLO_ERR_NOT_SUPPORTED,
                      std::string("dict keys other than strings (a ") + type_name(k) + ")");
        Value v = eval(*e.args[i + 1]);
        bool found = false;
        for (auto& kv : items)
          if (kv.first == k.str()) {
            kv.second = v;
            found = true;
          }
        if (!found) items.emplace_back(k.str(), std::move(v));
      }
      return Value::dict(std::move(items));
    }
    case Expr::kAttr: return getattr(eval(*e.args[0]), e.name);
    case Expr::kItem: {
      Value obj = eval(*e.args[0]);
      return getitem(obj, eval(*e.args[1]));
    }
    case Expr::kSlice: {
      Value obj = eval(*e.args[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.args[1 + i] ? eval(*e.args[1 + i]) : Value::none();
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::kCall: {
      Value callee = eval(*e.args[0]);
      return call(callee, eval_args(e, 1));
    }
    case Expr::kFilter: {
      Value v = eval(*e.args[0]);
      return apply_filter(*this, e.builtin, v, eval_args(e, 1));
    }
    case Expr::kTest: {
      Value v = eval(*e.args[0]);
      const bool r = apply_test(*this, e.builtin, v, eval_args(e, 1));
      return Value::boolean(r != e.negate);
    }
    case Expr::kUnary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number())
        type_error(std::string("bad operand type for unary ") + e.name + ": '" + type_name(v) +
                   "'");
      if (e.name == "+") return v.type() == Value::Type::kBool ? Value::integer(v.as_int()) : v;
      if (v.type() == Value::Type::kFloat) return Value::number(-v.as_float());
      if (v.as_int() == INT64_MIN) type_error("integer overflow (oslo's integers are 64-bit)");
      return Value::integer(-v.as_int());
    }
    case Expr::kBinary: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      return binary(e.name, a, b);
    }
    case Expr::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        if (!compare(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::kAnd: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    case Expr::kOr: {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    case Expr::kCond:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2])
                       : Value::undefined("the condition was false and there is no else");
  }
  return Value();
}

Value Renderer::call(const Value& callee, CallArgs args) {
  if (callee.type() == Value::Type::kFunction) return callee.fn().call(*this, std::move(args));
  if (callee.is_undefined()) undefined_error(callee);
  type_error(std::string("'") + type_name(callee) + "' object is not callable");
}

Value Renderer::getattr(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kUndefined: undefined_error(obj);
    case Value::Type::kDict: {
      Value m = bound_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Type::kNamespace: {
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    default: {
      Value m = bound_method(obj, name);
      if (!m.is_undefined()) return m;
      return Value::undefined(std::string("'") + type_name(obj) + " object' has no attribute '" +
                              name + "'");
    }
  }
}

namespace {
// Python's index normalisation: -1 is the last; npos when out of range.
size_t py_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i < 0 || static_cast<uint64_t>(i) >= n ? std::string::npos : static_cast<size_t>(i);
}
std::vector<size_t> cp_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  return starts;
}
}  // namespace

Value Renderer::getitem(const Value& obj, const Value& key) {
  const bool int_key = key.type() == Value::Type::kInt || key.type() == Value::Type::kBool;
  switch (obj.type()) {
    case Value::Type::kUndefined: undefined_error(obj);
    case Value::Type::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.dict().find(key.str())) return *v;
        return getattr(obj, key.str());
      }
      break;
    case Value::Type::kNamespace:
      if (key.is_string()) return getattr(obj, key.str());
      break;
    case Value::Type::kList:
      if (int_key) {
        const size_t i = py_index(key.as_int(), obj.items().size());
        if (i != std::string::npos) return obj.items()[i];
      } else if (key.is_string()) {
        return getattr(obj, key.str());
      }
      break;
    case Value::Type::kString:
      if (int_key) {
        const std::string& s = obj.str();
        const std::vector<size_t> st = cp_starts(s);
        const size_t i = py_index(key.as_int(), st.size());
        if (i != std::string::npos) {
          const size_t end = i + 1 < st.size() ? st[i + 1] : s.size();
          return Value::string(s.substr(st[i], end - st[i]));
        }
      } else if (key.is_string()) {
        return getattr(obj, key.str());
      }
      break;
    default: break;
  }
  return Value::undefined(std::string("'") + type_name(obj) + " object' has no element " +
                          repr(key));
}

Value Renderer::slice(const Value& obj, const Value& start, const Value& stop, const Value& stepv) {
  if (obj.is_undefined()) undefined_error(obj);
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.type() != Value::Type::kInt && v.type() != Value::Type::kBool)
      type_error(std::string("slice ") + what + " must be an integer or None, not '" +
                 type_name(v) + "'");
    return v.as_int();
  };
  const auto b = as_index(start, "start"), e = as_index(stop, "stop"), st = as_index(stepv, "step");
  const int64_t step = st.value_or(1);
  if (step == 0) type_error("slice step cannot be zero");
  std::vector<size_t> starts;
  int64_t n;
  if (obj.is_string()) {
    starts = cp_starts(obj.str());
    n = static_cast<int64_t>(starts.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.items().size());
  } else {
    type_error(std::string("'") + type_name(obj) + "' object is not subscriptable");
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(b, step < 0 ? n - 1 : 0);
  const int64_t hi = adjust(e, step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) idx.push_back(i);
  charge(idx.size() * sizeof(Value));
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::string out;
    for (int64_t i : idx) {
      const size_t k = static_cast<size_t>(i);
      const size_t end = k + 1 < starts.size() ? starts[k + 1] : s.size();
      out.append(s, starts[k], end - starts[k]);
    }
    return make_string(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i : idx) items.push_back(obj.items()[static_cast<size_t>(i)]);
  return Value::list(std::move(items), obj.is_tuple());
}

}  // namespace tmpl
}  // namespace oslo
