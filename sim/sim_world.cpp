#include "sim/sim_world.h"

#include <algorithm>

#include "core/config/ds_config.h"
#include "core/env/rng.h"
#include "core/checkpoint/manifest.h"

#include <xxhash.h>

namespace zerosim {

namespace {

using nlohmann::json;

Status check_keys(const json& object, const std::string& where, const std::vector<std::string_view>& valid) {
  if (!object.is_object()) return invalid_argument(where + ": expected an object");
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(valid.begin(), valid.end(), it.key()) == valid.end()) {
      return invalid_argument(where + "." + it.key() + ": unknown key; " + unknown_key_hint(it.key(), valid));
    }
  }
  return Status();
}

Result<double> non_negative_number(const json& object, const std::string& where, const std::string& key, double fallback) {
  if (!object.contains(key)) return fallback;
  const json& value = object[key];
  if (!value.is_number() || value.get<double>() < 0.0) {
    return invalid_argument(where + "." + key + ": expected a number >= 0, found " + value.dump());
  }
  return value.get<double>();
}

}  // namespace

Result<FaultPlan> parse_fault_plan(const json& document, const std::string& source_name) {
  ZEROSIM_RETURN_IF_ERROR(check_keys(document, source_name, {"costs", "disk_faults", "crash"}));
  FaultPlan plan;
  if (document.contains("costs")) {
    const json& costs = document["costs"];
    const std::string where = source_name + ": costs";
    ZEROSIM_RETURN_IF_ERROR(check_keys(costs, where,
                                       {"disk_latency_us", "disk_latency_jitter", "seed", "disk_bandwidth_mb_per_s",
                                        "collective_latency_us", "network_bandwidth_mb_per_s",
                                        "compute_ns_per_element"}));
    ZEROSIM_ASSIGN_OR_RETURN(plan.costs.disk_latency_jitter, non_negative_number(costs, where, "disk_latency_jitter", 0.5));
    if (plan.costs.disk_latency_jitter > 1.0) return invalid_argument(where + ".disk_latency_jitter: expected 0 to 1");
    ZEROSIM_ASSIGN_OR_RETURN(double seed, non_negative_number(costs, where, "seed", 1));
    plan.costs.seed = static_cast<uint64_t>(seed);
    ZEROSIM_ASSIGN_OR_RETURN(double disk_latency, non_negative_number(costs, where, "disk_latency_us", 20));
    ZEROSIM_ASSIGN_OR_RETURN(plan.costs.disk_bandwidth_mb_per_s,
                             non_negative_number(costs, where, "disk_bandwidth_mb_per_s", 2000));
    ZEROSIM_ASSIGN_OR_RETURN(double collective_latency, non_negative_number(costs, where, "collective_latency_us", 10));
    ZEROSIM_ASSIGN_OR_RETURN(plan.costs.network_bandwidth_mb_per_s,
                             non_negative_number(costs, where, "network_bandwidth_mb_per_s", 20000));
    ZEROSIM_ASSIGN_OR_RETURN(plan.costs.compute_ns_per_element,
                             non_negative_number(costs, where, "compute_ns_per_element", 1.0));
    plan.costs.disk_latency_us = static_cast<uint64_t>(disk_latency);
    plan.costs.collective_latency_us = static_cast<uint64_t>(collective_latency);
  }
  if (document.contains("disk_faults")) {
    Result<std::vector<FaultRule>> rules = parse_fault_rules(document["disk_faults"]);
    if (!rules.ok()) return invalid_argument(source_name + ": disk_faults: " + rules.status().message());
    plan.disk_faults = std::move(rules).value();
  }
  if (document.contains("crash")) {
    const json& crash = document["crash"];
    const std::string where = source_name + ": crash";
    ZEROSIM_RETURN_IF_ERROR(check_keys(crash, where, {"site", "rank", "occurrence", "virtual_time_us"}));
    if (crash.contains("virtual_time_us")) {
      if (crash.contains("site")) return invalid_argument(where + ": give either site (with rank, occurrence) or virtual_time_us");
      if (!crash["virtual_time_us"].is_number_integer() || crash["virtual_time_us"].get<int64_t>() < 0) {
        return invalid_argument(where + ".virtual_time_us: expected a non-negative integer");
      }
      plan.crash_at_virtual_time_us = crash["virtual_time_us"].get<uint64_t>();
    } else {
      if (!crash.contains("site") || !crash["site"].is_string()) return invalid_argument(where + ".site: expected a crash-point name");
      CrashPoint point;
      point.site = crash["site"].get<std::string>();
      if (crash.contains("rank") && !(crash["rank"].is_number_integer() && crash["rank"].get<int64_t>() >= 0)) return invalid_argument(where + ".rank: expected a rank");
      if (crash.contains("occurrence") &&
          (!crash["occurrence"].is_number_integer() || crash["occurrence"].get<int64_t>() < 1)) {
        return invalid_argument(where + ".occurrence: expected an integer >= 1");
      }
      point.rank = crash.value("rank", 0);
      point.occurrence = crash.value("occurrence", int64_t{1});
      plan.crash_point = point;
    }
  }
  return plan;
}

template <typename InnerCollective>
Status ClockedComm::clocked(const char* kind, uint64_t bytes, uint64_t compute_elements,
                            InnerCollective&& inner_collective) {
  std::vector<uint64_t>& entry_clocks = clock_table_.entry_clock_ns[collectives_entered_ % 2];
  ZEROSIM_CHECK(static_cast<size_t>(world_size()) == entry_clocks.size(), "ClockedComm: the world and its clock table differ in size");
  ++collectives_entered_;
  entry_clocks[static_cast<size_t>(rank())] = clock_.now_ns();
  ZEROSIM_RETURN_IF_ERROR(inner_collective());
  const uint64_t latest_clock_ns = *std::max_element(entry_clocks.begin(), entry_clocks.end());
  const std::string entry = std::string(kind) + " " + std::to_string(bytes);
  trace_.store(XXH64(entry.data(), entry.size(), trace_.load()));
  clock_.advance_to_ns(latest_clock_ns);
  const double transfer_ns =
      costs_.network_bandwidth_mb_per_s > 0 ? static_cast<double>(bytes) * 1000.0 / costs_.network_bandwidth_mb_per_s : 0;
  clock_.advance_ns(costs_.collective_latency_us * 1000 + static_cast<uint64_t>(transfer_ns) +
                    static_cast<uint64_t>(static_cast<double>(compute_elements) * costs_.compute_ns_per_element));
  return Status();
}

Status ClockedComm::all_gather(std::span<const std::byte> send, std::span<std::byte> receive) {
  return clocked("all_gather", receive.size(), receive.size() / 2, [&] { return inner_.all_gather(send, receive); });
}

Status ClockedComm::gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) {
  return clocked("gather", send.size() * static_cast<uint64_t>(world_size()), 0,
                 [&] { return inner_.gather(send, receive, root_rank); });
}

Status ClockedComm::reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t chunk_elements,
                                              std::span<float> accumulator) {
  return clocked("reduce_scatter", send.size(), 0,
                 [&] { return inner_.reduce_scatter_accumulate(send, dtype, chunk_elements, accumulator); });
}

Status ClockedComm::all_reduce_max(std::span<double> values) {
  return clocked("all_reduce_max", values.size_bytes(), 0, [&] { return inner_.all_reduce_max(values); });
}

Status ClockedComm::broadcast(std::span<std::byte> buffer, int root_rank) {
  return clocked("broadcast", buffer.size(), 0, [&] { return inner_.broadcast(buffer, root_rank); });
}

Status ClockedComm::barrier() {
  return clocked("barrier", 0, 0, [&] { return inner_.barrier(); });
}

SimWorld::SimWorld(SimDisk& disk, int world_size, const FaultPlan& plan, CrashPointHook& crash_points,
                   const DefectSet* defects)
    : costs_(plan.costs), collective_clocks_(world_size), crash_points_(crash_points), defects_(defects) {
  // The plan's faults wrap the shared disk; each rank sees them through its own view, whose
  // occurrences are that rank's operations (the same ones in every run, whatever the threads'
  // interleaving). They need no delay of their own: latency is charged per rank below.
  faulty_disk_ = std::make_unique<FaultyDisk>(disk, plan.disk_faults, [](uint64_t) {});
  // A power_loss rule: the operation took effect, now the power goes out (as a crash point does).
  faulty_disk_->set_power_loss_handler([&disk](const std::string&) { disk.freeze(); });
  for (int rank = 0; rank < world_size; ++rank) {
    collective_traces_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
    clocks_.push_back(std::make_unique<SimClock>());
    SimClock* clock = clocks_.back().get();
    std::vector<FaultRule> latency;
    for (FaultOperation operation : {FaultOperation::kOpen, FaultOperation::kRead, FaultOperation::kWrite,
                                     FaultOperation::kSync, FaultOperation::kRename, FaultOperation::kRemove,
                                     FaultOperation::kCreateDirectory, FaultOperation::kSyncDirectory}) {
      FaultRule rule;
      rule.path_pattern = "*";
      rule.operation = operation;
      rule.occurrence = 0;
      rule.kind = FaultKind::kLatency;
      rule.latency_us = plan.costs.disk_latency_us;
      if (operation == FaultOperation::kRead || operation == FaultOperation::kWrite) {
        rule.bandwidth_mb_per_s = plan.costs.disk_bandwidth_mb_per_s;
      }
      latency.push_back(rule);
    }
    // The delay callback runs on the rank's own threads in program order, so the operation
    // index, and with it the jittered latency, is the same in every run of the scenario.
    auto operation_index = std::make_shared<std::atomic<uint64_t>>(0);
    const SimCostModel costs = plan.costs;
    // The plan's faults count each rank's operations on their own (FaultyDisk::for_requester).
    plan_views_.push_back(faulty_disk_->for_requester(rank));
    rank_disks_.push_back(std::make_unique<FaultyDisk>(
        *plan_views_.back(), latency, [clock, operation_index, costs, rank](uint64_t latency_us) {
          const uint64_t index = operation_index->fetch_add(1);
          const double uniform =
              static_cast<double>(mix_random_bits(costs.seed, static_cast<uint64_t>(rank), index) >> 11) * 0x1.0p-53;
          const double factor = 1.0 - costs.disk_latency_jitter + 2.0 * costs.disk_latency_jitter * uniform;
          clock->advance_ns(static_cast<uint64_t>(static_cast<double>(latency_us) * 1000.0 * factor));
        }));
  }
}

RankSeams SimWorld::seams() {
  RankSeams seams;
  seams.env_for_rank = [this](int rank) {
    // Async saves run deferred (Env::async_saves_deferred): the simulator stays deterministic.
    return Env{rank_disks_[static_cast<size_t>(rank)].get(), clocks_[static_cast<size_t>(rank)].get(), &crash_points_,
               defects_, /*async_saves_deferred=*/true};
  };
  seams.wrap_comm = [this](int rank, Comm& inner) -> std::unique_ptr<Comm> {
    return std::make_unique<ClockedComm>(inner, *clocks_[static_cast<size_t>(rank)], costs_,
                                         *collective_traces_[static_cast<size_t>(rank)], collective_clocks_);
  };
  return seams;
}

uint64_t SimWorld::virtual_time_ns() const {
  uint64_t latest = 0;
  for (const auto& clock : clocks_) latest = std::max(latest, clock->now_ns());
  return latest;
}

std::string SimWorld::collective_trace_hash() const {
  uint64_t hash = 0;
  for (const auto& trace : collective_traces_) {
    const uint64_t value = trace->load();
    hash = XXH64(&value, sizeof value, hash);
  }
  return format_hash_128(hash, collective_traces_.size());
}

void VirtualTimeCrash::hit(std::string_view site, int rank) {
  if (world_ == nullptr || fired_.load()) return;
  if (world_->clock(rank).now_ns() < time_us_ * 1000) return;
  bool expected = false;
  if (!fired_.compare_exchange_strong(expected, true)) return;
  disk_.freeze();
  throw SimulatedCrash{std::string(site), rank};
}

}  // namespace zerosim
