// The interpreter against transformers' apply_chat_template: every case of
// tests/fixtures/chat_templates/reference.json (make_reference.py) renders to the same text, byte
// for byte, with the same {% generation %} ranges, or fails with the same raise_exception message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tokenizer/jinja/template.h"

namespace tandem::jinja {
namespace {

const std::string kTemplates = TANDEM_CHAT_TEMPLATES;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Python string indices (code points) of a byte offset.
int64_t CodePoints(const std::string& text, size_t bytes) {
  return static_cast<int64_t>(Decode(std::string_view(text).substr(0, bytes)).size());
}

TEST(JinjaReference, RendersWhatTransformersRenders) {
  // Read in order: a tool's keys print in the order they were written, as Python's dicts keep them.
  const nlohmann::ordered_json reference =
      nlohmann::ordered_json::parse(ReadFile(kTemplates + "/reference.json"));
  ASSERT_EQ(reference["cases"].size(), 20u);
  for (const auto& c : reference["cases"]) {
    const std::string name = c["template"];
    SCOPED_TRACE(name + " " + c["messages"].dump().substr(0, 80));
    auto t = Template::Parse(ReadFile(kTemplates + "/" + name + ".jinja"));
    ASSERT_TRUE(t.ok()) << t.status();
    Dict variables;
    for (const auto& [key, value] : c["variables"].items())
      variables.Set(key, Value::FromJson(value));
    variables.Set("messages", Value::FromJson(c["messages"]));
    variables.Set("documents", Value::None());
    variables.Set("add_generation_prompt", Value::Bool(c["add_generation_prompt"].get<bool>()));
    auto rendered = t->Render(variables);
    if (c.contains("error")) {
      ASSERT_FALSE(rendered.ok());
      EXPECT_EQ(rendered.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(rendered.status().message().find(c["error"].get<std::string>()), std::string::npos)
          << rendered.status();
      continue;
    }
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(rendered->text, c["rendered"].get<std::string>());
    std::vector<std::vector<int64_t>> spans;
    for (const auto& [begin, end] : rendered->generation) {
      spans.push_back({CodePoints(rendered->text, begin), CodePoints(rendered->text, end)});
    }
    EXPECT_EQ(spans, c["generation"].get<std::vector<std::vector<int64_t>>>());
  }
}

}  // namespace
}  // namespace tandem::jinja
