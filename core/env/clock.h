// The Clock seam: the only way core/ reads time. Time never reaches a result or a
// file; it is used for logging and, in the simulator, for virtual-time costs.
#pragma once

#include <cstdint>
#include <memory>

namespace zerosim {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary origin.
  virtual uint64_t now_ns() = 0;
  // Waits (or, in virtual time, advances) `duration_ns`: how a poll waits between tries.
  virtual void sleep_ns(uint64_t duration_ns) = 0;
};

// The real implementation: std::chrono::steady_clock.
std::unique_ptr<Clock> make_steady_clock();

}  // namespace zerosim
