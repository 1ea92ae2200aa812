// Generated scenarios: the shape of a scenario as a handful of small choices, drawn from a
// seed, written as an ordinary scenario file, and shrunk towards the simplest scenario that
// still fails the same way.
//
// Every generated scenario demands recovery: its faults are the ones a correct engine must
// survive, and it expects the resume to be bit-identical to the uninterrupted run, from the
// newest save that returned before the crash (the durability oracle, scenario_runner.h), or a
// refusal that names what is wrong. So with no defect every generated case passes, and a case
// that fails is a bug (or a defect switched on). The dimensions, each drawn independently:
//   * the run: world size and the resume's (elastic: W' above, below, not dividing the sizes,
//     larger than the smallest parameter), model, precision and numerics, batch, accumulation,
//     sub-group size, offload of the optimizer and parameters, async saves, retention;
//   * the schedule: none, WarmupLR, WarmupDecayLR, WarmupCosineLR, log or linear warmup,
//     warmup and total lengths placed so that saves and resumes fall in warmup, decay and past
//     the end;
//   * fp16 dynamics: initial scale, window, hysteresis (consecutive or not) and minimum drawn so
//     that cases overflow, recover and hit hysteresis around the save and the resume;
//   * one fault of the first phase: a crash at a step end or a commit site of a save that is
//     not the first; ENOSPC or EIO on a later save's shard; a power loss in the middle of any
//     write, fsync, rename or directory fsync of a later save's commit protocol (shard,
//     manifest, `latest`; inside an async save's background commit too); a lost or misdirected
//     write or a latent read error on a swap file after the first commit, or a lost write of a
//     later save's shard; SIGTERM with save-on-signal;
//   * after the power loss: the swap directory deleted; at-rest damage (a flipped bit, a
//     truncated or removed file, a stale copy from the previous tag, another rank's shard) to
//     a shard, the manifest or `latest` of the newest or the previous tag;
//   * the restart: a changed seed, dataset or model, which must be refused naming the dataset
//     or the model; DeepSpeed's load options and another frozen set;
//   * a chain of resumes: one or two restarts before the judged one, each with any load option
//     and its own frozen set, killed by a power loss after its saves (modelled: the expected run
//     changes the state where each load does, scenario_runner.h restart_chain).
//
// One generator serves `zerosim fuzz` (seeded: case i of a campaign is a pure function of the
// campaign seed and i, so a shard of a CI matrix runs the same cases on any machine) and the
// RapidCheck properties in the tests (which draw the same fields through RapidCheck, so that
// its shrinking works on them); both pass through normalize_shape, which makes any
// combination of fields valid.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario_runner.h"

namespace zerosim {

enum class GeneratedFault {
  kNone,
  kCrashAtStepEnd,
  kCrashInSave,
  kNoSpaceOnSave,
  kIoErrorOnSave,
  kPowerLossInSave,   // power_loss at one operation of a later save's commit protocol
  kStorageFault,      // a lying or failing disk during training (StorageFault)
  kSigterm,           // SIGTERM in step fault_occurrence, saved on the signal
};
inline constexpr int kGeneratedFaultCount = 8;

// The storage faults of kStorageFault (scenarios: faults/faulty_disk.h's vocabulary).
enum class StorageFault { kLostWriteSwap, kMisdirectedWriteSwap, kReadErrorSwap, kLostWriteShard, kBitFlipReadSwap };
inline constexpr int kStorageFaultCount = 5;

// The operations of a save's commit protocol (the order the engine makes them), where
// kPowerLossInSave cuts the power: index into commit_protocol_operations().
struct CommitOperation {
  const char* name;      // "manifest.json.tmp write"
  const char* file;      // the path pattern under the tag ("%s" = the tag directory)
  const char* operation; // the fault plan's op
  bool per_save;         // true: counted once per save (files of the tag); false: `latest`, counted over saves
};
std::span<const CommitOperation> commit_protocol_operations();

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
  // Set: the case trains this transformer instead of the MLP above (whose widths are then unused).
  std::optional<GptSpec> transformer;
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
  int commit_operation = 0;         // kPowerLossInSave: index into commit_protocol_operations()
  StorageFault storage_fault = StorageFault::kLostWriteSwap;
  std::string numerics = "portable";  // portable, deepspeed
  // The schedule.
  std::string scheduler = "WarmupLR";  // none, WarmupLR, WarmupDecayLR, WarmupCosineLR
  std::string warmup_type = "log";     // log, linear
  int64_t warmup_num_steps = 3;
  int64_t total_num_steps = 8;         // WarmupDecayLR, WarmupCosineLR
  // fp16's dynamic loss scale.
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  int64_t min_loss_scale_power = 0;
  int64_t keep_last = 0;  // checkpoint.keep_last (0: keep all)
  // At-rest damage after the power loss (damaged: whether there is any).
  bool damaged = false;
  AtRestDamage damage;
  std::string resume_change = "none";  // none, seed, dataset_size, model, optimizer (AdamW -> Adam with L2 decay)
  // DeepSpeed's load options for the restart (CheckpointLoadOptions): all, no_optimizer
  // (load_optimizer_states=false), no_scheduler (load_lr_scheduler_states=false), module_only.
  std::string resume_load = "all";
  // Frozen parameters (requires_grad=False): bit p freezes the model's parameter p (never all of
  // them); exclude_frozen: every save leaves their values out (exclude_frozen_parameters).
  uint64_t frozen_mask = 0;
  bool exclude_frozen = false;
  // A chain of resumes: zero to two restarts before the judged one, each loading with its own
  // option (the vocabulary of resume_load) into its own frozen set, saving every save_every
  // steps and killed by a power loss after saves_before_kill of its saves. A module-only restart
  // counts from 0 and saves past every tag on the disk (a first save onto the tag `latest` names
  // would be refused).
  struct ChainedRestart {
    std::string load = "all";
    bool frozen_changed = false;
    uint64_t frozen_mask = 0;  // with frozen_changed: its frozen set (as frozen_mask)
    int64_t save_every = 1;
    int64_t saves_before_kill = 1;
    bool operator==(const ChainedRestart&) const = default;
  };
  std::vector<ChainedRestart> chain;
  // The judged restart's own frozen set, when it changes.
  bool resume_frozen_changed = false;
  uint64_t resume_frozen_mask = 0;

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
// "scheduler", "loss"), "refused", or "fault never happened" (a simpler shape whose fault no
// longer fires is not the same failure), so a shrunk case fails for the same reason.
std::string failure_class(const ScenarioVerdict& verdict);

// Greedy shrinking: repeatedly takes the first candidate that still fails with the same
// failure_class, until none does or `max_attempts` candidates were run.
Result<ShrinkResult> shrink_failure(const ScenarioShape& failing, const ScenarioVerdict& verdict,
                                    const DefectSet& defects, int64_t max_attempts = 200,
                                    ReferenceCache* cache = nullptr, const ComputeDevice& compute = ComputeDevice{});

// Runs a shape as a scenario (through its JSON document, as a replay would), computing on
// `compute` (the CPU by default).
//
// A storage fault on a swap file counts the file's reads or writes after the first commit, and
// how many there are depends on what no draw can know (an fp16 step that overflows reads and
// writes no optimizer state). A drawn occurrence past the last one would be a fault that never
// fires, which the runner fails as a test that tests nothing. So when that rule never fired,
// the shape is run again with the occurrence moved to the last matching operation (the run is
// deterministic: the same operations come before it), or without the fault when no operation
// matched. `ran`, when given, receives the shape that ran (what a replay file must hold).
Result<ScenarioVerdict> run_shape(const ScenarioShape& shape, const std::string& name, const DefectSet& defects,
                                  ReferenceCache* cache = nullptr, const ComputeDevice& compute = ComputeDevice{},
                                  ScenarioShape* ran = nullptr);

}  // namespace zerosim
