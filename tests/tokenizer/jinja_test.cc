// The interpreter's errors and bounds: what a broken or hostile template gets instead of a crash,
// a hang or the host's memory. (jinja_reference_test.cc holds what it renders.)
#include <gtest/gtest.h>

#include "tokenizer/jinja/template.h"

namespace tandem::jinja {
namespace {

absl::StatusOr<std::string> Render(const std::string& source, const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  Dict variables;
  variables.Set("messages", Value::MakeList({Value::String("m")}));
  auto rendered = t->Render(variables, options);
  if (!rendered.ok()) return rendered.status();
  return rendered->text;
}

void ExpectError(const std::string& source, absl::StatusCode code, const std::string& message,
                 const RenderOptions& options = {}) {
  auto out = Render(source, options);
  ASSERT_FALSE(out.ok()) << source << " rendered " << *out;
  EXPECT_EQ(out.status().code(), code) << out.status();
  EXPECT_EQ(std::string(out.status().message()), message);
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  ExpectError("{% for x in messages %}\n{{ x }", absl::StatusCode::kInvalidArgument,
              "line 2: unexpected '}'");
  ExpectError("a\n{% for x in messages %}{{ x }}", absl::StatusCode::kInvalidArgument,
              "line 2: expected 'endfor', found the end of the template");
  ExpectError("{% with a = 1 %}{% endwith %}", absl::StatusCode::kInvalidArgument,
              "line 1: unknown tag 'with'");
  ExpectError("\n\n{% include 'other.jinja' %}", absl::StatusCode::kInvalidArgument,
              "line 3: 'include' is not supported: a chat template has no other templates to load");
  ExpectError("{{ (1 + }}", absl::StatusCode::kInvalidArgument,
              "line 1: unexpected '}', expected ')'");
  ExpectError("{% break %}", absl::StatusCode::kInvalidArgument, "line 1: 'break' outside a loop");
  ExpectError("{{ 'open }}", absl::StatusCode::kInvalidArgument, "line 1: unterminated string");
  ExpectError("{# never closed", absl::StatusCode::kInvalidArgument,
              "line 1: missing end of comment tag");
}

TEST(Jinja, RuntimeErrorsNameTheLineAndTheValue) {
  ExpectError("\n{{ nothing.attribute }}", absl::StatusCode::kInvalidArgument,
              "line 2: 'nothing' is undefined");
  ExpectError("{{ 1 + 'a' }}", absl::StatusCode::kInvalidArgument,
              "line 1: unsupported operand type(s) for +: 'int' and 'str'");
  ExpectError("{{ 'a' + 1 }}", absl::StatusCode::kInvalidArgument,
              "line 1: can only concatenate str (not \"int\") to str");
  ExpectError("{{ messages|nope }}", absl::StatusCode::kInvalidArgument,
              "line 1: no filter named 'nope'");
  ExpectError("{{ 1 / 0 }}", absl::StatusCode::kInvalidArgument, "line 1: division by zero");
  ExpectError("{{ 9223372036854775807 + 1 }}", absl::StatusCode::kInvalidArgument,
              "line 1: integer overflow (past 64 bits)");
  // The sandbox: a list cannot be changed, so append is not an attribute and calling it fails.
  ExpectError("{{ messages.append(1) }}", absl::StatusCode::kInvalidArgument,
              "line 1: 'list object' has no attribute 'append'");
  ExpectError("{% set x = 1 %}{% set x.y = 2 %}", absl::StatusCode::kInvalidArgument,
              "line 1: cannot assign attribute 'y' on 'x', which is not a namespace");
  ExpectError("{{ raise_exception('Roles must alternate') }}",
              absl::StatusCode::kFailedPrecondition, "line 1: Roles must alternate");
}

TEST(Jinja, AHostileTemplateIsStoppedByItsBounds) {
  // An empty inner loop still counts its items: a budget of a million steps ends this in about 10.
  RenderOptions small;
  small.max_steps = 1'000'000;
  ExpectError("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              absl::StatusCode::kResourceExhausted, "line 1: the template ran past 1000000 steps",
              small);
  ExpectError("{{ range(100001) }}", absl::StatusCode::kInvalidArgument,
              "line 1: range too big: the sandbox refuses ranges past 100000 items");
  ExpectError("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}",
              absl::StatusCode::kResourceExhausted,
              "line 1: the template wrote past 16777216 bytes");
  ExpectError("{{ 'x' * 100000000 }}", absl::StatusCode::kInvalidArgument,
              "line 1: a repeated string past 64 MiB");
  ExpectError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
              absl::StatusCode::kResourceExhausted,
              "line 1: macro 'f' called deeper than 64 levels");
}

TEST(Jinja, DeepNestingIsRefusedWhenParsed) {
  auto out = Render("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "line 1: nesting deeper than 200");
  out = Render(std::string(300, ' ') + [] {
    std::string s;
    for (int i = 0; i < 300; ++i) s += "{% if true %}";
    return s;
  }());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "line 1: nesting deeper than 200");
}

TEST(Jinja, StrftimeNowReadsTheGivenClock) {
  RenderOptions options;
  options.now = [] { return std::time_t{1795780800}; };  // 2026-11-27 12:00 UTC
  auto out = Render("{{ strftime_now('%Y') }}", options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "2026");
}

}  // namespace
}  // namespace tandem::jinja
