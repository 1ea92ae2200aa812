// The device's synthetic micro-batches (core/cuda/device_dataset.h) are SyntheticDataset's bits
// (labelled "gpu"): features and labels of arbitrary sample indices, for small and the 25 M
// MLP's dataset shapes, and the tie rule (the first class of the greatest score) where every
// score is equal.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/device_dataset.h"
#include "core/data/dataset.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

struct DeviceBatch {
  std::vector<float> features;
  std::vector<int32_t> labels;
};

// Makes the batch of `indices` on the device and copies it back.
DeviceBatch make_on_device(const SyntheticDataset& dataset, const std::vector<int64_t>& indices) {
  const DatasetSpec& spec = dataset.spec();
  const std::span<const float> teacher = dataset.teacher_by_feature();
  const size_t samples = indices.size(), feature_count = static_cast<size_t>(spec.feature_count);
  float *teacher_on_device = nullptr, *features = nullptr;
  int64_t* indices_on_device = nullptr;
  int32_t* labels = nullptr;
  EXPECT_EQ(cudaMalloc(&teacher_on_device, teacher.size_bytes()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&indices_on_device, samples * sizeof(int64_t) + 1), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&features, samples * feature_count * sizeof(float) + 1), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&labels, samples * sizeof(int32_t) + 1), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(teacher_on_device, teacher.data(), teacher.size_bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(indices_on_device, indices.data(), samples * sizeof(int64_t), cudaMemcpyHostToDevice), cudaSuccess);
  // Sentinels, so that a sample the kernels skip shows.
  EXPECT_EQ(cudaMemset(features, 0xff, samples * feature_count * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemset(labels, 0xff, samples * sizeof(int32_t)), cudaSuccess);
  const Status status = device_synthetic_batch(spec, teacher_on_device, indices_on_device, static_cast<int64_t>(samples),
                                               features, labels, nullptr);
  EXPECT_TRUE(status.ok()) << status.to_string();
  DeviceBatch batch{std::vector<float>(samples * feature_count), std::vector<int32_t>(samples)};
  EXPECT_EQ(cudaMemcpy(batch.features.data(), features, batch.features.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(batch.labels.data(), labels, batch.labels.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(teacher_on_device);
  cudaFree(indices_on_device);
  cudaFree(features);
  cudaFree(labels);
  return batch;
}

void expect_host_bits(const SyntheticDataset& dataset, const std::vector<int64_t>& indices) {
  const DeviceBatch on_device = make_on_device(dataset, indices);
  const size_t feature_count = static_cast<size_t>(dataset.spec().feature_count);
  std::vector<float> expected_features(feature_count);
  for (size_t s = 0; s < indices.size(); ++s) {
    dataset.features(indices[s], expected_features.data());
    ASSERT_EQ(std::memcmp(expected_features.data(), on_device.features.data() + s * feature_count,
                          feature_count * sizeof(float)),
              0)
        << "features of sample " << indices[s];
    ASSERT_EQ(on_device.labels[s], dataset.label(indices[s])) << "label of sample " << indices[s];
  }
}

TEST(DeviceDataset, MakesTheHostsFeaturesAndLabels) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 random(29);
  // (features, classes): the MLP tests' small shapes, more classes than a block's threads (and
  // not a multiple of them), two classes, and the 25 M MLP benchmark's 1,024 x 1,024.
  for (const auto& [feature_count, class_count] :
       {std::pair<int64_t, int64_t>{13, 5}, {64, 10}, {7, 1031}, {33, 2}, {1024, 1024}, {3, 257}}) {
    SCOPED_TRACE(testing::Message() << feature_count << " features, " << class_count << " classes");
    DatasetSpec spec;
    spec.sample_count = int64_t{1} << 40;
    spec.feature_count = feature_count;
    spec.class_count = class_count;
    spec.seed = random();
    const SyntheticDataset dataset(spec);
    std::vector<int64_t> indices;
    for (int s = 0; s < 70; ++s) indices.push_back(static_cast<int64_t>(random() % static_cast<uint64_t>(spec.sample_count)));
    indices.push_back(0);
    indices.push_back(spec.sample_count - 1);
    indices.push_back(indices[3]);  // a sample twice in one batch
    expect_host_bits(dataset, indices);
  }
}

TEST(DeviceDataset, AmongEqualScoresTheFirstClassWins) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  // One feature: a sample whose feature is exactly 0 scores +0 for every class (0 + 0 * w), so
  // its label is class 0 whatever order the device's threads meet the classes in.
  for (const int64_t class_count : {int64_t{2}, int64_t{300}, int64_t{5000}}) {
    DatasetSpec spec;
    spec.sample_count = int64_t{1} << 40;
    spec.feature_count = 1;
    spec.class_count = class_count;
    spec.seed = 5;
    const SyntheticDataset dataset(spec);
    int64_t zero_feature_sample = 0;
    while (synthetic_feature(spec.seed, zero_feature_sample, 1, 0) != 0.0f) ++zero_feature_sample;
    ASSERT_EQ(dataset.label(zero_feature_sample), 0);
    expect_host_bits(dataset, {zero_feature_sample, 1, zero_feature_sample, 2});
  }
}

TEST(DeviceDataset, BadShapesAreRefusedByName) {
  DatasetSpec spec;
  spec.class_count = 1;
  const Status status = device_synthetic_batch(spec, nullptr, nullptr, 1, nullptr, nullptr, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("1 classes"), std::string::npos) << status.message();
}

#else

TEST(DeviceDataset, TheStubSaysTheBackendIsAbsent) {
  DatasetSpec spec;
  EXPECT_EQ(device_synthetic_batch(spec, nullptr, nullptr, 1, nullptr, nullptr, nullptr).code(),
            StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
