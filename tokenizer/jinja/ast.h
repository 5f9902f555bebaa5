// The parsed form of a template: expressions and statements, each with the line it starts on.
// Built by Parse (parser.h), walked by the interpreter; immutable once built.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace tandem::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items: key, value, key, value, ...
    kGetAttr,    // items[0].name
    kGetItem,    // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null where left out)
    kCall,       // items[0](items[1:], kwargs)
    kFilter,     // items[0] | name(items[1:], kwargs); items[0] null in a filter block
    kTest,       // items[0] is [not] name(items[1:], kwargs)
    kNeg,        // -items[0]
    kPos,        // +items[0]
    kNot,        // not items[0]
    kBinary,     // items[0] name items[1]: + - * / // % ** ~
    kAnd,        // items[0] and items[1]
    kOr,         // items[0] or items[1]
    kCompare,    // items[0] ops[0] items[1] ops[1] items[2] ...: == != < <= > >= in notin
    kCondition,  // items[1] if items[0] else items[2] (items[2] null when left out)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body), else_body
    kFor,          // for targets in expr [if condition]: body, else_body
    kSet,          // set targets = expr; or ns.attribute = expr (attribute set)
    kSetBlock,     // set targets[0]: body
    kMacro,        // macro name(params): body
    kCallBlock,    // call [(params)] expr: body, the caller
    kFilterBlock,  // filter expr (kFilter chain on null): body
    kGeneration,   // generation: body, its output tracked as assistant text
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::string name;       // macro name
  std::string attribute;  // set ns.attribute
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>>
      params;  // macro parameters and their defaults (null: none)
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

}  // namespace tandem::jinja
