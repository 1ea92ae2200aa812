// The MLP's layers on the GPU write the CPU layers' bits (labelled "gpu"): forward with and
// without ReLU, weight, bias and input gradients, over layer shapes from 1 to a few hundred
// features and sample counts from 1 to 64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/device_mlp.h"
#include "core/model/mlp.h"
#include "core/tensor/portable_math.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

float* to_device(const std::vector<float>& host) {
  float* device = nullptr;
  if (cudaMalloc(&device, std::max<size_t>(host.size(), 1) * sizeof(float)) != cudaSuccess) return nullptr;
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  return device;
}

std::vector<float> to_host(const float* device, size_t count) {
  std::vector<float> host(count);
  cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost);
  return host;
}

std::vector<float> random_values(size_t count, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(random);
  return values;
}

void expect_same_bits(const std::vector<float>& cpu, const std::vector<float>& gpu, const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  for (size_t k = 0; k < cpu.size(); ++k) {
    ASSERT_EQ(std::memcmp(&cpu[k], &gpu[k], sizeof(float)), 0) << what << "[" << k << "]: CPU " << cpu[k] << ", GPU " << gpu[k];
  }
}

TEST(DeviceMlp, EveryLayerWritesTheCpuLayersBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 random(5);
  for (const ModelSpec& spec : {ModelSpec{{13, 37, 29, 5}}, ModelSpec{{1, 1, 2}}, ModelSpec{{300, 257, 3}}}) {
    for (const int64_t samples : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      SCOPED_TRACE(model_spec_to_string(spec) + " x " + std::to_string(samples));
      const int64_t layers = mlp_layer_count(spec);
      for (int64_t layer = 0; layer < layers; ++layer) {
        const int64_t in = spec.layer_widths[static_cast<size_t>(layer)];
        const int64_t out = spec.layer_widths[static_cast<size_t>(layer) + 1];
        const bool last = layer + 1 == layers;
        // CPU: an activation record with this layer's input (and the previous pre-activation).
        MlpActivations activations;
        activations.sample_count = samples;
        activations.inputs.resize(static_cast<size_t>(layers));
        activations.pre_activations.resize(static_cast<size_t>(layers));
        const std::vector<float> previous_pre = random_values(static_cast<size_t>(samples * in), random);
        std::vector<float> input(previous_pre.size());
        for (size_t k = 0; k < input.size(); ++k) input[k] = previous_pre[k] > 0.0f ? previous_pre[k] : 0.0f;
        activations.inputs[static_cast<size_t>(layer)] = input;
        if (layer > 0) activations.pre_activations[static_cast<size_t>(layer) - 1] = previous_pre;
        const std::vector<float> weight = random_values(static_cast<size_t>(out * in), random);
        const std::vector<float> bias = random_values(static_cast<size_t>(out), random);
        mlp_layer_forward(spec, layer, weight, bias, activations);
        const std::vector<float> output_gradient = random_values(static_cast<size_t>(samples * out), random);
        std::vector<float> weight_gradient(weight.size()), bias_gradient(bias.size()), previous_gradient;
        mlp_layer_backward(spec, layer, weight, activations, output_gradient, weight_gradient, bias_gradient,
                           previous_gradient);

        float* d_input = to_device(input);
        float* d_previous_pre = to_device(previous_pre);
        float* d_weight = to_device(weight);
        float* d_bias = to_device(bias);
        float* d_pre = to_device(std::vector<float>(static_cast<size_t>(samples * out)));
        float* d_next = to_device(std::vector<float>(static_cast<size_t>(samples * out)));
        float* d_output_gradient = to_device(output_gradient);
        float* d_weight_gradient = to_device(std::vector<float>(weight.size(), 7.0f));  // overwritten, not added to
        float* d_bias_gradient = to_device(std::vector<float>(bias.size(), 7.0f));
        float* d_previous_gradient = to_device(std::vector<float>(input.size()));
        const DeviceLayerShape shape{samples, in, out};
        ASSERT_TRUE(device_mlp_layer_forward(shape, d_input, d_weight, d_bias, d_pre, last ? nullptr : d_next).ok());
        ASSERT_TRUE(device_mlp_layer_backward(shape, d_input, d_weight, d_output_gradient,
                                              layer > 0 ? d_previous_pre : nullptr, d_weight_gradient, d_bias_gradient,
                                              layer > 0 ? d_previous_gradient : nullptr)
                        .ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        expect_same_bits(activations.pre_activations[static_cast<size_t>(layer)], to_host(d_pre, static_cast<size_t>(samples * out)),
                         "pre-activation");
        if (!last) {
          expect_same_bits(activations.inputs[static_cast<size_t>(layer) + 1], to_host(d_next, static_cast<size_t>(samples * out)),
                           "ReLU output");
        }
        expect_same_bits(weight_gradient, to_host(d_weight_gradient, weight.size()), "weight gradient");
        expect_same_bits(bias_gradient, to_host(d_bias_gradient, bias.size()), "bias gradient");
        if (layer > 0) expect_same_bits(previous_gradient, to_host(d_previous_gradient, input.size()), "input gradient");
        for (float* pointer : {d_input, d_previous_pre, d_weight, d_bias, d_pre, d_next, d_output_gradient,
                               d_weight_gradient, d_bias_gradient, d_previous_gradient}) {
          cudaFree(pointer);
        }
      }
    }
  }
}

TEST(DeviceMlp, PortableExpAndLogGiveTheHostsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<double> arguments = {0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 5e-324, 700.0, 709.7, -744.0, -745.2, 88.7, -103.9,
                                   1e300, 123.456, -0.3465735902799726};
  std::mt19937_64 random(3);
  std::uniform_real_distribution<double> wide(-800.0, 800.0), narrow(-20.0, 1.0);
  for (int k = 0; k < 20000; ++k) arguments.push_back(k % 2 == 0 ? wide(random) : narrow(random));
  for (int k = 0; k < 20000; ++k) arguments.push_back(std::ldexp(1.0 + static_cast<double>(k) / 20000.0, k % 600 - 300));
  std::vector<double> exp_results(arguments.size()), log_results(arguments.size());
  ASSERT_TRUE(device_portable_exp_log(arguments.data(), arguments.size(), exp_results.data(), log_results.data()).ok());
  for (size_t k = 0; k < arguments.size(); ++k) {
    const double host_exp = portable_exp(arguments[k]);
    const double host_log = portable_log(arguments[k]);
    ASSERT_EQ(std::memcmp(&host_exp, &exp_results[k], sizeof(double)), 0) << "exp(" << arguments[k] << ")";
    ASSERT_EQ(std::memcmp(&host_log, &log_results[k], sizeof(double)), 0) << "log(" << arguments[k] << ")";
  }
}

TEST(DeviceMlp, SoftmaxCrossEntropyGivesTheCpuLossAndGradient) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 random(9);
  for (const int64_t classes : {int64_t{2}, int64_t{5}, int64_t{1000}}) {
    for (const int64_t samples : {int64_t{1}, int64_t{13}, int64_t{256}}) {
      SCOPED_TRACE(std::to_string(samples) + " x " + std::to_string(classes));
      MlpActivations activations;
      activations.sample_count = samples;
      std::vector<float> logits = random_values(static_cast<size_t>(samples * classes), random);
      for (float& logit : logits) logit *= 8.0f;
      activations.pre_activations = {logits};
      std::vector<int32_t> labels(static_cast<size_t>(samples));
      for (int32_t& label : labels) label = static_cast<int32_t>(random() % static_cast<uint32_t>(classes));
      std::vector<float> cpu_gradient;
      const float gradient_scale = 65536.0f / 96.0f;
      const float cpu_loss = softmax_cross_entropy(activations, labels, gradient_scale, cpu_gradient);
      float* d_logits = to_device(logits);
      float* d_gradient = to_device(std::vector<float>(logits.size()));
      float* d_losses = to_device(std::vector<float>(static_cast<size_t>(samples)));
      float* d_loss = to_device(std::vector<float>(1));
      int32_t* d_labels = nullptr;
      ASSERT_EQ(cudaMalloc(&d_labels, labels.size() * sizeof(int32_t)), cudaSuccess);
      cudaMemcpy(d_labels, labels.data(), labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
      ASSERT_TRUE(device_softmax_cross_entropy(samples, classes, d_logits, d_labels, gradient_scale, d_gradient, d_losses,
                                               d_loss)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expect_same_bits({cpu_loss}, to_host(d_loss, 1), "loss");
      expect_same_bits(cpu_gradient, to_host(d_gradient, logits.size()), "logits gradient");
      for (void* pointer : {static_cast<void*>(d_logits), static_cast<void*>(d_gradient), static_cast<void*>(d_losses),
                            static_cast<void*>(d_loss), static_cast<void*>(d_labels)}) {
        cudaFree(pointer);
      }
    }
  }
}

#else

TEST(DeviceMlp, TheStubSaysTheBackendIsAbsent) {
  EXPECT_EQ(device_mlp_layer_forward(DeviceLayerShape{1, 1, 1}, nullptr, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
