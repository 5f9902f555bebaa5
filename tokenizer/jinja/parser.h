// A template's tokens (lexer.h) parsed into statements and expressions (ast.h) with jinja2's
// grammar and precedence: conditional expressions, or/and/not, chained comparisons with in and
// not in, + - then ~ then * / // % then ** (left-associative, as in Jinja), unary minus, then
// filters and tests, which bind to the whole unary expression ("-2|abs" is 2). Statements: if,
// elif, else; for with an if filter, tuple targets, else, break and continue; set (a name, a
// tuple, a namespace attribute, or a block); macro; call; filter blocks; generation (Hugging
// Face's assistant-mask extension). include, extends, import and block are refused: a chat
// template has no loader.
//
// Errors are InvalidArgument naming the line and what was found: "line 4: unknown tag 'with'",
// "line 7: expected 'endfor', found the end of the template". Stateless and thread-safe.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/ast.h"

namespace tandem::jinja {

absl::StatusOr<Body> Parse(std::string_view source);

}  // namespace tandem::jinja
