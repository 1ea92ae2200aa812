// The fast mode's row and column reductions (labelled "gpu"): each the same function as a
// double-precision reference to fp32 rounding, the same bits at a second launch, and the column
// sums added to what the sums held. Shapes around a warp's 32 lanes and the column sums' 64-row
// slices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cuda_devices.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/cuda/device_fast_rows.h"
#endif

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

std::vector<float> values_for(size_t count, uint64_t seed) {
  std::vector<float> values(count);
  for (size_t k = 0; k < count; ++k) {
    const uint64_t bits = (k + 1) * 0x9e3779b97f4a7c15ull ^ seed * 0xbf58476d1ce4e5b9ull;
    values[k] = static_cast<float>(bits >> 40) / 16777216.0f * 4.0f - 2.0f;
  }
  return values;
}

// A device copy of `host`, freed with the object.
struct DeviceFloats {
  float* data = nullptr;
  size_t count = 0;
  explicit DeviceFloats(const std::vector<float>& host) : count(host.size()) {
    EXPECT_EQ(cudaMalloc(&data, std::max<size_t>(count, 1) * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data); }
  std::vector<float> host() const {
    std::vector<float> out(count);
    EXPECT_EQ(cudaMemcpy(out.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DeviceFastRows, ColumnSumsAddEachColumnsSumAndRepeatTheirBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const int64_t rows : {1, 63, 64, 65, 210}) {
    for (const int64_t width : {1, 31, 33, 96}) {
      for (const bool with_factor : {false, true}) {
        SCOPED_TRACE(testing::Message() << rows << " rows x " << width << (with_factor ? " with a factor" : ""));
        const std::vector<float> in = values_for(static_cast<size_t>(rows * width), 1);
        const std::vector<float> factor = values_for(static_cast<size_t>(rows * width), 2);
        const std::vector<float> start = values_for(static_cast<size_t>(width), 3);
        const DeviceFloats d_in(in), d_factor(factor);
        const DeviceFloats scratch(std::vector<float>(static_cast<size_t>(fast_column_sums_scratch_floats(rows, width))));
        std::vector<std::vector<float>> runs;
        for (int run = 0; run < 2; ++run) {
          const DeviceFloats sums(start), products(start);
          ASSERT_EQ(launch_fast_column_sums(rows, width, d_in.data, with_factor ? d_factor.data : nullptr, sums.data,
                                            with_factor ? products.data : nullptr, scratch.data, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<float> both = sums.host();
          const std::vector<float> product_sums = products.host();
          if (!with_factor) {
            EXPECT_TRUE(same_bits(product_sums, start)) << "no factor: product sums untouched";
          }
          both.insert(both.end(), product_sums.begin(), product_sums.end());
          runs.push_back(both);
        }
        EXPECT_TRUE(same_bits(runs[0], runs[1])) << "a second launch gave other bits; replay: ctest -R DeviceFastRows";
        for (int64_t j = 0; j < width; ++j) {
          double sum = start[static_cast<size_t>(j)], product = start[static_cast<size_t>(j)], magnitude = 1.0;
          for (int64_t r = 0; r < rows; ++r) {
            const double value = in[static_cast<size_t>(r * width + j)];
            sum += value;
            product += value * factor[static_cast<size_t>(r * width + j)];
            magnitude += std::fabs(value) * 2.0;
          }
          EXPECT_NEAR(runs[0][static_cast<size_t>(j)], sum, 1e-6 * magnitude) << "column " << j;
          if (with_factor) {
            EXPECT_NEAR(runs[0][static_cast<size_t>(width + j)], product, 1e-6 * magnitude) << "column " << j;
          }
        }
      }
    }
  }
}

TEST(DeviceFastRows, LayerNormStatisticsForwardAndBackwardAreTheRowsMoments) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const float epsilon = 1e-5f;
  for (const int64_t rows : {1, 7, 9, 210}) {
    for (const int64_t width : {1, 31, 33, 96}) {
      SCOPED_TRACE(testing::Message() << rows << " rows x " << width);
      const std::vector<float> x = values_for(static_cast<size_t>(rows * width), 4);
      const std::vector<float> d_out = values_for(static_cast<size_t>(rows * width), 5);
      const std::vector<float> gamma = values_for(static_cast<size_t>(width), 6);
      const DeviceFloats d_x(x), d_d_out(d_out), d_gamma(gamma);
      const std::vector<float> zeros(static_cast<size_t>(rows));
      std::vector<std::vector<float>> runs;
      for (int run = 0; run < 2; ++run) {
        const DeviceFloats mean(zeros), inverse_std(zeros), mean_d(zeros), mean_dx(zeros);
        ASSERT_EQ(launch_fast_layer_norm_statistics(rows, width, d_x.data, epsilon, mean.data, inverse_std.data, nullptr),
                  cudaSuccess);
        // x stands in for the normalized input: the backward's statistics take any values.
        ASSERT_EQ(launch_fast_layer_norm_gradient_statistics(rows, width, d_d_out.data, d_x.data, d_gamma.data,
                                                             mean_d.data, mean_dx.data, nullptr),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> all = mean.host();
        for (const DeviceFloats* part : {&inverse_std, &mean_d, &mean_dx}) {
          const std::vector<float> values = part->host();
          all.insert(all.end(), values.begin(), values.end());
        }
        runs.push_back(all);
      }
      EXPECT_TRUE(same_bits(runs[0], runs[1])) << "a second launch gave other bits; replay: ctest -R DeviceFastRows";
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0, d_sum = 0, dx_sum = 0;
        for (int64_t i = 0; i < width; ++i) {
          const size_t k = static_cast<size_t>(r * width + i);
          sum += x[k];
          const double d_hat = static_cast<double>(d_out[k]) * gamma[static_cast<size_t>(i)];
          d_sum += d_hat;
          dx_sum += d_hat * x[k];
        }
        const double mean = sum / static_cast<double>(width);
        double variance = 0;
        for (int64_t i = 0; i < width; ++i) {
          const double deviation = x[static_cast<size_t>(r * width + i)] - mean;
          variance += deviation * deviation;
        }
        variance /= static_cast<double>(width);
        const size_t n = static_cast<size_t>(rows), row = static_cast<size_t>(r);
        EXPECT_NEAR(runs[0][row], mean, 1e-6) << "row " << r;
        EXPECT_NEAR(runs[0][n + row], 1.0 / std::sqrt(variance + epsilon), 1e-5 / std::sqrt(variance + epsilon)) << "row " << r;
        EXPECT_NEAR(runs[0][2 * n + row], d_sum / static_cast<double>(width), 1e-5) << "row " << r;
        EXPECT_NEAR(runs[0][3 * n + row], dx_sum / static_cast<double>(width), 1e-5) << "row " << r;
      }
    }
  }
}

TEST(DeviceFastRows, SoftmaxCrossEntropyGivesEachRowsLossAndGradient) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t sequences = 2, length = 3, rows = sequences * length;
  const float gradient_scale = 0.5f;
  // 100,003 logits pass the shared memory a block may have: that row is read in place.
  for (const int64_t vocab : {1, 5, 255, 257, 3001, 100003}) {
    SCOPED_TRACE(testing::Message() << "vocabulary " << vocab);
    std::vector<float> logits = values_for(static_cast<size_t>(rows * vocab), 7);
    for (float& z : logits) z *= 8.0f;
    std::vector<int32_t> tokens(static_cast<size_t>(sequences * (length + 1)));
    for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = static_cast<int32_t>((k * 7919) % static_cast<size_t>(vocab));
    int32_t* d_tokens = nullptr;
    ASSERT_EQ(cudaMalloc(&d_tokens, tokens.size() * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_tokens, tokens.data(), tokens.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
    // The gradients (written to `gradients`) and then the row losses of one launch over logits
    // `stride` apart; empty when the launch fails.
    auto gradients_and_losses = [&](const std::vector<float>& input, int64_t stride, bool in_place) {
      const DeviceFloats d_input(input), separate(std::vector<float>(in_place ? 0 : logits.size())),
          losses(std::vector<float>(static_cast<size_t>(rows)));
      const DeviceFloats& gradients = in_place ? d_input : separate;
      std::vector<float> all;
      if (launch_fast_softmax_cross_entropy(sequences, length, vocab, d_tokens, gradient_scale, d_input.data, stride,
                                            gradients.data, losses.data, nullptr) != cudaSuccess ||
          cudaDeviceSynchronize() != cudaSuccess) {
        return all;
      }
      all = gradients.host();
      const std::vector<float> row_losses = losses.host();
      all.insert(all.end(), row_losses.begin(), row_losses.end());
      return all;
    };
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) runs.push_back(gradients_and_losses(logits, vocab, true));
    ASSERT_EQ(runs[0].size(), logits.size() + static_cast<size_t>(rows)) << "the launch failed";
    // The same logits in rows 3 elements longer (NaNs between them, which must not be read), the
    // gradients into an array of their own: the same bits.
    const int64_t stride = vocab + 3;
    std::vector<float> padded(static_cast<size_t>(rows * stride), std::nanf(""));
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(padded.data() + row * stride, logits.data() + row * vocab, static_cast<size_t>(vocab) * sizeof(float));
    }
    EXPECT_TRUE(same_bits(runs[0], gradients_and_losses(padded, stride, false)))
        << "strided logits gave other bits; replay: ctest -R DeviceFastRows";
    {
      const DeviceFloats d_padded(padded), gradients(logits), losses(std::vector<float>(static_cast<size_t>(rows)));
      EXPECT_EQ(launch_fast_softmax_cross_entropy(sequences, length, vocab, d_tokens, gradient_scale, d_padded.data,
                                                  vocab - 1, gradients.data, losses.data, nullptr),
                cudaErrorInvalidValue)
          << "a row stride shorter than the row";
    }
    cudaFree(d_tokens);
    EXPECT_TRUE(same_bits(runs[0], runs[1])) << "a second launch gave other bits; replay: ctest -R DeviceFastRows";
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t s = row / length, t = row % length;
      const int32_t target = tokens[static_cast<size_t>(s * (length + 1) + t + 1)];
      const float* z = logits.data() + row * vocab;
      double maximum = z[0];
      for (int64_t c = 1; c < vocab; ++c) maximum = std::max<double>(maximum, z[c]);
      double total = 0;
      for (int64_t c = 0; c < vocab; ++c) total += std::exp(z[c] - maximum);
      EXPECT_NEAR(runs[0][static_cast<size_t>(rows * vocab + row)], std::log(total) - (z[target] - maximum), 1e-5)
          << "row " << row;
      for (int64_t c = 0; c < vocab; ++c) {
        const double gradient = (std::exp(z[c] - maximum) / total - (c == target ? 1.0 : 0.0)) * gradient_scale;
        ASSERT_NEAR(runs[0][static_cast<size_t>(row * vocab + c)], gradient, 1e-6) << "row " << row << ", class " << c;
      }
    }
  }
}

#endif

}  // namespace
}  // namespace zerosim
