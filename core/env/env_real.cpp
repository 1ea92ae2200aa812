#include <chrono>
#include <thread>

#include "core/env/clock.h"
#include "core/env/rng.h"

namespace zerosim {
namespace {

class SteadyClock final : public Clock {
 public:
  uint64_t now_ns() override {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  void sleep_ns(uint64_t duration_ns) override { std::this_thread::sleep_for(std::chrono::nanoseconds(duration_ns)); }
};

class CounterRng final : public Rng {
 public:
  explicit CounterRng(RngState state) : state_(state) {}
  uint64_t next_u64() override { return mix_random_bits(state_.seed, state_.stream_id, state_.counter++); }
  RngState state() const override { return state_; }
  void restore(const RngState& state) override { state_ = state; }

 private:
  RngState state_;
};

uint64_t splitmix64_finalize(uint64_t value) {
  value ^= value >> 30;
  value *= 0xbf58476d1ce4e5b9ULL;
  value ^= value >> 27;
  value *= 0x94d049bb133111ebULL;
  value ^= value >> 31;
  return value;
}

}  // namespace

std::unique_ptr<Clock> make_steady_clock() { return std::make_unique<SteadyClock>(); }

uint64_t mix_random_bits(uint64_t seed, uint64_t stream_id, uint64_t counter) {
  // Each word goes through the finalizer before it is combined, so that nearby
  // (stream, counter) pairs do not produce correlated outputs.
  uint64_t combined = splitmix64_finalize(seed + 0x9e3779b97f4a7c15ULL);
  combined = splitmix64_finalize(combined ^ (stream_id + 0x6a09e667f3bcc909ULL));
  return splitmix64_finalize(combined ^ (counter * 0x9e3779b97f4a7c15ULL + 0xbb67ae8584caa73bULL));
}

float random_symmetric_unit_float(uint64_t random_bits) {
  // 24 bits give k in [0, 2^24); k * 2^-23 - 1 is exact in fp32.
  const uint32_t top_bits = static_cast<uint32_t>(random_bits >> 40);
  return static_cast<float>(top_bits) * (1.0f / 8388608.0f) - 1.0f;
}

uint64_t Rng::next_below(uint64_t bound) {
  if (bound <= 1) return 0;
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
  uint64_t value;
  do {
    value = next_u64();
  } while (value >= limit);
  return value % bound;
}

std::unique_ptr<Rng> make_counter_rng(RngState initial_state) { return std::make_unique<CounterRng>(initial_state); }

}  // namespace zerosim
