// The template grammar as one recursive-descent parser (parser.h): statements, then expressions by
// precedence. Its 700 lines stay one file because each rule calls the next in one chain, as Jinja's
// own parser.py does; the lexer, the values, the filters and the renderer are files of their own.
#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/jinja/lexer.h"

namespace tandem::jinja {
namespace {

using Type = Token::Type;

// Nesting deeper than this is refused, so a hostile template cannot overflow the stack.
constexpr int kMaxNesting = 200;

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

Node MakeNode(Node::Kind kind, int line) {
  Node node;
  node.kind = kind;
  node.line = line;
  return node;
}

std::string Describe(const Token& t) {
  switch (t.type) {
    case Type::kEnd:
      return "the end of the template";
    case Type::kData:
      return "text";
    case Type::kVariableBegin:
      return "'{{'";
    case Type::kVariableEnd:
      return "'}}'";
    case Type::kBlockBegin:
      return "'{%'";
    case Type::kBlockEnd:
      return "'%}'";
    case Type::kString:
      return "a string";
    case Type::kInteger:
    case Type::kFloat:
      return "a number";
    default:
      return absl::StrCat("'", t.text, "'");
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    return body;
  }

 private:
  const Token& Current() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const {
    return Current().type == Type::kOperator && Current().text == op;
  }
  bool IsName(std::string_view name) const {
    return Current().type == Type::kName && Current().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  absl::Status Fail(std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", Current().line, ": ", std::string(message)));
  }
  absl::Status Expect(std::string_view op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Fail(absl::StrCat("expected '", std::string(op), "', found ", Describe(Current())));
  }
  absl::Status ExpectBlockEnd() {
    if (Current().type == Type::kBlockEnd) {
      Next();
      return absl::OkStatus();
    }
    return Fail(absl::StrCat("expected '%}', found ", Describe(Current())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Current().type != Type::kName)
      return Fail(absl::StrCat("expected a name, found ", Describe(Current())));
    std::string name = Current().text;
    Next();
    return name;
  }
  absl::Status Enter() {
    if (++depth_ > kMaxNesting) return Fail(absl::StrCat("nesting deeper than ", kMaxNesting));
    return absl::OkStatus();
  }

  // Statements up to one of `ends` (a block tag's name), which is consumed with its "{%" and name;
  // `*end` says which. With no ends, up to the end of the template.
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string* end) {
    RETURN_IF_ERROR(Enter());
    Body body;
    while (true) {
      const Token& t = Current();
      if (t.type == Type::kEnd) {
        if (ends.size() == 0) break;
        return Fail(absl::StrCat("expected '", std::string(*(ends.end() - 1)),
                                 "', found the end of the template"));
      }
      if (t.type == Type::kData) {
        Node node = MakeNode(Node::Kind::kText, t.line);
        node.text = t.text;
        body.push_back(std::move(node));
        Next();
        continue;
      }
      if (t.type == Type::kVariableBegin) {
        Next();
        Node node = MakeNode(Node::Kind::kOutput, t.line);
        ASSIGN_OR_RETURN(node.expr, ParseTuple(true));
        if (Current().type != Type::kVariableEnd)
          return Fail(absl::StrCat("expected '}}', found ", Describe(Current())));
        Next();
        body.push_back(std::move(node));
        continue;
      }
      if (t.type != Type::kBlockBegin) return Fail(absl::StrCat("unexpected ", Describe(t)));
      Next();
      if (Current().type != Type::kName)
        return Fail(absl::StrCat("expected a tag name, found ", Describe(Current())));
      for (std::string_view candidate : ends) {
        if (Current().text == candidate) {
          *end = Current().text;
          Next();
          --depth_;
          return body;
        }
      }
      ASSIGN_OR_RETURN(Node node, ParseStatement());
      body.push_back(std::move(node));
    }
    --depth_;
    return body;
  }

  absl::StatusOr<Node> ParseStatement() {
    const Token& t = Current();
    const std::string tag = t.text;
    const int line = t.line;
    Next();
    if (tag == "if") return ParseIf(line);
    if (tag == "for") return ParseFor(line);
    if (tag == "set") return ParseSet(line);
    if (tag == "macro") return ParseMacro(line);
    if (tag == "call") return ParseCall(line);
    if (tag == "filter") return ParseFilterBlock(line);
    if (tag == "generation") {
      Node node = MakeNode(Node::Kind::kGeneration, line);
      RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      ASSIGN_OR_RETURN(node.body, ParseBody({"endgeneration"}, &end));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (tag == "break" || tag == "continue") {
      if (loops_ == 0) return Fail(absl::StrCat("'", tag, "' outside a loop"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return MakeNode(tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (tag == "include" || tag == "extends" || tag == "import" || tag == "from" ||
        tag == "block") {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": '", tag,
                       "' is not supported: a chat template has no other templates to load"));
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": unknown tag '", tag, "'"));
  }

  absl::StatusOr<Node> ParseIf(int line) {
    Node node = MakeNode(Node::Kind::kIf, line);
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple(true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
      node.branches.emplace_back(std::move(condition), std::move(body));
      if (end == "elif") continue;
      RETURN_IF_ERROR(ExpectBlockEnd());
      if (end == "else") {
        ASSIGN_OR_RETURN(node.else_body, ParseBody({"endif"}, &end));
        RETURN_IF_ERROR(ExpectBlockEnd());
      }
      return node;
    }
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = SkipOp("(");
    do {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets.push_back(std::move(name));
    } while (SkipOp(",") && Current().type == Type::kName && !IsName("in"));
    if (parenthesized) RETURN_IF_ERROR(Expect(")"));
    return targets;
  }

  absl::StatusOr<Node> ParseFor(int line) {
    Node node = MakeNode(Node::Kind::kFor, line);
    ASSIGN_OR_RETURN(node.targets, ParseTargets());
    if (!SkipName("in")) return Fail(absl::StrCat("expected 'in', found ", Describe(Current())));
    ASSIGN_OR_RETURN(node.expr, ParseTuple(false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(node.condition, ParseExpression(true));
    }
    if (IsName("recursive")) return Fail("recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ++loops_;
    ASSIGN_OR_RETURN(node.body, ParseBody({"else", "endfor"}, &end));
    --loops_;
    RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "else") {
      ASSIGN_OR_RETURN(node.else_body, ParseBody({"endfor"}, &end));
      RETURN_IF_ERROR(ExpectBlockEnd());
    }
    return node;
  }

  absl::StatusOr<Node> ParseSet(int line) {
    Node node = MakeNode(Node::Kind::kSet, line);
    if (Current().type == Type::kName && Peek().type == Type::kOperator && Peek().text == ".") {
      node.targets.push_back(Current().text);
      Next();
      Next();
      ASSIGN_OR_RETURN(node.attribute, ExpectName());
    } else {
      ASSIGN_OR_RETURN(node.targets, ParseTargets());
    }
    if (SkipOp("=")) {
      ASSIGN_OR_RETURN(node.expr, ParseTuple(true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (!node.attribute.empty() || node.targets.size() != 1)
      return Fail("a block set takes one name");
    node.kind = Node::Kind::kSetBlock;
    if (IsOp("|")) {
      ASSIGN_OR_RETURN(node.expr, ParseFilter(nullptr, false));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ASSIGN_OR_RETURN(node.body, ParseBody({"endset"}, &end));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  absl::Status ParseParams(Node& node) {
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!node.params.empty()) RETURN_IF_ERROR(Expect(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr default_value;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(default_value, ParseExpression(true));
      } else if (!node.params.empty() && node.params.back().second) {
        return Fail(
            absl::StrCat("parameter '", name, "' without a default follows one with a default"));
      }
      node.params.emplace_back(std::move(name), std::move(default_value));
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<Node> ParseMacro(int line) {
    Node node = MakeNode(Node::Kind::kMacro, line);
    ASSIGN_OR_RETURN(node.name, ExpectName());
    RETURN_IF_ERROR(ParseParams(node));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    ASSIGN_OR_RETURN(node.body, ParseBody({"endmacro"}, &end));
    loops_ = loops;
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  absl::StatusOr<Node> ParseCall(int line) {
    Node node = MakeNode(Node::Kind::kCallBlock, line);
    if (IsOp("(")) RETURN_IF_ERROR(ParseParams(node));
    ASSIGN_OR_RETURN(node.expr, ParseExpression(true));
    if (node.expr->kind != Expr::Kind::kCall) return Fail("expected a call");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    ASSIGN_OR_RETURN(node.body, ParseBody({"endcall"}, &end));
    loops_ = loops;
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  absl::StatusOr<Node> ParseFilterBlock(int line) {
    Node node = MakeNode(Node::Kind::kFilterBlock, line);
    ASSIGN_OR_RETURN(node.expr, ParseFilter(nullptr, true));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ASSIGN_OR_RETURN(node.body, ParseBody({"endfilter"}, &end));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  // Expressions separated by commas: one alone is itself, more (or a trailing comma) a tuple.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition, bool parenthesized = false) {
    const int line = Current().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        comma = true;
      }
      if (Current().type == Type::kBlockEnd || Current().type == Type::kVariableEnd || IsOp(")") ||
          (!with_condition && (IsName("if") || IsName("recursive")))) {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condition));
      items.push_back(std::move(item));
    }
    if (items.empty() && !parenthesized)
      return Fail(absl::StrCat("expected an expression, found ", Describe(Current())));
    if (items.size() == 1 && !comma) return std::move(items[0]);
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->items = std::move(items);
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition) {
    RETURN_IF_ERROR(Enter());
    absl::StatusOr<ExprPtr> out = with_condition ? ParseCondition() : ParseOr();
    --depth_;
    return out;
  }

  absl::StatusOr<ExprPtr> ParseCondition() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Current().line;
      Next();
      auto condition = MakeExpr(Expr::Kind::kCondition, line);
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      condition->items.push_back(std::move(test));
      condition->items.push_back(std::move(expr));
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      condition->items.push_back(std::move(otherwise));
      expr = std::move(condition);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> Binary(Expr::Kind kind, std::string op, ExprPtr left, ExprPtr right) {
    auto e = MakeExpr(kind, left->line);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (SkipName("or")) {
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kOr, "or", std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (SkipName("and")) {
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kAnd, "and", std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Current().line;
      Next();
      RETURN_IF_ERROR(Enter());
      auto e = MakeExpr(Expr::Kind::kNot, line);
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --depth_;
      e->items.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto compare = MakeExpr(Expr::Kind::kCompare, first->line);
    compare->items.push_back(std::move(first));
    while (true) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
        op = Current().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == Type::kName && Peek().text == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      compare->ops.push_back(op);
      compare->items.push_back(std::move(operand));
    }
    if (compare->ops.empty()) return std::move(compare->items[0]);
    return compare;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      std::string op = Current().text;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kBinary, op, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (SkipOp("~")) {
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kBinary, "~", std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Current().text;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kBinary, op, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (SkipOp("**")) {
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      ASSIGN_OR_RETURN(left, Binary(Expr::Kind::kBinary, "**", std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    RETURN_IF_ERROR(Enter());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Current().line);
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->items.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Current();
    const int line = t.line;
    if (t.type == Type::kName) {
      auto e = MakeExpr(Expr::Kind::kLiteral, line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      Next();
      return e;
    }
    if (t.type == Type::kString) {
      std::string text;
      while (Current().type == Type::kString) {
        text += Current().text;
        Next();
      }
      auto e = MakeExpr(Expr::Kind::kLiteral, line);
      e->value = Value::String(std::move(text));
      return e;
    }
    if (t.type == Type::kInteger || t.type == Type::kFloat) {
      auto e = MakeExpr(Expr::Kind::kLiteral, line);
      e->value = t.type == Type::kInteger ? Value::Int(t.integer) : Value::Float(t.real);
      Next();
      return e;
    }
    if (SkipOp("(")) {
      ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, /*parenthesized=*/true));
      RETURN_IF_ERROR(Expect(")"));
      return inner;
    }
    if (IsOp("[") || IsOp("{")) {
      const bool dict = IsOp("{");
      const std::string close = dict ? "}" : "]";
      Next();
      auto e = MakeExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, line);
      while (!IsOp(close)) {
        if (!e->items.empty()) RETURN_IF_ERROR(Expect(","));
        if (IsOp(close)) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
        e->items.push_back(std::move(item));
        if (dict) {
          RETURN_IF_ERROR(Expect(":"));
          ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
          e->items.push_back(std::move(value));
        }
      }
      Next();
      return e;
    }
    return Fail(absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Current().line;
      if (SkipOp(".")) {
        if (Current().type == Type::kInteger) {
          auto e = MakeExpr(Expr::Kind::kGetItem, line);
          auto index = MakeExpr(Expr::Kind::kLiteral, line);
          index->value = Value::Int(Current().integer);
          Next();
          e->items.push_back(std::move(node));
          e->items.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        auto e = MakeExpr(Expr::Kind::kGetAttr, line);
        ASSIGN_OR_RETURN(e->name, ExpectName());
        e->items.push_back(std::move(node));
        node = std::move(e);
      } else if (SkipOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCallArgs(MakeExpr(Expr::Kind::kCall, line), std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    std::vector<ExprPtr> parts;  // start, stop, step
    bool slice = false;
    if (!IsOp(":")) {
      ASSIGN_OR_RETURN(ExprPtr index, ParseExpression(true));
      parts.push_back(std::move(index));
    } else {
      parts.push_back(nullptr);
    }
    for (int k = 0; k < 2 && SkipOp(":"); ++k) {
      slice = true;
      ExprPtr part;
      if (!IsOp(":") && !IsOp("]")) {
        ASSIGN_OR_RETURN(part, ParseExpression(true));
      }
      parts.push_back(std::move(part));
    }
    RETURN_IF_ERROR(Expect("]"));
    auto e = MakeExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
    e->items.push_back(std::move(node));
    for (auto& part : parts) e->items.push_back(std::move(part));
    while (slice && e->items.size() < 4) e->items.push_back(nullptr);
    return e;
  }

  // "(" positional and keyword arguments ")", appended to `call` after `callee` (null for a
  // filter's or a test's operand, which the caller has put in place).
  absl::StatusOr<ExprPtr> ParseCallArgs(ExprPtr call, ExprPtr callee) {
    if (callee) call->items.push_back(std::move(callee));
    RETURN_IF_ERROR(Expect("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(Expect(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Fail("*args and **kwargs are not supported");
      if (Current().type == Type::kName && Peek().type == Type::kOperator && Peek().text == "=") {
        std::string name = Current().text;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        if (!call->kwargs.empty()) return Fail("a positional argument follows a keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->items.push_back(std::move(value));
      }
    }
    Next();
    return call;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        const int line = Current().line;
        ASSIGN_OR_RETURN(node, ParseCallArgs(MakeExpr(Expr::Kind::kCall, line), std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<std::string> DottedName() {
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&name, ".", part);
    }
    return name;
  }

  // "| name(args)" repeated; `inline_start`: the first filter has no "|" (a filter block).
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool inline_start) {
    while (IsOp("|") || inline_start) {
      if (!inline_start) Next();
      inline_start = false;
      auto filter = MakeExpr(Expr::Kind::kFilter, Current().line);
      ASSIGN_OR_RETURN(filter->name, DottedName());
      filter->items.push_back(std::move(node));
      if (IsOp("(")) {
        ASSIGN_OR_RETURN(filter, ParseCallArgs(std::move(filter), nullptr));
      }
      node = std::move(filter);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    auto test = MakeExpr(Expr::Kind::kTest, Current().line);
    Next();  // is
    test->negated = SkipName("not");
    ASSIGN_OR_RETURN(test->name, DottedName());
    test->items.push_back(std::move(node));
    const Token& t = Current();
    if (IsOp("(")) {
      ASSIGN_OR_RETURN(test, ParseCallArgs(std::move(test), nullptr));
    } else if ((t.type == Type::kName || t.type == Type::kString || t.type == Type::kInteger ||
                t.type == Type::kFloat || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Fail("tests cannot be chained with 'is'");
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      test->items.push_back(std::move(arg));
    }
    return test;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  return Parser(std::move(tokens)).Run();
}

}  // namespace tandem::jinja
