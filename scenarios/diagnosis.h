// The element-level answer to "what state was lost": given the full state of the reference and
// of the resumed run at the global step where a component first differs (captured with
// TrainingOptions::capture_state_at_step), the first differing element in parameter order and
// element order (or scalar field), both values with their bits, their ULP distance in the
// tensor's dtype, the rank that owns the element in the resumed run, and the tolerance
// ladder's class over the whole component.
//
// The tolerance ladder tells numerical noise from lost state. It never makes a strict
// scenario pass: bit identity is the contract (determinism is the product); the class says
// what kind of difference a user is looking at:
//   identical       no bit differs;
//   numerical noise every differing element within kNoiseUlp ULP (a reduction order, an FMA,
//                   +0 against -0);
//   drift           every differing element within kDriftRelative relative difference
//                   (noise compounded over steps);
//   lost state      anything larger, a NaN, a value replaced by zero, a missing tensor, or a scalar (a counter, the
//                   schedule, the scaler, the RNG, the data position) that differs.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"

namespace zerosim {

enum class ToleranceClass { kIdentical, kNumericalNoise, kDrift, kLostState };
const char* tolerance_class_name(ToleranceClass tolerance_class);  // "numerical noise"

inline constexpr uint64_t kNoiseUlp = 4;
inline constexpr double kDriftRelative = 1e-3;

struct ElementDiagnosis {
  std::string component;      // "exp_avg", "scheduler", ...
  std::string tensor;         // the parameter's name, or the scalar field ("last_batch_iteration")
  int64_t element = -1;       // flat index in the unpadded tensor; -1 for a scalar field
  int rank = -1;              // the owning rank in the resumed run; -1: replicated on every rank
  std::string expected_value, actual_value;  // with their bits for floating-point values
  uint64_t ulp_distance = 0;
  int64_t differing_elements = 0;  // over the whole component
  int64_t compared_elements = 0;
  uint64_t max_ulp_distance = 0;
  ToleranceClass ladder = ToleranceClass::kIdentical;
  bool shape_mismatch = false;  // the tensor is missing or has another size or dtype
  // "exp_avg: layer1.weight[17] on rank 2: expected 0.0123 (0x3c4985f0), found 0 (0x00000000),
  //  ulp distance 1011500528; 1071 of 1073 elements differ (lost state)"
  std::string describe() const;
  nlohmann::json to_json() const;
};

// `component` is one of ComponentDigests' names. Both states come from runs of the same model.
ElementDiagnosis diagnose_component(const CapturedState& expected, const CapturedState& actual,
                                    const std::string& component);

}  // namespace zerosim
