// `zerosim run FILE... [--json] [--defect NAME]...` and `zerosim suite [DIR]`: run scenarios
// (scenarios/scenario_runner.h) and print one verdict line each, or one JSON object.
// Exit codes: 0 all passed, 1 a scenario failed, 2 bad input, 3 an environment error.
#pragma once

#include <string>
#include <vector>

namespace zerosim {

struct RunFlags {
  std::vector<std::string> scenario_paths;
  std::string suite_directory;  // zerosim suite: every *.json in it, sorted
  std::vector<std::string> defect_names;
  bool json = false;
  std::string junit_path;  // set: also write a JUnit XML report there
};

int run_scenarios_command(const RunFlags& flags);

}  // namespace zerosim
