// The corpus of bad inputs (tests/data/bad/cases.json): hostile checkpoints, broken DeepSpeed
// configs and scenarios through the built `zerosim` binary, and foreign or corrupt swap files
// through the swap-file reader. Each must give its expected error and exit code; none may crash
// zerosim (a signal, a sanitizer report) or allocate what the input claims before validating it
// (the CLI runs under a 4 GB address-space limit, except in sanitizer builds, whose shadow
// memory needs more). One test case per input, named after it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/swap/swap_file.h"
#include "tests/shell_command.h"

namespace zerosim {
namespace {

struct BadInput {
  std::string input;    // relative to tests/data/bad
  std::string command;  // zerosim's arguments, {input} replaced; empty for a reader case
  std::string reader;   // "swap_header" for a reader case
  int exit_code = 0;
  std::vector<std::string> errors;
  std::string name;  // for the test's name: input and command, as an identifier
};

std::string data_path(const std::string& relative) { return std::string(ZEROSIM_TEST_DATA_DIR) + "/bad/" + relative; }

std::vector<BadInput> load_cases() {
  std::ifstream file(data_path("cases.json"));
  const nlohmann::json document = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  std::vector<BadInput> cases;
  if (!document.is_object() || !document.contains("cases")) {
    cases.push_back(BadInput{"cases.json", "", "unreadable", 0, {}, "cases_json_is_unreadable"});
    return cases;
  }
  for (const nlohmann::json& entry : document["cases"]) {
    BadInput bad;
    bad.input = entry.value("input", "");
    bad.command = entry.value("command", "");
    bad.reader = entry.value("reader", "");
    bad.exit_code = entry.value("exit_code", 0);
    for (const nlohmann::json& error : entry.value("errors", nlohmann::json::array())) bad.errors.push_back(error);
    std::string name = bad.input + (bad.command.empty() ? "" : "_" + bad.command.substr(0, bad.command.find(' ')));
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    bad.name = name;
    cases.push_back(bad);
  }
  return cases;
}

ShellResult run_zerosim(const std::string& arguments) {
#ifdef ZEROSIM_SANITIZED
  const std::string limit;
#else
  const std::string limit = "ulimit -v 4000000; ";
#endif
  return run_shell_command("sh -c '" + limit + "exec " + ZEROSIM_CLI_PATH + " " + arguments + "' 2>&1");
}

class BadInputs : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputs, GiveTheirExpectedErrorAndNeverCrash) {
  const BadInput& bad = GetParam();
  ASSERT_NE(bad.reader, "unreadable") << "tests/data/bad/cases.json does not parse";
  ASSERT_FALSE(bad.errors.empty()) << bad.input << ": a case must say its expected error";
  std::string output;
  if (bad.reader == "swap_header") {
    std::ifstream file(data_path(bad.input), std::ios::binary);
    ASSERT_TRUE(file) << data_path(bad.input);
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    SwapFileHeader expected;
    expected.run_id = "corpus";
    expected.rank = 0;
    expected.world_size = 2;
    expected.sub_group = 0;
    expected.kind = SwapTensorKind::kMaster;
    expected.element_count = 16;
    expected.dtype = DType::kFp32;
    expected.optimizer_step = 2;
    SwapFileHeader found;
    const Status status = check_swap_header(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), expected,
                                            bad.input, found);
    ASSERT_FALSE(status.ok()) << bad.input << " was accepted";
    output = status.to_string();
  } else {
    ASSERT_FALSE(bad.command.empty()) << bad.input << ": neither a command nor a reader";
    std::string arguments = bad.command;
    const size_t at = arguments.find("{input}");
    if (at != std::string::npos) arguments.replace(at, 7, data_path(bad.input));
    const ShellResult result = run_zerosim(arguments);
    output = result.output;
    ASSERT_EQ(result.signal, 0) << "zerosim " << arguments << " died of signal " << result.signal << "\n" << output;
    EXPECT_EQ(result.exit_code, bad.exit_code) << "zerosim " << arguments << "\n" << output;
    EXPECT_EQ(output.find("Sanitizer"), std::string::npos) << output;
    EXPECT_EQ(output.find("runtime error"), std::string::npos) << output;
  }
  for (const std::string& error : bad.errors) {
    EXPECT_NE(output.find(error), std::string::npos) << "expected: " << error << "\nfound: " << output;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInputs, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

}  // namespace
}  // namespace zerosim
