// JUnit reports: escaped, counted, and valid against the structure CI systems read
// (tests/data/junit.xsd, checked with xmllint, which scripts/install-deps.sh installs).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "reports/junit.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

std::vector<JunitCase> sample_cases() {
  JunitCase passed;
  passed.name = "seed: resume after the swap directory is deleted";
  passed.class_name = "scenarios/library/seed.json";
  passed.seconds = 0.25;
  JunitCase failed;
  failed.name = "crash <while> saving & \"quoted\"";
  failed.class_name = "scenarios/library/crash.json";
  failed.seconds = 1.5;
  failed.passed = false;
  failed.failure_message = "after load (step 4): scheduler";
  failed.failure_details = std::string("resumed at step 4\nreplay: zerosim run crash.json --defect x\x01");
  return {passed, failed};
}

TEST(Junit, CountsEscapesAndCarriesTheReplayCommand) {
  const std::string xml = junit_xml("scenarios/library", sample_cases());
  EXPECT_NE(xml.find("<testsuite name=\"scenarios/library\" tests=\"2\" failures=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"crash &lt;while&gt; saving &amp; &quot;quoted&quot;\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"after load (step 4): scheduler\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("replay: zerosim run crash.json --defect x"), std::string::npos) << xml;
  EXPECT_EQ(xml.find('\x01'), std::string::npos) << "a control character reached the XML";
}

TEST(Junit, TheFileValidatesAgainstTheSchemaCiSystemsRead) {
  TestDirectory directory;
  const std::string path = directory.path() + "/report.xml";
  ASSERT_TRUE(write_junit_file(path, "scenarios/library", sample_cases()).ok());
  const std::string command = "xmllint --noout --schema " + std::string(ZEROSIM_TEST_DATA_DIR) + "/junit.xsd " + path +
                              " > " + directory.path() + "/xmllint.log 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream log(directory.path() + "/xmllint.log");
  const std::string output((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "xmllint (libxml2-utils) must be installed and the report valid:\n" << output;
  // The schema is not a formality: a testcase without its required classname is refused.
  std::ofstream(directory.path() + "/bad.xml") << "<testsuites><testsuite name=\"s\" tests=\"1\" failures=\"0\">"
                                                  "<testcase name=\"x\" time=\"1\"/></testsuite></testsuites>";
  const std::string bad = "xmllint --noout --schema " + std::string(ZEROSIM_TEST_DATA_DIR) + "/junit.xsd " +
                          directory.path() + "/bad.xml > /dev/null 2>&1";
  const int bad_status = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(bad_status) && WEXITSTATUS(bad_status) != 0);
}

}  // namespace
}  // namespace zerosim
