#include "sim/crash_explorer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "core/checkpoint/manifest.h"
#include "core/env/rng.h"
#include "core/tensor/dtype.h"
#include "sim/sim_world.h"

#include <xxhash.h>

#include <map>

namespace zerosim {

std::string CrashPoint::describe() const {
  return site + "@rank" + std::to_string(rank) + "#" + std::to_string(occurrence);
}

void ScriptedCrashPoints::hit(std::string_view site, int rank) {
  // Armed, only the target's own hits count (the others pass without the lock: crash points
  // are hit on every rank's hot paths).
  if (armed_ && (rank != target_.rank || site != target_.site)) return;
  std::lock_guard lock(mutex_);
  if (!armed_) {
    const int64_t occurrence = ++counts_[{std::string(site), rank}];
    recorded_.push_back(CrashPoint{std::string(site), rank, occurrence});
    return;
  }
  const int64_t occurrence = ++target_hits_;
  if (fired_ || occurrence != target_.occurrence) return;
  fired_ = true;
  // The power goes out now: nothing any rank does from here on reaches the disk.
  if (disk_ != nullptr) disk_->freeze();
  throw SimulatedCrash{std::string(site), rank};
}

std::vector<CrashPoint> ScriptedCrashPoints::recorded() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

bool ScriptedCrashPoints::fired() const {
  std::lock_guard lock(mutex_);
  return fired_;
}

std::string Divergence::describe() const {
  if (!found) return "";
  return component.empty() ? where : where + ": " + component;
}

namespace {

template <typename Value>
std::string value_with_bits(Value value) {
  using Bits = std::conditional_t<sizeof(Value) == 4, uint32_t, uint64_t>;
  char text[96];
  std::snprintf(text, sizeof text, "%.17g (0x%0*llx)", static_cast<double>(value), static_cast<int>(sizeof(Value) * 2),
                static_cast<unsigned long long>(std::bit_cast<Bits>(value)));
  return text;
}

}  // namespace

void keep_steps_after(TrainingRun& run, int64_t step) {
  if (step <= 0) return;
  const size_t kept_from = static_cast<size_t>(step);
  ZEROSIM_CHECK(run.steps.size() >= kept_from && run.step_digests.size() == run.steps.size(),
                "keep_steps_after: the run has no digest of that step");
  run.initial_digests = run.step_digests[kept_from - 1];
  run.steps.erase(run.steps.begin(), run.steps.begin() + static_cast<ptrdiff_t>(kept_from));
  run.step_digests.erase(run.step_digests.begin(), run.step_digests.begin() + static_cast<ptrdiff_t>(kept_from));
}

Divergence find_first_divergence(const TrainingRun& reference, const TrainingRun& resumed, int64_t first_step) {
  Divergence divergence;
  divergence.found = true;
  if (reference.step_digests.size() != reference.steps.size()) {
    divergence.where = "the reference has no per-step digests";
    return divergence;
  }
  if (first_step < 0 || static_cast<size_t>(first_step) > reference.steps.size() ||
      resumed.steps.size() != reference.steps.size() - static_cast<size_t>(first_step)) {
    divergence.where = "the resumed run ran " + std::to_string(resumed.steps.size()) + " steps from step " +
                       std::to_string(first_step) + ", the reference " + std::to_string(reference.steps.size());
    return divergence;
  }
  if (resumed.step_digests.size() != resumed.steps.size()) {
    divergence.where = "the resumed run has no per-step digests";
    return divergence;
  }
  // Right after the load, before any step: where a lost or mangled state shows first.
  const ComponentDigests& saved = first_step == 0 ? reference.initial_digests : reference.step_digests[first_step - 1];
  divergence.component = first_differing_component(saved, resumed.initial_digests);
  if (!divergence.component.empty()) {
    divergence.where = "after load (step " + std::to_string(first_step) + ")";
    divergence.state_step = first_step;
    divergence.at_step = first_step;
    return divergence;
  }
  for (size_t k = 0; k < resumed.steps.size(); ++k) {
    const size_t r = k + static_cast<size_t>(first_step);
    divergence.where = "step " + std::to_string(r + 1);
    divergence.at_step = static_cast<int64_t>(r) + 1;
    const StepRecord& expected = reference.steps[r];
    const StepRecord& actual = resumed.steps[k];
    auto record_field = [&](const char* field, auto expected_value, auto actual_value) {
      divergence.component = field;
      divergence.expected_value = value_with_bits(expected_value);
      divergence.actual_value = value_with_bits(actual_value);
      divergence.ulp_distance = ulp_distance(expected_value, actual_value);
      return divergence;
    };
    if (expected.step != actual.step) {
      divergence.component = "step number";
      divergence.expected_value = std::to_string(expected.step);
      divergence.actual_value = std::to_string(actual.step);
      return divergence;
    }
    if (std::memcmp(&expected.loss, &actual.loss, sizeof(float)) != 0) return record_field("loss", expected.loss, actual.loss);
    if (std::memcmp(&expected.learning_rate, &actual.learning_rate, sizeof(double)) != 0) {
      return record_field("learning rate", expected.learning_rate, actual.learning_rate);
    }
    if (std::memcmp(&expected.loss_scale, &actual.loss_scale, sizeof(double)) != 0) {
      return record_field("loss scale", expected.loss_scale, actual.loss_scale);
    }
    if (std::memcmp(&expected.grad_norm, &actual.grad_norm, sizeof(double)) != 0) {
      return record_field("grad norm", expected.grad_norm, actual.grad_norm);
    }
    if (expected.skipped != actual.skipped) {
      divergence.component = "skipped";
      divergence.expected_value = expected.skipped ? "true" : "false";
      divergence.actual_value = actual.skipped ? "true" : "false";
      return divergence;
    }
    divergence.component = first_differing_component(reference.step_digests[r], resumed.step_digests[k]);
    if (!divergence.component.empty()) {
      divergence.state_step = static_cast<int64_t>(r) + 1;
      return divergence;
    }
  }
  return Divergence{};
}

std::string first_divergence(const TrainingRun& reference, const TrainingRun& resumed, int64_t first_step) {
  return find_first_divergence(reference, resumed, first_step).describe();
}

namespace {

Env sim_env(SimDisk& disk, CrashPointHook& hook, Clock& clock, const DefectSet* defects) {
  return Env{&disk, &clock, &hook, defects, /*async_saves_deferred=*/true};
}

// Calls the scenario's planted hook (tests only), then the real one.
class PlantedHook final : public CrashPointHook {
 public:
  PlantedHook(const CrashScenario& scenario, Disk& disk, CrashPointHook& inner)
      : scenario_(scenario), disk_(disk), inner_(inner) {}
  void hit(std::string_view site, int rank) override {
    if (scenario_.planted_hook) scenario_.planted_hook(disk_, site, rank);
    inner_.hit(site, rank);
  }

 private:
  const CrashScenario& scenario_;
  Disk& disk_;
  CrashPointHook& inner_;
};


// A clock that never moves: the explorer's runs must not depend on time.
class FixedClock final : public Clock {
 public:
  uint64_t now_ns() override { return 0; }
  void sleep_ns(uint64_t) override {}
};

}  // namespace

// The fates to try for these pending operations (see crash_explorer.h). Fates follow what an
// operation is, not its position (ranks interleave differently from run to run): operations
// are put in a canonical order (their description, then their rank among equal ones), the
// checkpoint's own operations are enumerated (or sampled past the bound), and the others
// (scratch swap files, never read by a resume) get a fate drawn from their identity.
std::vector<std::vector<CrashFate>> crash_states(const std::vector<PendingOperation>& pending, int64_t bound,
                                                 uint64_t seed, const std::string& checkpoint_directory) {
  std::vector<std::string> keys(pending.size());
  std::map<std::string, int> seen;
  for (size_t i = 0; i < pending.size(); ++i) {
    const std::string described = pending[i].describe();
    keys[i] = described + "#" + std::to_string(seen[described]++);
  }
  std::vector<size_t> relevant, scratch;
  for (size_t i = 0; i < pending.size(); ++i) {
    const bool in_checkpoint = pending[i].path.rfind(checkpoint_directory + "/", 0) == 0 ||
                               pending[i].path == checkpoint_directory;
    (in_checkpoint ? relevant : scratch).push_back(i);
  }
  std::sort(relevant.begin(), relevant.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  auto choices_of = [&](size_t i) {
    return pending[i].kind == PendingOperation::Kind::kWrite && pending[i].sector_count >= 2 ? 3 : 2;
  };
  auto fate_of = [&](size_t i, int choice) {
    CrashFate fate;
    if (choice == 1) fate.kind = CrashFate::Kind::kDrop;
    if (choice == 2) {
      fate.kind = CrashFate::Kind::kTear;
      const uint64_t half = pending[i].sector_count / 2;
      fate.surviving_sectors_mask = half >= 64 ? ~uint64_t{0} : ((uint64_t{1} << half) - 1);
    }
    return fate;
  };
  auto identity_bits = [&](size_t i, uint64_t n) {
    return mix_random_bits(seed ^ XXH64(keys[i].data(), keys[i].size(), 0), n, 0);
  };
  long double combinations = 1;
  for (size_t i : relevant) combinations *= choices_of(i);
  const bool exhaustive = combinations <= static_cast<long double>(bound);
  const int64_t count = exhaustive ? static_cast<int64_t>(combinations) : bound;
  std::vector<std::vector<CrashFate>> states;
  for (int64_t n = 0; n < count; ++n) {
    std::vector<CrashFate> fates(pending.size());
    int64_t rest = n;
    for (size_t i : relevant) {
      int choice = 0;
      if (exhaustive) {
        choice = static_cast<int>(rest % choices_of(i));
        rest /= choices_of(i);
      } else if (n == 1) {
        choice = 1;  // drop all (n == 0 keeps all)
      } else if (n >= 2) {
        choice = static_cast<int>(identity_bits(i, static_cast<uint64_t>(n)) % static_cast<uint64_t>(choices_of(i)));
      }
      fates[i] = fate_of(i, choice);
    }
    for (size_t i : scratch) {
      fates[i] = fate_of(i, static_cast<int>(identity_bits(i, static_cast<uint64_t>(n) + 1000003) %
                                             static_cast<uint64_t>(choices_of(i))));
    }
    states.push_back(std::move(fates));
  }
  return states;
}

std::string describe_state(const std::vector<PendingOperation>& pending, const std::vector<CrashFate>& fates) {
  std::string text;
  for (size_t i = 0; i < pending.size(); ++i) {
    const char* fate = fates[i].kind == CrashFate::Kind::kKeep ? "keep" : fates[i].kind == CrashFate::Kind::kDrop ? "drop" : "tear";
    if (!text.empty()) text += "; ";
    text += std::string(fate) + " " + pending[i].describe();
  }
  return text.empty() ? "(nothing pending)" : text;
}

Result<TrainingOptions> resume_options_for(const CrashScenario& scenario, const std::string& source) {
  TrainingOptions resume_options = scenario.options;
  resume_options.digest_every_step = true;
  const int world_size = scenario.resume_world_size;
  if (world_size <= 0 || world_size == scenario.options.world_size) return resume_options;
  // Elastic resume keeps the global batch: the accumulation follows the world size.
  const ResolvedConfig& config = scenario.options.config;
  const int64_t per_step = config.micro_batch_size * world_size;
  if (config.train_batch_size % per_step != 0) {
    return invalid_argument(source + ": resume_world_size " + std::to_string(world_size) +
                            " does not divide train_batch_size " + std::to_string(config.train_batch_size) +
                            " by micro batch " + std::to_string(config.micro_batch_size));
  }
  resume_options.world_size = world_size;
  resume_options.config.gradient_accumulation_steps = config.train_batch_size / per_step;
  return resume_options;
}

Result<std::string> check_determinism(const CrashScenario& scenario) {
  TrainingOptions options = scenario.options;
  options.digest_every_step = true;
  CheckpointPlan saving;
  saving.save_directory = scenario.checkpoint_directory;
  saving.save_every_steps = scenario.save_every_steps;
  saving.save_options = scenario.save_options;
  // Every I/O (the disk's trace), every collective (each rank's, in program order), every
  // crash decision, and the virtual time the run took.
  std::string hashes[2];
  for (std::string& hash : hashes) {
    SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, scenario.seed});
    NoCrashPoints no_crash;
    PlantedHook hook(scenario, disk, no_crash);
    SimWorld world(disk, options.world_size, FaultPlan{}, hook);
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun run, run_training(options, scenario.total_steps, world.seams(), saving));
    (void)run;
    hash = disk.trace_hash() + "-" + world.collective_trace_hash() + "-" + std::to_string(world.virtual_time_ns());
  }
  if (hashes[0] != hashes[1]) {
    return internal_error("determinism self-check failed: the same scenario and seed gave trace hashes " + hashes[0] +
                          " and " + hashes[1] + " (some I/O depends on something other than the seed)");
  }
  return hashes[0];
}

int64_t previous_save_step(const CrashScenario& scenario) {
  return scenario.explored_save_step - scenario.save_every_steps;
}

Result<ExplorationResult> explore_save_crashes(const CrashScenario& scenario) {
  if (scenario.save_every_steps < 1 || scenario.explored_save_step < scenario.save_every_steps ||
      scenario.explored_save_step % scenario.save_every_steps != 0) {
    return invalid_argument("scenario: explored_save_step (" + std::to_string(scenario.explored_save_step) +
                            ") must be a positive multiple of save_every (" + std::to_string(scenario.save_every_steps) +
                            ")");
  }
  if (scenario.total_steps < scenario.explored_save_step) {
    return invalid_argument("scenario: steps (" + std::to_string(scenario.total_steps) +
                            ") must be at least explored_save_step (" + std::to_string(scenario.explored_save_step) + ")");
  }
  if (scenario.crash_state_bound < 2) return invalid_argument("scenario: crash_state_bound must be at least 2");
  ZEROSIM_RETURN_IF_ERROR(validate_training_options(scenario.options));
  TrainingOptions options = scenario.options;
  options.digest_every_step = true;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, resume_options_for(scenario, "scenario"));
  FixedClock clock;
  ExplorationResult result;
  ZEROSIM_ASSIGN_OR_RETURN(std::string trace_hash, check_determinism(scenario));

  // The uninterrupted reference.
  SimDisk reference_disk(SimDiskOptions{512, uint64_t{1} << 40, scenario.seed});
  NoCrashPoints no_crash;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference,
                           run_training(options, scenario.total_steps, sim_env(reference_disk, no_crash, clock, nullptr)));
  result.reference_trace_hash = trace_hash;

  // The crash points of the explored save.
  CheckpointPlan saving;
  saving.save_directory = scenario.checkpoint_directory;
  saving.save_every_steps = scenario.save_every_steps;
  saving.save_options = scenario.save_options;
  const int64_t save_index = scenario.explored_save_step / scenario.save_every_steps;
  std::vector<CrashPoint> points;
  {
    SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, scenario.seed});
    ScriptedCrashPoints recorder;
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun run, run_training(options, scenario.explored_save_step,
                                                           sim_env(disk, recorder, clock, &scenario.defects), saving));
    (void)run;
    // The phases of a save, in order; ranks hit them concurrently, so the recorded order is
    // not reproducible, but the set is: it is explored in (phase, rank) order.
    static const char* const kSavePhases[] = {"ckpt.save_begin",      "ckpt.tag_prepared",      "ckpt.shard_written",
                                              "ckpt.manifest_written", "ckpt.latest_published", "ckpt.save_end"};
    auto phase_of = [](const std::string& site) {
      for (size_t i = 0; i < std::size(kSavePhases); ++i) {
        if (site == kSavePhases[i]) return static_cast<int>(i);
      }
      return -1;
    };
    for (const CrashPoint& point : recorder.recorded()) {
      if (phase_of(point.site) >= 0 && point.occurrence == save_index) points.push_back(point);
    }
    std::sort(points.begin(), points.end(), [&](const CrashPoint& a, const CrashPoint& b) {
      return std::pair(phase_of(a.site), a.rank) < std::pair(phase_of(b.site), b.rank);
    });
  }
  if (points.empty()) return internal_error("the explored save hit no crash point");

  // The first save has no committed checkpoint before it: a crash state whose save did not
  // commit has nothing to resume from (a named refusal), else it resumes from the explored save.
  const bool first_save = previous_save_step(scenario) == 0;
  const std::string committed_tag = checkpoint_tag_for_step(previous_save_step(scenario));
  const std::string explored_tag = checkpoint_tag_for_step(scenario.explored_save_step);
  CheckpointPlan resuming;
  resuming.resume_directory = scenario.checkpoint_directory;
  for (const CrashPoint& point : points) {
    const CrashPointTallyScope tally(result, point.describe());
    ++result.crash_points;
    result.explored_points.push_back(point.describe());
    result.points.push_back(point);
    SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, scenario.seed});
    ScriptedCrashPoints crash(point, &disk);
    const Result<TrainingRun> killed =
        run_training(options, scenario.explored_save_step, sim_env(disk, crash, clock, &scenario.defects), saving);
    if (!crash.fired() || killed.ok()) {
      return internal_error("crash point " + point.describe() + " was not reached on replay (nondeterminism?)");
    }
    const std::vector<PendingOperation> pending = disk.pending_operations();
    for (const std::vector<CrashFate>& fates : crash_states(pending, scenario.crash_state_bound, scenario.seed, scenario.checkpoint_directory)) {
      ++result.crash_states;
      std::unique_ptr<SimDisk> after = disk.clone();
      after->crash(fates);
      auto fail = [&](const std::string& reason) {
        ++result.failed;
        if (result.failures.size() < 8) {
          result.failures.push_back(CrashCaseFailure{point.describe(), describe_state(pending, fates), reason});
        }
      };
      // No committed checkpoint may be lost: the earlier save was complete before the crash.
      // Retention (checkpoint.keep_last) may remove it, but only once the explored save is
      // complete: then the resume must start there.
      const bool committed_complete =
          !first_save && check_tag_complete(*after, scenario.checkpoint_directory, committed_tag).ok();
      const bool explored_complete = check_tag_complete(*after, scenario.checkpoint_directory, explored_tag).ok();
      if (!first_save && !committed_complete && !explored_complete) {
        fail("the committed checkpoint " + committed_tag + " was lost");
        continue;
      }
      const Result<TrainingRun> resumed =
          run_training(resume_options, scenario.total_steps, sim_env(*after, no_crash, clock, &scenario.defects), resuming);
      if (!resumed.ok()) {
        if (resumed.status().code() == StatusCode::kNotFound) {
          ++result.refused;
        } else {
          fail("resume failed: " + resumed.status().to_string());
        }
        continue;
      }
      const int64_t resumed_at = scenario.total_steps - static_cast<int64_t>(resumed->steps.size());
      if (!committed_complete && resumed_at != scenario.explored_save_step) {
        fail("resumed at step " + std::to_string(resumed_at) + ", but only the explored save (step " +
             std::to_string(scenario.explored_save_step) + ") " +
             (first_save ? "exists (it is the run's first)" : "is left: retention removed " + committed_tag));
        continue;
      }
      if (resumed_at != previous_save_step(scenario) && resumed_at != scenario.explored_save_step) {
        fail("resumed at step " + std::to_string(resumed_at) + ", which is neither the committed save (step " +
             std::to_string(previous_save_step(scenario)) + ") nor the explored one");
        continue;
      }
      const std::string divergence = first_divergence(reference, *resumed, resumed_at);
      if (!divergence.empty()) {
        fail("resumed at step " + std::to_string(resumed_at) + ", diverged at " + divergence);
        continue;
      }
      ++result.passed;
    }
  }
  return result;
}

}  // namespace zerosim
