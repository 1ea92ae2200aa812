#include "scenarios/generator.h"

#include <algorithm>
#include <cstdio>

#include "core/env/rng.h"

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
  std::string text = std::to_string(shape.input_width);
  for (int64_t width : shape.hidden_widths) text += "," + std::to_string(width);
  return text + "," + std::to_string(shape.class_count);
}

}  // namespace

ScenarioShape normalize_shape(ScenarioShape shape) {
  shape.save_every = std::clamp<int64_t>(shape.save_every, 1, 4);
  shape.saves_before_kill = std::clamp<int64_t>(shape.saves_before_kill, 2, 4);
  shape.steps_after = std::clamp<int64_t>(shape.steps_after, 1, 6);
  shape.world_size = std::clamp(shape.world_size, 1, kMaxWorldSize);
  shape.input_width = std::clamp<int64_t>(shape.input_width, 1, 16);
  if (shape.hidden_widths.size() > 3) shape.hidden_widths.resize(3);
  for (int64_t& width : shape.hidden_widths) width = std::clamp<int64_t>(width, 1, 32);
  shape.class_count = std::clamp<int64_t>(shape.class_count, 2, 8);
  if (shape.precision != "fp32" && shape.precision != "bf16") shape.precision = "fp16";
  shape.micro_batch_size = std::clamp<int64_t>(shape.micro_batch_size, 1, 4);
  shape.gradient_accumulation_steps = std::clamp<int64_t>(shape.gradient_accumulation_steps, 1, 3);
  shape.sub_group_size = std::clamp<int64_t>(shape.sub_group_size, 1, 1 << 20);
  if (shape.offload_optimizer != "cpu" && shape.offload_optimizer != "nvme") shape.offload_optimizer = "none";
  // An elastic resume keeps the global batch: the new world size must divide accumulation x W.
  shape.resume_world_size = std::clamp(shape.resume_world_size, 0, kMaxWorldSize);
  if (shape.resume_world_size == shape.world_size ||
      (shape.resume_world_size > 0 &&
       (shape.gradient_accumulation_steps * shape.world_size) % shape.resume_world_size != 0)) {
    shape.resume_world_size = 0;
  }
  if (!shape.offload_param_nvme && shape.offload_optimizer != "nvme") shape.delete_swap_directory = false;
  // Faults a correct engine must recover from, after a first save that committed.
  shape.fault_rank = std::clamp(shape.fault_rank, 0, shape.world_size - 1);
  if (shape.async_save && shape.fault == GeneratedFault::kCrashInSave) {
    // The commit sites of an async save are hit in the background; crash at a step instead.
    shape.fault = GeneratedFault::kCrashAtStepEnd;
  }
  switch (shape.fault) {
    case GeneratedFault::kNone: break;
    case GeneratedFault::kCrashAtStepEnd: {
      // After the first save committed: an async save of step s commits once the next save waits for it.
      const int64_t first = (shape.async_save ? 2 : 1) * shape.save_every + 1;
      if (first > first_phase_steps(shape)) {
        shape.fault = GeneratedFault::kNone;
        break;
      }
      shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, first, first_phase_steps(shape));
      break;
    }
    case GeneratedFault::kCrashInSave:
    case GeneratedFault::kNoSpaceOnSave:
    case GeneratedFault::kIoErrorOnSave:
      shape.fault_occurrence = std::clamp<int64_t>(shape.fault_occurrence, 2, shape.saves_before_kill);
      break;
  }
  if (shape.fault == GeneratedFault::kCrashInSave) {
    const bool known_any = std::find(std::begin(kSaveSitesAnyRank), std::end(kSaveSitesAnyRank), shape.fault_site) !=
                           std::end(kSaveSitesAnyRank);
    if (!known_any && !is_rank_zero_site(shape.fault_site)) shape.fault_site = "ckpt.shard_written";
    if (is_rank_zero_site(shape.fault_site)) shape.fault_rank = 0;
  }
  if (shape.fault == GeneratedFault::kNone) {
    shape.fault_rank = 0;
    shape.fault_occurrence = 1;
    shape.fault_site = "ckpt.shard_written";
  }
  return shape;
}

ScenarioShape generate_shape(uint64_t seed) {
  std::unique_ptr<Rng> rng = make_counter_rng(RngState{seed, 0x5ce7a210, 0});
  auto pick = [&](int64_t low, int64_t high) {
    return low + static_cast<int64_t>(rng->next_below(static_cast<uint64_t>(high - low + 1)));
  };
  ScenarioShape shape;
  shape.seed = seed % 1000003;
  shape.save_every = pick(1, 3);
  shape.saves_before_kill = pick(2, 3);
  shape.steps_after = pick(1, 4);
  shape.world_size = static_cast<int>(pick(1, kMaxWorldSize));
  shape.resume_world_size = static_cast<int>(pick(0, kMaxWorldSize));
  shape.input_width = pick(1, 12);
  shape.hidden_widths.clear();
  for (int64_t layer = pick(0, 2); layer > 0; --layer) shape.hidden_widths.push_back(pick(1, 24));
  shape.class_count = pick(2, 6);
  shape.precision = std::array<const char*, 3>{"fp32", "fp16", "bf16"}[static_cast<size_t>(pick(0, 2))];
  shape.micro_batch_size = pick(1, 3);
  shape.gradient_accumulation_steps = pick(1, 3);
  shape.sub_group_size = std::array<int64_t, 4>{7, 16, 64, 1000000000}[static_cast<size_t>(pick(0, 3))];
  shape.offload_optimizer = std::array<const char*, 3>{"none", "cpu", "nvme"}[static_cast<size_t>(pick(0, 2))];
  shape.offload_param_nvme = pick(0, 3) == 0;
  shape.async_save = pick(0, 3) == 0;
  shape.delete_swap_directory = pick(0, 1) == 1;
  shape.fault = static_cast<GeneratedFault>(pick(0, 4));
  shape.fault_rank = static_cast<int>(pick(0, kMaxWorldSize - 1));
  shape.fault_occurrence = pick(1, 12);
  const int64_t site = pick(0, 5);
  shape.fault_site = site < 3 ? kSaveSitesAnyRank[site] : kSaveSitesRankZero[site - 3];
  return normalize_shape(shape);
}

uint64_t case_seed(uint64_t campaign_seed, uint64_t index) { return mix_random_bits(campaign_seed, 0xf022, index); }

json scenario_document(const ScenarioShape& input, const std::string& name) {
  const ScenarioShape shape = normalize_shape(input);
  json zero = {{"stage", 3}, {"sub_group_size", shape.sub_group_size}};
  if (shape.offload_optimizer == "cpu") zero["offload_optimizer"] = {{"device", "cpu"}};
  if (shape.offload_optimizer == "nvme") zero["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", "/nvme/optimizer"}};
  if (shape.offload_param_nvme) zero["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/nvme/param"}};
  json config = {
      {"fp16", {{"enabled", "auto"}, {"loss_scale", 0}, {"initial_scale_power", 16}, {"hysteresis", 2}, {"min_loss_scale", 1}}},
      {"bf16", {{"enabled", "auto"}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}}},
      {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_min_lr", "auto"}, {"warmup_max_lr", "auto"}, {"warmup_num_steps", "auto"}}}}},
      {"zero_optimization", zero},
      {"train_batch_size", "auto"},
      {"train_micro_batch_size_per_gpu", "auto"},
      {"gradient_accumulation_steps", "auto"},
      {"gradient_clipping", "auto"}};
  if (shape.async_save) config["checkpoint"] = {{"async_save", true}};
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
                   {"steps", phase_steps + shape.steps_after},
                   {"config", config},
                   {"expect", {{"bit_identical", true}}}};
  if (shape.delete_swap_directory) document["operator_actions"] = json::array({"delete_swap_directory"});
  const int64_t saved_step = shape.fault_occurrence * shape.save_every;
  char shard_pattern[64];
  std::snprintf(shard_pattern, sizeof shard_pattern, "*global_step%lld/rank-%05d*", static_cast<long long>(saved_step),
                shape.fault_rank);
  switch (shape.fault) {
    case GeneratedFault::kNone: break;
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
  }
  return document;
}

std::string describe_shape(const ScenarioShape& shape) {
  std::string text = "W=" + std::to_string(shape.world_size);
  if (shape.resume_world_size > 0) text += "->" + std::to_string(shape.resume_world_size);
  text += ", model " + model_text(shape) + ", " + std::to_string(first_phase_steps(shape) + shape.steps_after) +
          " steps, save every " + std::to_string(shape.save_every) + ", " + shape.precision;
  if (shape.gradient_accumulation_steps > 1) text += ", accumulation " + std::to_string(shape.gradient_accumulation_steps);
  if (shape.offload_optimizer != "none") text += ", " + shape.offload_optimizer + " optimizer";
  if (shape.offload_param_nvme) text += ", nvme params";
  if (shape.async_save) text += ", async save";
  if (shape.delete_swap_directory) text += ", swap directory deleted";
  const std::string at = "@rank" + std::to_string(shape.fault_rank) + "#" + std::to_string(shape.fault_occurrence);
  switch (shape.fault) {
    case GeneratedFault::kNone: break;
    case GeneratedFault::kCrashAtStepEnd: text += ", crash at engine.step_end" + at; break;
    case GeneratedFault::kCrashInSave: text += ", crash at " + shape.fault_site + at; break;
    case GeneratedFault::kNoSpaceOnSave: text += ", ENOSPC on save " + std::to_string(shape.fault_occurrence); break;
    case GeneratedFault::kIoErrorOnSave: text += ", EIO on save " + std::to_string(shape.fault_occurrence); break;
  }
  return text;
}

std::vector<ScenarioShape> shrink_candidates(const ScenarioShape& shape) {
  std::vector<ScenarioShape> candidates;
  auto add = [&](auto change) {
    ScenarioShape candidate = shape;
    change(candidate);
    candidate = normalize_shape(candidate);
    if (describe_shape(candidate) != describe_shape(shape) || candidate.seed != shape.seed ||
        candidate.sub_group_size != shape.sub_group_size || candidate.micro_batch_size != shape.micro_batch_size) {
      candidates.push_back(candidate);
    }
  };
  add([](ScenarioShape& s) { s.steps_after = 1; });
  add([](ScenarioShape& s) { s.saves_before_kill = 2; });
  add([](ScenarioShape& s) { s.save_every = 1; });
  add([](ScenarioShape& s) { s.fault = GeneratedFault::kNone; });
  add([](ScenarioShape& s) { s.async_save = false; });
  add([](ScenarioShape& s) { s.world_size = 1; });
  add([](ScenarioShape& s) { s.resume_world_size = 0; });
  add([](ScenarioShape& s) { s.delete_swap_directory = false; });
  add([](ScenarioShape& s) { s.offload_param_nvme = false; });
  add([](ScenarioShape& s) { s.offload_optimizer = "none"; });
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
  if (verdict.divergence && verdict.divergence->found) return verdict.divergence->component;
  return verdict.resumed_at < 0 ? "refused" : "other";
}

Result<ScenarioVerdict> run_shape(const ScenarioShape& shape, const std::string& name, const DefectSet& defects,
                                  ReferenceCache* cache, const ComputeDevice& compute) {
  ZEROSIM_ASSIGN_OR_RETURN(Scenario scenario, scenario_from_json(scenario_document(shape, name), name));
  scenario.run.options.compute = compute;
  return run_scenario(scenario, defects, cache);
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
      Result<ScenarioVerdict> attempt = run_shape(candidate, result.verdict.name, defects, cache, compute);
      if (!attempt.ok() || attempt->passed || failure_class(*attempt) != wanted) continue;
      result.shape = candidate;
      result.verdict = std::move(attempt).value();
      ++result.accepted;
      progressed = true;
      break;
    }
  }
  return result;
}

}  // namespace zerosim
