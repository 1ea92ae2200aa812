#include "scenarios/generator.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "core/engine/engine.h"

#include "core/env/rng.h"
#include "core/model/gpt.h"

namespace zerosim {

namespace {

using nlohmann::json;

constexpr int kMaxWorldSize = 4;
constexpr const char* kSaveSitesAnyRank[] = {"ckpt.save_begin", "ckpt.shard_written", "ckpt.save_end"};
constexpr const char* kSaveSitesRankZero[] = {"ckpt.tag_prepared", "ckpt.manifest_written", "ckpt.latest_published"};

bool is_rank_zero_site(const std::string& site) {
  return std::find(std::begin(kSaveSitesRankZero), std::end(kSaveSitesRankZero), site) != std::end(kSaveSitesRankZero);
}

int64_t first_phase_steps(const ScenarioShape& shape) { return shape.save_every * shape.saves_before_kill; }

std::string model_text(const ScenarioShape& shape) {
  if (shape.transformer) return gpt_spec_to_string(*shape.transformer);
  std::string text = std::to_string(shape.input_width);
  for (int64_t width : shape.hidden_widths) text += "," + std::to_string(width);
  return text + "," + std::to_string(shape.class_count);
}

// layers.<i>.weight and layers.<i>.bias of every layer, in parameter order.
// The transformer's in module order (gpt_parameters).
int parameter_count(const ScenarioShape& shape) {
  if (shape.transformer) return static_cast<int>(gpt_parameters(*shape.transformer).size());
  return 2 * static_cast<int>(shape.hidden_widths.size() + 1);
}

std::vector<std::string> frozen_names(const ScenarioShape& shape) {
  std::vector<std::string> names;
  if (shape.transformer) {
    const std::vector<ParameterInfo> parameters = gpt_parameters(*shape.transformer);
    for (int p = 0; p < parameter_count(shape) && p < 64; ++p) {
      if ((shape.frozen_mask >> p) & 1u) names.push_back(parameters[static_cast<size_t>(p)].name);
    }
    return names;
  }
  for (int p = 0; p < parameter_count(shape); ++p) {
    if ((shape.frozen_mask >> p) & 1u) names.push_back("layers." + std::to_string(p / 2) + (p % 2 == 0 ? ".weight" : ".bias"));
  }
  return names;
}

std::vector<std::string> frozen_names_of(const ScenarioShape& shape, uint64_t mask) {
  ScenarioShape masked = shape;
  masked.frozen_mask = mask;
  return frozen_names(masked);
}

// Each chained restart's save interval and kill step (in its own count), and the run's total
// steps. A restart that loads the newest tag starts where the run before it stopped, or at 0
// after a module-only load, whose saves then start past every tag already on the disk.
struct ChainStep {
  int64_t save_every = 1;
  int64_t killed_after_step = 1;
};
struct ChainSchedule {
  std::vector<ChainStep> restarts;
  int64_t total_steps = 0;
};
ChainSchedule chain_schedule(const ScenarioShape& shape) {
  ChainSchedule schedule;
  int64_t stopped_at = first_phase_steps(shape);
  int64_t newest_tag = stopped_at;
  for (const ScenarioShape::ChainedRestart& restart : shape.chain) {
    ChainStep step;
    const bool module_only = restart.load == "module_only";
    step.save_every = module_only ? newest_tag + restart.save_every : restart.save_every;
    const int64_t start = module_only ? 0 : stopped_at;
    // Its saves fall on the multiples of save_every after its start.
    step.killed_after_step = (start / step.save_every + restart.saves_before_kill) * step.save_every;
    schedule.restarts.push_back(step);
    stopped_at = step.killed_after_step;
    newest_tag = std::max(newest_tag, stopped_at);
  }
  schedule.total_steps = newest_tag + shape.steps_after;
  return schedule;
}

}  // namespace

namespace {

constexpr CommitOperation kCommitOperations[] = {
    {"shard write", "%s/rank-%05d-of-*", "write", true},
    {"shard fsync", "%s/rank-%05d-of-*", "sync", true},
    {"tag directory fsync before the manifest", "%s", "sync_directory", true},
    {"manifest.json.tmp write", "%s/manifest.json.tmp", "write", true},
    {"manifest.json.tmp fsync", "%s/manifest.json.tmp", "sync", true},
    {"manifest.json rename", "%s/manifest.json.tmp", "rename", true},
    {"tag directory fsync after the manifest", "%s", "sync_directory", true},
    {"latest.tmp write", "/checkpoints/latest.tmp", "write", false},
    {"latest.tmp fsync", "/checkpoints/latest.tmp", "sync", false},
    {"latest rename", "/checkpoints/latest.tmp", "rename", false},
};
// The tag directory's second fsync is its second occurrence; every other operation's first.
int64_t commit_operation_occurrence(int index) { return index == 6 ? 2 : 1; }

const char* storage_fault_name(StorageFault fault) {
  switch (fault) {
    case StorageFault::kLostWriteSwap: return "lost write";
    case StorageFault::kMisdirectedWriteSwap: return "misdirected write";
    case StorageFault::kReadErrorSwap: return "latent read error";
    case StorageFault::kLostWriteShard: return "lost write";
    case StorageFault::kBitFlipReadSwap: return "silently flipped bit in a read";
  }
  return "unknown";
}

bool has_swap_files(const ScenarioShape& shape) { return shape.offload_optimizer == "nvme" || shape.offload_param_nvme; }

int64_t greatest_common_divisor(int64_t a, int64_t b) { return b == 0 ? a : greatest_common_divisor(b, a % b); }

}  // namespace

std::span<const CommitOperation> commit_protocol_operations() { return kCommitOperations; }

ScenarioShape normalize_shape(ScenarioShape shape) {
  shape.save_every = std::clamp<int64_t>(shape.save_every, 1, 4);
  shape.saves_before_kill = std::clamp<int64_t>(shape.saves_before_kill, 2, 4);
  shape.steps_after = std::clamp<int64_t>(shape.steps_after, 1, 6);
  shape.world_size = std::clamp(shape.world_size, 1, kMaxWorldSize);
  shape.input_width = std::clamp<int64_t>(shape.input_width, 1, 16);
  if (shape.hidden_widths.size() > 3) shape.hidden_widths.resize(3);
  for (int64_t& width : shape.hidden_widths) width = std::clamp<int64_t>(width, 1, 32);
  shape.class_count = std::clamp<int64_t>(shape.class_count, 2, 8);
  if (shape.transformer) {
    GptSpec& gpt = *shape.transformer;
    gpt.layers = std::clamp<int64_t>(gpt.layers, 1, 2);
    gpt.heads = std::clamp<int64_t>(gpt.heads, 1, 2);
    gpt.embd = gpt.heads * std::clamp<int64_t>(gpt.embd / gpt.heads, 1, 4);
    gpt.vocab = std::clamp<int64_t>(gpt.vocab, 3, 16);
    gpt.block = std::clamp<int64_t>(gpt.block, 1, 6);
  }
  if (shape.precision != "fp32" && shape.precision != "bf16") shape.precision = "fp16";
  if (shape.numerics != "deepspeed") shape.numerics = "portable";
  shape.micro_batch_size = std::clamp<int64_t>(shape.micro_batch_size, 1, 4);
  shape.gradient_accumulation_steps = std::clamp<int64_t>(shape.gradient_accumulation_steps, 1, 4);
  shape.sub_group_size = std::clamp<int64_t>(shape.sub_group_size, 1, 1 << 30);
  if (shape.offload_optimizer != "cpu" && shape.offload_optimizer != "nvme") shape.offload_optimizer = "none";
  // An elastic resume keeps the global batch: the new world size must divide accumulation x W,
  // so the accumulation grows to make it (W' above W, or not dividing it, is what is wanted).
  shape.resume_world_size = std::clamp(shape.resume_world_size, 0, kMaxWorldSize);
  if (shape.resume_world_size == shape.world_size) shape.resume_world_size = 0;
  if (shape.resume_world_size > 0) {
    const int64_t needed = shape.resume_world_size / greatest_common_divisor(shape.world_size, shape.resume_world_size);
    if (shape.gradient_accumulation_steps % needed != 0) shape.gradient_accumulation_steps = needed;
  }
  if (!has_swap_files(shape)) shape.delete_swap_directory = false;
  const int64_t phase_steps = first_phase_steps(shape);
  const int64_t total_steps = phase_steps + shape.steps_after;
  // The schedule: lengths around the run's steps, so that saves and resumes meet every phase.
  if (shape.scheduler != "none" && shape.scheduler != "WarmupDecayLR" && shape.scheduler != "WarmupCosineLR") {
    shape.scheduler = "WarmupLR";
  }
  if (shape.warmup_type != "linear") shape.warmup_type = "log";
  shape.warmup_num_steps = std::clamp<int64_t>(shape.warmup_num_steps, 1, total_steps + 2);
  shape.total_num_steps = std::clamp<int64_t>(shape.total_num_steps, shape.warmup_num_steps, total_steps + 3);
  // fp16's loss scale: the minimum low enough that an overflow never meets it (DeepSpeed aborts
  // the run then, the reference included).
  shape.initial_scale_power = std::clamp<int64_t>(shape.initial_scale_power, 8, 32);
  shape.loss_scale_window = std::clamp<int64_t>(shape.loss_scale_window, 1, 1000);
  shape.hysteresis = std::clamp<int64_t>(shape.hysteresis, 1, 3);
  shape.min_loss_scale_power = std::clamp<int64_t>(shape.min_loss_scale_power, 0, 4);
  shape.keep_last = std::clamp<int64_t>(shape.keep_last, 0, 3);
  // Faults a correct engine must recover from, after a first save that committed.
  shape.fault_rank = std::clamp(shape.fault_rank, 0, shape.world_size - 1);
  if (shape.async_save && shape.fault == GeneratedFault::kCrashInSave) {
    // The commit sites of an async save are hit in the background; crash at a step instead.
    shape.fault = GeneratedFault::kCrashAtStepEnd;
  }
  if (shape.fault == GeneratedFault::kStorageFault) {
    if (!has_swap_files(shape)) shape.storage_fault = StorageFault::kLostWriteShard;
    if (shape.storage_fault == StorageFault::kReadErrorSwap && shape.offload_optimizer != "nvme") {
      shape.storage_fault = StorageFault::kLostWriteSwap;
    }
  }
  switch (shape.fault) {
    case GeneratedFault::kNone: break;
    case GeneratedFault::kCrashAtStepEnd: {
      // After the first save committed: an async save of step s commits once the next save waits for it.
      const int64_t first = (shape.async_save ? 2 : 1) * shape.save_every + 1;
      if (first > phase_steps) {
        shape.fault = GeneratedFault::kNone;
        break;
      }
      shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, first, phase_steps);
      break;
    }
    case GeneratedFault::kStorageFault:
      if (shape.storage_fault != StorageFault::kLostWriteShard) {
        // The n-th write (or read) of one swap file of the rank after the first save committed.
        shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, 1, std::max<int64_t>(1, phase_steps - shape.save_every));
        break;
      }
      [[fallthrough]];
    case GeneratedFault::kCrashInSave:
    case GeneratedFault::kNoSpaceOnSave:
    case GeneratedFault::kIoErrorOnSave:
    case GeneratedFault::kPowerLossInSave:
      shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, 2, shape.saves_before_kill);
      break;
    case GeneratedFault::kSigterm:
      shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, 1, phase_steps - 1);
      break;
  }
  shape.commit_operation = std::clamp(shape.commit_operation, 0, static_cast<int>(std::size(kCommitOperations)) - 1);
  if (shape.fault == GeneratedFault::kCrashInSave) {
    const bool known_any = std::find(std::begin(kSaveSitesAnyRank), std::end(kSaveSitesAnyRank), shape.fault_site) !=
                           std::end(kSaveSitesAnyRank);
    if (!known_any && !is_rank_zero_site(shape.fault_site)) shape.fault_site = "ckpt.shard_written";
    if (is_rank_zero_site(shape.fault_site)) shape.fault_rank = 0;
  }
  if (shape.fault == GeneratedFault::kPowerLossInSave && shape.commit_operation >= 2) shape.fault_rank = 0;
  if (shape.fault != GeneratedFault::kCrashInSave) shape.fault_site = "ckpt.shard_written";
  if (shape.fault != GeneratedFault::kPowerLossInSave) shape.commit_operation = 0;
  if (shape.fault != GeneratedFault::kStorageFault) shape.storage_fault = StorageFault::kLostWriteSwap;
  if (shape.fault == GeneratedFault::kNone || shape.fault == GeneratedFault::kSigterm) shape.fault_rank = 0;
  if (shape.fault == GeneratedFault::kNone) shape.fault_occurrence = 1;
  // The restart's change must be refused naming it: no damage in the way of that message.
  if (shape.resume_change != "seed" && shape.resume_change != "dataset_size" && shape.resume_change != "model" &&
      shape.resume_change != "optimizer") {
    shape.resume_change = "none";
  }
  if (shape.resume_change != "none") shape.damaged = false;
  // Load options: not with a change the restart must refuse (a fresh optimizer may change the
  // optimizer, a module-only load the dataset), nor where no model of the load exists yet
  // ("deepspeed" numerics across a world-size change).
  if (shape.resume_load != "no_optimizer" && shape.resume_load != "no_scheduler" && shape.resume_load != "module_only") {
    shape.resume_load = "all";
  }
  const bool resume_change_allows_loads =
      shape.resume_change == "none" &&
      !(shape.numerics == "deepspeed" && shape.resume_world_size != 0 && shape.resume_world_size != shape.world_size);
  if (!resume_change_allows_loads) shape.resume_load = "all";
  // Frozen parameters: some of the model's, never all; excluded values come from the model's
  // initialisation, which a restart with another seed would change (a divergence, not a refusal).
  const uint64_t all_parameters = (uint64_t{1} << parameter_count(shape)) - 1;
  shape.frozen_mask &= all_parameters;
  if (shape.frozen_mask == all_parameters) shape.frozen_mask &= shape.frozen_mask - 1;  // the lowest stays trainable
  // The chain and the judged restart's frozen set: not with a change the restart must refuse,
  // nor where no model of a load exists ("deepspeed" numerics across a world-size change).
  const bool loads_modelled = resume_change_allows_loads;
  if (shape.chain.size() > 2) shape.chain.resize(2);
  // A chain starts from what the first phase left loadable: no damage at rest and no storage
  // that lied (a restart of the chain that refuses them ends the chain before it is judged).
  const bool storage_lies = shape.fault == GeneratedFault::kStorageFault &&
                            (shape.storage_fault == StorageFault::kLostWriteSwap ||
                             shape.storage_fault == StorageFault::kMisdirectedWriteSwap ||
                             shape.storage_fault == StorageFault::kLostWriteShard ||
                             shape.storage_fault == StorageFault::kBitFlipReadSwap);
  if (shape.damaged || storage_lies) shape.chain.clear();
  if (!loads_modelled) {
    shape.chain.clear();
    shape.resume_frozen_changed = false;
  }
  uint64_t frozen_before = shape.frozen_mask;
  // A frozen set of the model's parameters, never all of them; a parameter frozen in the run
  // before comes back trainable only with a fresh optimizer (a full load refuses it).
  auto valid_frozen = [&](uint64_t mask, const std::string& load) {
    mask &= all_parameters;
    if (load != "no_optimizer" && load != "module_only") mask |= frozen_before;
    if (mask == all_parameters) mask = frozen_before;
    return mask;
  };
  for (ScenarioShape::ChainedRestart& restart : shape.chain) {
    if (restart.load != "no_optimizer" && restart.load != "no_scheduler" && restart.load != "module_only") restart.load = "all";
    restart.save_every = std::clamp<int64_t>(restart.save_every, 1, 3);
    restart.saves_before_kill = std::clamp<int64_t>(restart.saves_before_kill, 1, 2);
    restart.frozen_mask = restart.frozen_changed ? valid_frozen(restart.frozen_mask, restart.load) : 0;
    if (restart.frozen_changed && restart.frozen_mask == frozen_before) restart.frozen_changed = false;
    if (!restart.frozen_changed) restart.frozen_mask = 0;
    if (restart.frozen_changed) frozen_before = restart.frozen_mask;
  }
  shape.resume_frozen_mask = shape.resume_frozen_changed ? valid_frozen(shape.resume_frozen_mask, shape.resume_load) : 0;
  if (shape.resume_frozen_changed && shape.resume_frozen_mask == frozen_before) shape.resume_frozen_changed = false;
  if (!shape.resume_frozen_changed) shape.resume_frozen_mask = 0;
  // Excluded on save: a scenario names the first phase's frozen set for it (scenario_runner.h).
  if (shape.frozen_mask == 0 || shape.resume_change == "seed") shape.exclude_frozen = false;
  if (!shape.damaged) {
    shape.damage = AtRestDamage{};
  } else {
    AtRestDamage& damage = shape.damage;
    damage.rank = std::clamp(damage.rank, 0, shape.world_size - 1);
    damage.from_rank = std::clamp(damage.from_rank, 0, shape.world_size - 1);
    if (damage.file != "manifest" && damage.file != "latest") damage.file = "shard";
    if (damage.tag != "previous") damage.tag = "newest";
    if (damage.kind == AtRestDamage::Kind::kOtherRank && (shape.world_size < 2 || damage.file != "shard")) {
      damage.kind = AtRestDamage::Kind::kStaleCopy;
    }
    if (damage.kind == AtRestDamage::Kind::kOtherRank && damage.from_rank == damage.rank) {
      damage.from_rank = (damage.rank + 1) % shape.world_size;
    }
    if (damage.file == "latest") {
      // `latest` can only be damaged into a name no tag has: its "global_step" prefix flipped,
      // emptied, or removed (a flipped digit could name an older complete tag, which no
      // loader can tell from a pointer that was never moved).
      if (damage.kind == AtRestDamage::Kind::kStaleCopy || damage.kind == AtRestDamage::Kind::kOtherRank) {
        damage.kind = AtRestDamage::Kind::kRemove;
      }
      damage.tag = "newest";
      damage.bit %= 8 * 11;
      damage.keep_bytes = 0;
    }
    if (damage.file != "shard") damage.rank = 0;
    if (damage.kind != AtRestDamage::Kind::kOtherRank) damage.from_rank = 0;
    if (damage.kind != AtRestDamage::Kind::kFlipBit) damage.bit = 0;
    if (damage.kind != AtRestDamage::Kind::kTruncate) damage.keep_bytes = 0;
  }
  return shape;
}

ScenarioShape generate_shape(uint64_t seed) {
  std::unique_ptr<Rng> rng = make_counter_rng(RngState{seed, 0x5ce7a210, 0});
  auto pick = [&](int64_t low, int64_t high) {
    return low + static_cast<int64_t>(rng->next_below(static_cast<uint64_t>(high - low + 1)));
  };
  auto one_of = [&](auto choices) { return choices[static_cast<size_t>(pick(0, static_cast<int64_t>(choices.size()) - 1))]; };
  ScenarioShape shape;
  shape.seed = seed % 1000003;
  shape.save_every = pick(1, 3);
  shape.saves_before_kill = pick(2, 4);
  shape.steps_after = pick(1, 4);
  shape.world_size = static_cast<int>(pick(1, kMaxWorldSize));
  // Half the cases resume at another world size.
  shape.resume_world_size = pick(0, 1) == 0 ? 0 : static_cast<int>(pick(1, kMaxWorldSize));
  shape.input_width = pick(1, 12);
  shape.hidden_widths.clear();
  for (int64_t layer = pick(0, 2); layer > 0; --layer) shape.hidden_widths.push_back(pick(1, 24));
  shape.class_count = pick(2, 6);
  shape.precision = one_of(std::array<const char*, 4>{"fp32", "fp16", "fp16", "bf16"});
  // A quarter in DeepSpeed's numerics (their elastic resumes also run the W' continuation).
  shape.numerics = one_of(std::array<const char*, 4>{"portable", "portable", "portable", "deepspeed"});
  shape.micro_batch_size = pick(1, 3);
  shape.gradient_accumulation_steps = pick(1, 3);
  shape.sub_group_size = one_of(std::array<int64_t, 4>{7, 16, 64, 1000000000});
  shape.offload_optimizer = one_of(std::array<const char*, 3>{"none", "cpu", "nvme"});
  shape.offload_param_nvme = pick(0, 3) == 0;
  shape.async_save = pick(0, 3) == 0;
  shape.delete_swap_directory = pick(0, 1) == 1;
  shape.fault = static_cast<GeneratedFault>(pick(0, kGeneratedFaultCount - 1));
  shape.fault_rank = static_cast<int>(pick(0, kMaxWorldSize - 1));
  shape.fault_occurrence = pick(1, 12);
  const int64_t site = pick(0, 5);
  shape.fault_site = site < 3 ? kSaveSitesAnyRank[site] : kSaveSitesRankZero[site - 3];
  shape.commit_operation = static_cast<int>(pick(0, static_cast<int64_t>(std::size(kCommitOperations)) - 1));
  shape.storage_fault = static_cast<StorageFault>(pick(0, kStorageFaultCount - 1));
  shape.scheduler = one_of(std::array<const char*, 4>{"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  shape.warmup_type = one_of(std::array<const char*, 2>{"log", "linear"});
  shape.warmup_num_steps = pick(1, 10);
  shape.total_num_steps = shape.warmup_num_steps + pick(0, 8);
  // fp16: a third of the cases start high enough to overflow, with a short window to grow back.
  shape.initial_scale_power = one_of(std::array<int64_t, 6>{8, 12, 16, 16, 24, 32});
  shape.loss_scale_window = one_of(std::array<int64_t, 5>{1, 2, 3, 5, 1000});
  shape.hysteresis = pick(1, 3);
  shape.consecutive_hysteresis = pick(0, 1) == 1;
  shape.min_loss_scale_power = pick(0, 4);
  shape.keep_last = one_of(std::array<int64_t, 4>{0, 1, 2, 3});
  shape.damaged = pick(0, 2) == 0;
  shape.damage.kind = static_cast<AtRestDamage::Kind>(pick(0, 4));
  shape.damage.file = one_of(std::array<const char*, 4>{"shard", "shard", "manifest", "latest"});
  shape.damage.tag = one_of(std::array<const char*, 3>{"newest", "newest", "previous"});
  shape.damage.rank = static_cast<int>(pick(0, kMaxWorldSize - 1));
  shape.damage.from_rank = static_cast<int>(pick(0, kMaxWorldSize - 1));
  shape.damage.bit = static_cast<uint64_t>(pick(0, 1 << 24));
  shape.damage.keep_bytes = static_cast<uint64_t>(pick(0, 1 << 16));
  shape.resume_change =
      pick(0, 9) == 0 ? one_of(std::array<const char*, 4>{"seed", "dataset_size", "model", "optimizer"}) : "none";
  shape.resume_load = pick(0, 7) == 0 ? one_of(std::array<const char*, 3>{"no_optimizer", "no_scheduler", "module_only"}) : "all";
  shape.frozen_mask = pick(0, 7) == 0 ? static_cast<uint64_t>(pick(1, 255)) : 0;
  shape.exclude_frozen = pick(0, 1) == 1;
  // One case in six trains the transformer (drawn last, so the other draws of a seed stay as they were).
  if (pick(0, 5) == 0) {
    GptSpec gpt;
    gpt.layers = pick(1, 2);
    gpt.heads = pick(1, 2);
    gpt.embd = gpt.heads * pick(1, 4);
    gpt.vocab = pick(3, 16);
    gpt.block = pick(1, 6);
    shape.transformer = gpt;
  }
  // A quarter of the cases resume in a chain (drawn after the rest, as the transformer is).
  const int64_t chained = pick(0, 7) < 2 ? pick(1, 2) : 0;
  for (int64_t i = 0; i < chained; ++i) {
    ScenarioShape::ChainedRestart restart;
    restart.load = one_of(std::array<const char*, 6>{"all", "all", "no_optimizer", "no_scheduler", "module_only", "no_optimizer"});
    restart.frozen_changed = pick(0, 2) == 0;
    restart.frozen_mask = static_cast<uint64_t>(pick(0, 255));
    restart.save_every = pick(1, 3);
    restart.saves_before_kill = pick(1, 2);
    shape.chain.push_back(restart);
  }
  if (chained > 0 && shape.resume_load == "all" && pick(0, 1) == 0) {
    shape.resume_load = one_of(std::array<const char*, 3>{"no_optimizer", "no_scheduler", "module_only"});
  }
  shape.resume_frozen_changed = pick(0, 7) == 0;
  shape.resume_frozen_mask = static_cast<uint64_t>(pick(0, 255));
  return normalize_shape(shape);
}

uint64_t case_seed(uint64_t campaign_seed, uint64_t index) { return mix_random_bits(campaign_seed, 0xf022, index); }

namespace {

json scheduler_config(const ScenarioShape& shape) {
  json params = {{"warmup_num_steps", shape.warmup_num_steps}, {"warmup_type", shape.warmup_type}};
  if (shape.scheduler != "WarmupCosineLR") {
    params["warmup_min_lr"] = "auto";
    params["warmup_max_lr"] = "auto";
  }
  if (shape.scheduler != "WarmupLR") params["total_num_steps"] = shape.total_num_steps;
  return {{"type", shape.scheduler}, {"params", params}};
}

std::string tag_directory_pattern(int64_t step) { return "/checkpoints/" + checkpoint_tag_for_step(step); }

json storage_fault_rule(const ScenarioShape& shape) {
  const std::string rank = "*/rank-" + std::to_string(shape.fault_rank) + "-of-*/";
  const std::string swap_file =
      shape.offload_optimizer == "nvme" ? rank + "exp_avg.subgroup-0.swp" : rank + "params.param-0.swp";
  // Counted from the first publication of `latest`: after the first checkpoint committed.
  const json after = {{"path", "/checkpoints/latest.tmp"}, {"op", "rename"}};
  const int64_t occurrence = shape.fault_occurrence;
  switch (shape.storage_fault) {
    case StorageFault::kLostWriteSwap:
      return {{"path", swap_file}, {"op", "write"}, {"occurrence", occurrence}, {"fault", "lost_write"}, {"after", after}};
    case StorageFault::kMisdirectedWriteSwap:
      return {{"path", swap_file}, {"op", "write"}, {"occurrence", occurrence}, {"fault", "misdirected_write"}, {"after", after}};
    case StorageFault::kReadErrorSwap:
      return {{"path", swap_file}, {"op", "read"}, {"occurrence", occurrence}, {"fault", "io_error"}, {"after", after}};
    case StorageFault::kBitFlipReadSwap: {
      // An exponent bit of the payload's first element (after the 4096-byte header), so that a
      // run trained on it departs visibly: bit 30 of an fp32 value, bit 14 of a 16-bit one.
      const bool sixteen_bit = shape.offload_optimizer != "nvme" && shape.precision != "fp32";
      return {{"path", swap_file}, {"op", "read"},     {"occurrence", occurrence},
              {"fault", "bit_flip"}, {"bytes", 8 * 4096 + (sixteen_bit ? 14 : 30)}, {"after", after}};
    }
    case StorageFault::kLostWriteShard: {
      char pattern[96];
      std::snprintf(pattern, sizeof pattern, "%s/rank-%05d-of-*",
                    tag_directory_pattern(shape.fault_occurrence * shape.save_every).c_str(), shape.fault_rank);
      return {{"path", pattern}, {"op", "write"}, {"occurrence", 1}, {"fault", "lost_write"}};
    }
  }
  return {};
}

json power_loss_rule(const ScenarioShape& shape) {
  const CommitOperation& operation = kCommitOperations[shape.commit_operation];
  char pattern[160];
  std::snprintf(pattern, sizeof pattern, operation.file, tag_directory_pattern(shape.fault_occurrence * shape.save_every).c_str(),
                shape.fault_rank);
  // `latest` is written once per save: the k-th save's is its k-th occurrence.
  const int64_t occurrence = operation.per_save ? commit_operation_occurrence(shape.commit_operation) : shape.fault_occurrence;
  return {{"path", pattern}, {"op", operation.operation}, {"occurrence", occurrence}, {"fault", "power_loss"}};
}

}  // namespace

json scenario_document(const ScenarioShape& input, const std::string& name) {
  const ScenarioShape shape = normalize_shape(input);
  json zero = {{"stage", 3}, {"sub_group_size", shape.sub_group_size}};
  if (shape.offload_optimizer == "cpu") zero["offload_optimizer"] = {{"device", "cpu"}};
  if (shape.offload_optimizer == "nvme") zero["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", "/nvme/optimizer"}};
  if (shape.offload_param_nvme) zero["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/nvme/param"}};
  json config = {
      {"fp16",
       {{"enabled", "auto"},
        {"loss_scale", 0},
        {"initial_scale_power", shape.initial_scale_power},
        {"loss_scale_window", shape.loss_scale_window},
        {"hysteresis", shape.hysteresis},
        {"consecutive_hysteresis", shape.consecutive_hysteresis},
        {"min_loss_scale", int64_t{1} << shape.min_loss_scale_power}}},
      {"bf16", {{"enabled", "auto"}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}}},
      {"zero_optimization", zero},
      {"train_batch_size", "auto"},
      {"train_micro_batch_size_per_gpu", "auto"},
      {"gradient_accumulation_steps", "auto"},
      {"gradient_clipping", "auto"}};
  if (shape.scheduler != "none") config["scheduler"] = scheduler_config(shape);
  if (shape.async_save) config["checkpoint"]["async_save"] = true;
  if (shape.keep_last > 0) config["checkpoint"]["keep_last"] = shape.keep_last;
  if (shape.numerics == "deepspeed") config["zerosim"] = {{"numerics", "deepspeed"}};
  const int64_t phase_steps = first_phase_steps(shape);
  json document = {{"name", name},
                   {"description", "generated: " + describe_shape(shape)},
                   {"model", model_text(shape)},
                   {"world_size", shape.world_size},
                   {"resume_world_size", shape.resume_world_size},
                   {"precision", shape.precision},
                   {"micro_batch_size", shape.micro_batch_size},
                   {"gradient_accumulation_steps", shape.gradient_accumulation_steps},
                   {"seed", shape.seed},
                   {"save_every", shape.save_every},
                   {"explored_save_step", phase_steps},
                   {"steps", chain_schedule(shape).total_steps},
                   {"config", config},
                   {"expect", {{"bit_identical", true}}}};
  json actions = json::array();
  if (shape.delete_swap_directory) actions.push_back("delete_swap_directory");
  if (shape.fault == GeneratedFault::kSigterm) actions.push_back({{"sigterm_at_step", shape.fault_occurrence}});
  if (shape.damaged) {
    const AtRestDamage& damage = shape.damage;
    json action = {{"damage", at_rest_damage_kind_name(damage.kind)}, {"file", damage.file}, {"tag", damage.tag}};
    if (damage.file == "shard") action["rank"] = damage.rank;
    if (damage.kind == AtRestDamage::Kind::kOtherRank) action["from_rank"] = damage.from_rank;
    if (damage.kind == AtRestDamage::Kind::kFlipBit) action["bit"] = damage.bit;
    if (damage.kind == AtRestDamage::Kind::kTruncate) action["keep_bytes"] = damage.keep_bytes;
    actions.push_back(action);
  }
  if (!actions.empty()) document["operator_actions"] = actions;
  if (shape.resume_load == "no_optimizer") document["resume_load_optimizer_states"] = false;
  if (shape.resume_load == "no_scheduler") document["resume_load_lr_scheduler_states"] = false;
  if (shape.resume_load == "module_only") document["resume_load_module_only"] = true;
  if (shape.frozen_mask != 0) document["frozen_parameters"] = frozen_names(shape);
  if (shape.exclude_frozen) document["save_exclude_frozen_parameters"] = true;
  if (!shape.chain.empty()) {
    const ChainSchedule schedule = chain_schedule(shape);
    json chain = json::array();
    for (size_t i = 0; i < shape.chain.size(); ++i) {
      const ScenarioShape::ChainedRestart& restart = shape.chain[i];
      json entry = {{"killed_after_step", schedule.restarts[i].killed_after_step},
                    {"save_every", schedule.restarts[i].save_every}};
      if (restart.load == "no_optimizer") entry["load_optimizer_states"] = false;
      if (restart.load == "no_scheduler") entry["load_lr_scheduler_states"] = false;
      if (restart.load == "module_only") entry["load_module_only"] = true;
      if (restart.frozen_changed) entry["frozen_parameters"] = frozen_names_of(shape, restart.frozen_mask);
      chain.push_back(entry);
    }
    document["restart_chain"] = chain;
  }
  if (shape.resume_frozen_changed) {
    document["resume_changes"] = {{"frozen_parameters", frozen_names_of(shape, shape.resume_frozen_mask)}};
  }
  if (shape.resume_change != "none") {
    if (shape.resume_change == "seed") document["resume_changes"] = {{"seed", shape.seed + 1}};
    if (shape.resume_change == "dataset_size") document["resume_changes"] = {{"dataset_size", 61}};
    if (shape.resume_change == "model") {
      ScenarioShape changed = shape;
      if (changed.transformer) changed.transformer->vocab += 1;
      else if (changed.hidden_widths.empty()) changed.hidden_widths.push_back(3);
      else changed.hidden_widths.back() += 1;
      document["resume_changes"] = {{"model", model_text(changed)}};
    }
    if (shape.resume_change == "optimizer") {
      // DeepSpeed's "Adam" with adam_w_mode false: L2 weight decay instead of decoupled.
      json changed = config;
      changed["optimizer"] = {{"type", "Adam"},
                              {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"},
                                          {"adam_w_mode", false}}}};
      document["resume_config"] = changed;
    }
    document["expect"] = {
        {"error", shape.resume_change == "model" ? "model shape" : shape.resume_change == "optimizer" ? "optimizer type" : "dataset"}};
  }
  const int64_t saved_step = shape.fault_occurrence * shape.save_every;
  char shard_pattern[64];
  std::snprintf(shard_pattern, sizeof shard_pattern, "*global_step%lld/rank-%05d*", static_cast<long long>(saved_step),
                shape.fault_rank);
  switch (shape.fault) {
    case GeneratedFault::kNone:
    case GeneratedFault::kSigterm: break;
    case GeneratedFault::kCrashAtStepEnd:
      document["fault_plan"] = {
          {"crash", {{"site", "engine.step_end"}, {"rank", shape.fault_rank}, {"occurrence", shape.fault_occurrence}}}};
      break;
    case GeneratedFault::kCrashInSave:
      document["fault_plan"] = {
          {"crash", {{"site", shape.fault_site}, {"rank", shape.fault_rank}, {"occurrence", shape.fault_occurrence}}}};
      break;
    case GeneratedFault::kNoSpaceOnSave:
    case GeneratedFault::kIoErrorOnSave:
      document["fault_plan"] = {
          {"disk_faults", json::array({{{"path", shard_pattern},
                                        {"op", "write"},
                                        {"occurrence", 1},
                                        {"fault", shape.fault == GeneratedFault::kNoSpaceOnSave ? "no_space" : "io_error"}}})}};
      break;
    case GeneratedFault::kPowerLossInSave:
      document["fault_plan"] = {{"disk_faults", json::array({power_loss_rule(shape)})}};
      break;
    case GeneratedFault::kStorageFault:
      document["fault_plan"] = {{"disk_faults", json::array({storage_fault_rule(shape)})}};
      break;
  }
  return document;
}

std::string describe_shape(const ScenarioShape& shape) {
  std::string text = "W=" + std::to_string(shape.world_size);
  if (shape.resume_world_size > 0) text += "->" + std::to_string(shape.resume_world_size);
  text += ", model " + model_text(shape) + ", " + std::to_string(first_phase_steps(shape) + shape.steps_after) +
          " steps, save every " + std::to_string(shape.save_every) + ", " + shape.precision;
  if (shape.numerics == "deepspeed") text += " (deepspeed numerics)";
  if (shape.precision == "fp16") {
    text += ", scale 2^" + std::to_string(shape.initial_scale_power) + " window " + std::to_string(shape.loss_scale_window) +
            " hysteresis " + std::to_string(shape.hysteresis) + (shape.consecutive_hysteresis ? " consecutive" : "") +
            " min 2^" + std::to_string(shape.min_loss_scale_power);
  }
  if (shape.scheduler != "none") {
    text += ", " + shape.scheduler + " " + shape.warmup_type + " warmup " + std::to_string(shape.warmup_num_steps);
    if (shape.scheduler != "WarmupLR") text += " total " + std::to_string(shape.total_num_steps);
  } else {
    text += ", no scheduler";
  }
  if (shape.gradient_accumulation_steps > 1) text += ", accumulation " + std::to_string(shape.gradient_accumulation_steps);
  if (shape.offload_optimizer != "none") text += ", " + shape.offload_optimizer + " optimizer";
  if (shape.offload_param_nvme) text += ", nvme params";
  if (shape.async_save) text += ", async save";
  if (shape.keep_last > 0) text += ", keep_last " + std::to_string(shape.keep_last);
  if (shape.delete_swap_directory) text += ", swap directory deleted";
  const std::string at = "@rank" + std::to_string(shape.fault_rank) + "#" + std::to_string(shape.fault_occurrence);
  switch (shape.fault) {
    case GeneratedFault::kNone: break;
    case GeneratedFault::kCrashAtStepEnd: text += ", crash at engine.step_end" + at; break;
    case GeneratedFault::kCrashInSave: text += ", crash at " + shape.fault_site + at; break;
    case GeneratedFault::kNoSpaceOnSave: text += ", ENOSPC on save " + std::to_string(shape.fault_occurrence); break;
    case GeneratedFault::kIoErrorOnSave: text += ", EIO on save " + std::to_string(shape.fault_occurrence); break;
    case GeneratedFault::kPowerLossInSave:
      text += ", power loss at the " + std::string(kCommitOperations[shape.commit_operation].name) + " of save " +
              std::to_string(shape.fault_occurrence) + (shape.commit_operation < 2 ? " (rank " + std::to_string(shape.fault_rank) + ")" : "");
      break;
    case GeneratedFault::kStorageFault:
      text += ", " + std::string(storage_fault_name(shape.storage_fault)) +
              (shape.storage_fault == StorageFault::kLostWriteShard
                   ? " of rank " + std::to_string(shape.fault_rank) + "'s shard of save " + std::to_string(shape.fault_occurrence)
                   : " on rank " + std::to_string(shape.fault_rank) + "'s swap file, operation " +
                         std::to_string(shape.fault_occurrence) + " after the first commit");
      break;
    case GeneratedFault::kSigterm: text += ", SIGTERM in step " + std::to_string(shape.fault_occurrence); break;
  }
  if (shape.damaged) text += ", at rest: " + shape.damage.describe();
  if (shape.resume_change != "none") text += ", restart with another " + shape.resume_change + " (refused)";
  if (!shape.chain.empty()) {
    const ChainSchedule schedule = chain_schedule(shape);
    for (size_t i = 0; i < shape.chain.size(); ++i) {
      const ScenarioShape::ChainedRestart& restart = shape.chain[i];
      text += ", then a restart loading " + restart.load;
      if (restart.frozen_changed) {
        std::string names;
        for (const std::string& name : frozen_names_of(shape, restart.frozen_mask)) names += (names.empty() ? "" : " ") + name;
        text += " frozen [" + names + "]";
      }
      text += " saving every " + std::to_string(schedule.restarts[i].save_every) + ", power lost after step " +
              std::to_string(schedule.restarts[i].killed_after_step);
    }
  }
  if (shape.resume_load != "all") text += ", restart loading " + shape.resume_load;
  if (shape.resume_frozen_changed) {
    std::string names;
    for (const std::string& name : frozen_names_of(shape, shape.resume_frozen_mask)) names += (names.empty() ? "" : " ") + name;
    text += ", restart frozen [" + names + "]";
  }
  if (shape.frozen_mask != 0) {
    std::string names;
    for (const std::string& name : frozen_names(shape)) names += (names.empty() ? "" : " ") + name;
    text += ", frozen " + names + (shape.exclude_frozen ? " (excluded on save)" : "");
  }
  return text;
}

std::vector<ScenarioShape> shrink_candidates(const ScenarioShape& shape) {
  std::vector<ScenarioShape> candidates;
  auto add = [&](auto change) {
    ScenarioShape candidate = shape;
    change(candidate);
    candidate = normalize_shape(candidate);
    if (!(candidate == shape)) {
      candidates.push_back(candidate);
    }
  };
  add([](ScenarioShape& s) { s.steps_after = 1; });
  add([](ScenarioShape& s) { s.saves_before_kill = 2; });
  add([](ScenarioShape& s) { s.save_every = 1; });
  add([](ScenarioShape& s) { s.fault = GeneratedFault::kNone; });
  add([](ScenarioShape& s) { s.damaged = false; });
  add([](ScenarioShape& s) { s.resume_change = "none"; });
  add([](ScenarioShape& s) { s.chain.clear(); });
  if (shape.chain.size() > 1) add([](ScenarioShape& s) { s.chain.pop_back(); });
  for (size_t i = 0; i < shape.chain.size(); ++i) {
    add([i](ScenarioShape& s) { s.chain[i].load = "all"; });
    add([i](ScenarioShape& s) { s.chain[i].frozen_changed = false; });
    add([i](ScenarioShape& s) { s.chain[i].saves_before_kill = 1; });
    add([i](ScenarioShape& s) { s.chain[i].save_every = 1; });
  }
  add([](ScenarioShape& s) { s.resume_frozen_changed = false; });
  add([](ScenarioShape& s) { s.resume_load = "all"; });
  add([](ScenarioShape& s) { s.frozen_mask = 0; });
  add([](ScenarioShape& s) { s.exclude_frozen = false; });
  add([](ScenarioShape& s) { s.storage_fault = StorageFault::kLostWriteShard; });
  add([](ScenarioShape& s) { s.keep_last = 0; });
  add([](ScenarioShape& s) { s.scheduler = "WarmupLR"; });
  add([](ScenarioShape& s) { s.numerics = "portable"; });
  add([](ScenarioShape& s) {
    s.initial_scale_power = 16;
    s.loss_scale_window = 1000;
  });
  add([](ScenarioShape& s) { s.async_save = false; });
  add([](ScenarioShape& s) { s.world_size = 1; });
  add([](ScenarioShape& s) { s.resume_world_size = 0; });
  add([](ScenarioShape& s) { s.delete_swap_directory = false; });
  add([](ScenarioShape& s) { s.offload_param_nvme = false; });
  add([](ScenarioShape& s) { s.offload_optimizer = "none"; });
  add([](ScenarioShape& s) { s.transformer.reset(); });
  if (shape.transformer) {
    add([](ScenarioShape& s) { s.transformer->layers = 1; });
    add([](ScenarioShape& s) {
      s.transformer->heads = 1;
      s.transformer->embd = 1;
    });
    add([](ScenarioShape& s) { s.transformer->vocab = 3; });
    add([](ScenarioShape& s) { s.transformer->block = 1; });
  }
  add([](ScenarioShape& s) { s.hidden_widths.clear(); });
  if (!shape.hidden_widths.empty()) add([](ScenarioShape& s) { s.hidden_widths.pop_back(); });
  add([](ScenarioShape& s) {
    for (int64_t& width : s.hidden_widths) width = std::max<int64_t>(1, width / 2);
  });
  add([](ScenarioShape& s) { s.input_width = std::max<int64_t>(1, s.input_width / 2); });
  add([](ScenarioShape& s) { s.class_count = 2; });
  add([](ScenarioShape& s) { s.precision = "fp32"; });
  add([](ScenarioShape& s) { s.gradient_accumulation_steps = 1; });
  add([](ScenarioShape& s) { s.micro_batch_size = 1; });
  add([](ScenarioShape& s) { s.sub_group_size = 16; });
  add([](ScenarioShape& s) { s.steps_after = std::max<int64_t>(1, s.steps_after - 1); });
  add([](ScenarioShape& s) { s.fault_occurrence = std::max<int64_t>(1, s.fault_occurrence - 1); });
  add([](ScenarioShape& s) { s.world_size = std::max(1, s.world_size - 1); });
  add([](ScenarioShape& s) { s.seed = 1; });
  return candidates;
}

std::string failure_class(const ScenarioVerdict& verdict) {
  if (verdict.passed) return "";
  if (verdict.fault_never_happened) return "fault never happened";
  if (verdict.divergence && verdict.divergence->found) return verdict.divergence->component;
  return verdict.resumed_at < 0 ? "refused" : "other";
}

Result<ScenarioVerdict> run_shape(const ScenarioShape& shape, const std::string& name, const DefectSet& defects,
                                  ReferenceCache* cache, const ComputeDevice& compute, ScenarioShape* ran) {
  auto run_once = [&](const ScenarioShape& running) -> Result<ScenarioVerdict> {
    ZEROSIM_ASSIGN_OR_RETURN(Scenario scenario, scenario_from_json(scenario_document(running, name), name));
    scenario.run.options.compute = compute;
    return run_scenario(scenario, defects, cache);
  };
  ScenarioShape running = normalize_shape(shape);
  ZEROSIM_ASSIGN_OR_RETURN(ScenarioVerdict verdict, run_once(running));
  const bool counts_swap_operations =
      running.fault == GeneratedFault::kStorageFault && running.storage_fault != StorageFault::kLostWriteShard;
  if (verdict.unfired_fault_rule == 0 && counts_swap_operations) {
    if (verdict.unfired_fault_rule_matched > 0) {
      running.fault_occurrence = verdict.unfired_fault_rule_matched;
    } else {
      running.fault = GeneratedFault::kNone;
    }
    running = normalize_shape(running);
    ZEROSIM_ASSIGN_OR_RETURN(verdict, run_once(running));
  }
  if (ran != nullptr) *ran = running;
  return verdict;
}

Result<ShrinkResult> shrink_failure(const ScenarioShape& failing, const ScenarioVerdict& verdict, const DefectSet& defects,
                                    int64_t max_attempts, ReferenceCache* cache, const ComputeDevice& compute) {
  ShrinkResult result{normalize_shape(failing), verdict, 0, 0};
  const std::string wanted = failure_class(verdict);
  bool progressed = true;
  while (progressed && result.attempts < max_attempts) {
    progressed = false;
    for (const ScenarioShape& candidate : shrink_candidates(result.shape)) {
      if (result.attempts >= max_attempts) break;
      ++result.attempts;
      ScenarioShape ran = candidate;
      Result<ScenarioVerdict> attempt = run_shape(candidate, result.verdict.name, defects, cache, compute, &ran);
      if (!attempt.ok() || attempt->passed || failure_class(*attempt) != wanted) continue;
      result.shape = ran;
      result.verdict = std::move(attempt).value();
      ++result.accepted;
      progressed = true;
      break;
    }
  }
  return result;
}

}  // namespace zerosim
