// The deterministic mode's GPU product (core/cuda/ordered_product.h) on one GPT-2 step's dense
// products, shape by shape, in every tile, beside cuBLAS's fp32 product (CUBLAS_COMPUTE_32F_PEDANTIC:
// the FMA pipes, no tensor cores, as a plain fp32 torch.mm without TF32) on the same shape in
// the same run. Milliseconds and TFLOP/s per shape and tile, which tile the backend's rule
// picks, and each tile's bits against the first tile's (they must be equal: tiling never
// changes a fold). Then the step's products in all: each tile alone, the rule's picks, the
// fastest tile of each shape, and cuBLAS. JSON lines.
//
//   ordered_product_bench [--tokens N] [--embd E] [--vocab V] [--layers L] [--repeat R]
//
// Each figure is the best of R timed runs (CUDA events) after one untimed run. Inputs are
// uniform in [-1, 1) from a fixed seed; C starts at zero before every run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/flag_value.h"
#include "bench/gpt_product_shapes.h"
#include "core/cuda/cublas_library.h"
#include "core/cuda/device_array.h"
#include "core/cuda/ordered_product.h"

namespace zerosim {
namespace {

bool check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  return false;
}

bool check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(status));
  return false;
}

// Best of `repeat` runs of `enqueue` (after one untimed), in milliseconds; C zeroed before each.
template <typename Enqueue>
double best_ms(int64_t repeat, float* c, size_t c_bytes, Enqueue&& enqueue, bool& ok) {
  cudaEvent_t start, stop;
  ok = check(cudaEventCreate(&start), "cudaEventCreate") && check(cudaEventCreate(&stop), "cudaEventCreate");
  if (!ok) return 0.0;
  double best = 1e30;
  for (int64_t r = 0; r <= repeat && ok; ++r) {
    ok = check(cudaMemsetAsync(c, 0, c_bytes, nullptr), "cudaMemsetAsync") &&
         check(cudaEventRecord(start, nullptr), "cudaEventRecord") && enqueue() &&
         check(cudaEventRecord(stop, nullptr), "cudaEventRecord") && check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    ok = ok && check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (r > 0) best = std::min(best, static_cast<double>(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

int run(int argc, char** argv) {
  int64_t tokens = 1024, embd = 768, vocab = 50257, layers = 12, repeat = 5;
  read_positive_flags(argc, argv,
                      {{"--tokens", &tokens}, {"--embd", &embd}, {"--vocab", &vocab}, {"--layers", &layers},
                       {"--repeat", &repeat}});
  int multiprocessors = 0;
  cudaDeviceProp properties{};
  if (!check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties") ||
      !check(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute")) {
    return 1;
  }
  Result<std::unique_ptr<CublasLibrary>> blas = CublasLibrary::load();
  if (!blas.ok()) {
    std::fprintf(stderr, "%s\n", blas.status().to_string().c_str());
    return 1;
  }
  cublasHandle_t handle = nullptr;
  if (!check_blas((*blas)->create(&handle), "cublasCreate") ||
      !check_blas((*blas)->set_math_mode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode")) {
    return 1;
  }
  std::printf("{\"device\":\"%s\",\"multiprocessors\":%d,\"tokens\":%lld}\n", properties.name, multiprocessors,
              static_cast<long long>(tokens));
  const std::vector<GptProductShape> shapes = gpt_step_product_shapes(
      static_cast<size_t>(tokens), static_cast<size_t>(embd), static_cast<size_t>(vocab), layers);
  std::mt19937 generator(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::map<std::string, double> step_ms;  // per tile, and "rule", "fastest", "cublas"
  double step_flops = 0.0;
  bool all_equal = true;
  for (const GptProductShape& shape : shapes) {
    std::vector<float> a(shape.rows * shape.inner), b(shape.inner * shape.n);
    for (float& value : a) value = uniform(generator);
    for (float& value : b) value = uniform(generator);
    const size_t c_bytes = shape.rows * shape.n * sizeof(float);
    DeviceArray a_device, b_device, c_device;
    if (!check(a_device.reserve(a.size() * sizeof(float)), "cudaMalloc") ||
        !check(b_device.reserve(b.size() * sizeof(float)), "cudaMalloc") || !check(c_device.reserve(c_bytes), "cudaMalloc") ||
        !check(cudaMemcpy(a_device.as<float>(), a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy") ||
        !check(cudaMemcpy(b_device.as<float>(), b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy")) {
      return 1;
    }
    const auto rows = static_cast<int64_t>(shape.rows), n = static_cast<int64_t>(shape.n),
               inner = static_cast<int64_t>(shape.inner);
    const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(inner) * static_cast<double>(n);
    const auto per_step = static_cast<double>(shape.per_step);
    step_flops += flops * per_step;
    const OrderedProductTile picked = ordered_product_tile();
    std::vector<float> first_bits, bits(shape.rows * shape.n);
    double fastest = 1e30;
    for (const OrderedProductTile tile : kOrderedProductTiles) {
      bool ok = false;
      const double ms = best_ms(repeat, c_device.as<float>(), c_bytes, [&] {
        return check(launch_ordered_product(tile, rows, n, inner, {a_device.as<float>(), shape.a_transposed},
                                            {b_device.as<float>(), shape.b_transposed}, c_device.as<float>(), nullptr),
                     "launch_ordered_product");
      }, ok);
      if (!ok || !check(cudaMemcpy(bits.data(), c_device.as<float>(), c_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy")) {
        return 1;
      }
      if (first_bits.empty()) first_bits = bits;
      const bool equal = std::memcmp(bits.data(), first_bits.data(), c_bytes) == 0;
      all_equal = all_equal && equal;
      fastest = std::min(fastest, ms);
      step_ms[ordered_product_tile_name(tile)] += ms * per_step;
      if (tile == picked) step_ms["rule"] += ms * per_step;
      std::printf("{\"engine\":\"zerosim\",\"shape\":\"%s\",\"rows\":%zu,\"inner\":%zu,\"n\":%zu,\"tile\":\"%s\","
                  "\"picked\":%s,\"ms\":%.4f,\"tflops\":%.2f,\"bits_equal_first_tile\":%s}\n",
                  shape.name.c_str(), shape.rows, shape.inner, shape.n, ordered_product_tile_name(tile),
                  tile == picked ? "true" : "false", ms, flops / ms / 1e9, equal ? "true" : "false");
    }
    step_ms["fastest"] += fastest * per_step;
    // cuBLAS, row-major C = A B as column-major C^T = B^T A^T (as the fast mode calls it).
    bool ok = false;
    const float one = 1.0f;
    const double blas_ms = best_ms(repeat, c_device.as<float>(), c_bytes, [&] {
      return check_blas((*blas)->gemm_ex(handle, shape.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         shape.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                         static_cast<int>(rows), static_cast<int>(inner), &one, b_device.as<float>(),
                                         CUDA_R_32F, static_cast<int>(shape.b_transposed ? inner : n),
                                         a_device.as<float>(), CUDA_R_32F,
                                         static_cast<int>(shape.a_transposed ? rows : inner), &one,
                                         c_device.as<float>(), CUDA_R_32F, static_cast<int>(n),
                                         CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
    }, ok);
    if (!ok) return 1;
    step_ms["cublas"] += blas_ms * per_step;
    std::printf("{\"engine\":\"cublas-fp32\",\"shape\":\"%s\",\"ms\":%.4f,\"tflops\":%.2f}\n", shape.name.c_str(),
                blas_ms, flops / blas_ms / 1e9);
  }
  for (const auto& [name, ms] : step_ms) {
    std::printf("{\"shape\":\"step\",\"choice\":\"%s\",\"ms\":%.2f,\"tflops\":%.2f}\n", name.c_str(), ms,
                step_flops / ms / 1e9);
  }
  std::printf("{\"tiles_bits_equal\":%s}\n", all_equal ? "true" : "false");
  (*blas)->destroy(handle);
  return all_equal ? 0 : 1;
}

}  // namespace
}  // namespace zerosim

int main(int argc, char** argv) { return zerosim::run(argc, argv); }
