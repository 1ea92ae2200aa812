// The dense products of one GPT-2 training step on the CPU (vector_ops' add_product_threads, the
// kernel of every Conv1D layer and of the tied head), shape by shape, at a chosen token count and
// thread count: milliseconds and GFLOP/s per shape and for the step's products in all, as JSON
// lines. bench/product_vs_torch.sh runs it beside torch.mm (product_peer.py, which times the
// shapes these lines name) on the same threads; this alone prints zerosim's side.
//
//   product_bench [--tokens N] [--embd E] [--vocab V] [--layers L] [--threads T] [--repeat R]
//
// Each shape is timed R times (best of R, after one untimed run that touches the memory); the
// step's figure weights each block shape by L and the head's shapes by one. Inputs are uniform in
// [-1, 1) from a fixed seed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/flag_value.h"
#include "bench/gpt_product_shapes.h"
#include "core/tensor/vector_ops.h"

namespace zerosim {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run(int argc, char** argv) {
  int64_t tokens = 1024, embd = 768, vocab = 50257, layers = 12, threads = 1, repeat = 3;
  read_positive_flags(argc, argv,
                      {{"--tokens", &tokens}, {"--embd", &embd}, {"--vocab", &vocab}, {"--layers", &layers},
                       {"--threads", &threads}, {"--repeat", &repeat}});
  const std::vector<GptProductShape> shapes = gpt_step_product_shapes(
      static_cast<size_t>(tokens), static_cast<size_t>(embd), static_cast<size_t>(vocab), layers);
  std::mt19937 generator(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  double step_seconds = 0.0, step_flops = 0.0;
  for (const GptProductShape& shape : shapes) {
    std::vector<float> a(shape.rows * shape.inner), b(shape.inner * shape.n), c(shape.rows * shape.n, 0.0f);
    for (float& value : a) value = uniform(generator);
    for (float& value : b) value = uniform(generator);
    const ProductOperand a_view = shape.a_transposed ? ProductOperand::transpose_of(a.data(), shape.rows)
                                                     : ProductOperand::row_major(a.data(), shape.inner);
    const ProductOperand b_view = shape.b_transposed ? ProductOperand::transpose_of(b.data(), shape.inner)
                                                     : ProductOperand::row_major(b.data(), shape.n);
    add_product_threads(a_view, shape.rows, shape.inner, b_view, shape.n, c.data(), static_cast<int>(threads));
    double best = 1e30;
    for (int64_t r = 0; r < repeat; ++r) {
      const double start = seconds_now();
      add_product_threads(a_view, shape.rows, shape.inner, b_view, shape.n, c.data(), static_cast<int>(threads));
      best = std::min(best, seconds_now() - start);
    }
    const double flops = 2.0 * static_cast<double>(shape.rows) * static_cast<double>(shape.inner) * static_cast<double>(shape.n);
    step_seconds += best * static_cast<double>(shape.per_step);
    step_flops += flops * static_cast<double>(shape.per_step);
    std::printf(
        "{\"engine\":\"zerosim\",\"shape\":\"%s\",\"rows\":%zu,\"inner\":%zu,\"n\":%zu,\"a_transposed\":%s,"
        "\"b_transposed\":%s,\"threads\":%lld,\"ms\":%.3f,\"gflops\":%.2f,\"per_step\":%lld}\n",
        shape.name.c_str(), shape.rows, shape.inner, shape.n, shape.a_transposed ? "true" : "false",
        shape.b_transposed ? "true" : "false", static_cast<long long>(threads), best * 1e3, flops / best / 1e9,
        static_cast<long long>(shape.per_step));
  }
  std::printf("{\"engine\":\"zerosim\",\"shape\":\"step\",\"threads\":%lld,\"ms\":%.1f,\"gflops\":%.2f}\n",
              static_cast<long long>(threads), step_seconds * 1e3, step_flops / step_seconds / 1e9);
  return 0;
}

}  // namespace
}  // namespace zerosim

int main(int argc, char** argv) { return zerosim::run(argc, argv); }
