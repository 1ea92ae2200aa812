#include "scenarios/import_ds.h"

#include <algorithm>
#include <filesystem>

#include "core/config/ds_config.h"
#include "scenarios/deepspeed_model.h"
#include "scenarios/scenario_file.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// "ckpt.shard_written@1#2" -> {"site", "rank", "occurrence"}.
Result<ordered_json> parse_crash(const std::string& text) {
  const size_t at = text.find('@');
  const size_t hash = text.find('#');
  const std::string site = text.substr(0, std::min(at, hash));
  if (site.empty() || site.find_first_of(" \t") != std::string::npos) {
    return invalid_argument("--crash " + text + ": expected SITE[@RANK][#OCCURRENCE], e.g. ckpt.shard_written@1#2");
  }
  auto number = [&](size_t begin, size_t end, const char* what) -> Result<int64_t> {
    const std::string digits = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument("--crash " + text + ": the " + what + " must be a number, found '" + digits + "'");
    }
    return std::stoll(digits);
  };
  ordered_json crash = {{"site", site}};
  if (at != std::string::npos) {
    ZEROSIM_ASSIGN_OR_RETURN(int64_t rank, number(at + 1, hash > at ? hash : std::string::npos, "rank"));
    crash["rank"] = rank;
  }
  if (hash != std::string::npos) {
    ZEROSIM_ASSIGN_OR_RETURN(int64_t occurrence, number(hash + 1, at > hash ? at : std::string::npos, "occurrence"));
    if (occurrence < 1) return invalid_argument("--crash " + text + ": the occurrence counts from 1");
    crash["occurrence"] = occurrence;
  }
  return crash;
}

std::string precision_from(const json& config) {
  for (const char* name : {"bf16", "fp16"}) {
    if (config.contains(name) && config[name].is_object() && config[name].contains("enabled") &&
        config[name]["enabled"].is_boolean() && config[name]["enabled"].get<bool>()) {
      return name;
    }
  }
  const bool fp16_off = config.contains("fp16") && config["fp16"].is_object() && config["fp16"].contains("enabled") &&
                        config["fp16"]["enabled"].is_boolean() && !config["fp16"]["enabled"].get<bool>();
  return fp16_off ? "fp32" : "fp16";
}

}  // namespace

Result<ordered_json> import_deepspeed_config(const ImportOptions& options, ImportNotes* notes) {
  auto one_of = [](const std::string& flag, const std::string& value, std::initializer_list<const char*> allowed) -> Status {
    std::string list;
    for (const char* item : allowed) {
      if (value == item) return Status();
      list += (list.empty() ? "" : ", ") + std::string(item);
    }
    return invalid_argument(flag + " '" + value + "': expected one of " + list);
  };
  ZEROSIM_RETURN_IF_ERROR(one_of("--as", options.as, {"", "deepspeed"}));
  ZEROSIM_RETURN_IF_ERROR(one_of("--training-loop", options.training_loop, {"hf", "plain"}));
  ZEROSIM_RETURN_IF_ERROR(one_of("--ended-by", options.ended_by, {"power-loss", "kill"}));
  ZEROSIM_RETURN_IF_ERROR(one_of("--no-checkpoint", options.no_checkpoint, {"fresh-start", "refusal"}));
  ZEROSIM_RETURN_IF_ERROR(one_of("--delete-tag", options.delete_tag, {"", "newest", "previous"}));
  if (options.resume_tag.empty()) return invalid_argument("--resume-tag: empty (give a tag, or leave it out for latest)");
  ZEROSIM_ASSIGN_OR_RETURN(std::string text, read_text_file(options.config_path, "DeepSpeed config"));
  // Parsed twice: once to check it (duplicate keys, nesting), once keeping its key order.
  ZEROSIM_ASSIGN_OR_RETURN(json config, parse_json_text(text, options.config_path));
  if (!config.is_object()) return invalid_argument(options.config_path + ": expected a DeepSpeed config object");
  const ordered_json verbatim = ordered_json::parse(text);

  const std::string file_name = std::filesystem::path(options.config_path).filename().string();
  ordered_json scenario;
  scenario["name"] = options.name.empty() ? "imported from " + file_name : options.name;
  scenario["description"] =
      "Imported by zerosim import-ds from " + options.config_path +
      " (verbatim). Train, save every " + std::to_string(options.save_every) + " steps, " +
      (options.crash.empty() ? "kill after step " + std::to_string(options.saved_step)
                             : "crash at " + options.crash) +
      (options.ended_by == "kill" ? ", the job killed (no power loss)" : ", power loss") +
      (options.delete_swap_directory ? ", swap directory deleted" : "") +
      (options.delete_tag.empty() ? "" : ", the " + options.delete_tag + " tag deleted") + ", resume" +
      (options.resume_tag != "latest" ? " from " + options.resume_tag : "") +
      (options.resume_world_size > 0 ? " on " + std::to_string(options.resume_world_size) + " ranks" : "") +
      ", and compare every component at every step with the uninterrupted run.";
  scenario["model"] = options.model;
  scenario["world_size"] = options.world_size;
  if (options.resume_world_size > 0) scenario["resume_world_size"] = options.resume_world_size;
  scenario["precision"] = options.precision.empty() ? precision_from(config) : options.precision;
  scenario["seed"] = options.seed;
  scenario["save_every"] = options.save_every;
  scenario["explored_save_step"] = options.saved_step;
  scenario["steps"] = options.steps;
  if (!options.crash.empty()) {
    ZEROSIM_ASSIGN_OR_RETURN(ordered_json crash, parse_crash(options.crash));
    scenario["fault_plan"] = {{"crash", crash}};
  }
  ordered_json actions = ordered_json::array();
  if (options.delete_swap_directory) actions.push_back("delete_swap_directory");
  // A deleted tag: without its manifest a tag is no checkpoint (the loader falls back past it).
  if (!options.delete_tag.empty()) actions.push_back({{"damage", "remove"}, {"file", "manifest"}, {"tag", options.delete_tag}});
  if (!actions.empty()) scenario["operator_actions"] = actions;
  if (options.ended_by == "kill") scenario["power_loss"] = false;
  if (options.resume_tag != "latest") scenario["resume_tag"] = options.resume_tag;
  if (!options.load_optimizer_states) scenario["resume_load_optimizer_states"] = false;
  if (!options.load_lr_scheduler_states) scenario["resume_load_lr_scheduler_states"] = false;
  if (options.load_module_only) scenario["resume_load_module_only"] = true;
  if (!options.resume_config_path.empty()) {
    scenario["resume_config"] = std::filesystem::absolute(options.resume_config_path).lexically_normal().string();
  }
  scenario["expect"] = {{"bit_identical", true},
                        {"no_checkpoint", options.no_checkpoint == "refusal" ? "refusal" : "fresh_start"}};
  // A restart that asks for global_stepN must start from step N: a tag the run saves.
  if (options.resume_tag != "latest") {
    const std::string& tag = options.resume_tag;
    const bool numbered = tag.rfind("global_step", 0) == 0 && tag.size() > 11 && tag.size() < 20 &&
                          tag.find_first_not_of("0123456789", 11) == std::string::npos;
    const int64_t step = numbered ? std::stoll(tag.substr(11)) : -1;
    if (step < options.save_every || step % options.save_every != 0 || step > options.saved_step) {
      return invalid_argument("--resume-tag " + tag + ": the run saves global_step" + std::to_string(options.save_every) +
                              " every " + std::to_string(options.save_every) + " steps up to global_step" +
                              std::to_string(options.saved_step) + "; name one of those (or latest)");
    }
    scenario["expect"]["resumed_at_step"] = step;
  }
  scenario["config"] = verbatim;

  if (options.saved_step < options.save_every || options.saved_step % options.save_every != 0) {
    return invalid_argument("--saved-step " + std::to_string(options.saved_step) + " must be a multiple of --save-every " +
                            std::to_string(options.save_every));
  }
  if (options.steps < options.saved_step) {
    return invalid_argument("--steps " + std::to_string(options.steps) + " must be at least --saved-step " +
                            std::to_string(options.saved_step));
  }
  // The scenario must load: the config resolves with these settings, the batch divides.
  Result<Scenario> loaded = scenario_from_json(json::parse(scenario.dump()), options.config_path);
  if (!loaded.ok()) return loaded.status();
  if (options.as == "deepspeed") {
    if (loaded->run.options.config.zero.stage != 3) {
      return invalid_argument("--as deepspeed: the model describes DeepSpeed's ZeRO stage 3 resume; " + options.config_path +
                              " sets zero_optimization.stage " + std::to_string(loaded->run.options.config.zero.stage));
    }
    const TrainingLoop loop = options.training_loop == "plain" ? TrainingLoop::kPlain : TrainingLoop::kHfTrainer;
    Result<std::vector<DeepSpeedModelEntry>> for_release = deepspeed_model_for_release(*loaded, loop);
    if (!for_release.ok()) return invalid_argument("--as deepspeed: " + for_release.status().message());
    const std::vector<DeepSpeedModelEntry>& entries = *for_release;
    ordered_json defects = ordered_json::array();
    std::string ids;
    for (const DeepSpeedModelEntry& entry : entries) {
      ids += (ids.empty() ? "" : ", ") + entry.id;
      for (Defect defect : entry.defects) {
        if (std::find(defects.begin(), defects.end(), defect_name(defect)) == defects.end()) defects.push_back(defect_name(defect));
      }
      if (notes != nullptr) {
        notes->lines.push_back("deepspeed " + std::string(kDeepSpeedModelCommit) + " model: " + entry.id + " (" +
                               entry.condition + "): " + entry.effect + " [" + entry.source + "]");
        // The model is read from one commit; what running a release showed may differ.
        notes->lines.push_back("  run against DeepSpeed: " + entry.measured);
      }
    }
    const OffloadDevice saved_on = loaded->run.options.config.zero.offload_optimizer.device;
    const OffloadDevice loaded_on =
        loaded->resume_config ? loaded->resume_config->zero.offload_optimizer.device : saved_on;
    if (saved_on != loaded_on) {
      return invalid_argument("--as deepspeed: the optimizer's offload device changes between the runs (" +
                              std::string(offload_device_name(saved_on)) + " -> " + offload_device_name(loaded_on) +
                              "): not in the model (DeepSpeed's NVMe load copies swap files a non-NVMe save never wrote)");
    }
    const bool nvme = loaded_on == OffloadDevice::kNvme;
    const int resume_world_size = options.resume_world_size > 0 ? options.resume_world_size : options.world_size;
    if (nvme && (!options.load_optimizer_states || options.load_module_only) && notes != nullptr) {
      notes->lines.push_back("deepspeed model: not modelled: a fresh-optimizer or module-only load with the optimizer on "
                             "NVMe (read from the code, DeepSpeed raises or overwrites the weights there; DeepSpeed 0.14.5 "
                             "raised in zero_to_fp32 for a fresh-optimizer load of a swapped sub-group)");
    }
    if (nvme && resume_world_size != options.world_size && notes != nullptr) {
      notes->lines.push_back("deepspeed model: not modelled: another world size with the optimizer on NVMe (no world-size "
                             "check there; the new ranks find no files of theirs, or the swap files are resized unchecked)");
    }
    // The release the config names, or the commit the model was read from.
    const std::optional<DeepSpeedRelease>& release =
        (loaded->resume_config ? *loaded->resume_config : loaded->run.options.config).deepspeed_release;
    const std::string which = release ? deepspeed_release_text(*release) : std::string(kDeepSpeedModelCommit);
    scenario["name"] = scenario["name"].get<std::string>() + ", as DeepSpeed " + which + " resumes it";
    scenario["description"] = scenario["description"].get<std::string>() + " Run as DeepSpeed " + which +
                              " resumes it (zerosim's model of DeepSpeed, read from its code at " + kDeepSpeedModelCommit +
                              " and measured where its entries say so: " + (ids.empty() ? std::string("no entry") : ids) +
                              "); without --as deepspeed the same scenario shows what a correct engine does.";
    scenario["defects"] = defects;
  }
  // An absolute path: the scenario file may be written anywhere, and a relative "config" is
  // read beside it.
  if (options.config_by_path) scenario["config"] = std::filesystem::absolute(options.config_path).lexically_normal().string();
  return scenario;
}

}  // namespace zerosim
