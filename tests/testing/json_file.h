// A JSON file of a test's fixtures, parsed; a file that is missing or malformed fails the test
// that reads it (parse throws, and an empty document is refused).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace tandem::testing {

inline nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << ": cannot read";
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

}  // namespace tandem::testing
