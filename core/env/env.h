// The Env: the seams a rank engine is constructed with (docs/design.md, "The seams"). The engine
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
  // The CPUs this rank may count on: the process's (sched_getaffinity) over the ranks that share
  // them (the launcher knows how many run on the host). It sizes the checkpoint's buffered I/O
  // threads (checkpoint_io_options_from). 0 when not known, as in the simulator and the tests,
  // whose results must not depend on the machine: then the fixed default applies.
  int cpus_per_rank = 0;
};

// The CPUs this process may run on (its affinity mask; at least 1).
int available_cpu_count();

// available_cpu_count() shared by `ranks_on_host` ranks (rounded down, at least 1); 0 when the
// number of ranks on the host is not known (ranks_on_host <= 0).
int cpus_per_rank_on_host(int ranks_on_host);

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
