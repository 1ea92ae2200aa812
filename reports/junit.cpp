#include "reports/junit.h"

#include <cstdio>
#include <fstream>

namespace zerosim {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += ' ';
        else out += c;
    }
  }
  return out;
}

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
  xml += "  <testsuite name=\"" + escape(suite_name) + "\"" + counts + ">\n";
  for (const JunitCase& test_case : cases) {
    xml += "    <testcase name=\"" + escape(test_case.name) + "\" classname=\"" + escape(test_case.class_name) +
           "\" time=\"" + seconds_text(test_case.seconds) + "\"";
    if (test_case.passed) {
      xml += "/>\n";
      continue;
    }
    xml += ">\n      <failure message=\"" + escape(test_case.failure_message) + "\" type=\"divergence\">" +
           escape(test_case.failure_details) + "</failure>\n    </testcase>\n";
  }
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

Status write_junit_file(const std::string& path, const std::string& suite_name, const std::vector<JunitCase>& cases) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return io_error("JUnit report " + temporary + " cannot be created");
    out << junit_xml(suite_name, cases);
    out.flush();
    if (!out) return io_error("JUnit report " + temporary + " could not be written");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) return io_error("JUnit report: rename to " + path + " failed");
  return Status();
}

}  // namespace zerosim
