#include "scenarios/scenario_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace zerosim
