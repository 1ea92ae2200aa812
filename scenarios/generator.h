// Generated scenarios: the shape of a scenario as a handful of small choices, drawn from a
// seed, written as an ordinary scenario file, and shrunk towards the simplest scenario that
// still fails the same way.
//
// Every generated scenario demands recovery: its faults are the ones a correct engine must
// survive (a crash at a step or a commit site of a save that is not the first, ENOSPC or EIO
// on a later save's shard, a deleted swap directory, a resume at another world size), and it
// expects the resume to be bit-identical to the uninterrupted run. So with no defect every
// generated case passes, and a case that fails is a bug (or a defect switched on).
//
// One generator serves `zerosim fuzz` (seeded: case i of a campaign is a pure function of the
// campaign seed and i, so a shard of a CI matrix runs the same cases on any machine) and the
// RapidCheck properties in the tests (which draw the same fields through RapidCheck, so that
// its shrinking works on them); both pass through normalize_shape, which makes any
// combination of fields valid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario_runner.h"

namespace zerosim {

enum class GeneratedFault { kNone, kCrashAtStepEnd, kCrashInSave, kNoSpaceOnSave, kIoErrorOnSave };

struct ScenarioShape {
  uint64_t seed = 1;
  int64_t save_every = 2;          // save every S steps
  int64_t saves_before_kill = 2;   // the first phase runs to save_every * saves_before_kill (>= 2)
  int64_t steps_after = 2;         // the run's total = that + steps_after (>= 1)
  int world_size = 2;
  int resume_world_size = 0;       // 0: the same
  int64_t input_width = 6;
  std::vector<int64_t> hidden_widths = {5};  // 0 to 3 hidden layers
  int64_t class_count = 3;
  std::string precision = "fp16";  // fp32, fp16, bf16
  int64_t micro_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t sub_group_size = 16;
  std::string offload_optimizer = "none";  // none, cpu, nvme
  bool offload_param_nvme = false;
  bool async_save = false;
  bool delete_swap_directory = false;
  GeneratedFault fault = GeneratedFault::kNone;
  int fault_rank = 0;
  int64_t fault_occurrence = 1;     // which step end, or which save (1-based, >= 2 for saves)
  std::string fault_site = "ckpt.shard_written";  // kCrashInSave: the commit site

  bool operator==(const ScenarioShape&) const = default;
};

// Clamps and fixes every field so that the shape is a valid scenario that demands recovery
// (see above). Idempotent.
ScenarioShape normalize_shape(ScenarioShape shape);
// A shape drawn from `seed` (uniform over the choices above, then normalized).
ScenarioShape generate_shape(uint64_t seed);
// The scenario file of a shape (expect bit_identical), readable by scenario_from_json.
nlohmann::json scenario_document(const ScenarioShape& shape, const std::string& name);
// One line: "W=2->1, 10 steps, save every 2, fp16, nvme optimizer, crash at ckpt.shard_written@rank1#2".
std::string describe_shape(const ScenarioShape& shape);
// The seed of case `index` of the campaign `campaign_seed`: disjoint across indices, so shards
// taking indices i, i+N, i+2N... never run the same case.
uint64_t case_seed(uint64_t campaign_seed, uint64_t index);

// Simpler shapes than `shape`, simplest first: fewer steps and saves, no fault, one rank, a
// smaller model, fp32, no offload, no accumulation.
std::vector<ScenarioShape> shrink_candidates(const ScenarioShape& shape);

struct ShrinkResult {
  ScenarioShape shape;
  ScenarioVerdict verdict;
  int64_t attempts = 0;  // candidate runs
  int64_t accepted = 0;  // simplifications kept
};

// The class of a failure that shrinking must keep: the diverging component ("exp_avg",
// "scheduler", "loss") or "refused", so a shrunk case fails for the same reason.
std::string failure_class(const ScenarioVerdict& verdict);

// Greedy shrinking: repeatedly takes the first candidate that still fails with the same
// failure_class, until none does or `max_attempts` candidates were run.
Result<ShrinkResult> shrink_failure(const ScenarioShape& failing, const ScenarioVerdict& verdict,
                                    const DefectSet& defects, int64_t max_attempts = 200,
                                    ReferenceCache* cache = nullptr, const ComputeDevice& compute = ComputeDevice{});

// Runs a shape as a scenario (through its JSON document, as a replay would), computing on
// `compute` (the CPU by default).
Result<ScenarioVerdict> run_shape(const ScenarioShape& shape, const std::string& name, const DefectSet& defects,
                                  ReferenceCache* cache = nullptr, const ComputeDevice& compute = ComputeDevice{});

}  // namespace zerosim
