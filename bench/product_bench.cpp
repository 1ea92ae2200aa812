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
#include "core/tensor/vector_ops.h"

namespace zerosim {
namespace {

struct Shape {
  std::string name;  // what the product is in the step
  size_t rows, inner, n;
  bool a_transposed, b_transposed;  // the operand is read from the row-major array of its transpose
  int64_t per_step;                 // how many times a step computes it
};

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run(int argc, char** argv) {
  int64_t tokens = 1024, embd = 768, vocab = 50257, layers = 12, threads = 1, repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int64_t* target = flag == "--tokens"    ? &tokens
                      : flag == "--embd"    ? &embd
                      : flag == "--vocab"   ? &vocab
                      : flag == "--layers"  ? &layers
                      : flag == "--threads" ? &threads
                      : flag == "--repeat"  ? &repeat
                                            : nullptr;
    if (target == nullptr) {
      std::fprintf(stderr, "unknown flag %s (flags: --tokens --embd --vocab --layers --threads --repeat)\n", argv[i]);
      return 2;
    }
    require_value(i, argc, argv[i]);
    *target = whole_number(flag, argv[++i]);
    if (*target <= 0) {
      std::fprintf(stderr, "%s %lld: must be positive\n", flag.c_str(), static_cast<long long>(*target));
      return 2;
    }
  }
  const size_t t = static_cast<size_t>(tokens), e = static_cast<size_t>(embd), v = static_cast<size_t>(vocab);
  const std::vector<Shape> shapes = {
      {"qkv forward", t, e, 3 * e, false, false, layers},
      {"attention projection forward", t, e, e, false, false, layers},
      {"MLP up forward", t, e, 4 * e, false, false, layers},
      {"MLP down forward", t, 4 * e, e, false, false, layers},
      {"head forward (wte^T in place)", t, e, v, false, true, 1},
      {"qkv weight gradient (in^T in place)", e, t, 3 * e, true, false, layers},
      {"attention projection weight gradient", e, t, e, true, false, layers},
      {"MLP up weight gradient", e, t, 4 * e, true, false, layers},
      {"MLP down weight gradient", 4 * e, t, e, true, false, layers},
      {"head wte gradient (logits^T in place)", v, t, e, true, false, 1},
      {"qkv input gradient (weight^T in place)", t, 3 * e, e, false, true, layers},
      {"attention projection input gradient", t, e, e, false, true, layers},
      {"MLP up input gradient", t, 4 * e, e, false, true, layers},
      {"MLP down input gradient", t, e, 4 * e, false, true, layers},
      {"head input gradient", t, v, e, false, false, 1},
  };
  std::mt19937 generator(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  double step_seconds = 0.0, step_flops = 0.0;
  for (const Shape& shape : shapes) {
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
