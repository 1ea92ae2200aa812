#include "reports/junit.h"

#include <cstdio>

#include "reports/report_file.h"

namespace zerosim {

namespace {

std::string seconds_text(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", seconds);
  return buffer;
}

}  // namespace

std::string junit_xml(const std::string& suite_name, const std::vector<JunitCase>& cases) {
  size_t failures = 0;
  double total_seconds = 0.0;
  for (const JunitCase& test_case : cases) {
    if (!test_case.passed) ++failures;
    total_seconds += test_case.seconds;
  }
  const std::string counts = " tests=\"" + std::to_string(cases.size()) + "\" failures=\"" + std::to_string(failures) +
                             "\" errors=\"0\" skipped=\"0\" time=\"" + seconds_text(total_seconds) + "\"";
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += "<testsuites name=\"zerosim\"" + counts + ">\n";
  xml += "  <testsuite name=\"" + xml_escape(suite_name) + "\"" + counts + ">\n";
  for (const JunitCase& test_case : cases) {
    xml += "    <testcase name=\"" + xml_escape(test_case.name) + "\" classname=\"" + xml_escape(test_case.class_name) +
           "\" time=\"" + seconds_text(test_case.seconds) + "\"";
    if (test_case.passed) {
      xml += "/>\n";
      continue;
    }
    xml += ">\n      <failure message=\"" + xml_escape(test_case.failure_message) + "\" type=\"divergence\">" +
           xml_escape(test_case.failure_details) + "</failure>\n    </testcase>\n";
  }
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

Status write_junit_file(const std::string& path, const std::string& suite_name, const std::vector<JunitCase>& cases) {
  return write_report_file(path, junit_xml(suite_name, cases), "JUnit report");
}

}  // namespace zerosim
