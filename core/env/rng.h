// The Rng seam: seeded, counter-based random streams.
//
// Why counter-based: a value is a pure function of (seed, stream id, counter), so a stream's
// whole state is three integers that a checkpoint records and a resume restores exactly,
// and randomness keyed by global indices (sample i, epoch e, element j) is the same at any
// world size. There is no unseeded randomness anywhere in zerosim.
#pragma once

#include <cstdint>
#include <memory>

#include "core/env/random_bits.h"

namespace zerosim {

struct RngState {
  uint64_t seed = 0;
  uint64_t stream_id = 0;
  uint64_t counter = 0;
  bool operator==(const RngState&) const = default;
};

class Rng {
 public:
  virtual ~Rng() = default;
  virtual uint64_t next_u64() = 0;
  // Uniform integer in [0, bound) without modulo bias (rejection on the top range).
  uint64_t next_below(uint64_t bound);
  virtual RngState state() const = 0;
  virtual void restore(const RngState& state) = 0;
};

// The real implementation (the simulator uses the same streams).
std::unique_ptr<Rng> make_counter_rng(RngState initial_state);

}  // namespace zerosim
