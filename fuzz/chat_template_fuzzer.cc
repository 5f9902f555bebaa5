// libFuzzer target: the chat-template interpreter (tokenizer/jinja/) on arbitrary template text,
// rendered with a fixed conversation as apply_chat_template passes it. Beyond "no crash, no hang,
// no leak": every error is one of the interpreter's codes (InvalidArgument, FailedPrecondition from
// raise_exception, ResourceExhausted from a bound), and a render that succeeds stays within the
// output bound. The render bounds are small so that a slow template is found as a limit, not a
// timeout.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja/template.h"

using tandem::jinja::Dict;
using tandem::jinja::List;
using tandem::jinja::Value;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto t = tandem::jinja::Template::Parse(source);
  if (!t.ok()) {
    if (t.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  List messages;
  for (const char* role : {"system", "user", "assistant"}) {
    Dict message;
    message.Set("role", Value::String(role));
    message.Set("content", Value::String(std::string("<image>\n ") + role + " ü"));
    messages.push_back(Value::MakeDict(std::move(message)));
  }
  Dict variables;
  variables.Set("messages", Value::MakeList(std::move(messages)));
  variables.Set("add_generation_prompt", Value::Bool(true));
  variables.Set("bos_token", Value::String("<s>"));
  variables.Set("eos_token", Value::String("</s>"));
  variables.Set("tools", Value::None());
  tandem::jinja::RenderOptions options;
  options.max_output_bytes = 1 << 20;
  options.max_steps = 200'000;
  options.max_call_depth = 32;
  options.now = [] { return std::time_t{0}; };
  auto rendered = t->Render(variables, options);
  if (!rendered.ok()) {
    const auto code = rendered.status().code();
    if (code != absl::StatusCode::kInvalidArgument &&
        code != absl::StatusCode::kFailedPrecondition &&
        code != absl::StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "unexpected error code: %s\n", rendered.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  if (rendered->text.size() > options.max_output_bytes) std::abort();
  return 0;
}
