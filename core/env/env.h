// The Env: the seams a rank engine is constructed with (DESIGN.md, "The seams"). The engine
// never reaches a disk, a clock or the crash hook except through these pointers, so the
// simulator can hand it SimDisk, SimClock and its crash selector instead. Comm is per rank
// and handed separately. Randomness comes from counter-based streams keyed by the run's
// seed (rng.h), so there is no RNG object to inject, only the seed.
#pragma once

#include <memory>

#include "core/env/clock.h"
#include "core/env/crash_points.h"
#include "core/env/defects.h"
#include "core/env/disk.h"

namespace zerosim {

struct Env {
  Disk* disk = nullptr;
  Clock* clock = nullptr;
  CrashPointHook* crash_points = nullptr;
  // Null in real runs: no defect is active (defects.h).
  const DefectSet* defects = nullptr;
  // The simulator's scheduling of checkpoint.async_save: the background half of a save runs
  // when the next save (or the end of the run) waits for it, on the rank's own thread, instead
  // of on a thread racing the training steps. A crash then finds the same saves committed in
  // every run (a save still "in flight" at the crash was never written), which keeps the
  // simulator deterministic. Real runs leave it false.
  bool async_saves_deferred = false;
};

// Owns the real implementations: POSIX disk, steady clock, no crash points.
class RealEnv {
 public:
  RealEnv() : disk_(make_posix_disk()), clock_(make_steady_clock()) {}
  Env env() { return Env{disk_.get(), clock_.get(), &crash_points_, nullptr}; }

 private:
  std::unique_ptr<Disk> disk_;
  std::unique_ptr<Clock> clock_;
  NoCrashPoints crash_points_;
};

}  // namespace zerosim
