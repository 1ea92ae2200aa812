#include "exec/state_log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "scenarios/scenario_file.h"

namespace zerosim {

using nlohmann::json;

namespace {

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

bool ComponentSelection::judged(const std::string& name) const {
  return (only.empty() || listed(only, name)) && !listed(ignored, name);
}

Status ComponentSelection::check_against(const StateLine& logged) const {
  std::vector<std::string> names;
  for (const auto& [name, digest] : logged.components) names.push_back(name);
  for (const std::string& name : ignored) {
    if (listed(only, name)) return invalid_argument("--ignore-component " + name + ": also listed in --components");
  }
  for (const auto& [flag, list] : {std::pair<const char*, const std::vector<std::string>*>{"--components", &only},
                                   {"--ignore-component", &ignored}}) {
    for (const std::string& name : *list) {
      if (!listed(names, name)) {
        return invalid_argument(std::string(flag) + " " + name + ": the state log has no component " + name +
                                " (its components: " + joined(names) + ")");
      }
    }
  }
  return Status();
}

std::string ComponentSelection::describe() const {
  if (!only.empty()) {
    std::vector<std::string> kept;
    for (const std::string& name : only) {
      if (!listed(ignored, name)) kept.push_back(name);
    }
    return "judged: " + joined(kept);
  }
  return ignored.empty() ? "" : "not judged: " + joined(ignored);
}

namespace {

// Every judged component that differs between the two lines (or is missing from the resume's),
// by name in the uninterrupted run's order: when the loss is the first thing to differ, these
// are the state behind it.
std::vector<std::string> differing_judged_components(const StateLine& want, const StateLine& line,
                                                     const ComponentSelection& selection) {
  std::vector<std::string> names;
  for (const auto& [name, digest] : want.components) {
    if (!selection.judged(name)) continue;
    auto other = line.components.find(name);
    if (other == line.components.end() || other->second != digest) names.push_back(name);
  }
  return names;
}

// The first of them, described with its step and digests; "" when they agree.
std::string differing_judged_component(const StateLine& want, const StateLine& line, const ComponentSelection& selection) {
  const std::vector<std::string> differing = differing_judged_components(want, line, selection);
  if (differing.empty()) return "";
  const std::string& name = differing.front();
  auto other = line.components.find(name);
  if (other == line.components.end()) {
    return "step " + std::to_string(line.step) + ": component " + name + " missing from the resume's line";
  }
  return "step " + std::to_string(line.step) + ": " + name + " differs (expected " + want.components.at(name) +
         ", found " + other->second + ")";
}

}  // namespace

Result<std::vector<StateLine>> parse_state_log(const std::string& text, const std::string& source) {
  std::vector<StateLine> lines;
  std::istringstream stream(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(stream, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = source + " line " + std::to_string(number);
    json document = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (document.is_discarded() || !document.is_object()) return invalid_argument(where + ": not a JSON object");
    if (!document.contains("step") || !document["step"].is_number_integer()) {
      return invalid_argument(where + ": \"step\": expected an integer");
    }
    if (!document.contains("loss") || !document["loss"].is_number()) return invalid_argument(where + ": \"loss\": expected a number");
    if (!document.contains("components") || !document["components"].is_object()) {
      return invalid_argument(where + ": \"components\": expected an object of NAME: HEX_DIGEST");
    }
    StateLine parsed;
    parsed.step = document["step"].get<int64_t>();
    parsed.loss = document["loss"].get<double>();
    parsed.loss_text = document["loss"].dump();
    for (const auto& [name, digest] : document["components"].items()) {
      if (!digest.is_string()) return invalid_argument(where + ": components." + name + ": expected a string");
      parsed.components[name] = digest.get<std::string>();
    }
    if (document.contains("checkpoint")) {
      if (!document["checkpoint"].is_boolean()) return invalid_argument(where + ": \"checkpoint\": expected true or false");
      parsed.checkpoint = document["checkpoint"].get<bool>();
    }
    lines.push_back(std::move(parsed));
  }
  return lines;
}

namespace {

// A capture file (safetensors, any dtype): name -> (dtype, element bytes, data).
struct CaptureFileTensor {
  std::string dtype;
  size_t element_bytes = 1;
  std::string data;
};

Result<std::map<std::string, CaptureFileTensor>> read_capture(const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string bytes, read_text_file(path, "the capture"));
  if (bytes.size() < 8) return data_loss(path + ": shorter than a safetensors header");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > bytes.size() - 8) return data_loss(path + ": header length past the end of the file");
  const json header = json::parse(bytes.substr(8, header_bytes), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return data_loss(path + ": the header is not a JSON object");
  const std::map<std::string, size_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                               {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  std::map<std::string, CaptureFileTensor> tensors;
  const size_t data_start = 8 + header_bytes;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return data_loss(path + ": tensor " + name + ": expected dtype and data_offsets");
    }
    CaptureFileTensor tensor;
    tensor.dtype = entry["dtype"].get<std::string>();
    auto size = sizes.find(tensor.dtype);
    tensor.element_bytes = size == sizes.end() ? 1 : size->second;
    const uint64_t begin = entry["data_offsets"][0].get<uint64_t>(), end = entry["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > bytes.size() - data_start) return data_loss(path + ": tensor " + name + ": offsets past the end");
    tensor.data = bytes.substr(data_start + begin, end - begin);
    tensors[name] = std::move(tensor);
  }
  return tensors;
}

std::string element_text(const CaptureFileTensor& tensor, size_t index) {
  const char* at = tensor.data.data() + index * tensor.element_bytes;
  std::string hex;
  char digits[3];
  for (size_t i = tensor.element_bytes; i-- > 0;) {
    std::snprintf(digits, sizeof(digits), "%02x", static_cast<unsigned char>(at[i]));
    hex += digits;
  }
  if (tensor.dtype == "F64") {
    double value;
    std::memcpy(&value, at, 8);
    return std::to_string(value) + " (0x" + hex + ")";
  }
  if (tensor.dtype == "F32") {
    float value;
    std::memcpy(&value, at, 4);
    return std::to_string(value) + " (0x" + hex + ")";
  }
  return "0x" + hex;
}

}  // namespace

Result<std::string> first_differing_element(const std::string& expected_path, const std::string& found_path) {
  ZEROSIM_ASSIGN_OR_RETURN(auto expected, read_capture(expected_path));
  ZEROSIM_ASSIGN_OR_RETURN(auto found, read_capture(found_path));
  for (const auto& [name, want] : expected) {
    auto other = found.find(name);
    if (other == found.end()) return "tensor " + name + " missing from the resume's capture";
    const CaptureFileTensor& got = other->second;
    if (got.dtype != want.dtype || got.data.size() != want.data.size()) {
      return "tensor " + name + ": " + want.dtype + " of " + std::to_string(want.data.size()) + " bytes expected, " +
             got.dtype + " of " + std::to_string(got.data.size()) + " found";
    }
    for (size_t i = 0; i * want.element_bytes < want.data.size(); ++i) {
      if (std::memcmp(want.data.data() + i * want.element_bytes, got.data.data() + i * want.element_bytes,
                      want.element_bytes) != 0) {
        return "tensor " + name + "[" + std::to_string(i) + "]: expected " + element_text(want, i) + ", found " +
               element_text(got, i);
      }
    }
  }
  for (const auto& [name, tensor] : found) {
    if (expected.count(name) == 0) return "tensor " + name + " is only in the resume's capture";
  }
  return std::string();
}


// The verdict of one resume against the reference.
ScenarioVerdict judge_resume(const std::vector<StateLine>& reference, int64_t durable_step,
                             const ProcessOutcome& outcome, const Result<std::vector<StateLine>>& resumed,
                             const ComponentSelection& selection, int64_t* diverged_step) {
  ScenarioVerdict verdict;
  for (const StateLine& line : reference) verdict.reference_losses.push_back(static_cast<float>(line.loss));
  verdict.committed_step = durable_step;
  if (outcome.timed_out) {
    verdict.outcome = "the resume never reached its end: " + outcome.describe();
    verdict.diagnosis = verdict.outcome + (outcome.stderr_tail.empty() ? "" : " (stderr: " + outcome.stderr_tail + ")");
    return verdict;
  }
  if (outcome.signal != 0) {
    verdict.outcome = "the resume crashed: " + outcome.describe();
    verdict.diagnosis = verdict.outcome + (outcome.stderr_tail.empty() ? "" : " (stderr: " + outcome.stderr_tail + ")");
    return verdict;
  }
  if (outcome.exit_code != 0) {
    verdict.outcome = "the resume refused: " + outcome.describe() + (outcome.stderr_tail.empty() ? "" : ": " + outcome.stderr_tail);
    verdict.diagnosis = verdict.outcome;
    return verdict;
  }
  if (reference.empty()) {
    verdict.outcome = "the resume completed (no state log: lost work and divergence not judged)";
    verdict.passed = true;
    return verdict;
  }
  if (!resumed.ok()) {
    verdict.outcome = "the resume's state log is unreadable";
    verdict.diagnosis = resumed.status().to_string();
    return verdict;
  }
  const int64_t last_step = reference.empty() ? 0 : reference.back().step;
  verdict.resumed_at = resumed->empty() ? last_step : resumed->front().step - 1;
  for (const StateLine& line : *resumed) verdict.resumed_losses.push_back(static_cast<float>(line.loss));
  std::map<int64_t, const StateLine*> expected;
  for (const StateLine& line : reference) expected[line.step] = &line;
  std::string divergence;
  std::string state_behind_loss;  // when the loss differs first: the components that differ with it
  int64_t previous = verdict.resumed_at;
  for (const StateLine& line : *resumed) {
    if (line.step != previous + 1) {
      divergence = "the resume logged step " + std::to_string(line.step) + " after step " + std::to_string(previous);
      break;
    }
    previous = line.step;
    auto found = expected.find(line.step);
    if (found == expected.end()) {
      divergence = "step " + std::to_string(line.step) + ": the uninterrupted run has no such step";
      break;
    }
    const StateLine& want = *found->second;
    if (std::memcmp(&want.loss, &line.loss, sizeof(double)) != 0) {
      divergence = "step " + std::to_string(line.step) + ": loss: expected " + want.loss_text + ", found " + line.loss_text;
      const std::vector<std::string> differing = differing_judged_components(want, line, selection);
      state_behind_loss = differing.empty() ? "; every judged component agrees at that step"
                                            : "; components differing at that step: " + joined(differing);
    } else {
      divergence = differing_judged_component(want, line, selection);
    }
    if (!divergence.empty()) {
      *diverged_step = line.step;  // the loss or the state differs here: a capture of this step names the element
      break;
    }
  }
  if (divergence.empty() && previous != last_step) {
    divergence = "the resume stopped at step " + std::to_string(previous) + ", the uninterrupted run at step " +
                 std::to_string(last_step);
  }
  verdict.outcome = "resumed at step " + std::to_string(verdict.resumed_at) +
                    (divergence.empty() ? ", identical to step " + std::to_string(last_step) : ", diverged: " + divergence);
  if (verdict.resumed_at < durable_step) {
    verdict.diagnosis = "lost work: step " + std::to_string(durable_step) +
                        "'s save had returned (its line said \"checkpoint\": true) before the crash, but the resume "
                        "started at step " + std::to_string(verdict.resumed_at);
  } else if (!divergence.empty()) {
    verdict.diagnosis = divergence + state_behind_loss;
  } else {
    verdict.passed = true;
  }
  return verdict;
}

}  // namespace zerosim
