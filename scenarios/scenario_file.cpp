#include "scenarios/scenario_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/checkpoint/commit.h"
#include "core/config/ds_config.h"
#include "core/model/mlp.h"

namespace zerosim {

namespace {

using nlohmann::json;

// ZeRO-3 with AdamW and WarmupLR, every run-dependent value "auto" (filled from the scenario).
constexpr const char* kDefaultScenarioConfig = R"json({
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
           "hysteresis": 2, "min_loss_scale": 1},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                "warmup_num_steps": "auto"}},
  "zero_optimization": {"stage": 3, "sub_group_size": 16},
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"
})json";

const std::vector<std::string_view> kScenarioKeys = {
    "model",   "world_size", "resume_world_size", "precision",         "micro_batch_size", "gradient_accumulation_steps",
    "seed",    "dataset_size", "save_every",      "explored_save_step", "steps",            "crash_state_bound",
    "config",  "name",       "description",       "fault_plan",        "operator_actions", "defects",
    "expect",  "resume_tag", "resume_config",     "cause_class",       "catches",          "resume_changes",
    "resume_save_every", "resume_load_optimizer_states", "resume_load_lr_scheduler_states", "resume_load_module_only", "fallback_on_invalid", "save_at_start", "restart_killed_after_step", "restart_chain",
    "frozen_parameters", "save_exclude_frozen_parameters", "power_loss"};

class ScenarioReader {
 public:
  ScenarioReader(const json& document, std::string source) : document_(document), source_(std::move(source)) {}

  Status error(const std::string& key, const std::string& what) const {
    return invalid_argument(source_ + ": " + key + ": " + what);
  }
  Result<int64_t> integer(const std::string& key, int64_t fallback, int64_t minimum, int64_t maximum) const {
    if (!document_.contains(key)) return fallback;
    const json& value = document_[key];
    if (!value.is_number_integer()) return error(key, "expected an integer, found " + value.dump());
    const int64_t number = value.get<int64_t>();
    if (number < minimum || number > maximum) {
      return error(key, "expected " + std::to_string(minimum) + " to " + std::to_string(maximum) + ", found " +
                            std::to_string(number));
    }
    return number;
  }
  Result<std::string> text(const std::string& key, const std::string& fallback) const {
    if (!document_.contains(key)) return fallback;
    const json& value = document_[key];
    if (!value.is_string()) return error(key, "expected a string, found " + value.dump());
    return value.get<std::string>();
  }

 private:
  const json& document_;
  std::string source_;
};

}  // namespace

Result<std::string> read_text_file(const std::string& path, const std::string& what) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return not_found(what + " " + path + " cannot be opened");
  std::stringstream buffer;
  buffer << stream.rdbuf();
  if (stream.bad()) return io_error(what + " " + path + " could not be read");
  return buffer.str();
}

Result<nlohmann::json> read_config_beside(const std::string& scenario_path, const std::string& config_path) {
  std::filesystem::path path(config_path);
  if (path.is_relative()) path = std::filesystem::path(scenario_path).parent_path() / path;
  Result<std::string> text = read_text_file(path.string(), "the DeepSpeed config");
  if (!text.ok()) return invalid_argument(scenario_path + ": config: " + text.status().message());
  return parse_json_text(*text, path.string());
}

std::string with_line_number(const std::string& text, const std::string& source_name, const std::string& message) {
  // The message reads "<source>: <key>[.<key>|[i]]...: what"; find the innermost key that the
  // text holds, walking the path from the first key's line on.
  const std::string prefix = source_name + ": ";
  if (message.rfind(prefix, 0) != 0) return message;
  // Leading "key.path: " parts (no spaces) are joined: "config: zero_optimization.stage: ...".
  std::string key_path;
  size_t part_begin = prefix.size();
  while (true) {
    const size_t part_end = message.find(": ", part_begin);
    if (part_end == std::string::npos) break;
    const std::string part = message.substr(part_begin, part_end - part_begin);
    if (part.empty() || part.find(' ') != std::string::npos) break;
    key_path += (key_path.empty() ? "" : ".") + part;
    part_begin = part_end + 2;
  }
  if (key_path.empty()) return message;
  size_t position = 0;
  bool found_any = false;
  size_t segment_begin = 0;
  while (segment_begin <= key_path.size()) {
    size_t segment_end = key_path.find_first_of(".[", segment_begin);
    if (segment_end == std::string::npos) segment_end = key_path.size();
    const std::string segment = key_path.substr(segment_begin, segment_end - segment_begin);
    if (!segment.empty() && segment.find_first_of(" ]") == std::string::npos) {
      const size_t at = text.find("\"" + segment + "\"", position);
      if (at == std::string::npos) break;
      position = at;
      found_any = true;
    }
    if (segment_end == key_path.size()) break;
    segment_begin = key_path.find_first_not_of(".[]0123456789", segment_end);
    if (segment_begin == std::string::npos) break;
  }
  if (!found_any) return message;
  const int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(position), '\n');
  return source_name + ":" + std::to_string(line) + ": " + message.substr(prefix.size());
}

Result<CrashScenario> crash_scenario_from_json(const json& document, const std::string& source_name) {
  if (!document.is_object()) return invalid_argument(source_name + ": expected a JSON object");
  for (auto it = document.begin(); it != document.end(); ++it) {
    if (std::find(kScenarioKeys.begin(), kScenarioKeys.end(), it.key()) == kScenarioKeys.end()) {
      return invalid_argument(source_name + ": " + it.key() + ": unknown key; " +
                              unknown_key_hint(it.key(), kScenarioKeys));
    }
  }
  const ScenarioReader reader(document, source_name);
  CrashScenario scenario;
  ZEROSIM_ASSIGN_OR_RETURN(std::string model_text, reader.text("model", "6,5,3"));
  Result<ModelSpec> model = parse_model_spec(model_text);
  if (!model.ok()) {
    // The reader names the key; the parser's own "model: " would say it twice.
    const std::string& message = model.status().message();
    return reader.error("model", message.rfind("model: ", 0) == 0 ? message.substr(7) : message);
  }
  ZEROSIM_ASSIGN_OR_RETURN(int64_t world_size, reader.integer("world_size", 4, 1, 256));
  ZEROSIM_ASSIGN_OR_RETURN(int64_t resume_world_size, reader.integer("resume_world_size", 0, 0, 256));
  ZEROSIM_ASSIGN_OR_RETURN(std::string precision, reader.text("precision", "fp16"));
  if (precision != "fp32" && precision != "fp16" && precision != "bf16") {
    return reader.error("precision", "expected fp32, fp16 or bf16, found '" + precision + "'");
  }
  ZEROSIM_ASSIGN_OR_RETURN(int64_t micro_batch, reader.integer("micro_batch_size", 1, 1, 4096));
  ZEROSIM_ASSIGN_OR_RETURN(int64_t accumulation, reader.integer("gradient_accumulation_steps", 1, 1, 4096));
  ZEROSIM_ASSIGN_OR_RETURN(int64_t seed, reader.integer("seed", 77, 0, INT64_MAX));
  ZEROSIM_ASSIGN_OR_RETURN(int64_t dataset_size, reader.integer("dataset_size", 97, 1, int64_t{1} << 40));
  ZEROSIM_ASSIGN_OR_RETURN(scenario.save_every_steps, reader.integer("save_every", 2, 1, 1 << 20));
  ZEROSIM_ASSIGN_OR_RETURN(scenario.explored_save_step, reader.integer("explored_save_step", 4, 1, 1 << 20));
  ZEROSIM_ASSIGN_OR_RETURN(scenario.total_steps, reader.integer("steps", 6, 1, 1 << 20));
  ZEROSIM_ASSIGN_OR_RETURN(scenario.crash_state_bound, reader.integer("crash_state_bound", 64, 2, 1 << 20));
  scenario.resume_world_size = static_cast<int>(resume_world_size);
  scenario.seed = static_cast<uint64_t>(seed);

  json config = document.contains("config") ? document["config"] : json::parse(kDefaultScenarioConfig);
  if (config.is_string()) {
    // A DeepSpeed config file, verbatim, relative to the scenario file.
    ZEROSIM_ASSIGN_OR_RETURN(config, read_config_beside(source_name, config.get<std::string>()));
  }
  if (!config.is_object()) return reader.error("config", "expected a DeepSpeed config object or the path of one");
  RunSettings settings;
  settings.world_size = world_size;
  settings.micro_batch_size = micro_batch;
  settings.gradient_accumulation_steps = accumulation;
  set_default_hyperparameters(settings);
  settings.warmup_steps = 3;
  settings.hidden_size = model->gpt                         ? model->gpt->embd
                         : model->layer_widths.size() > 2 ? model->layer_widths[1]
                                                          : model->layer_widths.back();
  // The hyperparameters above only fill "auto": a concrete value in the config (a user's real
  // config) wins, as it does over a command line's defaults. So do the batch sizes the
  // scenario does not set itself.
  settings.defaulted_flags = {"--learning-rate", "--adam-beta1",   "--adam-beta2",  "--adam-epsilon", "--weight-decay",
                              "--max-grad-norm", "--warmup-steps", "--total-steps", "--hidden-size"};
  if (!document.contains("micro_batch_size")) settings.defaulted_flags.push_back("--micro-batch-size");
  if (!document.contains("gradient_accumulation_steps")) {
    settings.defaulted_flags.push_back("--gradient-accumulation-steps");
  }
  settings.auto_precision = precision == "fp16" ? Precision::kFp16 : precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
  Result<ResolvedConfig> resolved = resolve_config(config, settings);
  if (!resolved.ok()) return reader.error("config", resolved.status().message());

  TrainingOptions& options = scenario.options;
  options.config = std::move(resolved).value();
  options.model = *model;
  options.world_size = static_cast<int>(world_size);
  options.seed = static_cast<uint64_t>(seed);
  options.data = dataset_for_model(*model, dataset_size, static_cast<uint64_t>(seed));
  options.run_id = "explore";
  if (document.contains("frozen_parameters")) {
    const json& frozen = document["frozen_parameters"];
    if (!frozen.is_array() || frozen.empty()) {
      return reader.error("frozen_parameters", "expected a non-empty list of parameter names, found " + frozen.dump());
    }
    for (const json& name : frozen) {
      if (!name.is_string() || name.get<std::string>().empty()) {
        return reader.error("frozen_parameters", "expected parameter names (non-empty strings), found " + name.dump());
      }
      options.frozen_parameters.push_back(name.get<std::string>());
    }
  }
  if (document.contains("save_exclude_frozen_parameters")) {
    const json& exclude = document["save_exclude_frozen_parameters"];
    if (!exclude.is_boolean()) return reader.error("save_exclude_frozen_parameters", "expected true or false, found " + exclude.dump());
    if (exclude.get<bool>() && options.frozen_parameters.empty()) {
      return reader.error("save_exclude_frozen_parameters", "true without frozen_parameters: there is nothing to exclude");
    }
    scenario.save_options.exclude_frozen_parameters = exclude.get<bool>();
  }
  Status valid = validate_training_options(options);
  if (!valid.ok()) return invalid_argument(source_name + ": " + valid.message());
  return scenario;
}

Result<CrashScenario> read_crash_scenario_file(const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "scenario file"));
  ZEROSIM_ASSIGN_OR_RETURN(nlohmann::json document, parse_json_text(text, path));
  Result<CrashScenario> scenario = crash_scenario_from_json(document, path);
  if (!scenario.ok()) return Status(scenario.status().code(), with_line_number(text, path, scenario.status().message()));
  return scenario;
}

namespace {

Status require_string_list(const json& value, const std::string& where) {
  if (!value.is_array()) return invalid_argument(where + ": expected a list of names");
  for (const json& item : value) {
    if (!item.is_string()) return invalid_argument(where + ": expected names, found " + item.dump());
  }
  return Status();
}

Result<uint64_t> non_negative(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) return uint64_t{0};
  const json& value = object[key];
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    return invalid_argument(where + "." + key + ": expected an integer >= 0, found " + value.dump());
  }
  return value.get<uint64_t>();
}

Status parse_object_action(const json& action, const std::string& where, Scenario& scenario) {
  if (action.contains("sigterm_at_step")) {
    if (action.size() != 1) return invalid_argument(where + ": sigterm_at_step takes no other key");
    const json& step = action["sigterm_at_step"];
    if (!step.is_number_integer()) return invalid_argument(where + ".sigterm_at_step: expected a step");
    if (scenario.sigterm_at_step) return invalid_argument(where + ": a second sigterm_at_step");
    scenario.sigterm_at_step = step.get<int64_t>();
    return Status();
  }
  if (!action.contains("damage")) {
    return invalid_argument(where + ": expected {\"damage\": ...} or {\"sigterm_at_step\": N}, found " + action.dump());
  }
  AtRestDamage damage;
  const std::vector<std::string_view> kinds = {"flip_bit", "truncate", "remove", "stale_copy", "other_rank"};
  for (const auto& [key, value] : action.items()) {
    const std::string at = where + "." + key;
    if (key == "damage" || key == "file" || key == "tag") {
      if (!value.is_string()) return invalid_argument(at + ": expected a string, found " + value.dump());
      const std::string text = value.get<std::string>();
      if (key == "damage") {
        const auto found = std::find(kinds.begin(), kinds.end(), text);
        if (found == kinds.end()) return invalid_argument(at + ": unknown damage '" + text + "'; " + unknown_key_hint(text, kinds));
        damage.kind = static_cast<AtRestDamage::Kind>(found - kinds.begin());
      } else if (key == "file") {
        if (text != "shard" && text != "manifest" && text != "latest") {
          return invalid_argument(at + ": expected shard, manifest or latest, found '" + text + "'");
        }
        damage.file = text;
      } else {
        if (text != "newest" && text != "previous") return invalid_argument(at + ": expected newest or previous, found '" + text + "'");
        damage.tag = text;
      }
    } else if (key == "rank" || key == "from_rank") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1 << 20) {
        return invalid_argument(at + ": expected a rank, found " + value.dump());
      }
      (key == "rank" ? damage.rank : damage.from_rank) = value.get<int>();
    } else if (key == "bit" || key == "keep_bytes") {
      ZEROSIM_ASSIGN_OR_RETURN(const uint64_t number, non_negative(action, key.c_str(), where));
      (key == "bit" ? damage.bit : damage.keep_bytes) = number;
    } else {
      return invalid_argument(at + ": unknown key; " +
                              unknown_key_hint(key, {"damage", "file", "tag", "rank", "from_rank", "bit", "keep_bytes"}));
    }
  }
  const bool copies = damage.kind == AtRestDamage::Kind::kStaleCopy || damage.kind == AtRestDamage::Kind::kOtherRank;
  if (copies && damage.file == "latest") return invalid_argument(where + ": " + damage.describe() + ": latest is not a file of a tag");
  if (damage.kind == AtRestDamage::Kind::kOtherRank && (damage.file != "shard" || damage.from_rank == damage.rank)) {
    return invalid_argument(where + ": other_rank copies another rank's shard: file shard, from_rank != rank");
  }
  if (damage.file == "latest" && damage.tag != "newest") return invalid_argument(where + ": latest belongs to no tag: tag newest");
  scenario.damage.push_back(damage);
  return Status();
}

}  // namespace

Result<TrainingOptions> restart_options(const Scenario& scenario, const std::string& source) {
  if (!scenario.resume_config) return resume_options_for(scenario.run, source);
  TrainingOptions options = scenario.run.options;
  options.digest_every_step = true;
  if (scenario.run.resume_world_size > 0) options.world_size = scenario.run.resume_world_size;
  options.config = *scenario.resume_config;
  const int64_t per_step = options.config.micro_batch_size * options.world_size;
  if (per_step <= 0 || options.config.train_batch_size % per_step != 0) {
    return invalid_argument(source + ": resume_config: train_batch_size " + std::to_string(options.config.train_batch_size) +
                            " is not a multiple of micro batch " + std::to_string(options.config.micro_batch_size) +
                            " x the restart's " + std::to_string(options.world_size) + " ranks");
  }
  options.config.gradient_accumulation_steps = options.config.train_batch_size / per_step;
  return options;
}

namespace {

// The crash point of the fault plan: a known site, on a rank of the first phase.
Status check_crash_point(const Scenario& scenario, const std::string& source_name) {
  if (scenario.fault_plan.crash_point) {
    const CrashPoint& point = *scenario.fault_plan.crash_point;
    const std::vector<std::string_view> sites = known_crash_sites();
    if (std::find(sites.begin(), sites.end(), point.site) == sites.end()) {
      return invalid_argument(source_name + ": fault_plan.crash.site: unknown crash point '" + point.site + "'; " +
                              unknown_key_hint(point.site, sites));
    }
    if (point.rank >= scenario.run.options.world_size) {
      return invalid_argument(source_name + ": fault_plan.crash.rank: " + std::to_string(point.rank) +
                              " is not a rank of a world of " + std::to_string(scenario.run.options.world_size));
    }
  }
  return Status();
}

// The schedule and the resume's batch arithmetic, checked before anything runs.
Status check_schedule(const json& document, const std::string& source_name, const Scenario& scenario) {
  const CrashScenario& schedule = scenario.run;
  // A restart from an explicit older tag may run fewer steps than the abandoned first phase.
  const bool restarts_from_latest = !document.contains("resume_tag") || document["resume_tag"] == "latest";
  if (restarts_from_latest && schedule.explored_save_step > schedule.total_steps) {
    return invalid_argument(source_name + ": explored_save_step: " + std::to_string(schedule.explored_save_step) +
                            " is past steps (" + std::to_string(schedule.total_steps) + ")");
  }
  if (schedule.save_every_steps > schedule.explored_save_step) {
    return invalid_argument(source_name + ": save_every: " + std::to_string(schedule.save_every_steps) +
                            " saves nothing before explored_save_step (" + std::to_string(schedule.explored_save_step) + ")");
  }
  // The restart's batch arithmetic: with a resume_config, its own (checked once it is read).
  if (!document.contains("resume_config")) ZEROSIM_RETURN_IF_ERROR(resume_options_for(schedule, source_name).status());
  return Status();
}

// operator_actions: named actions between the crash and the restart, and the object ones (damage at
// rest, SIGTERM); each checked against the first phase.
Status read_operator_actions(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("operator_actions")) {
    const std::string where = source_name + ": operator_actions";
    if (!document["operator_actions"].is_array()) return invalid_argument(where + ": expected a list of actions");
    for (size_t i = 0; i < document["operator_actions"].size(); ++i) {
      const json& action = document["operator_actions"][i];
      const std::string at = where + "[" + std::to_string(i) + "]";
      if (action.is_object()) {
        ZEROSIM_RETURN_IF_ERROR(parse_object_action(action, at, scenario));
        continue;
      }
      if (!action.is_string()) return invalid_argument(at + ": expected a name or an object, found " + action.dump());
      const std::string name = action.get<std::string>();
      if (name == "delete_swap_directory") scenario.operator_actions.push_back(OperatorAction::kDeleteSwapDirectory);
      else if (name == "point_latest_at_partial_tag") scenario.operator_actions.push_back(OperatorAction::kPointLatestAtPartialTag);
      else {
        return invalid_argument(at + ": unknown action '" + name + "'; " +
                                unknown_key_hint(name, {"delete_swap_directory", "point_latest_at_partial_tag"}));
      }
    }
    if (scenario.sigterm_at_step &&
        (*scenario.sigterm_at_step < 1 || *scenario.sigterm_at_step >= scenario.run.explored_save_step)) {
      return invalid_argument(where + ": sigterm_at_step: " + std::to_string(*scenario.sigterm_at_step) +
                              " is not a step of the first phase before its last (1 to " +
                              std::to_string(scenario.run.explored_save_step - 1) + ")");
    }
    for (const AtRestDamage& damage : scenario.damage) {
      for (int rank : {damage.rank, damage.from_rank}) {
        if (rank >= scenario.run.options.world_size) {
          return invalid_argument(where + ": " + damage.describe() + ": rank " + std::to_string(rank) +
                                  " did not save (the first phase has " + std::to_string(scenario.run.options.world_size) +
                                  " ranks)");
        }
      }
    }
  }
  return Status();
}

// resume_save_every, and resume_changes: what the restart runs with that the first phase did not.
Status read_restart_changes(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("resume_save_every")) {
    const json& every = document["resume_save_every"];
    if (!every.is_number_integer() || every.get<int64_t>() < 1 || every.get<int64_t>() > (1 << 20)) {
      return invalid_argument(source_name + ": resume_save_every: expected a number of steps >= 1, found " + every.dump());
    }
    scenario.resume_save_every = every.get<int64_t>();
  }
  if (document.contains("resume_changes")) {
    const json& changes = document["resume_changes"];
    const std::string where = source_name + ": resume_changes";
    if (!changes.is_object() || changes.empty()) {
      return invalid_argument(where + ": expected an object of seed, dataset_size, model, frozen_parameters");
    }
    json restart = document;
    for (const auto& [key, value] : changes.items()) {
      if (key != "seed" && key != "dataset_size" && key != "model" && key != "frozen_parameters") {
        return invalid_argument(where + "." + key + ": unknown key; " +
                                unknown_key_hint(key, {"seed", "dataset_size", "model", "frozen_parameters"}));
      }
      restart[key] = value;
      if (key == "frozen_parameters") {
        scenario.resume_changes_frozen = true;
        // [] : the restart freezes nothing (every parameter trainable again).
        if (value.is_array() && value.empty()) {
          restart.erase("frozen_parameters");
          restart.erase("save_exclude_frozen_parameters");  // the first phase's saves: their own option
        }
      }
    }
    restart.erase("resume_changes");
    Result<CrashScenario> resolved = crash_scenario_from_json(restart, source_name);
    if (!resolved.ok()) return invalid_argument(where + ": " + resolved.status().message());
    scenario.resume_settings = resolved->options;
  }
  return Status();
}

// defects: the named defects switched on in every run of the scenario.
Status read_defects(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("defects")) {
    const std::string where = source_name + ": defects";
    ZEROSIM_RETURN_IF_ERROR(require_string_list(document["defects"], where));
    for (const json& name : document["defects"]) {
      std::optional<Defect> defect = defect_from_name(name.get<std::string>());
      if (!defect) return invalid_argument(where + ": unknown defect '" + name.get<std::string>() + "' (zerosim defects lists them)");
      scenario.run.defects.enable(*defect);
    }
  }
  return Status();
}

// expect: what the restart must do (bit-identical, a refusal, a start step, the checkpoints it
// finds, the outcome when no checkpoint was left).
Status read_expectation(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("expect")) {
    const json& expect = document["expect"];
    const std::string where = source_name + ": expect";
    if (!expect.is_object()) return invalid_argument(where + ": expected an object");
    for (auto it = expect.begin(); it != expect.end(); ++it) {
      if (it.key() == "bit_identical") {
        if (!it->is_boolean()) return invalid_argument(where + ".bit_identical: expected true or false");
        scenario.expect_bit_identical = it->get<bool>();
      } else if (it.key() == "resumed_at_step") {
        if (!it->is_number_integer() || it->get<int64_t>() < 0) {
          return invalid_argument(where + ".resumed_at_step: expected a step >= 0");
        }
        scenario.expect_resumed_at_step = it->get<int64_t>();
      } else if (it.key() == "checkpoint") {
        const std::string at = where + ".checkpoint";
        if (!it->is_object() || it->empty()) return invalid_argument(at + ": expected {\"tags\": [...], \"latest\": TAG or null}");
        for (auto field = it->begin(); field != it->end(); ++field) {
          if (field.key() == "tags") {
            ZEROSIM_RETURN_IF_ERROR(require_string_list(*field, at + ".tags"));
            std::vector<std::string> tags;
            for (const json& tag : *field) {
              Status valid = validate_checkpoint_tag(tag.get<std::string>());
              if (!valid.ok()) return invalid_argument(at + ".tags: " + valid.message());
              tags.push_back(tag.get<std::string>());
            }
            scenario.expect_checkpoint_tags = tags;
          } else if (field.key() == "latest") {
            if (field->is_null()) {
              scenario.expect_latest = "";
            } else if (field->is_string() && validate_checkpoint_tag(field->get<std::string>()).ok()) {
              scenario.expect_latest = field->get<std::string>();
            } else {
              return invalid_argument(at + ".latest: expected a tag name or null, found " + field->dump());
            }
          } else {
            return invalid_argument(at + "." + field.key() + ": unknown key; " + unknown_key_hint(field.key(), {"tags", "latest"}));
          }
        }
      } else if (it.key() == "no_checkpoint") {
        if (*it != "fresh_start" && *it != "refusal") {
          return invalid_argument(where + ".no_checkpoint: expected \"fresh_start\" or \"refusal\", found " + it->dump());
        }
        scenario.expect_no_checkpoint = it->get<std::string>();
      } else if (it.key() == "error") {
        if (!it->is_string() || it->get<std::string>().empty()) return invalid_argument(where + ".error: expected a message part");
        scenario.expect_error = it->get<std::string>();
        scenario.expect_bit_identical = false;
      } else {
        return invalid_argument(where + "." + it.key() + ": unknown key; " + unknown_key_hint(it.key(), {"bit_identical", "error", "resumed_at_step", "checkpoint", "no_checkpoint"}));
      }
    }
  }
  return Status();
}

// resume_tag and the booleans: the load options of the restart, save_at_start and power_loss.
Status read_resume_load(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("resume_tag")) {
    const json& tag = document["resume_tag"];
    if (!tag.is_string()) return invalid_argument(source_name + ": resume_tag: expected a tag name or \"latest\"");
    scenario.resume_tag = tag.get<std::string>();
    if (scenario.resume_tag != "latest") {
      Status valid = validate_checkpoint_tag(scenario.resume_tag);
      if (!valid.ok()) return invalid_argument(source_name + ": resume_tag: " + valid.message());
    }
  }
  for (const auto& [key, target] :
       {std::pair{"resume_load_optimizer_states", &scenario.resume_load.optimizer_states},
        std::pair{"resume_load_lr_scheduler_states", &scenario.resume_load.lr_scheduler_states},
        std::pair{"resume_load_module_only", &scenario.resume_load.module_only},
        std::pair{"fallback_on_invalid", &scenario.resume_load.fallback_on_invalid},
        std::pair{"save_at_start", &scenario.save_at_start},
        std::pair{"power_loss", &scenario.power_loss}}) {
    if (!document.contains(key)) continue;
    if (!document[key].is_boolean()) {
      return invalid_argument(source_name + ": " + key + ": expected true or false, found " + document[key].dump());
    }
    *target = document[key].get<bool>();
  }
  return Status();
}

// restart_chain (or its short form restart_killed_after_step): the restarts before the judged one.
Status read_restart_chain(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("restart_killed_after_step") && document.contains("restart_chain")) {
    return invalid_argument(source_name + ": restart_killed_after_step and restart_chain: give the chain one way");
  }
  if (document.contains("restart_killed_after_step")) {
    const json& step = document["restart_killed_after_step"];
    const std::string where = source_name + ": restart_killed_after_step";
    if (!step.is_number_integer() || step.get<int64_t>() < 1 || step.get<int64_t>() >= scenario.run.total_steps) {
      return invalid_argument(where + ": expected a step between 1 and steps - 1, found " + step.dump());
    }
    if (scenario.resume_save_every < 1) {
      return invalid_argument(where + ": the first restart must save for the second to resume from its saves: give resume_save_every");
    }
    // The first restart is the judged one's twin: the same load options and frozen set.
    Scenario::ChainedRestart first;
    first.killed_after_step = step.get<int64_t>();
    first.save_every = scenario.resume_save_every;
    first.load = scenario.resume_load;
    if (scenario.resume_changes_frozen) first.frozen_parameters = scenario.resume_settings->frozen_parameters;
    scenario.restart_chain.push_back(std::move(first));
  }
  if (document.contains("restart_chain")) {
    const json& chain = document["restart_chain"];
    const std::string where = source_name + ": restart_chain";
    if (!chain.is_array() || chain.empty() || chain.size() > 2) {
      return invalid_argument(where + ": expected one or two restarts before the judged one, found " + chain.dump());
    }
    for (size_t i = 0; i < chain.size(); ++i) {
      const json& entry = chain[i];
      const std::string at = where + "[" + std::to_string(i) + "]";
      if (!entry.is_object()) return invalid_argument(at + ": expected an object");
      Scenario::ChainedRestart restart;
      bool has_step = false, has_every = false;
      for (const auto& [key, value] : entry.items()) {
        if (key == "killed_after_step" || key == "save_every") {
          if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > (1 << 20)) {
            return invalid_argument(at + "." + key + ": expected a number of steps >= 1, found " + value.dump());
          }
          (key == "save_every" ? restart.save_every : restart.killed_after_step) = value.get<int64_t>();
          (key == "save_every" ? has_every : has_step) = true;
        } else if (key == "load_optimizer_states" || key == "load_lr_scheduler_states" || key == "load_module_only") {
          if (!value.is_boolean()) return invalid_argument(at + "." + key + ": expected true or false, found " + value.dump());
          bool& target = key == "load_optimizer_states"      ? restart.load.optimizer_states
                         : key == "load_lr_scheduler_states" ? restart.load.lr_scheduler_states
                                                             : restart.load.module_only;
          target = value.get<bool>();
        } else if (key == "frozen_parameters") {
          ZEROSIM_RETURN_IF_ERROR(require_string_list(value, at + ".frozen_parameters"));
          restart.frozen_parameters = value.get<std::vector<std::string>>();
        } else {
          return invalid_argument(at + "." + key + ": unknown key; " +
                                  unknown_key_hint(key, {"killed_after_step", "save_every", "load_optimizer_states",
                                                         "load_lr_scheduler_states", "load_module_only", "frozen_parameters"}));
        }
      }
      if (!has_step) return invalid_argument(at + ": killed_after_step is required (the step after which its power goes out)");
      if (!has_every) return invalid_argument(at + ": save_every is required (the next restart resumes from its saves)");
      if (restart.killed_after_step >= scenario.run.total_steps) {
        return invalid_argument(at + ".killed_after_step: " + std::to_string(restart.killed_after_step) +
                                " is not before steps (" + std::to_string(scenario.run.total_steps) + ")");
      }
      if (restart.load.module_only && restart.load.describe() != "load_module_only=true") {
        return invalid_argument(at + ".load_module_only: give it alone (DeepSpeed's module-only load ignores the "
                                "optimizer and scheduler options); found " + restart.load.describe());
      }
      scenario.restart_chain.push_back(std::move(restart));
    }
  }
  return Status();
}

// Keys that contradict each other.
Status check_consistency(const Scenario& scenario, const std::string& source_name) {
  if (!scenario.power_loss &&
      std::any_of(scenario.fault_plan.disk_faults.begin(), scenario.fault_plan.disk_faults.end(),
                  [](const FaultRule& rule) { return rule.kind == FaultKind::kPowerLoss; })) {
    return invalid_argument(source_name + ": power_loss: false, but the fault plan has a power_loss disk fault");
  }
  if (!scenario.expect_no_checkpoint.empty() && !scenario.restart_chain.empty()) {
    return invalid_argument(source_name + ": expect.no_checkpoint with a chain of resumes: a chain of resumes "
                            "starts from a checkpoint; drop one of them");
  }
  if (scenario.resume_load.module_only && scenario.resume_load.describe() != "load_module_only=true") {
    return invalid_argument(source_name + ": resume_load_module_only: give it alone (DeepSpeed's module-only load "
                            "ignores the optimizer and scheduler options); found " + scenario.resume_load.describe());
  }
  return Status();
}

// resume_config: the restart's own DeepSpeed config, resolved with the same run settings.
Status read_resume_config(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("resume_config")) {
    // The same scenario with the restart's config: resolved with the same run settings.
    json restart = document;
    restart["config"] = document["resume_config"];
    restart.erase("resume_config");
    Result<CrashScenario> resolved = crash_scenario_from_json(restart, source_name);
    if (!resolved.ok()) {
      std::string message = resolved.status().message();
      const std::string prefix = source_name + ": config";
      if (message.rfind(prefix, 0) == 0) message = source_name + ": resume_config" + message.substr(prefix.size());
      return invalid_argument(message);
    }
    scenario.resume_config = resolved->options.config;
    ZEROSIM_RETURN_IF_ERROR(restart_options(scenario, source_name).status());
  }
  return Status();
}

// cause_class and catches: where the scenario sits in the resume-bug catalog, and which defects
// it must catch.
Status read_catalog_keys(const json& document, const std::string& source_name, Scenario& scenario) {
  if (document.contains("cause_class")) {
    const json& cause = document["cause_class"];
    if (!cause.is_string() || cause.get<std::string>().size() != 1 || cause.get<std::string>()[0] < 'A' ||
        cause.get<std::string>()[0] > 'N') {
      return invalid_argument(source_name + ": cause_class: expected a class letter A to N of the resume-bug catalog");
    }
    scenario.cause_class = cause.get<std::string>();
  }
  if (document.contains("catches")) {
    const std::string where = source_name + ": catches";
    ZEROSIM_RETURN_IF_ERROR(require_string_list(document["catches"], where));
    for (const json& name : document["catches"]) {
      if (!defect_from_name(name.get<std::string>())) {
        return invalid_argument(where + ": unknown defect '" + name.get<std::string>() + "' (zerosim defects lists them)");
      }
      scenario.catches.push_back(name.get<std::string>());
    }
  }
  return Status();
}

}  // namespace

Result<Scenario> scenario_from_json(const json& document, const std::string& source_name) {
  Scenario scenario;
  ZEROSIM_ASSIGN_OR_RETURN(scenario.run, crash_scenario_from_json(document, source_name));
  for (const char* key : {"name", "description"}) {
    if (document.contains(key) && !document[key].is_string()) {
      return invalid_argument(source_name + ": " + key + ": expected a string, found " + document[key].dump());
    }
  }
  scenario.name = document.value("name", source_name);
  scenario.description = document.value("description", "");
  if (document.contains("fault_plan")) {
    ZEROSIM_ASSIGN_OR_RETURN(scenario.fault_plan, parse_fault_plan(document["fault_plan"], source_name + ": fault_plan"));
  }
  ZEROSIM_RETURN_IF_ERROR(check_crash_point(scenario, source_name));
  ZEROSIM_RETURN_IF_ERROR(check_schedule(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_operator_actions(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_restart_changes(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_defects(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_expectation(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_resume_load(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_restart_chain(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(check_consistency(scenario, source_name));
  ZEROSIM_RETURN_IF_ERROR(read_resume_config(document, source_name, scenario));
  ZEROSIM_RETURN_IF_ERROR(read_catalog_keys(document, source_name, scenario));
  return scenario;
}

Result<Scenario> read_scenario_file(const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "scenario file"));
  ZEROSIM_ASSIGN_OR_RETURN(nlohmann::json document, parse_json_text(text, path));
  Result<Scenario> scenario = scenario_from_json(document, path);
  if (!scenario.ok()) return Status(scenario.status().code(), with_line_number(text, path, scenario.status().message()));
  return scenario;
}

}  // namespace zerosim
