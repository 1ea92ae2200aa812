// JUnit XML, the report format CI systems read (GitHub Actions test reporters, GitLab,
// Jenkins): <testsuites><testsuite name tests failures errors skipped time><testcase name
// classname time>[<failure message type>details</failure>]</testcase>...</testsuite></testsuites>.
// A failure carries the diagnosis and the command that replays the case.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace zerosim {

struct JunitCase {
  std::string name;
  std::string class_name;  // the scenario file, or the property
  double seconds = 0.0;
  bool passed = true;
  std::string failure_message;  // one line (the diagnosis)
  std::string failure_details;  // the outcome, the seed, the replay command
};

// The XML text; every attribute and text is escaped.
std::string junit_xml(const std::string& suite_name, const std::vector<JunitCase>& cases);

// Writes it to `path` (through a temporary file and a rename).
Status write_junit_file(const std::string& path, const std::string& suite_name, const std::vector<JunitCase>& cases);

}  // namespace zerosim
