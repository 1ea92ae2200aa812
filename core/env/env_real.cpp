#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/env/clock.h"
#include "core/env/env.h"
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

}  // namespace

std::unique_ptr<Clock> make_steady_clock() { return std::make_unique<SteadyClock>(); }

int available_cpu_count() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
  // Without the mask (more CPUs than a cpu_set_t holds), the machine's count.
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int cpus_per_rank_on_host(int ranks_on_host) {
  if (ranks_on_host <= 0) return 0;
  return std::max(1, available_cpu_count() / ranks_on_host);
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
