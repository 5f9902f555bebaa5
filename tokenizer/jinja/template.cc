#include "tokenizer/jinja/template.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"

namespace tandem::jinja {
namespace {

struct Scope {
  explicit Scope(Scope* parent_scope = nullptr) : parent(parent_scope) {}
  Scope* parent;
  Dict vars;

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (const Value* v = s->vars.Find(name)) return v;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// The line, once, at the front of an error's message.
absl::Status AtLine(const absl::Status& status, int line) {
  if (status.ok() || absl::StartsWith(status.message(), "line ")) return status;
  return absl::Status(status.code(), absl::StrCat("line ", line, ": ", status.message()));
}

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, const Dict& variables) : options_(options) {
    std::function<std::time_t()> now = options.now;
    if (!now)
      now = [] { return std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()); };
    root_.vars = Globals(std::move(now));
    for (const auto& [name, value] : variables.items) root_.vars.Set(name, value);
  }

  absl::StatusOr<Rendered> Run(const Body& body) {
    out_ = &rendered_.text;
    absl::StatusOr<Flow> flow = ExecBody(body, root_);
    if (!flow.ok()) return flow.status();
    return std::move(rendered_);
  }

 private:
  // Counts `cost` steps: one a statement or expression, one an item of a list a call, a filter
  // or a loop makes, so that range(100000) nested in a loop counts what it does.
  absl::Status Step(int line, int64_t cost = 1) {
    steps_ += cost;
    if (steps_ > options_.max_steps) {
      return absl::ResourceExhaustedError(
          absl::StrCat("line ", line, ": the template ran past ", options_.max_steps, " steps"));
    }
    return absl::OkStatus();
  }

  absl::Status Emit(std::string_view text, int line) {
    if (out_->size() + text.size() > options_.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("line ", line, ": the template wrote past ",
                                                       options_.max_output_bytes, " bytes"));
    }
    out_->append(text);
    return absl::OkStatus();
  }

  // The output of `body` run in `scope`, written to a buffer of its own.
  absl::StatusOr<std::string> Capture(const Body& body, Scope& scope) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    absl::StatusOr<Flow> flow = ExecBody(body, scope);
    out_ = saved;
    if (!flow.ok()) return flow.status();
    return buffer;
  }

  absl::StatusOr<Flow> ExecBody(const Body& body, Scope& scope) {
    for (const Node& node : body) {
      absl::StatusOr<Flow> flow = Exec(node, scope);
      if (!flow.ok()) return AtLine(flow.status(), node.line);
      if (*flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars.Set(targets[0], value);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(List items, Iterate(value));
    if (items.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          items.size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ",
          targets.size(), ", got ", items.size(), ")"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars.Set(targets[i], items[i]);
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> Exec(const Node& node, Scope& scope) {
    RETURN_IF_ERROR(Step(node.line));
    switch (node.kind) {
      case Node::Kind::kText:
        RETURN_IF_ERROR(Emit(node.text, node.line));
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*node.expr, scope));
        RETURN_IF_ERROR(Emit(v.Str(), node.line));
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [condition, body] : node.branches) {
          ASSIGN_OR_RETURN(Value v, Eval(*condition, scope));
          if (v.Truthy()) return ExecBody(body, scope);
        }
        return ExecBody(node.else_body, scope);
      case Node::Kind::kFor:
        return ExecFor(node, scope);
      case Node::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*node.expr, scope));
        if (node.attribute.empty()) {
          RETURN_IF_ERROR(Assign(node.targets, v, scope));
          return Flow::kNormal;
        }
        const Value* ns = scope.Find(node.targets[0]);
        if (!ns || !ns->is_namespace()) {
          return absl::InvalidArgumentError(absl::StrCat("cannot assign attribute '",
                                                         node.attribute, "' on '", node.targets[0],
                                                         "', which is not a namespace"));
        }
        ns->mutable_namespace().Set(node.attribute, std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        ASSIGN_OR_RETURN(std::string text, Capture(node.body, scope));
        Value v = Value::String(std::move(text));
        if (node.expr) {
          ASSIGN_OR_RETURN(v, EvalFilters(*node.expr, v, scope));
        }
        scope.vars.Set(node.targets[0], std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        scope.vars.Set(node.name, Value::MakeCallable(node.name, [this, &node](CallArgs& args) {
                         return CallMacro(node, args);
                       }));
        return Flow::kNormal;
      case Node::Kind::kCallBlock: {
        const Node* block = &node;
        Scope* site = &scope;
        Value caller = Value::MakeCallable(
            "caller", [this, block, site](CallArgs& args) -> absl::StatusOr<Value> {
              Scope inner(site);
              for (size_t i = 0; i < block->params.size(); ++i) {
                inner.vars.Set(block->params[i].first,
                               i < args.positional.size() ? args.positional[i] : Value());
              }
              ASSIGN_OR_RETURN(std::string text, Capture(block->body, inner));
              return Value::String(std::move(text));
            });
        ASSIGN_OR_RETURN(Value v, EvalCall(*node.expr, scope, &caller));
        RETURN_IF_ERROR(Emit(v.Str(), node.line));
        return Flow::kNormal;
      }
      case Node::Kind::kFilterBlock: {
        ASSIGN_OR_RETURN(std::string text, Capture(node.body, scope));
        ASSIGN_OR_RETURN(Value v, EvalFilters(*node.expr, Value::String(std::move(text)), scope));
        RETURN_IF_ERROR(Emit(v.Str(), node.line));
        return Flow::kNormal;
      }
      case Node::Kind::kGeneration: {
        const bool tracked = out_ == &rendered_.text;
        const size_t begin = out_->size();
        ASSIGN_OR_RETURN(Flow flow, ExecBody(node.body, scope));
        if (tracked) rendered_.generation.emplace_back(begin, out_->size());
        return flow;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Node& node, Scope& scope) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr, scope));
    ASSIGN_OR_RETURN(List all, Iterate(iterable));
    RETURN_IF_ERROR(Step(node.line, static_cast<int64_t>(all.size())));
    List items;
    for (Value& item : all) {
      if (node.condition) {
        Scope test(&scope);
        RETURN_IF_ERROR(Assign(node.targets, item, test));
        ASSIGN_OR_RETURN(Value keep, Eval(*node.condition, test));
        if (!keep.Truthy()) continue;
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) {
      Scope inner(&scope);
      ASSIGN_OR_RETURN(Flow flow, ExecBody(node.else_body, inner));
      (void)flow;
      return Flow::kNormal;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Scope inner(&scope);
      RETURN_IF_ERROR(Assign(node.targets, items[i], inner));
      Dict loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
      loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
      loop.Set("cycle",
               Value::MakeCallable("loop.cycle", [i](CallArgs& args) -> absl::StatusOr<Value> {
                 if (args.positional.empty())
                   return absl::InvalidArgumentError("no items for cycling given");
                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
               }));
      inner.vars.Set("loop", Value::MakeNamespace(std::move(loop)));
      ASSIGN_OR_RETURN(Flow flow, ExecBody(node.body, inner));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Value> CallMacro(const Node& macro, CallArgs& args,
                                  const Value* caller = nullptr) {
    if (depth_ >= options_.max_call_depth) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "macro '", macro.name, "' called deeper than ", options_.max_call_depth, " levels"));
    }
    Scope scope(&root_);
    List varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < macro.params.size()) {
        scope.vars.Set(macro.params[i].first, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Dict kwargs;
    for (const auto& [key, value] : args.keyword) {
      bool parameter = false;
      for (size_t i = 0; i < macro.params.size(); ++i) {
        if (macro.params[i].first != key) continue;
        if (i < args.positional.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "macro '", macro.name, "' got multiple values for argument '", key, "'"));
        }
        parameter = true;
      }
      if (parameter || key == "caller") {
        scope.vars.Set(key, value);
      } else {
        kwargs.Set(key, value);
      }
    }
    if (caller) scope.vars.Set("caller", *caller);
    ++depth_;
    for (size_t i = args.positional.size(); i < macro.params.size(); ++i) {
      const auto& [name, default_value] = macro.params[i];
      if (scope.vars.Find(name)) continue;
      if (default_value) {
        absl::StatusOr<Value> v = Eval(*default_value, scope);
        if (!v.ok()) {
          --depth_;
          return v.status();
        }
        scope.vars.Set(name, *v);
      } else {
        scope.vars.Set(name,
                       Value::Undefined(absl::StrCat("parameter '", name, "' was not provided")));
      }
    }
    scope.vars.Set("varargs", Value::MakeList(std::move(varargs)));
    scope.vars.Set("kwargs", Value::MakeDict(std::move(kwargs)));
    absl::StatusOr<std::string> text = Capture(macro.body, scope);
    --depth_;
    if (!text.ok()) return text.status();
    return Value::String(*std::move(text));
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, Scope& scope) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.items[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> EvalCall(const Expr& e, Scope& scope, const Value* caller) {
    ASSIGN_OR_RETURN(Value callee, Eval(*e.items[0], scope));
    if (callee.is_undefined()) {
      return absl::InvalidArgumentError(callee.string().empty() ? "calling an undefined value"
                                                                : callee.string());
    }
    if (!callee.is_callable()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", callee.TypeName(), "' object is not callable"));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
    if (caller) args.keyword.emplace_back("caller", *caller);
    ASSIGN_OR_RETURN(Value result, callee.callable().call(args));
    if (result.is_list()) RETURN_IF_ERROR(Step(e.line, static_cast<int64_t>(result.list().size())));
    return result;
  }

  // A chain of kFilter expressions applied to `input` (a filter block's or a block set's text).
  absl::StatusOr<Value> EvalFilters(const Expr& e, Value input, Scope& scope) {
    Value operand = std::move(input);
    if (e.items[0]) {
      ASSIGN_OR_RETURN(operand, EvalFilters(*e.items[0], std::move(operand), scope));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
    return ApplyFilter(e.name, operand, args);
  }

  absl::StatusOr<Value> Eval(const Expr& e, Scope& scope) {
    RETURN_IF_ERROR(Step(e.line));
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName: {
        if (const Value* v = scope.Find(e.name)) return *v;
        return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& item : e.items) {
          ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
          items.push_back(std::move(v));
        }
        return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.items[i], scope));
          if (!key.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat("a dict key must be a string, not ", key.TypeName()));
          }
          ASSIGN_OR_RETURN(Value v, Eval(*e.items[i + 1], scope));
          dict.Set(key.string(), std::move(v));
        }
        return Value::MakeDict(std::move(dict));
      }
      case Expr::Kind::kGetAttr: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.items[0], scope));
        return GetAttribute(object, e.name);
      }
      case Expr::Kind::kGetItem: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.items[0], scope));
        ASSIGN_OR_RETURN(Value key, Eval(*e.items[1], scope));
        return GetItem(object, key);
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.items[0], scope));
        Value parts[3];
        for (int k = 0; k < 3; ++k) {
          if (e.items[k + 1]) {
            ASSIGN_OR_RETURN(parts[k], Eval(*e.items[k + 1], scope));
          }
        }
        return GetSlice(object, e.items[1] ? &parts[0] : nullptr, e.items[2] ? &parts[1] : nullptr,
                        e.items[3] ? &parts[2] : nullptr);
      }
      case Expr::Kind::kCall:
        return EvalCall(e, scope, nullptr);
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.items[0], scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        ASSIGN_OR_RETURN(Value result, ApplyFilter(e.name, operand, args));
        if (result.is_list())
          RETURN_IF_ERROR(Step(e.line, static_cast<int64_t>(result.list().size())));
        return result;
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.items[0], scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
        ASSIGN_OR_RETURN(bool pass, ApplyTest(e.name, operand, args));
        return Value::Bool(pass != e.negated);
      }
      case Expr::Kind::kNeg: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.items[0], scope));
        return Negate(v);
      }
      case Expr::Kind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.items[0], scope));
        if (!v.is_number())
          return absl::InvalidArgumentError(
              absl::StrCat("bad operand type for unary +: '", v.TypeName(), "'"));
        return v;
      }
      case Expr::Kind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.items[0], scope));
        return Value::Bool(!v.Truthy());
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.items[0], scope));
        ASSIGN_OR_RETURN(Value b, Eval(*e.items[1], scope));
        return BinaryOp(e.name, a, b);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.items[0], scope));
        if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
        return Eval(*e.items[1], scope);
      }
      case Expr::Kind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.items[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.items[i + 1], scope));
          ASSIGN_OR_RETURN(bool pass, CompareOp(e.ops[i], left, right));
          if (!pass) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCondition: {
        ASSIGN_OR_RETURN(Value test, Eval(*e.items[0], scope));
        if (test.Truthy()) return Eval(*e.items[1], scope);
        if (e.items[2]) return Eval(*e.items[2], scope);
        return Value::Undefined("the conditional expression has no else");
      }
    }
    return absl::InternalError("unknown expression");
  }

  const RenderOptions& options_;
  Scope root_;
  Rendered rendered_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(Body body, jinja::Parse(source));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

absl::StatusOr<Rendered> Template::Render(const Dict& variables,
                                          const RenderOptions& options) const {
  Interpreter interpreter(options, variables);
  return interpreter.Run(*body_);
}

}  // namespace tandem::jinja
