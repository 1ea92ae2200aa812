// The element-level diagnosis and the tolerance ladder: the first differing element, its
// owning rank, both values, the ULP distance in the tensor's dtype, and the class.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/tensor/dtype.h"
#include "scenarios/diagnosis.h"

namespace zerosim {
namespace {

CapturedTensor fp32_tensor(const std::string& component, const std::string& parameter, const std::vector<float>& values,
                           int64_t partition_size) {
  CapturedTensor tensor{component, parameter, DType::kFp32, partition_size, {}};
  tensor.bytes.resize(values.size() * sizeof(float));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

float next_up(float value, int ulps) { return bits_to_float(float_bits(value) + static_cast<uint32_t>(ulps)); }

TEST(Diagnosis, NamesTheFirstDifferingElementItsRankAndTheUlpDistance) {
  CapturedState expected, actual;
  expected.tensors = {fp32_tensor("exp_avg", "layers.0.weight", {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}, 3),
                      fp32_tensor("exp_avg", "layers.0.bias", {0.5f, 0.25f}, 1)};
  // The resumed run has 2 ranks: partition size 3, so element 3 lives on rank 1.
  actual.tensors = {fp32_tensor("exp_avg", "layers.0.weight", {1.0f, 2.0f, 3.0f, next_up(4.0f, 3), 5.0f}, 3),
                    fp32_tensor("exp_avg", "layers.0.bias", {0.5f, next_up(0.25f, 1)}, 1)};
  const ElementDiagnosis diagnosis = diagnose_component(expected, actual, "exp_avg");
  EXPECT_EQ(diagnosis.tensor, "layers.0.weight");
  EXPECT_EQ(diagnosis.element, 3);
  EXPECT_EQ(diagnosis.rank, 1);
  EXPECT_EQ(diagnosis.ulp_distance, 3u);
  EXPECT_EQ(diagnosis.differing_elements, 2);
  EXPECT_EQ(diagnosis.compared_elements, 7);
  EXPECT_EQ(diagnosis.max_ulp_distance, 3u);
  EXPECT_EQ(diagnosis.ladder, ToleranceClass::kNumericalNoise);
  EXPECT_EQ(diagnosis.expected_value, "4 (0x40800000)");
  EXPECT_NE(diagnosis.describe().find("layers.0.weight[3] on rank 1: expected 4 (0x40800000), found 4.00000143"),
            std::string::npos)
      << diagnosis.describe();
}

TEST(Diagnosis, TheLadderTellsNoiseFromDriftFromLostState) {
  CapturedState expected, actual;
  expected.tensors = {fp32_tensor("master", "w", {1.0f, 1.0f}, 2)};
  actual.tensors = {fp32_tensor("master", "w", {1.0f, 1.0f}, 2)};
  EXPECT_EQ(diagnose_component(expected, actual, "master").ladder, ToleranceClass::kIdentical);
  actual.tensors[0] = fp32_tensor("master", "w", {1.0f, next_up(1.0f, static_cast<int>(kNoiseUlp))}, 2);
  EXPECT_EQ(diagnose_component(expected, actual, "master").ladder, ToleranceClass::kNumericalNoise);
  actual.tensors[0] = fp32_tensor("master", "w", {1.0f, next_up(1.0f, static_cast<int>(kNoiseUlp) + 1)}, 2);
  EXPECT_EQ(diagnose_component(expected, actual, "master").ladder, ToleranceClass::kDrift);
  actual.tensors[0] = fp32_tensor("master", "w", {1.0f, 1.0f + 2e-3f}, 2);
  EXPECT_EQ(diagnose_component(expected, actual, "master").ladder, ToleranceClass::kLostState);
  actual.tensors[0] = fp32_tensor("master", "w", {0.0f, 1.0f}, 2);  // a moment never restored
  const ElementDiagnosis zeroed = diagnose_component(expected, actual, "master");
  EXPECT_EQ(zeroed.ladder, ToleranceClass::kLostState);
  EXPECT_EQ(zeroed.element, 0);
  EXPECT_EQ(zeroed.rank, 0);
}

TEST(Diagnosis, SignedZeroIsNoiseAndNanIsLostState) {
  CapturedState expected, actual;
  expected.tensors = {fp32_tensor("master", "w", {0.0f, 1.0f}, 2)};
  actual.tensors = {fp32_tensor("master", "w", {-0.0f, 1.0f}, 2)};
  const ElementDiagnosis zero = diagnose_component(expected, actual, "master");
  EXPECT_EQ(zero.differing_elements, 1);
  EXPECT_EQ(zero.ladder, ToleranceClass::kNumericalNoise);
  actual.tensors = {fp32_tensor("master", "w", {0.0f, std::nanf("")}, 2)};
  EXPECT_EQ(diagnose_component(expected, actual, "master").ladder, ToleranceClass::kLostState);
}

TEST(Diagnosis, SixteenBitParametersAreMeasuredInTheirOwnUlps) {
  CapturedTensor want{"params", "w", DType::kFp16, 4, {}};
  CapturedTensor have = want;
  const uint16_t one = 0x3c00, one_plus_two_ulps = 0x3c02;
  want.bytes.resize(2);
  have.bytes.resize(2);
  std::memcpy(want.bytes.data(), &one, 2);
  std::memcpy(have.bytes.data(), &one_plus_two_ulps, 2);
  CapturedState expected, actual;
  expected.tensors = {want};
  actual.tensors = {have};
  const ElementDiagnosis diagnosis = diagnose_component(expected, actual, "params");
  EXPECT_EQ(diagnosis.ulp_distance, 2u);
  EXPECT_EQ(diagnosis.expected_value, "1 (0x3c00)");
  EXPECT_EQ(diagnosis.ladder, ToleranceClass::kNumericalNoise);
}

TEST(Diagnosis, ScalarComponentsNameTheFieldAndAreAlwaysLostState) {
  CapturedState expected, actual;
  expected.scalars.scheduler_last_batch_iteration = 4;
  actual.scalars.scheduler_last_batch_iteration = 0;
  const ElementDiagnosis scheduler = diagnose_component(expected, actual, "scheduler");
  EXPECT_EQ(scheduler.tensor, "last_batch_iteration");
  EXPECT_EQ(scheduler.expected_value, "4");
  EXPECT_EQ(scheduler.actual_value, "0");
  EXPECT_EQ(scheduler.rank, -1);
  EXPECT_EQ(scheduler.ladder, ToleranceClass::kLostState);
  expected.scalars.counters.optimizer_steps = 6;
  const ElementDiagnosis counters = diagnose_component(expected, actual, "counters");
  EXPECT_EQ(counters.tensor, "optimizer_steps");
  EXPECT_EQ(counters.differing_elements, 1);
  EXPECT_EQ(counters.compared_elements, 5);
}

TEST(Diagnosis, AMissingOrReshapedTensorIsLostState) {
  CapturedState expected, actual;
  expected.tensors = {fp32_tensor("exp_avg_sq", "w", {1.0f, 2.0f}, 1)};
  actual.tensors = {fp32_tensor("exp_avg_sq", "w", {1.0f}, 1)};
  const ElementDiagnosis shorter = diagnose_component(expected, actual, "exp_avg_sq");
  EXPECT_EQ(shorter.ladder, ToleranceClass::kLostState);
  EXPECT_EQ(shorter.tensor, "w");
  EXPECT_TRUE(shorter.shape_mismatch);
  EXPECT_EQ(shorter.describe(), "exp_avg_sq: w: expected 8 bytes of fp32, found 4 bytes of fp32 (lost state)");
  actual.tensors.clear();
  EXPECT_EQ(diagnose_component(expected, actual, "exp_avg_sq").actual_value, "no such tensor");
  // And a tensor only the resumed state has.
  expected.tensors.clear();
  actual.tensors = {fp32_tensor("exp_avg_sq", "extra", {1.0f}, 1)};
  const ElementDiagnosis extra = diagnose_component(expected, actual, "exp_avg_sq");
  EXPECT_EQ(extra.tensor, "extra");
  EXPECT_EQ(extra.expected_value, "no such tensor");
  EXPECT_EQ(extra.ladder, ToleranceClass::kLostState);
}

}  // namespace
}  // namespace zerosim
