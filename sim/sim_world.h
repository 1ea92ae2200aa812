// Virtual time and the per-rank seams of a simulated run.
//
// Each rank has its own SimClock. It advances by modelled costs only, never by wall time:
//   * disk operations: each rank sees the shared SimDisk through its own FaultyDisk whose
//     latency rules (latency_us per operation, plus size / bandwidth for reads and writes)
//     delay on that rank's clock instead of sleeping;
//   * collectives: ClockedComm first makes the participants agree on the latest of their
//     clocks (a collective cannot finish before its last participant arrives), then charges
//     latency + bytes / network bandwidth, plus, for the all-gather of a layer, the compute
//     that the gathered elements stand for (compute_ns_per_element; the core's arithmetic is
//     not timed, so compute is modelled by the work it gathers for).
// So the virtual time of a run is a pure function of the scenario (except with async saves,
// whose background writes share the rank's clock with its training thread in racy order): a crash can be placed at a
// virtual time, and "simulated seconds per wall second" measures the simulator.
//
// A fault plan (JSON) names the costs, the disk faults in FaultyDisk's vocabulary (so the same
// rules run against a real directory), and optionally a crash:
//   {"costs": {"disk_latency_us": 20, "disk_latency_jitter": 0.5, "seed": 1,
//              "disk_bandwidth_mb_per_s": 2000, "collective_latency_us": 10,
//              "network_bandwidth_mb_per_s": 20000, "compute_ns_per_element": 1.0},
//    "disk_faults": [{"path": "*/rank-00001*", "op": "write", "occurrence": 1, "fault": "io_error"}],
//    "crash": {"site": "ckpt.shard_written", "rank": 1, "occurrence": 2} | {"virtual_time_us": 1500}}
// Fault occurrences are counted per rank (each rank's operations, in its program order), so a rule
// whose path several ranks write hits the same rank's operation in every run; "rank": R limits a
// rule to rank R.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "faults/faulty_disk.h"
#include "sim/crash_explorer.h"
#include "sim/sim_disk.h"

namespace zerosim {

class SimClock final : public Clock {
 public:
  uint64_t now_ns() override { return now_ns_.load(); }
  void sleep_ns(uint64_t duration_ns) override { advance_ns(duration_ns); }
  void advance_ns(uint64_t duration_ns) { now_ns_ += duration_ns; }
  void advance_to_ns(uint64_t time_ns) {
    uint64_t current = now_ns_.load();
    while (current < time_ns && !now_ns_.compare_exchange_weak(current, time_ns)) {
    }
  }

 private:
  std::atomic<uint64_t> now_ns_{0};
};

struct SimCostModel {
  // A disk operation takes disk_latency_us x (1 - jitter + 2 x jitter x u), u uniform in [0, 1)
  // from a counter-based stream keyed by (seed, rank, operation index): a distribution, yet
  // the same for the same scenario.
  uint64_t disk_latency_us = 20;
  double disk_latency_jitter = 0.5;
  uint64_t seed = 1;
  double disk_bandwidth_mb_per_s = 2000.0;
  uint64_t collective_latency_us = 10;
  double network_bandwidth_mb_per_s = 20000.0;
  double compute_ns_per_element = 1.0;
};

struct FaultPlan {
  SimCostModel costs;
  std::vector<FaultRule> disk_faults;
  std::optional<CrashPoint> crash_point;
  std::optional<uint64_t> crash_at_virtual_time_us;
};

// Parses a fault plan; every error names the key.
Result<FaultPlan> parse_fault_plan(const nlohmann::json& document, const std::string& source_name);

// The ranks' clocks at entry to their collectives, shared by one SimWorld's ClockedComms.
// Two tables, used alternately by successive collectives: a rank writes the table of its
// collective k + 2 only after the rendezvous of collective k + 1, which every rank reaches
// only after reading the table of collective k.
struct CollectiveClockTable {
  explicit CollectiveClockTable(int world_size)
      : entry_clock_ns{std::vector<uint64_t>(static_cast<size_t>(world_size)),
                       std::vector<uint64_t>(static_cast<size_t>(world_size))} {}
  std::array<std::vector<uint64_t>, 2> entry_clock_ns;
};

// Wraps a rank's communicator: every collective synchronizes and advances the virtual clocks.
// The clocks agree through the shared table, not a collective of their own: the inner
// communicator (the in-process ThreadComm of run_training) is a rendezvous, every rank arrives
// before any leaves, so after it each rank reads every rank's entry clock. One rendezvous per
// collective instead of two (the clock agreement was 40% of a simulated run's wall time).
class ClockedComm final : public Comm {
 public:
  ClockedComm(Comm& inner, SimClock& clock, const SimCostModel& costs, std::atomic<uint64_t>& trace,
              CollectiveClockTable& clock_table)
      : inner_(inner), clock_(clock), costs_(costs), trace_(trace), clock_table_(clock_table) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) override;
  Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) override;
  Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t chunk_elements,
                                   std::span<float> accumulator) override;
  Status all_reduce_max(std::span<double> values) override;
  Status broadcast(std::span<std::byte> buffer, int root_rank) override;
  Status barrier() override;

 private:
  // Posts this rank's clock, runs the inner collective, then moves the clock to the latest
  // entry clock of any rank plus the collective's cost; the collective (its kind and size)
  // goes into this rank's trace, in program order. A failed collective charges nothing.
  template <typename InnerCollective>
  Status clocked(const char* kind, uint64_t bytes, uint64_t compute_elements, InnerCollective&& inner_collective);
  Comm& inner_;
  SimClock& clock_;
  SimCostModel costs_;
  std::atomic<uint64_t>& trace_;
  CollectiveClockTable& clock_table_;
  uint64_t collectives_entered_ = 0;  // picks the table of the next collective
};

// The seams of one simulated run: a clock per rank, the plan's faults around the shared disk,
// a per-rank view of it that charges the rank's clock, and clocked communicators.
class SimWorld {
 public:
  SimWorld(SimDisk& disk, int world_size, const FaultPlan& plan, CrashPointHook& crash_points,
           const DefectSet* defects = nullptr);
  RankSeams seams();
  SimClock& clock(int rank) { return *clocks_[static_cast<size_t>(rank)]; }
  // The latest virtual time of any rank, in nanoseconds.
  uint64_t virtual_time_ns() const;
  // Hash of every rank's sequence of collectives (kind and bytes), combined in rank order: with
  // the disk's trace hash, what the determinism self-check compares.
  std::string collective_trace_hash() const;
  FaultyDisk& faulty_disk() { return *faulty_disk_; }

 private:
  SimCostModel costs_;
  std::unique_ptr<FaultyDisk> faulty_disk_;  // the plan's faults, shared by all ranks
  std::vector<std::unique_ptr<FaultyDisk>> plan_views_;  // per rank: its operations under the plan's faults
  std::vector<std::unique_ptr<SimClock>> clocks_;
  std::vector<std::unique_ptr<FaultyDisk>> rank_disks_;  // latency on each rank's clock
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> collective_traces_;  // per rank
  CollectiveClockTable collective_clocks_;
  CrashPointHook& crash_points_;
  const DefectSet* defects_;
};

// Crash-point hook that stops the world at the first hit on a rank whose virtual clock has
// reached `time_us` (freezing the disk, as ScriptedCrashPoints does).
class VirtualTimeCrash final : public CrashPointHook {
 public:
  VirtualTimeCrash(uint64_t time_us, SimDisk& disk) : time_us_(time_us), disk_(disk) {}
  void attach(SimWorld& world) { world_ = &world; }
  void hit(std::string_view site, int rank) override;
  bool fired() const { return fired_.load(); }

 private:
  uint64_t time_us_;
  SimDisk& disk_;
  SimWorld* world_ = nullptr;
  std::atomic<bool> fired_{false};
};

}  // namespace zerosim
