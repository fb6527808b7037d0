// The parsed template: expression and statement trees.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/template/value.hpp"

namespace oslo {
namespace tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind : uint8_t {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kTuple,    // args
    kDict,     // kwargs-like: keys in args[2i], values in args[2i+1]
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null children: omitted)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..], kwargs); negate
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kAnd,
    kOr,
    kCond,  // args[1] if args[0] else args[2] (args[2] null: no else)
  };
  Kind kind;
  uint32_t pos;
  bool negate = false;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  // Filters and tests resolved at parse time (an index into the builtins).
  int builtin = -1;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum Kind : uint8_t {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // targets in expr [if cond]: body; else_body
    kSet,       // targets = expr, or attr_target.attr = expr
    kSetBlock,  // {% set name %}body{% endset %}
    kMacro,     // name(params) body
    kBreak,
    kContinue,
    kScope,  // body rendered as is ({% generation %}) or in a new scope ({% with %})
  };
  Kind kind;
  uint32_t pos;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;  // for: the loop filter
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  // kMacro: parameters and their defaults (null: required); kScope ({% with %}): assignments.
  std::vector<std::pair<std::string, ExprPtr>> params;
  bool new_scope = false;
};

}  // namespace tmpl
}  // namespace oslo
