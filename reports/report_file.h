// What every report writer shares: escaping for XML and HTML, and writing a report file whole
// (a temporary file, then a rename), so a reader never sees half a report.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zerosim {

// Escapes &, <, >, " and ' and replaces the control characters XML 1.0 forbids (all but tab,
// newline and carriage return) with a space. Valid for HTML text and attributes as well.
std::string xml_escape(const std::string& text);

// JSON text with a 2-space indent; bytes that are not UTF-8 (a file name, a flag) are replaced
// with U+FFFD instead of making the dump throw.
std::string json_text(const nlohmann::json& document);
std::string json_text(const nlohmann::ordered_json& document);

// `what` names the report in the error ("JUnit report /ci/junit.xml cannot be created").
Status write_report_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace zerosim
