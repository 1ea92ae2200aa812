#include "scenarios/import_ds.h"

#include <filesystem>

#include "core/config/ds_config.h"
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

Result<ordered_json> import_deepspeed_config(const ImportOptions& options) {
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
      ", power loss" + (options.delete_swap_directory ? ", swap directory deleted" : "") + ", resume" +
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
  if (options.delete_swap_directory) scenario["operator_actions"] = ordered_json::array({"delete_swap_directory"});
  scenario["expect"] = {{"bit_identical", true}};
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
  // An absolute path: the scenario file may be written anywhere, and a relative "config" is
  // read beside it.
  if (options.config_by_path) scenario["config"] = std::filesystem::absolute(options.config_path).lexically_normal().string();
  return scenario;
}

}  // namespace zerosim
