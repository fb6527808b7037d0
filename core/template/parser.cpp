// The parser, after Jinja2's parser.py (same precedence, same statements).
#include "core/template/parser.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/template/builtins.hpp"

namespace oslo {
namespace tmpl {
namespace {

[[noreturn]] void syntax_error(uint32_t pos, std::string msg) {
  throw RenderError{OSLO_ERR_FORMAT, std::move(msg), pos};
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Token::kText: return "template data";
    case Token::kVarBegin: return "'{{'";
    case Token::kVarEnd: return "end of print statement";
    case Token::kBlockBegin: return "'{%'";
    case Token::kBlockEnd: return "end of statement block";
    case Token::kEof: return "end of template";
    case Token::kString: return "string";
    case Token::kInt:
    case Token::kFloat: return "number " + t.text;
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_all() {
    Body b = subparse({});
    if (cur().kind != Token::kEof) syntax_error(cur().pos, "unexpected " + describe(cur()));
    return b;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  std::vector<std::string> open_ends_;  // for messages: the end tags awaited

  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser, uint32_t pos) : p(parser) {
      if (++p.depth_ > kMaxParseDepth)
        syntax_error(pos,
                     "template nested deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~Depth() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().kind == Token::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op))
      syntax_error(cur().pos, std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != Token::kName)
      syntax_error(cur().pos, "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != Token::kBlockEnd)
      syntax_error(cur().pos, "expected end of statement block, got " + describe(cur()));
    next();
  }
  static ExprPtr node(Expr::Kind k, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  // ---- statements ----
  // Template data and tags up to a {% NAME %} with NAME in `ends` (left
  // unconsumed, the current token is NAME) or the end of the template.
  Body subparse(const std::vector<const char*>& ends) {
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Token::kEof) {
        if (!ends.empty())
          syntax_error(t.pos,
                       std::string("unexpected end of template, expected '") + ends[0] + "'");
        return body;
      }
      if (t.kind == Token::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == Token::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::kOutput;
        s->pos = cur().pos;
        s->expr = parse_tuple(true);
        if (cur().kind != Token::kVarEnd)
          syntax_error(cur().pos, "expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == Token::kBlockBegin) {
        next();
        if (cur().kind == Token::kName)
          for (const char* e : ends)
            if (cur().text == e) return body;
        body.push_back(statement());
      } else {
        syntax_error(t.pos, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr statement() {
    const Token& t = cur();
    if (t.kind != Token::kName) syntax_error(t.pos, "tag name expected, got " + describe(t));
    Depth d(*this, t.pos);
    auto s = std::make_unique<Stmt>();
    s->pos = t.pos;
    const std::string name = t.text;
    next();
    if (name == "if") {
      s->kind = Stmt::kIf;
      for (;;) {
        s->conds.push_back(parse_tuple(false));
        expect_block_end();
        s->bodies.push_back(subparse({"elif", "else", "endif"}));
        if (skip_name("elif")) continue;
        if (skip_name("else")) {
          expect_block_end();
          s->else_body = subparse({"endif"});
        }
        next();  // endif
        break;
      }
    } else if (name == "for") {
      s->kind = Stmt::kFor;
      s->targets = assign_names();
      if (!skip_name("in")) syntax_error(cur().pos, "expected 'in', got " + describe(cur()));
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->cond = expression(true);
      if (is_name("recursive")) syntax_error(cur().pos, "recursive loops are not supported");
      expect_block_end();
      ++loops_;
      s->body = subparse({"endfor", "else"});
      --loops_;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = subparse({"endfor"});
      }
      next();  // endfor
    } else if (name == "set") {
      if (cur().kind == Token::kName && peek().kind == Token::kOp && peek().text == ".") {
        s->kind = Stmt::kSet;
        s->targets.push_back(expect_name());
        next();
        s->attr = expect_name();
        expect_op("=");
        s->expr = parse_tuple(true);
      } else {
        s->targets = assign_names();
        if (skip_op("=")) {
          s->kind = Stmt::kSet;
          s->expr = parse_tuple(true);
        } else {
          if (s->targets.size() != 1) syntax_error(s->pos, "a block set assigns one name");
          if (is_op("|")) syntax_error(cur().pos, "filters on a block set are not supported");
          s->kind = Stmt::kSetBlock;
          expect_block_end();
          s->body = subparse({"endset"});
          next();
        }
      }
    } else if (name == "macro") {
      s->kind = Stmt::kMacro;
      s->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        std::string p = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = expression(true);
        s->params.emplace_back(std::move(p), std::move(def));
      }
      expect_block_end();
      const int saved = loops_;
      loops_ = 0;
      s->body = subparse({"endmacro"});
      loops_ = saved;
      next();
    } else if (name == "with") {
      s->kind = Stmt::kScope;
      s->new_scope = true;
      while (cur().kind != Token::kBlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->params.emplace_back(std::move(n), expression(true));
      }
      expect_block_end();
      s->body = subparse({"endwith"});
      next();
    } else if (name == "generation") {  // transformers' assistant-mask extension
      s->kind = Stmt::kScope;
      expect_block_end();
      s->body = subparse({"endgeneration"});
      next();
    } else if (name == "print") {
      s->kind = Stmt::kOutput;
      s->expr = parse_tuple(true);
    } else if (name == "break" || name == "continue") {
      if (!loops_) syntax_error(s->pos, "'" + name + "' outside of a loop");
      s->kind = name == "break" ? Stmt::kBreak : Stmt::kContinue;
    } else if (name == "extends" || name == "block" || name == "include" || name == "import" ||
               name == "from" || name == "call" || name == "filter" || name == "autoescape") {
      syntax_error(s->pos, "the '" + name + "' tag is not supported in chat templates");
    } else {
      syntax_error(s->pos, "unknown tag '" + name + "'");
    }
    expect_block_end();
    return s;
  }

  // for / set targets: a name or names separated by commas (optionally in
  // parentheses).
  std::vector<std::string> assign_names() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (cur().kind != Token::kName || is_name("in"))
        syntax_error(cur().pos, "can't assign to " + describe(cur()));
      names.push_back(expect_name());
    } while (skip_op(",") && cur().kind == Token::kName && !is_name("in"));
    if (paren) expect_op(")");
    return names;
  }

  // ---- expressions ----
  bool tuple_end() const {
    const Token& t = cur();
    return t.kind == Token::kVarEnd || t.kind == Token::kBlockEnd || t.kind == Token::kEof ||
           (t.kind == Token::kOp && t.text == ")");
  }
  ExprPtr parse_tuple(bool with_cond, bool explicit_parens = false) {
    const uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (tuple_end()) break;
      items.push_back(expression(with_cond));
    }
    if (!comma && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !explicit_parens)
      syntax_error(cur().pos, "expected an expression, got " + describe(cur()));
    auto e = node(Expr::kTuple, pos);
    e->args = std::move(items);
    return e;
  }
  ExprPtr expression(bool with_cond) {
    Depth d(*this, cur().pos);
    if (!with_cond) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = node(Expr::kCond, cur().pos);
      next();
      c->args.push_back(parse_or());
      c->args.insert(c->args.begin() + 1, std::move(e));
      c->args.push_back(skip_name("else") ? expression(true) : nullptr);
      e = std::move(c);
    }
    return e;
  }
  ExprPtr binary_chain(Expr::Kind kind, const char* word, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (is_name(word)) {
      auto b = node(kind, cur().pos);
      next();
      b->args.push_back(std::move(e));
      b->args.push_back((this->*sub)());
      e = std::move(b);
    }
    return e;
  }
  ExprPtr parse_or() { return binary_chain(Expr::kOr, "or", &Parser::parse_and); }
  ExprPtr parse_and() { return binary_chain(Expr::kAnd, "and", &Parser::parse_not); }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this, cur().pos);
      auto n = node(Expr::kUnary, cur().pos);
      n->name = "not";
      next();
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    for (;;) {
      if (cur().kind == Token::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        ops.push_back(cur().text);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && peek().kind == Token::kName && peek().text == "in") {
        ops.push_back("not in");
        next();
        next();
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto c = node(Expr::kCompare, pos);
    c->args.push_back(std::move(first));
    for (auto& o : operands) c->args.push_back(std::move(o));
    c->ops = std::move(ops);
    return c;
  }
  ExprPtr binop_loop(std::initializer_list<const char*> ops, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    for (;;) {
      const char* found = nullptr;
      for (const char* o : ops)
        if (is_op(o)) found = o;
      if (!found) return e;
      auto b = node(Expr::kBinary, cur().pos);
      b->name = found;
      next();
      b->args.push_back(std::move(e));
      b->args.push_back((this->*sub)());
      e = std::move(b);
    }
  }
  ExprPtr parse_math1() { return binop_loop({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return binop_loop({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return binop_loop({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return binop_loop({"**"}, &Parser::parse_unary_f); }
  ExprPtr parse_unary_f() { return parse_unary(true); }
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::kUnary, cur().pos);
      e->name = cur().text;
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    const uint32_t pos = t.pos;
    if (t.kind == Token::kName) {
      auto e = node(Expr::kLiteral, pos);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::kName;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.kind == Token::kString) {
      std::string s;
      while (cur().kind == Token::kString) {
        s += cur().text;
        next();
      }
      auto e = node(Expr::kLiteral, pos);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.kind == Token::kInt || t.kind == Token::kFloat) {
      auto e = node(Expr::kLiteral, pos);
      errno = 0;
      if (t.kind == Token::kFloat) {
        e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
      } else {
        int base = 10;
        std::string digits = t.text;
        if (digits.size() > 1 && digits[0] == '0' &&
            std::isalpha(static_cast<unsigned char>(digits[1]))) {
          const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
          base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
          digits = digits.substr(2);
        }
        char* end = nullptr;
        const long long v = std::strtoll(digits.c_str(), &end, base);
        if (errno == ERANGE || digits.empty() || *end)
          syntax_error(pos, "integer literal " + t.text + " out of range (64-bit integers)");
        e->value = Value::integer(v);
      }
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = node(Expr::kList, pos);
      next();
      while (!skip_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (skip_op("]")) break;
        e->args.push_back(expression(true));
      }
      return e;
    }
    if (is_op("{")) {
      auto e = node(Expr::kDict, pos);
      next();
      while (!skip_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (skip_op("}")) break;
        e->args.push_back(expression(true));
        expect_op(":");
        e->args.push_back(expression(true));
      }
      return e;
    }
    syntax_error(pos, "unexpected " + describe(t));
  }
  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        auto a = node(Expr::kAttr, cur().pos);
        next();
        if (cur().kind == Token::kName) {
          a->name = cur().text;
        } else if (cur().kind == Token::kInt) {
          a->kind = Expr::kItem;
          auto idx = node(Expr::kLiteral, cur().pos);
          idx->value = Value::integer(std::strtoll(cur().text.c_str(), nullptr, 10));
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
          next();
          e = std::move(a);
          continue;
        } else {
          syntax_error(cur().pos, "expected a name or number after '.'");
        }
        next();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::kCall);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_subscript(ExprPtr e) {
    auto s = node(Expr::kItem, cur().pos);
    next();  // [
    s->args.push_back(std::move(e));
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = expression(true);
    while (colons < 2 && skip_op(":")) {
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = expression(true);
    }
    if (colons == 0 && is_op(",")) syntax_error(cur().pos, "tuple subscripts are not supported");
    expect_op("]");
    if (colons == 0) {
      s->args.push_back(std::move(parts[0]));
    } else {
      s->kind = Expr::kSlice;
      for (auto& p : parts) s->args.push_back(std::move(p));
    }
    return s;
  }
  // Call arguments after '(' into e->args (after what is there) and e->kwargs.
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**"))
        syntax_error(cur().pos, "*args and **kwargs are not supported");
      if (cur().kind == Token::kName && peek().kind == Token::kOp && peek().text == "=") {
        std::string k = expect_name();
        next();
        e.kwargs.emplace_back(std::move(k), expression(true));
      } else {
        if (!e.kwargs.empty())
          syntax_error(cur().pos, "positional argument after keyword argument");
        e.args.push_back(expression(true));
      }
    }
  }
  ExprPtr parse_call(ExprPtr callee, Expr::Kind kind) {
    auto c = node(kind, cur().pos);
    c->args.push_back(std::move(callee));
    call_args(*c);
    return c;
  }
  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += "." + expect_name();
    }
    return n;
  }
  ExprPtr parse_filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        auto f = node(Expr::kFilter, cur().pos);
        next();
        f->name = dotted_name();
        f->builtin = find_filter(f->name);
        if (f->builtin < 0) syntax_error(f->pos, "no filter named '" + f->name + "'");
        f->args.push_back(std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        auto t = node(Expr::kTest, cur().pos);
        next();
        t->negate = skip_name("not");
        t->name = dotted_name();
        t->builtin = find_test(t->name);
        if (t->builtin < 0) syntax_error(t->pos, "no test named '" + t->name + "'");
        t->args.push_back(std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
          call_args(*t);
        } else if ((c.kind == Token::kName || c.kind == Token::kString || c.kind == Token::kInt ||
                    c.kind == Token::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) syntax_error(c.pos, "you cannot chain multiple tests with is");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::kCall);
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).parse_all();
}

}  // namespace tmpl
}  // namespace oslo
