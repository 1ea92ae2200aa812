#include "reports/suite_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/build_info.h"
#include "reports/report_file.h"

namespace zerosim {

namespace {

using nlohmann::json;

std::string format_number(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// The step at which the crash is drawn: the steps the first phase completed.
int64_t crash_step(const ScenarioVerdict& verdict) { return verdict.steps_before_crash; }

// Reference (solid), resumed (dashed, from the resume step on), the crash and the resume
// marked with vertical lines, the first divergence with a circle.
std::string loss_curve_svg(const ScenarioVerdict& verdict) {
  const std::vector<float>& reference = verdict.reference_losses;
  if (reference.empty()) return "<p class=\"muted\">(no loss curve recorded for this entry)</p>";
  constexpr double kWidth = 640, kHeight = 220, kLeft = 64, kRight = 16, kTop = 16, kBottom = 34;
  double low = INFINITY, high = -INFINITY;
  for (const std::vector<float>* curve : {&reference, &verdict.resumed_losses}) {
    for (float loss : *curve) {
      if (!std::isfinite(loss)) continue;
      low = std::min(low, static_cast<double>(loss));
      high = std::max(high, static_cast<double>(loss));
    }
  }
  if (!std::isfinite(low)) low = 0, high = 1;
  if (high - low < 1e-9) low -= 0.5, high += 0.5;
  const double pad = (high - low) * 0.08;
  low -= pad, high += pad;
  const double steps = static_cast<double>(reference.size());
  auto x_of = [&](double step) {
    return kLeft + (steps <= 1 ? 0.5 : (step - 1) / (steps - 1)) * (kWidth - kLeft - kRight);
  };
  auto y_of = [&](double loss) { return kTop + (high - loss) / (high - low) * (kHeight - kTop - kBottom); };
  auto polyline = [&](const std::vector<float>& curve, int64_t first_step, const char* css_class) {
    std::string points;
    for (size_t k = 0; k < curve.size(); ++k) {
      if (!std::isfinite(curve[k])) continue;
      points += format_number("%.1f", x_of(static_cast<double>(first_step + static_cast<int64_t>(k) + 1))) + "," +
                format_number("%.1f", y_of(curve[k])) + " ";
    }
    return "<polyline class=\"" + std::string(css_class) + "\" points=\"" + points + "\"/>";
  };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + format_number("%.0f", kWidth) +
                    "\" height=\"" + format_number("%.0f", kHeight) + "\" role=\"img\" aria-label=\"loss per step\">";
  const double plot_bottom = kHeight - kBottom;
  svg += "<rect class=\"frame\" x=\"" + format_number("%.0f", kLeft) + "\" y=\"" + format_number("%.0f", kTop) +
         "\" width=\"" + format_number("%.0f", kWidth - kLeft - kRight) + "\" height=\"" +
         format_number("%.0f", kHeight - kTop - kBottom) + "\"/>";
  // Axes: the loss range on the left, the first and last step below.
  svg += "<text class=\"axis\" x=\"" + format_number("%.0f", kLeft - 6) + "\" y=\"" + format_number("%.0f", kTop + 10) +
         "\" text-anchor=\"end\">" + format_number("%.4g", high) + "</text>";
  svg += "<text class=\"axis\" x=\"" + format_number("%.0f", kLeft - 6) + "\" y=\"" + format_number("%.0f", plot_bottom) +
         "\" text-anchor=\"end\">" + format_number("%.4g", low) + "</text>";
  svg += "<text class=\"axis\" x=\"" + format_number("%.1f", x_of(1)) + "\" y=\"" + format_number("%.0f", kHeight - 18) +
         "\" text-anchor=\"middle\">1</text>";
  svg += "<text class=\"axis\" x=\"" + format_number("%.1f", x_of(steps)) + "\" y=\"" +
         format_number("%.0f", kHeight - 18) + "\" text-anchor=\"middle\">" + format_number("%.0f", steps) + "</text>";
  svg += "<text class=\"axis\" x=\"" + format_number("%.1f", (kLeft + kWidth - kRight) / 2) + "\" y=\"" +
         format_number("%.0f", kHeight - 4) + "\" text-anchor=\"middle\">step</text>";
  auto vertical = [&](double step, const char* css_class, const std::string& label, double label_y) {
    const double x = x_of(std::clamp(step, 1.0, std::max(steps, 1.0)));
    return "<line class=\"" + std::string(css_class) + "\" x1=\"" + format_number("%.1f", x) + "\" x2=\"" +
           format_number("%.1f", x) + "\" y1=\"" + format_number("%.0f", kTop) + "\" y2=\"" +
           format_number("%.0f", plot_bottom) + "\"/><text class=\"" + css_class + "-label\" x=\"" +
           format_number("%.1f", x + 4) + "\" y=\"" + format_number("%.0f", label_y) + "\">" + xml_escape(label) +
           "</text>";
  };
  svg += vertical(static_cast<double>(crash_step(verdict)) + 0.5, "crash", "crash", plot_bottom - 6);
  if (verdict.resumed_at >= 0) {
    svg += vertical(static_cast<double>(verdict.resumed_at), "resume", "resume @" + std::to_string(verdict.resumed_at),
                    kTop + 12);
  }
  svg += polyline(reference, 0, "reference");
  if (verdict.resumed_at >= 0) svg += polyline(verdict.resumed_losses, verdict.resumed_at, "resumed");
  if (verdict.resumed_at >= 0) {
    // Dots as well: a resume one step before the end has a single point, no line.
    for (size_t k = 0; k < verdict.resumed_losses.size(); ++k) {
      if (!std::isfinite(verdict.resumed_losses[k])) continue;
      svg += "<circle class=\"resumed-point\" cx=\"" +
             format_number("%.1f", x_of(static_cast<double>(verdict.resumed_at + static_cast<int64_t>(k) + 1))) +
             "\" cy=\"" + format_number("%.1f", y_of(verdict.resumed_losses[k])) + "\" r=\"3\"/>";
    }
  }
  if (verdict.divergence && verdict.divergence->found && !verdict.divergence->component.empty()) {
    // Where the resumed run first left the reference: the state loaded at step S (drawn on the
    // reference's loss of step S), or step N's record or state (on the resumed run's loss of step N).
    const Divergence& divergence = *verdict.divergence;
    const bool after_load = divergence.where.rfind("after load", 0) == 0;
    const int64_t step = divergence.at_step;
    float loss = NAN;
    if (after_load && step >= 1 && step <= static_cast<int64_t>(reference.size())) {
      loss = reference[static_cast<size_t>(step - 1)];
    } else if (!after_load && step > verdict.resumed_at &&
               step - verdict.resumed_at - 1 < static_cast<int64_t>(verdict.resumed_losses.size())) {
      loss = verdict.resumed_losses[static_cast<size_t>(step - verdict.resumed_at - 1)];
    }
    if (std::isfinite(loss)) {
      svg += "<circle class=\"divergence\" cx=\"" + format_number("%.1f", x_of(static_cast<double>(step))) +
             "\" cy=\"" + format_number("%.1f", y_of(loss)) + "\" r=\"7\"/>";
    }
  }
  svg += "</svg>";
  return svg;
}

std::string table_row(const std::vector<std::string>& cells) {
  std::string row = "<tr>";
  for (const std::string& cell : cells) row += "<td>" + xml_escape(cell) + "</td>";
  return row + "</tr>";
}

std::string divergence_table(const ScenarioVerdict& verdict) {
  if (!verdict.divergence || !verdict.divergence->found) return "";
  const Divergence& divergence = *verdict.divergence;
  std::string html =
      "<table class=\"divergence\"><tr><th>where</th><th>component</th><th>tensor / field</th><th>element</th>"
      "<th>rank</th><th>expected</th><th>found</th><th>ULP</th><th>class</th></tr>";
  if (verdict.element) {
    const ElementDiagnosis& element = *verdict.element;
    html += table_row({divergence.where, element.component, element.tensor,
                       element.element >= 0 ? std::to_string(element.element) : "",
                       element.rank >= 0 ? std::to_string(element.rank) : "all", element.expected_value,
                       element.actual_value, element.element >= 0 ? std::to_string(element.ulp_distance) : "",
                       std::string(tolerance_class_name(element.ladder)) + " (" +
                           std::to_string(element.differing_elements) + " of " +
                           std::to_string(element.compared_elements) + " differ)"});
  } else {
    html += table_row({divergence.where, divergence.component, "", "", "", divergence.expected_value,
                       divergence.actual_value, divergence.ulp_distance > 0 ? std::to_string(divergence.ulp_distance) : "",
                       ""});
  }
  return html + "</table>";
}

constexpr const char* kStyle = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; max-width: 1100px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 0 0 6px; }
.summary { font-size: 16px; margin: 6px 0 18px; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
section { border: 1px solid #d0d7de; border-radius: 6px; padding: 12px 16px; margin: 12px 0; }
section.failed { border-color: #cf222e; }
.muted { color: #57606a; } code { background: #f6f8fa; padding: 1px 4px; border-radius: 4px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
td, th { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
svg { display: block; margin: 8px 0; }
svg .frame { fill: #fbfcfd; stroke: #d0d7de; }
svg .axis { font-size: 11px; fill: #57606a; }
svg .reference { fill: none; stroke: #0969da; stroke-width: 2; }
svg .resumed { fill: none; stroke: #bf8700; stroke-width: 2; stroke-dasharray: 6 4; }
svg .crash { stroke: #cf222e; stroke-width: 1.5; } svg .crash-label { font-size: 11px; fill: #cf222e; }
svg .resume { stroke: #8250df; stroke-width: 1.5; stroke-dasharray: 2 3; } svg .resume-label { font-size: 11px; fill: #8250df; }
svg .divergence { fill: none; stroke: #cf222e; stroke-width: 2.5; }
svg .resumed-point { fill: #bf8700; }
.legend span { margin-right: 14px; font-size: 12px; }
.swatch { display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin-right: 4px; }
)css";

}  // namespace

int SuiteReport::failed() const {
  return static_cast<int>(std::count_if(scenarios.begin(), scenarios.end(),
                                        [](const ReportedScenario& entry) { return !entry.verdict.passed; }));
}

json report_json(const SuiteReport& report) {
  json scenarios = json::array();
  for (const ReportedScenario& entry : report.scenarios) {
    const ScenarioVerdict& verdict = entry.verdict;
    json item = {{"scenario", verdict.name},
                 {"file", entry.file},
                 {"passed", verdict.passed},
                 {"outcome", verdict.outcome},
                 {"diagnosis", verdict.diagnosis},
                 {"seed", verdict.seed},
                 {"crash", verdict.crash},
                 {"steps_before_crash", verdict.steps_before_crash},
                 {"resumed_at", verdict.resumed_at},
                 {"reference_losses", verdict.reference_losses},
                 {"resumed_losses", verdict.resumed_losses},
                 {"notes", verdict.notes},
                 {"fault_rules", verdict.fault_rule_counts},
                 {"replay", entry.replay_command},
                 {"seconds", entry.seconds}};
    if (verdict.divergence) {
      item["divergence"] = {{"where", verdict.divergence->where},
                            {"component", verdict.divergence->component},
                            {"state_step", verdict.divergence->state_step},
                            {"at_step", verdict.divergence->at_step},
                            {"expected", verdict.divergence->expected_value},
                            {"actual", verdict.divergence->actual_value},
                            {"ulp_distance", verdict.divergence->ulp_distance}};
    }
    if (verdict.element) item["element"] = verdict.element->to_json();
    scenarios.push_back(std::move(item));
  }
  const int failed = report.failed();
  return {{"title", report.title},
          {"zerosim_version", zerosim_build_version()},
          {"defects", report.defects},
          {"scenarios", scenarios},
          {"passed", static_cast<int>(report.scenarios.size()) - failed},
          {"failed", failed}};
}

std::string report_html(const SuiteReport& report) {
  const int failed = report.failed();
  const int passed = static_cast<int>(report.scenarios.size()) - failed;
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                     xml_escape(report.title) + "</title><style>" + kStyle + "</style></head><body>\n";
  html += "<h1>" + xml_escape(report.title) + "</h1>\n";
  html += "<p>zerosim " + xml_escape(zerosim_build_version()) + "</p>\n";
  html += "<div class=\"summary\"><span class=\"" + std::string(failed == 0 ? "pass" : "fail") + "\">" +
          std::to_string(passed) + " passed, " + std::to_string(failed) + " failed</span> of " +
          std::to_string(report.scenarios.size()) + " scenario(s)";
  if (!report.defects.empty()) {
    std::string names;
    for (const std::string& defect : report.defects) names += (names.empty() ? "" : ", ") + defect;
    html += " &middot; defects switched on: <code>" + xml_escape(names) + "</code>";
  }
  html += "</div>\n<div class=\"legend\"><span><i class=\"swatch\" style=\"background:#0969da\"></i>reference</span>"
          "<span><i class=\"swatch\" style=\"background:#bf8700\"></i>resumed</span>"
          "<span><i class=\"swatch\" style=\"background:#cf222e\"></i>crash, first divergence</span>"
          "<span><i class=\"swatch\" style=\"background:#8250df\"></i>resume step</span></div>\n";
  // Failures first: what a reader opened the page for.
  std::vector<const ReportedScenario*> ordered;
  for (const ReportedScenario& entry : report.scenarios) ordered.push_back(&entry);
  std::stable_partition(ordered.begin(), ordered.end(), [](const ReportedScenario* entry) { return !entry->verdict.passed; });
  for (const ReportedScenario* entry : ordered) {
    const ScenarioVerdict& verdict = entry->verdict;
    html += std::string("<section class=\"") + (verdict.passed ? "passed" : "failed") + "\"><h2><span class=\"" +
            (verdict.passed ? "pass\">PASS" : "fail\">FAIL") + "</span> " + xml_escape(verdict.name) + "</h2>\n";
    if (!verdict.description.empty()) html += "<p class=\"muted\">" + xml_escape(verdict.description) + "</p>\n";
    html += "<p>" + xml_escape(verdict.crash) + "; " + xml_escape(verdict.outcome) + "</p>\n";
    if (!verdict.diagnosis.empty()) html += "<p><b>Diagnosis:</b> " + xml_escape(verdict.diagnosis) + "</p>\n";
    html += loss_curve_svg(verdict) + "\n" + divergence_table(verdict) + "\n";
    for (const std::string& note : verdict.notes) html += "<p class=\"muted\">" + xml_escape(note) + "</p>\n";
    html += "<p class=\"muted\">seed " + std::to_string(verdict.seed) + " &middot; " +
            format_number("%.2f", entry->seconds) + " s &middot; replay: <code>" + xml_escape(entry->replay_command) +
            "</code></p></section>\n";
  }
  return html + "</body></html>\n";
}

std::string report_markdown(const SuiteReport& report) {
  const int failed = report.failed();
  std::string markdown = "### " + xml_escape(report.title) + ": " + (failed == 0 ? "all passed" : std::to_string(failed) + " failed") +
                         "\n\n" + std::to_string(report.scenarios.size() - static_cast<size_t>(failed)) + " passed, " +
                         std::to_string(failed) + " failed";
  if (!report.defects.empty()) {
    markdown += " (defects:";
    for (const std::string& defect : report.defects) markdown += " `" + defect + "`";
    markdown += ")";
  }
  markdown += "\n\n| | scenario | outcome |\n|---|---|---|\n";
  // Table cells: HTML-escaped (GitHub renders tags in Markdown), pipes and line breaks kept
  // from breaking the row.
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : xml_escape(text)) {
      if (c == '|') out += "\\|";
      else if (c == '\n') out += "<br>";
      else if (c != '\r') out += c;
    }
    return out;
  };
  for (const ReportedScenario& entry : report.scenarios) {
    markdown += std::string("| ") + (entry.verdict.passed ? "✅" : "❌") + " | " + cell(entry.verdict.name) + " | " +
                cell(entry.verdict.passed ? entry.verdict.outcome : entry.verdict.diagnosis) + " |\n";
  }
  for (const ReportedScenario& entry : report.scenarios) {
    if (entry.verdict.passed) continue;
    markdown += "\n<details><summary>" + xml_escape(entry.verdict.name) + "</summary>\n\n" +
                xml_escape(entry.verdict.outcome) + "\n\nseed " + std::to_string(entry.verdict.seed) +
                "; replay:\n<pre>" + xml_escape(entry.replay_command) + "</pre>\n</details>\n";
  }
  return markdown;
}

std::vector<JunitCase> report_junit_cases(const SuiteReport& report) {
  std::vector<JunitCase> cases;
  for (const ReportedScenario& entry : report.scenarios) {
    JunitCase junit_case;
    junit_case.name = entry.verdict.name;
    junit_case.class_name = entry.file.empty() ? report.title : entry.file;
    junit_case.seconds = entry.seconds;
    junit_case.passed = entry.verdict.passed;
    junit_case.failure_message = entry.verdict.diagnosis;
    junit_case.failure_details = entry.verdict.outcome + "\nseed " + std::to_string(entry.verdict.seed) +
                                 "\nreplay: " + entry.replay_command;
    cases.push_back(std::move(junit_case));
  }
  return cases;
}

Status write_report_directory(const std::string& directory, const SuiteReport& report) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return io_error("report directory " + directory + " cannot be created: " + error.message());
  ZEROSIM_RETURN_IF_ERROR(write_report_file(directory + "/report.json", json_text(report_json(report)) + "\n", "report"));
  ZEROSIM_RETURN_IF_ERROR(write_report_file(directory + "/report.html", report_html(report), "HTML report"));
  ZEROSIM_RETURN_IF_ERROR(write_report_file(directory + "/report.md", report_markdown(report), "Markdown report"));
  return write_junit_file(directory + "/junit.xml", report.title, report_junit_cases(report));
}

}  // namespace zerosim
