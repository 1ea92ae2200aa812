#include "scenarios/diagnosis.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "core/tensor/dtype.h"

namespace zerosim {

namespace {

std::string float_text(float value, uint64_t bits, int width_bits) {
  char text[80];
  std::snprintf(text, sizeof text, "%.9g (0x%0*" PRIx64 ")", static_cast<double>(value), width_bits / 4, bits);
  return text;
}

// Called for elements whose bits differ.
ToleranceClass classify(uint64_t ulp, double relative, bool either_nan) {
  if (either_nan) return ToleranceClass::kLostState;
  if (ulp == 0) return ToleranceClass::kNumericalNoise;  // +0 against -0
  if (ulp <= kNoiseUlp) return ToleranceClass::kNumericalNoise;
  if (std::isfinite(relative) && relative <= kDriftRelative) return ToleranceClass::kDrift;
  return ToleranceClass::kLostState;
}

struct ScalarField {
  const char* name;
  std::function<std::string(const FullTrainingState&)> text;
};

std::string number(int64_t value) { return std::to_string(value); }
std::string number(uint64_t value) { return std::to_string(value); }
std::string number(double value) {
  char text[80];
  std::snprintf(text, sizeof text, "%.17g (0x%016" PRIx64 ")", value, std::bit_cast<uint64_t>(value));
  return text;
}

std::vector<ScalarField> scalar_fields(const std::string& component) {
  if (component == "counters") {
    return {{"global_steps", [](const FullTrainingState& s) { return number(s.counters.global_steps); }},
            {"skipped_steps", [](const FullTrainingState& s) { return number(s.counters.skipped_steps); }},
            {"global_samples", [](const FullTrainingState& s) { return number(s.counters.global_samples); }},
            {"optimizer_steps", [](const FullTrainingState& s) { return number(s.counters.optimizer_steps); }},
            {"steps_before_optimizer", [](const FullTrainingState& s) { return number(s.counters.steps_before_optimizer); }}};
  }
  if (component == "scheduler") {
    return {{"last_batch_iteration", [](const FullTrainingState& s) { return number(s.scheduler_last_batch_iteration); }},
            {"learning_rate", [](const FullTrainingState& s) { return number(s.scheduler_learning_rate); }}};
  }
  if (component == "loss_scaler") {
    return {{"current_scale", [](const FullTrainingState& s) { return number(s.loss_scaler.current_scale); }},
            {"current_iteration", [](const FullTrainingState& s) { return number(s.loss_scaler.current_iteration); }},
            {"last_overflow_iteration",
             [](const FullTrainingState& s) { return number(s.loss_scaler.last_overflow_iteration); }},
            {"current_hysteresis", [](const FullTrainingState& s) { return number(s.loss_scaler.current_hysteresis); }}};
  }
  if (component == "rng") {
    return {{"seed", [](const FullTrainingState& s) { return number(s.seed); }},
            {"shuffle_stream.seed", [](const FullTrainingState& s) { return number(s.shuffle_stream.seed); }},
            {"shuffle_stream.stream_id", [](const FullTrainingState& s) { return number(s.shuffle_stream.stream_id); }},
            {"shuffle_stream.counter", [](const FullTrainingState& s) { return number(s.shuffle_stream.counter); }}};
  }
  if (component == "data") {
    return {{"samples_consumed", [](const FullTrainingState& s) { return number(s.data_position); }}};
  }
  return {};
}

void diagnose_tensors(const CapturedState& expected, const CapturedState& actual, ElementDiagnosis& diagnosis) {
  // A tensor the resumed state has and the reference does not is lost state too.
  for (const CapturedTensor& have : actual.tensors) {
    if (have.component != diagnosis.component) continue;
    bool known = false;
    for (const CapturedTensor& want : expected.tensors) {
      known = known || (want.component == have.component && want.parameter == have.parameter);
    }
    if (!known && diagnosis.tensor.empty()) {
      diagnosis.shape_mismatch = true;
      diagnosis.tensor = have.parameter;
      diagnosis.expected_value = "no such tensor";
      diagnosis.actual_value = std::to_string(have.bytes.size()) + " bytes of " + dtype_name(have.dtype);
      diagnosis.ladder = ToleranceClass::kLostState;
    }
  }
  for (const CapturedTensor& want : expected.tensors) {
    if (want.component != diagnosis.component) continue;
    const CapturedTensor* have = nullptr;
    for (const CapturedTensor& candidate : actual.tensors) {
      if (candidate.component == want.component && candidate.parameter == want.parameter) have = &candidate;
    }
    if (have == nullptr || have->dtype != want.dtype || have->bytes.size() != want.bytes.size()) {
      if (diagnosis.tensor.empty()) {
        diagnosis.shape_mismatch = true;
        diagnosis.tensor = want.parameter;
        diagnosis.expected_value = std::to_string(want.bytes.size()) + " bytes of " + dtype_name(want.dtype);
        diagnosis.actual_value = have == nullptr ? "no such tensor"
                                                 : std::to_string(have->bytes.size()) + " bytes of " + dtype_name(have->dtype);
      }
      diagnosis.ladder = ToleranceClass::kLostState;
      continue;
    }
    const size_t element_bytes = dtype_size_bytes(want.dtype);
    const int width_bits = static_cast<int>(element_bytes * 8);
    const int64_t element_count = static_cast<int64_t>(want.bytes.size() / element_bytes);
    diagnosis.compared_elements += element_count;
    for (int64_t e = 0; e < element_count; ++e) {
      uint64_t want_bits = 0, have_bits = 0;
      std::memcpy(&want_bits, want.bytes.data() + e * element_bytes, element_bytes);
      std::memcpy(&have_bits, have->bytes.data() + e * element_bytes, element_bytes);
      if (want_bits == have_bits) continue;
      float want_value = 0.0f, have_value = 0.0f;
      cast_to_fp32(want.dtype, want.bytes.data() + e * element_bytes, &want_value, 1);
      cast_to_fp32(have->dtype, have->bytes.data() + e * element_bytes, &have_value, 1);
      const uint64_t ulp = ulp_distance_bits(want_bits, have_bits, width_bits);
      const double magnitude = std::max(std::fabs(static_cast<double>(want_value)), std::fabs(static_cast<double>(have_value)));
      const double relative = std::fabs(static_cast<double>(want_value) - have_value) / magnitude;
      const ToleranceClass element_class =
          classify(ulp, relative, std::isnan(want_value) || std::isnan(have_value));
      if (element_class > diagnosis.ladder) diagnosis.ladder = element_class;
      diagnosis.max_ulp_distance = std::max(diagnosis.max_ulp_distance, ulp);
      if (diagnosis.differing_elements++ == 0 && diagnosis.tensor.empty()) {
        diagnosis.tensor = want.parameter;
        diagnosis.element = e;
        diagnosis.rank = have->partition_size > 0 ? static_cast<int>(e / have->partition_size) : -1;
        diagnosis.expected_value = float_text(want_value, want_bits, width_bits);
        diagnosis.actual_value = float_text(have_value, have_bits, width_bits);
        diagnosis.ulp_distance = ulp;
      }
    }
  }
}

}  // namespace

const char* tolerance_class_name(ToleranceClass tolerance_class) {
  switch (tolerance_class) {
    case ToleranceClass::kIdentical: return "identical";
    case ToleranceClass::kNumericalNoise: return "numerical noise";
    case ToleranceClass::kDrift: return "drift";
    case ToleranceClass::kLostState: return "lost state";
  }
  return "lost state";
}

ElementDiagnosis diagnose_component(const CapturedState& expected, const CapturedState& actual,
                                    const std::string& component) {
  ElementDiagnosis diagnosis;
  diagnosis.component = component;
  const std::vector<ScalarField> fields = scalar_fields(component);
  if (fields.empty()) {
    diagnose_tensors(expected, actual, diagnosis);
    return diagnosis;
  }
  for (const ScalarField& field : fields) {
    ++diagnosis.compared_elements;
    const std::string want = field.text(expected.scalars);
    const std::string have = field.text(actual.scalars);
    if (want == have) continue;
    if (diagnosis.differing_elements++ == 0) {
      diagnosis.tensor = field.name;
      diagnosis.expected_value = want;
      diagnosis.actual_value = have;
    }
    diagnosis.ladder = ToleranceClass::kLostState;  // a counter or a schedule is exact or wrong
  }
  return diagnosis;
}

std::string ElementDiagnosis::describe() const {
  if (tensor.empty()) return component + ": no element differs in the captured state";
  std::string text = component + ": " + tensor;
  if (shape_mismatch) {
    return component + ": " + tensor + ": expected " + expected_value + ", found " + actual_value + " (lost state)";
  }
  if (element >= 0) text += "[" + std::to_string(element) + "]";
  if (rank >= 0) text += " on rank " + std::to_string(rank);
  text += ": expected " + expected_value + ", found " + actual_value;
  if (element >= 0) text += ", ulp distance " + std::to_string(ulp_distance);
  text += "; " + std::to_string(differing_elements) + " of " + std::to_string(compared_elements) +
          (element >= 0 ? " elements differ" : " fields differ");
  if (element >= 0) text += ", at most " + std::to_string(max_ulp_distance) + " ulp";
  return text + " (" + tolerance_class_name(ladder) + ")";
}

nlohmann::json ElementDiagnosis::to_json() const {
  return {{"component", component},         {"tensor", tensor},
          {"element", element},             {"rank", rank},
          {"expected", expected_value},     {"actual", actual_value},
          {"ulp_distance", ulp_distance},   {"differing", differing_elements},
          {"compared", compared_elements},  {"max_ulp_distance", max_ulp_distance},
          {"class", tolerance_class_name(ladder)}};
}

}  // namespace zerosim
