// A Jinja template's tokens, as jinja2's lexer makes them with the settings Hugging Face renders
// chat templates with (trim_blocks and lstrip_blocks on, keep_trailing_newline off): text between
// tags, the tags' delimiters and the names, literals and operators inside them. Whitespace
// control ("{%-", "-%}", "{%+", "+%}") and the trimming are applied here, comments dropped and
// "{% raw %}" blocks turned into text, so the parser sees what renders.
//
// Errors are InvalidArgument with the line: "line 3: unexpected '}'", "line 1: unterminated
// string". Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::jinja {

struct Token {
  enum class Type {
    kData,
    kVariableBegin,
    kVariableEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInteger,
    kFloat,
    kOperator,
    kEnd
  };
  Type type;
  std::string text;  // data, a name, a string's value, an operator
  int64_t integer = 0;
  double real = 0;
  int line = 1;
};

absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace tandem::jinja
