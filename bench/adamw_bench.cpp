// CPU AdamW throughput beside its physical limit, a STREAM-style triad, measured in the same
// run with the same threads and a similar footprint (docs/benchmarks.md says how the figures are read).
//
// Byte accounting, stated once and used for every figure (GB = 1e9 bytes):
//   AdamW: 28 B per parameter = read p, g, m, v (16 B) + write p, m, v (12 B). The writes go
//          to lines the step has just read, so there is no write-allocate traffic to add:
//          28 B is what DRAM really moves.
//   triad: a[i] = b[i] + s*c[i], 24 B per element = read b, c + write a: the STREAM
//          convention, which does NOT count the write-allocate read of a. Two variants run:
//          - regular stores (what STREAM built with -O3 -march=native does): DRAM really moves
//            32 B per element; that figure is printed too;
//          - non-temporal stores: no write-allocate, so 24 B is the real traffic. This is the
//            strictest ceiling for "bytes DRAM can move", printed as a second ratio.
//   The goal ratio adam_GBps / triad_GBps >= 0.7 is against the regular-store triad at 24 B.
// A third figure runs Adam's own access pattern (4 reads, 3 in-place writes) with no math, to
// tell a slow kernel from a read/write mix that DRAM serves more slowly than a triad's.
// Best (shortest) of --repetitions timed runs after one warm-up run each; the triads and the
// Adam step alternate inside each repetition so that drift in a shared host hits all alike.
// Usage: adamw_bench [--params N] [--threads T] [--repetitions R] [--path scalar|avx2|avx512]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/optim/adamw.h"
#include "bench/flag_value.h"

namespace {

using zerosim::SimdPath;

struct FreeDeleter {
  void operator()(float* pointer) const { std::free(pointer); }
};
using FloatBuffer = std::unique_ptr<float[], FreeDeleter>;

FloatBuffer allocate_floats(size_t count) {
  constexpr size_t kAlignmentBytes = 64;
  const size_t bytes = (count * sizeof(float) + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes;
  auto* pointer = static_cast<float*>(std::aligned_alloc(kAlignmentBytes, bytes));
  if (pointer == nullptr) {
    std::fprintf(stderr, "adamw_bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  return FloatBuffer(pointer);
}

// A fixed team of workers; the calling thread is worker 0, so `thread_count` cores are busy
// and none is oversubscribed. run() times one job from the start barrier to the end barrier,
// which keeps thread creation out of the measurement.
class WorkerTeam {
 public:
  explicit WorkerTeam(int thread_count)
      : thread_count_(thread_count), start_(thread_count), finish_(thread_count) {
    for (int worker = 1; worker < thread_count; ++worker) threads_.emplace_back([this, worker] { loop(worker); });
  }
  ~WorkerTeam() {
    stopping_ = true;
    start_.arrive_and_wait();
    for (std::thread& thread : threads_) thread.join();
  }
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  int thread_count() const { return thread_count_; }

  // Returns the wall time in seconds.
  double run(const std::function<void(int worker)>& job) {
    job_ = &job;
    const auto begin = std::chrono::steady_clock::now();
    start_.arrive_and_wait();
    job(0);
    finish_.arrive_and_wait();
    const auto end = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(end - begin).count();
  }

 private:
  void loop(int worker) {
    for (;;) {
      start_.arrive_and_wait();
      if (stopping_) return;
      (*job_)(worker);
      finish_.arrive_and_wait();
    }
  }

  int thread_count_;
  std::barrier<> start_;
  std::barrier<> finish_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;  // published by the start barrier
  bool stopping_ = false;                            // likewise
};

// Worker `worker`'s contiguous share of [0, count), with boundaries on 64-byte lines.
struct Range {
  size_t begin, end;
};
Range chunk_of(size_t count, int worker, int thread_count) {
  constexpr size_t kLineFloats = 16;
  const size_t lines = (count + kLineFloats - 1) / kLineFloats;
  const size_t begin_line = lines * static_cast<size_t>(worker) / static_cast<size_t>(thread_count);
  const size_t end_line = lines * static_cast<size_t>(worker + 1) / static_cast<size_t>(thread_count);
  return {std::min(count, begin_line * kLineFloats), std::min(count, end_line * kLineFloats)};
}

#if defined(__x86_64__)
// [begin, end) with begin on a 64-byte line (chunk_of guarantees it) so that the streaming
// variant may use aligned non-temporal stores.
template <bool kNonTemporal>
__attribute__((target("avx512f"))) void triad_avx512(float* a, const float* b, const float* c, float scalar,
                                                     size_t begin, size_t end) {
  const __m512 s = _mm512_set1_ps(scalar);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 result = _mm512_add_ps(_mm512_loadu_ps(b + i), _mm512_mul_ps(s, _mm512_loadu_ps(c + i)));
    if constexpr (kNonTemporal) {
      _mm512_stream_ps(a + i, result);
    } else {
      _mm512_storeu_ps(a + i, result);
    }
  }
  for (; i < end; ++i) a[i] = b[i] + scalar * c[i];
  if constexpr (kNonTemporal) _mm_sfence();
}

// Adam's access pattern with no arithmetic to speak of: read p, g, m, v, write p, m, v in place,
// with the same prefetch as the AVX-512 Adam kernel. x + 0*g leaves every value bit-identical
// (g is finite), so it can run on the live Adam arrays. It separates "the kernel computes too
// slowly" from "DRAM moves this read/write mix more slowly than a triad's".
__attribute__((target("avx512f"))) void same_pattern_avx512(float* p, const float* g, float* m, float* v, size_t begin,
                                                            size_t end) {
  constexpr size_t kPrefetchDistanceFloats = 256;  // as in core/optim/adamw.cpp
  const __m512 zero = _mm512_setzero_ps();
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    for (const float* stream : {static_cast<const float*>(p), g, static_cast<const float*>(m),
                                static_cast<const float*>(v)}) {
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(stream) + (i + kPrefetchDistanceFloats) * sizeof(float);
      _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
    }
    const __m512 nothing = _mm512_mul_ps(_mm512_loadu_ps(g + i), zero);
    _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), nothing));
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), nothing));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), nothing));
  }
}
#endif

void triad_portable(float* a, const float* b, const float* c, float scalar, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) a[i] = b[i] + scalar * c[i];
}

struct Options {
  size_t params = size_t{64} << 20;
  int threads = 0;
  int repetitions = 10;
  SimdPath path = zerosim::best_simd_path();
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "adamw_bench: %s\nusage: adamw_bench [--params N] [--threads T] [--repetitions R] "
               "[--path scalar|avx2|avx512]\n",
               message.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--params") {
      options.params = zerosim::unsigned_number(flag, value.c_str());
      if (options.params == 0) usage_error("--params must be positive");
    } else if (flag == "--threads") {
      options.threads = static_cast<int>(zerosim::whole_number(flag, value));
      if (options.threads <= 0) usage_error("--threads must be positive");
    } else if (flag == "--repetitions") {
      options.repetitions = static_cast<int>(zerosim::whole_number(flag, value));
      if (options.repetitions <= 0) usage_error("--repetitions must be positive");
    } else if (flag == "--path") {
      if (value == "scalar") options.path = SimdPath::kScalar;
      else if (value == "avx2") options.path = SimdPath::kAvx2;
      else if (value == "avx512") options.path = SimdPath::kAvx512;
      else usage_error("unknown --path " + value);
      if (!zerosim::simd_path_available(options.path)) usage_error("--path " + value + " is not available here");
    } else {
      usage_error("unknown flag " + flag);
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const size_t params = options.params;
  // Footprint-matched triad: 3 arrays holding as many bytes as Adam's 4.
  const size_t triad_elements = params * 4 / 3;
  WorkerTeam team(options.threads);
  const int thread_count = team.thread_count();

  FloatBuffer p = allocate_floats(params), g = allocate_floats(params), m = allocate_floats(params),
              v = allocate_floats(params);
  FloatBuffer a = allocate_floats(triad_elements), b = allocate_floats(triad_elements),
              c = allocate_floats(triad_elements);

  // First touch by the worker that later streams the range (page placement on NUMA hosts).
  team.run([&](int worker) {
    const Range adam_range = chunk_of(params, worker, thread_count);
    for (size_t i = adam_range.begin; i < adam_range.end; ++i) {
      p[i] = 0.01f * static_cast<float>(static_cast<int>(i % 2001) - 1000) / 1000.0f;
      g[i] = 1e-3f * static_cast<float>(static_cast<int>((i * 7919) % 1999) - 999) / 999.0f;
      m[i] = 0.0f;
      v[i] = 0.0f;
    }
    const Range triad_range = chunk_of(triad_elements, worker, thread_count);
    for (size_t i = triad_range.begin; i < triad_range.end; ++i) {
      a[i] = 0.0f;
      b[i] = 1.0f;
      c[i] = 2.0f;
    }
  });

  zerosim::AdamHyperparameters hyperparameters;
  hyperparameters.learning_rate = 1e-4f;
  hyperparameters.weight_decay = 0.01f;
  hyperparameters.adamw_mode = true;
  int64_t step_index = 0;
  const float grad_multiplier = 1.0f / 65536.0f;  // as after unscaling an fp16 loss scale

  auto adam_job = [&](const zerosim::AdamStepScalars& scalars) {
    return [&, scalars](int worker) {
      const Range range = chunk_of(params, worker, thread_count);
      zerosim::adam_update(options.path, scalars, grad_multiplier, p.get() + range.begin, g.get() + range.begin,
                           m.get() + range.begin, v.get() + range.begin, range.end - range.begin);
    };
  };
  // The triads run AVX-512 whenever Adam does, so that the ceiling is not an ISA handicap.
  const bool triad_wide = options.path == SimdPath::kAvx512;
  auto make_triad_job = [&](bool non_temporal) -> std::function<void(int)> {
    return [&, non_temporal](int worker) {
      const Range range = chunk_of(triad_elements, worker, thread_count);
#if defined(__x86_64__)
      if (triad_wide) {
        if (non_temporal) {
          triad_avx512<true>(a.get(), b.get(), c.get(), 3.0f, range.begin, range.end);
        } else {
          triad_avx512<false>(a.get(), b.get(), c.get(), 3.0f, range.begin, range.end);
        }
        return;
      }
#endif
      triad_portable(a.get(), b.get(), c.get(), 3.0f, range.begin, range.end);
    };
  };
  const std::function<void(int)> same_pattern_job = [&](int worker) {
    const Range range = chunk_of(params, worker, thread_count);
#if defined(__x86_64__)
    same_pattern_avx512(p.get(), g.get(), m.get(), v.get(), range.begin, range.end);
#endif
  };
  const std::function<void(int)> triad_job = make_triad_job(false);
  const std::function<void(int)> streaming_triad_job = make_triad_job(true);

  double best_triad_seconds = 1e30;
  double best_streaming_triad_seconds = 1e30;
  double best_adam_seconds = 1e30;
  double best_same_pattern_seconds = 1e30;
  for (int repetition = -1; repetition < options.repetitions; ++repetition) {  // -1: warm-up
    const double triad_seconds = team.run(triad_job);
    const std::function<void(int)> job = adam_job(zerosim::make_adam_step_scalars(hyperparameters, ++step_index));
    const double adam_seconds = team.run(job);
    const double streaming_triad_seconds = triad_wide ? team.run(streaming_triad_job) : 1e30;
    const double same_pattern_seconds = triad_wide ? team.run(same_pattern_job) : 1e30;
    if (repetition >= 0) {
      best_triad_seconds = std::min(best_triad_seconds, triad_seconds);
      best_streaming_triad_seconds = std::min(best_streaming_triad_seconds, streaming_triad_seconds);
      best_adam_seconds = std::min(best_adam_seconds, adam_seconds);
      best_same_pattern_seconds = std::min(best_same_pattern_seconds, same_pattern_seconds);
    }
  }

  // Keep the results observable (and check that nothing went non-finite).
  double checksum = 0.0;
  for (size_t i = 0; i < params; i += 4099) checksum += static_cast<double>(p[i]) + static_cast<double>(v[i]);
  checksum += static_cast<double>(a[triad_elements / 2]);

  constexpr double kGigabyte = 1e9;
  const double triad_gbps = 24.0 * static_cast<double>(triad_elements) / best_triad_seconds / kGigabyte;
  const double triad_gbps_with_write_allocate =
      32.0 * static_cast<double>(triad_elements) / best_triad_seconds / kGigabyte;
  const double streaming_triad_gbps =
      24.0 * static_cast<double>(triad_elements) / best_streaming_triad_seconds / kGigabyte;
  const double adam_params_per_second = static_cast<double>(params) / best_adam_seconds;
  const double adam_gbps = 28.0 * adam_params_per_second / kGigabyte;
  const double gib = 1024.0 * 1024.0 * 1024.0;

  std::printf("adamw_bench: %zu params, %d threads, best of %d, adam SIMD path %s, triad %s\n", params,
              thread_count, options.repetitions, zerosim::simd_path_name(options.path),
              triad_wide ? "avx512" : "compiler-vectorized baseline");
  std::printf("triad  a[i] = b[i] + s*c[i]: %zu elements x 3 arrays = %.2f GiB\n", triad_elements,
              3.0 * 4.0 * static_cast<double>(triad_elements) / gib);
  std::printf("  regular stores:       best %.4f s: %.2f GB/s at 24 B/element (STREAM convention, write-allocate"
              " not counted); %.2f GB/s real traffic at 32 B/element\n",
              best_triad_seconds, triad_gbps, triad_gbps_with_write_allocate);
  if (triad_wide)
    std::printf("  non-temporal stores:  best %.4f s: %.2f GB/s at 24 B/element (= real traffic)\n",
                best_streaming_triad_seconds, streaming_triad_gbps);
  std::printf("adamw  p,g,m,v fp32: %zu params x 4 arrays = %.2f GiB, 28 B/param (read 16 + write 12, in place)\n",
              params, 4.0 * 4.0 * static_cast<double>(params) / gib);
  std::printf("  best %.4f s: %.3f G params/s, %.2f GB/s\n", best_adam_seconds, adam_params_per_second / 1e9,
              adam_gbps);
  if (triad_wide) {
    const double same_pattern_gbps = 28.0 * static_cast<double>(params) / best_same_pattern_seconds / kGigabyte;
    std::printf("  same access pattern, no math (p,m,v += 0*g): best %.4f s: %.2f GB/s; adam / that = %.3f\n",
                best_same_pattern_seconds, same_pattern_gbps, adam_gbps / same_pattern_gbps);
  }
  std::printf("roofline triad(24 B)/28 B = %.3f G params/s\n", triad_gbps * kGigabyte / 28.0 / 1e9);
  std::printf("ratio adam_GBps / triad_GBps = %.3f (goal >= 0.70)\n", adam_gbps / triad_gbps);
  std::printf("  stricter: vs real triad traffic (32 B) = %.3f", adam_gbps / triad_gbps_with_write_allocate);
  if (triad_wide) std::printf("; vs non-temporal triad = %.3f", adam_gbps / streaming_triad_gbps);
  std::printf("\n");
  std::printf("checksum %.6g\n", checksum);
  return 0;
}
