// A Jinja template as Hugging Face renders chat templates: jinja2's syntax and semantics for the
// subset chat templates use (parser.h lists the statements, builtins.h and methods.h the filters,
// tests, methods and globals), under the settings transformers' apply_chat_template sets
// (trim_blocks, lstrip_blocks, loop controls, the generation tag, its tojson, raise_exception and
// strftime_now). Python semantics throughout: for-loop bodies are a scope of their own per
// iteration (a namespace carries state out), macros see the template's top-level names when they
// are called, undefined names print as "" and fail when used.
//
//   auto t = jinja::Template::Parse(source);             // InvalidArgument "line 3: ..."
//   auto r = t->Render(variables);                        // r->text, r->generation
//
// A render is bounded (RenderOptions): its output, its steps (every statement and expression
// counts one) and its macro call depth, so that a hostile template ends with ResourceExhausted
// instead of taking the host. raise_exception("...") ends it with FailedPrecondition carrying the
// template's message; every other error is InvalidArgument. Messages start with the line.
//
// A Template is immutable and thread-safe; each Render is independent.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/value.h"

namespace tandem::jinja {

struct Node;

struct RenderOptions {
  size_t max_output_bytes = 16u << 20;
  int64_t max_steps = 20'000'000;
  int max_call_depth = 64;
  std::function<std::time_t()> now;  // strftime_now's clock; null: the system clock
};

struct Rendered {
  std::string text;
  // Byte ranges [begin, end) of text that {% generation %} blocks wrote (Hugging Face's assistant
  // mask), in order.
  std::vector<std::pair<size_t, size_t>> generation;
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source);
  // `variables` are the render's names (messages, add_generation_prompt, bos_token, tools, ...),
  // over the globals.
  absl::StatusOr<Rendered> Render(const Dict& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<Node>> body_;
};

}  // namespace tandem::jinja
