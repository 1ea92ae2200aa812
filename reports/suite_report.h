// The report of a run of scenarios (zerosim run, suite, fuzz, replay): one record per scenario
// with its verdict, rendered four ways from the same data:
//   report.json  everything, for scripts and for merging the shards of a fuzz campaign;
//   report.html  one self-contained page (no script, no external file): the summary, then per
//                scenario an SVG of the reference's and the resumed run's loss curves with the
//                crash and the resume marked, the outcome, and the divergence table (step,
//                component, tensor, element, rank, expected, found, ULP distance, class);
//   report.md    a Markdown summary for a pull-request comment;
//   junit.xml    JUnit XML (junit.h) for the CI system's test tab.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/junit.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {

struct ReportedScenario {
  ScenarioVerdict verdict;
  std::string file;            // the scenario file ("" for a generated case not written out)
  std::string replay_command;  // "zerosim run scenarios/library/x.json --defect y"
  double seconds = 0.0;
};

struct SuiteReport {
  std::string title;  // "zerosim suite scenarios/library"
  std::vector<std::string> defects;  // switched on for every scenario (--defect)
  std::vector<ReportedScenario> scenarios;
  int failed() const;
};

nlohmann::json report_json(const SuiteReport& report);
std::string report_html(const SuiteReport& report);
std::string report_markdown(const SuiteReport& report);
std::vector<JunitCase> report_junit_cases(const SuiteReport& report);

// Writes report.json, report.html, report.md and junit.xml into `directory` (created if
// missing); the error names the file.
Status write_report_directory(const std::string& directory, const SuiteReport& report);

}  // namespace zerosim
