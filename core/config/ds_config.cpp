// The DeepSpeed JSON reader. See ds_config.h for the promise; the rules mirrored here come
// from DeepSpeed HEAD (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py,
// precision_config.py, swap_tensor/aio_config.py, lr_schedules.py, engine.py) and from the
// HF Trainer's "auto" filling (transformers/integrations/deepspeed.py).
//
// How DeepSpeed reads each part, and so how strict this reader is:
//   - zero_optimization, offload_optimizer, offload_param, fp16, bf16 are pydantic models with
//     extra="forbid": unknown keys are errors, values are coerced in pydantic's lax mode (1e9
//     and "1000" for an int, true as 1), and "auto" is dropped so the default applies.
//   - the top level, aio, optimizer and scheduler are read with dict lookups: "auto" stays a
//     raw string (and would break DeepSpeed) unless the HF Trainer fills it, and values are
//     used as given. Unknown top-level keys are refused here (DeepSpeed ignores them; a typo
//     there silently changes nothing, which is exactly the bug class zerosim exists to catch).
//     Unknown aio keys and unknown keys of the optimizer/scheduler blocks themselves are
//     ignored as DeepSpeed ignores them, with a warning. optimizer.params and scheduler.params
//     are passed to a constructor as keyword arguments, so an unknown name is an error.
// Errors are collected (not just the first), each starting with the key's dotted path.
#include "core/config/ds_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zerosim {

bool RunSettings::is_defaulted(const std::string& flag) const {
  return std::find(defaulted_flags.begin(), defaulted_flags.end(), flag) != defaulted_flags.end();
}

const std::string* RunSettings::derivation_of(const std::string& flag) const {
  for (const auto& [derived_flag, how] : derived_from) {
    if (derived_flag == flag) return &how;
  }
  return nullptr;
}

const char* scheduler_type_name(SchedulerType type) {
  switch (type) {
    case SchedulerType::kNone: return "none";
    case SchedulerType::kWarmupLR: return "WarmupLR";
    case SchedulerType::kWarmupDecayLR: return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR: return "WarmupCosineLR";
  }
  return "unknown";
}

const char* checkpoint_writer_type_name(CheckpointWriterType type) {
  switch (type) {
    case CheckpointWriterType::kNone: return "none";
    case CheckpointWriterType::kPython: return "PYTHON";
    case CheckpointWriterType::kFast: return "FAST";
  }
  return "?";
}

const char* numerics_mode_name(NumericsMode mode) {
  return mode == NumericsMode::kDeepSpeed ? "deepspeed" : "portable";
}

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Small text helpers.

// A value as it appears in JSON, shortened for messages. Never throws (invalid UTF-8 is replaced).
std::string show(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string show_number(double value) { return show(json(value)); }

// "a number (3)", "a list", ...: what is in the way when a path cannot be walked.
std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean (" + show(value) + ")";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number (" + show(value) + ")";
    case json::value_t::string: return "a string (" + show(value) + ")";
    case json::value_t::array: return "a list (" + show(value) + ")";
    case json::value_t::object: return "an object";
    default: return "a " + std::string(value.type_name());
  }
}

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string path(parent);
  path += '.';
  path += key;
  return path;
}

std::string uppercase(std::string_view text) {
  std::string result(text);
  for (char& ch : result) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return result;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("persitence").
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

// "did you mean X?" when X is close to what was written, else just the nearest valid name.
std::string suggestion_text(std::string_view key, const std::string& nearest) {
  if (edit_distance(key, nearest) <= std::max<size_t>(1, key.size() / 3)) return "did you mean " + nearest + "?";
  return "the nearest valid name is " + nearest;
}

// The candidate closest to `key` (first one on ties, so the tables' order breaks ties).
std::string nearest_name(std::string_view key, const std::vector<std::string_view>& candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (std::string_view candidate : candidates) {
    const size_t distance = edit_distance(key, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best;
}

bool is_auto(const json& value) { return value.is_string() && value.get_ref<const std::string&>() == "auto"; }

const json* find_or_null(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &*it;
}

std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) return std::nullopt;
  }
  return product;
}

// ---------------------------------------------------------------------------------------------
// Collected diagnostics.

class Context {
 public:
  explicit Context(const RunSettings& run_settings) : settings(run_settings) {}

  // "path: message", or just the message when it already starts with the path.
  void error(std::string_view path, std::string_view message) {
    errors.push_back(path.empty() ? std::string(message) : std::string(path) + ": " + std::string(message));
  }
  void error_text(std::string message) { errors.push_back(std::move(message)); }
  void warn(std::string message) { warnings.push_back(std::move(message)); }
  void mark_inactive(const std::string& path) {
    if (std::find(inactive.begin(), inactive.end(), path) == inactive.end()) inactive.push_back(path);
  }

  const RunSettings& settings;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  std::vector<std::string> inactive;
};

// ---------------------------------------------------------------------------------------------
// Value coercion. `lax` is pydantic's lax mode (used inside pydantic models only): strings of
// digits for ints, numeric strings for floats, "true"/"yes"/... for bools.

enum class Bound { kAny, kNonNegative, kPositive };

std::string int_expectation(Bound bound) {
  switch (bound) {
    case Bound::kAny: return "an integer";
    case Bound::kNonNegative: return "an integer >= 0";
    case Bound::kPositive: return "an integer > 0";
  }
  return "an integer";
}

std::string number_expectation(Bound bound) {
  switch (bound) {
    case Bound::kAny: return "a number";
    case Bound::kNonNegative: return "a number >= 0";
    case Bound::kPositive: return "a number > 0";
  }
  return "a number";
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// "1000", "+1000", "-5" (what pydantic's lax int parsing accepts; "1e9" and "1.5" are not).
std::optional<int64_t> parse_integer_text(std::string_view text) {
  text = trim(text);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return std::nullopt;
    if (__builtin_mul_overflow(value, int64_t{10}, &value)) return std::nullopt;
    if (__builtin_add_overflow(value, int64_t{ch - '0'}, &value)) return std::nullopt;
  }
  return negative ? -value : value;
}

bool within_bound(int64_t value, Bound bound) {
  switch (bound) {
    case Bound::kAny: return true;
    case Bound::kNonNegative: return value >= 0;
    case Bound::kPositive: return value > 0;
  }
  return true;
}

bool within_bound(double value, Bound bound) {
  switch (bound) {
    case Bound::kAny: return true;
    case Bound::kNonNegative: return value >= 0.0;
    case Bound::kPositive: return value > 0.0;
  }
  return true;
}

std::optional<int64_t> parse_int(Context& context, const json& value, const std::string& path, bool lax,
                                 Bound bound) {
  std::optional<int64_t> parsed;
  std::string detail;
  switch (value.type()) {
    case json::value_t::number_integer:
      parsed = value.get<int64_t>();
      break;
    case json::value_t::number_unsigned: {
      const uint64_t raw = value.get<uint64_t>();
      if (raw <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        parsed = static_cast<int64_t>(raw);
      } else {
        detail = " (too large for 64 bits)";
      }
      break;
    }
    case json::value_t::number_float: {
      const double raw = value.get<double>();
      if (std::isfinite(raw) && std::trunc(raw) == raw) {
        if (raw >= -9223372036854775808.0 && raw < 9223372036854775808.0) {
          parsed = static_cast<int64_t>(raw);
        } else {
          detail = " (too large for 64 bits)";
        }
      }
      break;
    }
    case json::value_t::boolean:
      parsed = value.get<bool>() ? 1 : 0;  // pydantic (and Python arithmetic) take true as 1
      break;
    case json::value_t::string:
      if (lax) {
        parsed = parse_integer_text(value.get_ref<const std::string&>());
      } else if (parse_integer_text(value.get_ref<const std::string&>())) {
        detail = " (a string; write the number without quotes)";
      }
      break;
    default:
      break;
  }
  if (!parsed) {
    context.error(path, "expected " + int_expectation(bound) + ", found " + show(value) + detail);
    return std::nullopt;
  }
  if (!within_bound(*parsed, bound)) {
    context.error(path, "expected " + int_expectation(bound) + ", found " + show(value));
    return std::nullopt;
  }
  return parsed;
}

std::optional<double> parse_number(Context& context, const json& value, const std::string& path, bool lax,
                                   Bound bound) {
  std::optional<double> parsed;
  if (value.is_number()) {
    parsed = value.get<double>();
  } else if (value.is_string() && lax) {
    const std::string text(trim(value.get_ref<const std::string&>()));
    if (!text.empty()) {
      char* end = nullptr;
      const double raw = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && std::isfinite(raw)) parsed = raw;
    }
  }
  if (!parsed || !std::isfinite(*parsed) || !within_bound(*parsed, bound)) {
    context.error(path, "expected " + number_expectation(bound) + ", found " + show(value));
    return std::nullopt;
  }
  return parsed;
}

std::optional<bool> parse_bool(Context& context, const json& value, const std::string& path, bool lax) {
  if (value.is_boolean()) return value.get<bool>();
  // 0 and 1 are accepted as false and true (pydantic, and Python truthiness elsewhere).
  if (value.is_number_unsigned()) {
    const uint64_t raw = value.get<uint64_t>();
    if (raw <= 1) return raw == 1;
  } else if (value.is_number_integer()) {
    const int64_t raw = value.get<int64_t>();
    if (raw == 0 || raw == 1) return raw == 1;
  }
  if (value.is_string() && lax) {
    static const std::set<std::string> kTrue = {"1", "on", "t", "true", "y", "yes"};
    static const std::set<std::string> kFalse = {"0", "off", "f", "false", "n", "no"};
    const std::string text = lowercase(trim(value.get_ref<const std::string&>()));
    if (kTrue.count(text)) return true;
    if (kFalse.count(text)) return false;
  }
  context.error(path, "expected true or false, found " + show(value));
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Blocks and their key tables.

// One JSON object of the config, with how DeepSpeed reads it.
struct Block {
  const json* object = nullptr;  // nullptr when the block is absent (or not an object)
  std::string path;              // dotted path of the block itself; "" for the top level
  bool pydantic = false;         // a DeepSpeedConfigModel: lax coercion, "auto" means default

  const json* find(std::string_view key) const {
    if (object == nullptr) return nullptr;
    auto it = object->find(std::string(key));
    return it == object->end() ? nullptr : &*it;
  }
  std::string at(std::string_view key) const { return join_path(path, key); }
};

enum class Use {
  kActive,    // read below and acted on by zerosim
  kRead,      // read below (typed, stored), but zerosim does not act on it yet: inactive_keys
  kInactive,  // validated by its kind only and listed in inactive_keys
  kLegacy,    // a deprecated name, read below and mapped onto its replacement with a warning
};

enum class Kind {
  kAny,
  kBool,
  kInt,
  kNonNegativeInt,
  kPositiveInt,
  kNumber,
  kUnitInterval,
  kString,
  kObject,
  kObjectOrNull,
};

struct KeySpec {
  std::string_view name;
  Use use;
  Kind kind = Kind::kAny;
  // JSON text of DeepSpeed's default, used when an inactive pydantic key is "auto" and for
  // warn_if_changed. Empty when there is none worth stating.
  std::string_view default_json = {};
  // A value other than the default changes DeepSpeed's numerics in a way zerosim does not model.
  bool warn_if_changed = false;
};

// Top level: DeepSpeed's own keys (runtime/config.py, runtime/constants.py and the sub-configs
// read from the top level). Whole blocks zerosim does not implement are kInactive objects.
constexpr KeySpec kTopLevelKeys[] = {
    {"train_batch_size", Use::kActive},
    {"train_micro_batch_size_per_gpu", Use::kActive},
    {"gradient_accumulation_steps", Use::kActive},
    {"gradient_clipping", Use::kActive},
    {"fp16", Use::kActive},
    {"bf16", Use::kActive},
    {"bfloat16", Use::kLegacy},
    {"optimizer", Use::kActive},
    {"scheduler", Use::kActive},
    {"zero_optimization", Use::kActive},
    {"aio", Use::kActive},
    {"communication_data_type", Use::kActive},
    {"steps_per_print", Use::kRead},
    {"wall_clock_breakdown", Use::kInactive, Kind::kBool, "false"},
    {"memory_breakdown", Use::kInactive, Kind::kBool, "false"},
    {"dump_state", Use::kInactive, Kind::kBool, "false"},
    {"prescale_gradients", Use::kInactive, Kind::kBool, "false", true},
    {"gradient_predivide_factor", Use::kInactive, Kind::kNumber, "1.0", true},
    {"gradient_allreduce_op", Use::kInactive, Kind::kString},
    {"zero_allow_untested_optimizer", Use::kInactive, Kind::kBool, "false"},
    {"zero_force_ds_cpu_optimizer", Use::kInactive, Kind::kBool, "true"},
    {"disable_allgather", Use::kInactive, Kind::kBool, "false"},
    {"allgather_size", Use::kInactive, Kind::kNonNegativeInt, "500000000"},
    {"sparse_gradients", Use::kInactive, Kind::kBool, "false"},
    {"graph_harvesting", Use::kInactive, Kind::kBool, "false"},
    {"dataloader_drop_last", Use::kInactive, Kind::kBool, "false"},
    {"vocabulary_size", Use::kInactive, Kind::kAny},
    {"seq_parallel_comm_data_type", Use::kInactive, Kind::kString},
    {"seq_parallel_communication_data_type", Use::kInactive, Kind::kString},
    {"sequence_parallel_size", Use::kInactive, Kind::kAny},
    {"use_data_before_expert_parallelism", Use::kInactive, Kind::kBool, "false"},
    {"managed_gradient_accumulation", Use::kInactive, Kind::kAny},
    {"log_level", Use::kInactive, Kind::kAny},
    {"amp", Use::kInactive, Kind::kObject},
    {"torch_autocast", Use::kInactive, Kind::kObject},
    {"activation_checkpointing", Use::kInactive, Kind::kObject},
    {"flops_profiler", Use::kInactive, Kind::kObject},
    {"tensorboard", Use::kInactive, Kind::kObject},
    {"wandb", Use::kInactive, Kind::kObject},
    {"csv_monitor", Use::kInactive, Kind::kObject},
    {"comet", Use::kInactive, Kind::kObject},
    {"comms_logger", Use::kInactive, Kind::kObject},
    {"checkpoint", Use::kActive},
    {"zerosim", Use::kActive},
    {"data_types", Use::kInactive, Kind::kObject},
    {"compile", Use::kInactive, Kind::kObject},
    {"sparse_attention", Use::kInactive, Kind::kObject},
    {"elasticity", Use::kInactive, Kind::kObject},
    {"pipeline", Use::kInactive, Kind::kObject},
    {"autotuning", Use::kInactive, Kind::kObject},
    {"compression_training", Use::kInactive, Kind::kObject},
    {"quantize_training", Use::kInactive, Kind::kObject},
    {"progressive_layer_drop", Use::kInactive, Kind::kObject},
    {"curriculum_learning", Use::kInactive, Kind::kObject},
    {"data_efficiency", Use::kInactive, Kind::kObject},
    {"hybrid_engine", Use::kInactive, Kind::kObject},
    {"eigenvalue", Use::kInactive, Kind::kObject},
    {"nebula", Use::kInactive, Kind::kObject},
    {"datastates", Use::kInactive, Kind::kObject},
    {"weight_quantization", Use::kInactive, Kind::kObject},
    {"timers", Use::kInactive, Kind::kObject},
    {"tensor_parallel", Use::kInactive, Kind::kObject},
    {"expert_parallel", Use::kInactive, Kind::kObject},
};

// zero_optimization (DeepSpeedZeroConfig). Pydantic aliases and field names are both accepted
// (populate_by_name); the resolved document uses the alias, the name users write.
constexpr KeySpec kZeroKeys[] = {
    {"stage", Use::kActive},
    {"sub_group_size", Use::kActive},
    {"offload_optimizer", Use::kActive},
    {"offload_param", Use::kActive},
    {"reduce_bucket_size", Use::kRead},
    {"allgather_bucket_size", Use::kRead},
    {"stage3_prefetch_bucket_size", Use::kRead},
    {"prefetch_bucket_size", Use::kRead},
    {"stage3_param_persistence_threshold", Use::kRead},
    {"param_persistence_threshold", Use::kRead},
    {"stage3_max_live_parameters", Use::kRead},
    {"max_live_parameters", Use::kRead},
    {"stage3_max_reuse_distance", Use::kRead},
    {"max_reuse_distance", Use::kRead},
    {"stage3_gather_16bit_weights_on_model_save", Use::kRead},
    {"gather_16bit_weights_on_model_save", Use::kRead},
    {"overlap_comm", Use::kRead},
    {"contiguous_gradients", Use::kRead},
    {"cpu_offload", Use::kLegacy},
    {"cpu_offload_param", Use::kLegacy},
    {"cpu_offload_use_pin_memory", Use::kLegacy},
    {"stage3_gather_fp16_weights_on_model_save", Use::kLegacy},
    {"reduce_scatter", Use::kInactive, Kind::kBool, "true"},
    {"use_multi_rank_bucket_allreduce", Use::kInactive, Kind::kBool, "true"},
    {"allgather_partitions", Use::kInactive, Kind::kBool, "true"},
    {"load_from_fp32_weights", Use::kInactive, Kind::kBool, "true"},
    {"elastic_checkpoint", Use::kInactive, Kind::kBool, "false"},
    {"stage3_model_persistence_threshold", Use::kInactive, Kind::kNonNegativeInt, "9223372036854775807"},
    {"model_persistence_threshold", Use::kInactive, Kind::kNonNegativeInt, "9223372036854775807"},
    {"stage3_module_granularity_threshold", Use::kInactive, Kind::kInt, "0"},
    {"module_granularity_threshold", Use::kInactive, Kind::kInt, "0"},
    {"stage3_use_all_reduce_for_fetch_params", Use::kInactive, Kind::kBool, "false"},
    {"use_all_reduce_for_fetch_params", Use::kInactive, Kind::kBool, "false"},
    {"stage3_allgather_sequential", Use::kInactive, Kind::kBool, "false"},
    {"allgather_sequential", Use::kInactive, Kind::kBool, "false"},
    {"ignore_unused_parameters", Use::kInactive, Kind::kBool, "true"},
    {"legacy_stage1", Use::kInactive, Kind::kBool, "false"},
    {"round_robin_gradients", Use::kInactive, Kind::kBool, "false"},
    {"zero_hpz_partition_size", Use::kInactive, Kind::kNonNegativeInt, "1", true},
    {"zero_quantized_weights", Use::kInactive, Kind::kBool, "false", true},
    {"zero_quantized_nontrainable_weights", Use::kInactive, Kind::kBool, "false", true},
    {"zero_quantized_gradients", Use::kInactive, Kind::kBool, "false", true},
    {"zeropp_loco_param", Use::kInactive, Kind::kObjectOrNull, "null", true},
    {"mics_shard_size", Use::kInactive, Kind::kInt, "-1", true},
    {"mics_hierarchical_params_gather", Use::kInactive, Kind::kBool, "false"},
    {"memory_efficient_linear", Use::kInactive, Kind::kBool, "true"},
    {"pipeline_loading_checkpoint", Use::kInactive, Kind::kBool, "false"},
    {"override_module_apply", Use::kInactive, Kind::kBool, "true"},
    {"log_trace_cache_warnings", Use::kInactive, Kind::kBool, "false"},
    {"enable_sanity_checks", Use::kInactive, Kind::kBool, "false"},
    {"save_muon_momentum_buffer_in_memory", Use::kInactive, Kind::kBool, "false"},
    {"zenflow", Use::kInactive, Kind::kObjectOrNull, "null", true},
    {"leaf_module", Use::kInactive, Kind::kObject, "{}"},
};

// offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig).
constexpr KeySpec kOffloadOptimizerKeys[] = {
    {"device", Use::kActive},
    {"nvme_path", Use::kActive},
    {"buffer_count", Use::kActive},
    {"pipeline_read", Use::kActive},
    {"pipeline_write", Use::kActive},
    {"pin_memory", Use::kRead},
    {"fast_init", Use::kRead},
    {"ratio", Use::kRead},
    {"super_offload", Use::kInactive, Kind::kBool, "false"},
    {"cpuadam_cores_perc", Use::kInactive, Kind::kUnitInterval, "0.8"},
};

// offload_param (DeepSpeedZeroOffloadParamConfig).
constexpr KeySpec kOffloadParamKeys[] = {
    {"device", Use::kActive},
    {"nvme_path", Use::kActive},
    {"buffer_count", Use::kActive},
    {"buffer_size", Use::kActive},
    {"max_in_cpu", Use::kRead},
    {"pin_memory", Use::kRead},
};

// fp16 (DeepSpeedFP16Config).
constexpr KeySpec kFp16Keys[] = {
    {"enabled", Use::kActive},
    {"loss_scale", Use::kActive},
    {"initial_scale_power", Use::kActive},
    {"loss_scale_window", Use::kActive},
    {"hysteresis", Use::kActive},
    {"consecutive_hysteresis", Use::kActive},
    {"min_loss_scale", Use::kActive},
    {"auto_cast", Use::kInactive, Kind::kBool, "false"},
    {"fp16_master_weights_and_grads", Use::kInactive, Kind::kBool, "false", true},
};

// bf16 (DeepSpeedBF16Config).
constexpr KeySpec kBf16Keys[] = {
    {"enabled", Use::kActive},
    {"immediate_grad_update", Use::kInactive, Kind::kBool, "false"},
    {"check_grad_overflow", Use::kInactive, Kind::kBool, "true"},
    {"bf16_master_weights_and_grads", Use::kInactive, Kind::kBool, "false", true},
    {"bf16_optimizer_states", Use::kInactive, Kind::kBool, "false", true},
};

// aio (swap_tensor/aio_config.py reads exactly these; anything else is ignored).
constexpr KeySpec kAioKeys[] = {
    {"block_size", Use::kActive},
    {"queue_depth", Use::kActive},
    {"intra_op_parallelism", Use::kActive},
    {"single_submit", Use::kActive},
    {"overlap_events", Use::kActive},
    {"use_gds", Use::kRead},
    {"thread_count", Use::kLegacy},
};

// checkpoint (DeepSpeed reads the first four with dict lookups and ignores the rest; the last
// two are zerosim's).
constexpr KeySpec kCheckpointKeys[] = {
    {"tag_validation", Use::kRead},
    {"load_universal", Use::kInactive, Kind::kBool, "false"},
    {"use_node_local_storage", Use::kInactive, Kind::kBool, "false"},
    {"parallel_write", Use::kInactive, Kind::kObject},
    {"writer", Use::kActive},
    {"async_save", Use::kActive},
    {"keep_last", Use::kActive},
};

// checkpoint.writer (model_checkpointing/config.py get_checkpoint_writer_config reads these).
constexpr KeySpec kCheckpointWriterKeys[] = {
    {"type", Use::kActive},
    {"io_buffer_size", Use::kActive},
    {"io_buffer_double", Use::kActive},
    {"io_multiplier", Use::kInactive, Kind::kInt, "1"},
    {"show_statistics", Use::kInactive, Kind::kBool, "false"},
    {"data_parallel", Use::kInactive, Kind::kAny, "null"},
    {"decoupled", Use::kInactive, Kind::kBool, "false"},
};

// zerosim's own block (DeepSpeed ignores a top-level key it does not know).
constexpr KeySpec kZerosimKeys[] = {
    {"numerics", Use::kActive},
};

constexpr KeySpec kOptimizerBlockKeys[] = {
    {"type", Use::kActive},
    {"params", Use::kActive},
    {"legacy_fusion", Use::kInactive, Kind::kBool, "false"},
};

// optimizer.params for Adam/AdamW: the keyword arguments of FusedAdam / DeepSpeedCPUAdam /
// torch.optim.Adam(W) plus the two that the engine pops (torch_adam, adam_w_mode).
constexpr KeySpec kAdamParamKeys[] = {
    {"lr", Use::kActive},
    {"betas", Use::kActive},
    {"eps", Use::kActive},
    {"weight_decay", Use::kActive},
    {"bias_correction", Use::kActive},
    {"adam_w_mode", Use::kActive},
    {"torch_adam", Use::kRead},
    {"amsgrad", Use::kRead},
    {"max_grad_norm", Use::kRead},
    {"fp32_optimizer_states", Use::kInactive, Kind::kBool, "true"},
    {"set_grad_none", Use::kRead},
};

constexpr KeySpec kSchedulerBlockKeys[] = {
    {"type", Use::kActive},
    {"params", Use::kActive},
};

// scheduler.params: the constructor arguments of each supported schedule (lr_schedules.py).
constexpr KeySpec kWarmupLRKeys[] = {
    {"warmup_min_lr", Use::kActive},
    {"warmup_max_lr", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};
constexpr KeySpec kWarmupDecayLRKeys[] = {
    {"total_num_steps", Use::kActive},
    {"warmup_min_lr", Use::kActive},
    {"warmup_max_lr", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};
constexpr KeySpec kWarmupCosineLRKeys[] = {
    {"total_num_steps", Use::kActive},
    {"warmup_min_ratio", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"cos_min_ratio", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};

std::vector<std::string_view> names_of(std::span<const KeySpec> specs) {
  std::vector<std::string_view> names;
  names.reserve(specs.size());
  for (const KeySpec& spec : specs) names.push_back(spec.name);
  return names;
}

const KeySpec* find_spec(std::span<const KeySpec> specs, std::string_view name) {
  for (const KeySpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Checks a value against a kind; returns the normalized value (ints as ints) or nullopt.
std::optional<json> validate_kind(Context& context, const json& value, const std::string& path, Kind kind,
                                  bool lax) {
  switch (kind) {
    case Kind::kAny: return value;
    case Kind::kBool:
      if (auto parsed = parse_bool(context, value, path, lax)) return json(*parsed);
      return std::nullopt;
    case Kind::kInt:
      if (auto parsed = parse_int(context, value, path, lax, Bound::kAny)) return json(*parsed);
      return std::nullopt;
    case Kind::kNonNegativeInt:
      if (auto parsed = parse_int(context, value, path, lax, Bound::kNonNegative)) return json(*parsed);
      return std::nullopt;
    case Kind::kPositiveInt:
      if (auto parsed = parse_int(context, value, path, lax, Bound::kPositive)) return json(*parsed);
      return std::nullopt;
    case Kind::kNumber:
      if (auto parsed = parse_number(context, value, path, lax, Bound::kAny)) return json(*parsed);
      return std::nullopt;
    case Kind::kUnitInterval:
      if (auto parsed = parse_number(context, value, path, lax, Bound::kNonNegative)) {
        if (*parsed <= 1.0) return json(*parsed);
        context.error(path, "expected a number in [0, 1], found " + show(value));
      }
      return std::nullopt;
    case Kind::kString:
      if (value.is_string()) return value;
      context.error(path, "expected a string, found " + show(value));
      return std::nullopt;
    case Kind::kObject:
      if (value.is_object()) return value;
      context.error(path, "expected an object, found " + show(value));
      return std::nullopt;
    case Kind::kObjectOrNull:
      if (value.is_object() || value.is_null()) return value;
      context.error(path, "expected an object or null, found " + show(value));
      return std::nullopt;
  }
  return std::nullopt;
}

enum class Unknown { kRefuse, kIgnore };

// Refuses (or, where DeepSpeed ignores them, warns about) unknown keys, lists kRead/kInactive
// keys in inactive_keys and validates kInactive keys. `resolved` (the block's copy in the
// resolved document, may be null) receives normalized values of kInactive keys.
void check_keys(Context& context, const Block& block, std::span<const KeySpec> specs, Unknown unknown,
                json* resolved) {
  if (block.object == nullptr) return;
  const std::vector<std::string_view> names = names_of(specs);
  for (auto it = block.object->begin(); it != block.object->end(); ++it) {
    const std::string& key = it.key();
    const std::string path = block.at(key);
    const KeySpec* spec = find_spec(specs, key);
    if (spec == nullptr) {
      const std::string suggestion = suggestion_text(key, nearest_name(key, names));
      if (unknown == Unknown::kRefuse) {
        context.error(path, "unknown key; " + suggestion);
      } else {
        context.warn(path + ": unknown key, ignored as DeepSpeed ignores it; " + suggestion);
        context.mark_inactive(path);
      }
      continue;
    }
    if (spec->use == Use::kRead || spec->use == Use::kInactive) context.mark_inactive(path);
    if (spec->use != Use::kInactive) continue;

    const json default_value =
        spec->default_json.empty() ? json() : json::parse(spec->default_json.begin(), spec->default_json.end());
    if (is_auto(it.value()) && spec->kind != Kind::kString && spec->kind != Kind::kAny) {
      if (block.pydantic) {
        context.warn(path + " is \"auto\"; DeepSpeed drops \"auto\" here and uses the default " +
                     show(default_value));
        if (resolved != nullptr) (*resolved)[key] = default_value;
      } else {
        context.error(path, "is \"auto\", but the HF Trainer does not fill this key; give a value");
      }
      continue;
    }
    std::optional<json> normalized = validate_kind(context, it.value(), path, spec->kind, block.pydantic);
    if (!normalized) continue;
    if (resolved != nullptr) (*resolved)[key] = *normalized;
    if (spec->warn_if_changed && !spec->default_json.empty() && *normalized != default_value) {
      if (normalized->is_object()) {
        context.warn(path + " is given, which changes DeepSpeed's numerics; zerosim does not implement it and " +
                     "behaves as if it were absent");
      } else {
        context.warn(path + " is " + show(*normalized) + ", which changes DeepSpeed's numerics; zerosim does not " +
                     "implement it and behaves as with the default " + show(default_value));
      }
    }
  }
}

// A block that must be an object when present. Records the error and returns an absent block
// otherwise. `null_is_absent` for the Optional[...] sub-models.
Block object_block(Context& context, const json* value, std::string path, bool pydantic, bool null_is_absent) {
  Block block;
  block.path = std::move(path);
  block.pydantic = pydantic;
  if (value == nullptr) return block;
  if (value->is_null() && null_is_absent) return block;
  if (!value->is_object()) {
    context.error(block.path, "expected an object, found " + show(*value));
    return block;
  }
  block.object = value;
  return block;
}

// The resolved document's copy of a block: an object, created if absent.
json& resolved_object(json& parent, const std::string& key) {
  json& node = parent[key];
  if (!node.is_object()) node = json::object();
  return node;
}

// ---------------------------------------------------------------------------------------------
// Typed getters with defaults. An "auto" that the HF Trainer does not fill is dropped (default,
// with a warning) inside pydantic blocks and refused elsewhere.

bool unfilled_auto_means_default(Context& context, const Block& block, const std::string& path,
                                 const std::string& default_text) {
  if (block.pydantic) {
    context.warn(path + " is \"auto\"; DeepSpeed drops \"auto\" here and uses the default " + default_text);
    return true;
  }
  context.error(path, "is \"auto\", but the HF Trainer does not fill this key; give a value");
  return false;
}

int64_t get_int(Context& context, const Block& block, std::string_view key, int64_t fallback, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return fallback;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    unfilled_auto_means_default(context, block, path, std::to_string(fallback));
    return fallback;
  }
  return parse_int(context, *value, path, block.pydantic, bound).value_or(fallback);
}

double get_number(Context& context, const Block& block, std::string_view key, double fallback, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return fallback;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    unfilled_auto_means_default(context, block, path, show_number(fallback));
    return fallback;
  }
  return parse_number(context, *value, path, block.pydantic, bound).value_or(fallback);
}

bool get_bool(Context& context, const Block& block, std::string_view key, bool fallback) {
  const json* value = block.find(key);
  if (value == nullptr) return fallback;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    unfilled_auto_means_default(context, block, path, fallback ? "true" : "false");
    return fallback;
  }
  return parse_bool(context, *value, path, block.pydantic).value_or(fallback);
}

// ---------------------------------------------------------------------------------------------
// Run settings ("auto" sources).

struct SettingName {
  const char* flag;     // zerosim's command-line flag
  const char* trainer;  // the HF TrainingArguments / Trainer value it stands for
};

constexpr SettingName kMicroBatchSetting{"--micro-batch-size", "per_device_train_batch_size"};
constexpr SettingName kAccumulationSetting{"--gradient-accumulation-steps", "gradient_accumulation_steps"};
constexpr SettingName kLearningRateSetting{"--learning-rate", "learning_rate"};
constexpr SettingName kBetasSetting{"--adam-beta1 and --adam-beta2", "adam_beta1 and adam_beta2"};
constexpr SettingName kEpsilonSetting{"--adam-epsilon", "adam_epsilon"};
constexpr SettingName kWeightDecaySetting{"--weight-decay", "weight_decay"};
constexpr SettingName kMaxGradNormSetting{"--max-grad-norm", "max_grad_norm"};
constexpr SettingName kWarmupStepsSetting{"--warmup-steps", "warmup_steps"};
constexpr SettingName kTotalStepsSetting{"--total-steps", "num_training_steps"};
constexpr SettingName kHiddenSizeSetting{"--hidden-size", "the model's hidden_size"};

void auto_needs_setting(Context& context, const std::string& path, const SettingName& setting) {
  context.error_text(path + " is \"auto\"; give " + setting.flag + " (the HF Trainer fills it from " +
                     setting.trainer + ")");
}

void auto_filled(Context& context, const std::string& path, const std::string& value, const SettingName& setting) {
  context.warn(path + " is \"auto\"; filled with " + value + " from " + setting.flag);
}

// The HF Trainer refuses a concrete config value that disagrees with its argument (fill_match).
bool setting_is_defaulted(const RunSettings& settings, const SettingName& setting) {
  if (setting.flag == kBetasSetting.flag) {
    return settings.is_defaulted("--adam-beta1") || settings.is_defaulted("--adam-beta2");
  }
  return settings.is_defaulted(setting.flag);
}

void check_match(Context& context, const std::string& path, const std::string& config_value,
                 const std::string& setting_value, const SettingName& setting) {
  if (config_value == setting_value) return;
  if (setting_is_defaulted(context.settings, setting)) return;  // not the user's: the config wins
  if (const std::string* derivation = context.settings.derivation_of(setting.flag)) {
    context.error(path, "the config gives " + config_value + ", but this run needs " + setting_value + " (derived from " +
                            *derivation + ", not given on the command line); write \"auto\" or " + setting_value +
                            " in the config, or give " + setting.flag + " to choose the batch yourself");
    return;
  }
  context.error(path, "the config gives " + config_value + " but " + setting.flag + " is " + setting_value +
                          "; the HF Trainer refuses this mismatch (write \"auto\" or make them agree)");
}

bool has(int64_t setting) { return setting >= 0; }
bool has_positive(int64_t setting) { return setting > 0; }
bool has(double setting) { return setting >= 0.0; }

// ---------------------------------------------------------------------------------------------
// Sections.

// train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps.
void read_batch(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  const RunSettings& settings = context.settings;
  const int64_t world = settings.world_size;
  bool ok = world > 0;

  // One of the three keys: concrete (> 0), "auto" (from a run setting), or absent/null.
  auto read_key = [&](std::string_view key, int64_t setting, const SettingName& name) -> std::optional<int64_t> {
    const json* value = top.find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    const std::string path(key);
    if (is_auto(*value)) {
      // A defaulted accumulation against a concrete train_batch_size: derive it instead.
      if (&name == &kAccumulationSetting && setting_is_defaulted(settings, name)) {
        const json* train_value = top.find("train_batch_size");
        if (train_value != nullptr && !train_value->is_null() && !is_auto(*train_value)) {
          context.warn(path + " is \"auto\" and train_batch_size is given; derived from it");
          return std::nullopt;
        }
      }
      if (has_positive(setting)) {
        auto_filled(context, path, std::to_string(setting), name);
        return setting;
      }
      auto_needs_setting(context, path, name);
      ok = false;
      return std::nullopt;
    }
    std::optional<int64_t> parsed = parse_int(context, *value, path, false, Bound::kPositive);
    if (!parsed) {
      ok = false;
    } else if (has_positive(setting)) {
      check_match(context, path, std::to_string(*parsed), std::to_string(setting), name);
    }
    return parsed;
  };

  std::optional<int64_t> micro =
      read_key("train_micro_batch_size_per_gpu", settings.micro_batch_size, kMicroBatchSetting);
  std::optional<int64_t> accumulation =
      read_key("gradient_accumulation_steps", settings.gradient_accumulation_steps, kAccumulationSetting);

  std::optional<int64_t> train;
  if (const json* value = top.find("train_batch_size"); value != nullptr && !value->is_null()) {
    if (is_auto(*value)) {
      // world_size x per_device_train_batch_size x gradient_accumulation_steps; where the config
      // gives micro or accumulation concretely the Trainer's argument has to agree with it.
      const int64_t m = micro ? *micro : settings.micro_batch_size;
      const int64_t g = accumulation ? *accumulation : settings.gradient_accumulation_steps;
      if (!has_positive(m) || !has_positive(g)) {
        std::string missing;
        if (!has_positive(m)) missing = kMicroBatchSetting.flag;
        if (!has_positive(g)) missing += std::string(missing.empty() ? "" : " and ") + kAccumulationSetting.flag;
        context.error_text("train_batch_size is \"auto\"; give " + missing +
                           " (the HF Trainer fills it with world_size x per_device_train_batch_size x "
                           "gradient_accumulation_steps)");
        ok = false;
      } else if (world > 0) {
        train = checked_product({world, m, g});
        if (!train) {
          context.error("train_batch_size", "world size x micro batch x gradient_accumulation_steps overflows");
          ok = false;
        } else {
          context.warn("train_batch_size is \"auto\"; filled with " + std::to_string(*train) +
                       " = world size " + std::to_string(world) + " x micro batch " + std::to_string(m) +
                       " x gradient_accumulation_steps " + std::to_string(g));
        }
      }
    } else {
      train = parse_int(context, *value, "train_batch_size", false, Bound::kPositive);
      if (!train) {
        ok = false;
      } else if (has_positive(settings.micro_batch_size) && has_positive(settings.gradient_accumulation_steps) &&
                 !setting_is_defaulted(settings, kMicroBatchSetting) &&
                 !setting_is_defaulted(settings, kAccumulationSetting) && world > 0) {
        if (std::optional<int64_t> expected =
                checked_product({world, settings.micro_batch_size, settings.gradient_accumulation_steps})) {
          if (*expected != *train) {
            context.error("train_batch_size",
                          "the config gives " + std::to_string(*train) + " but world size x " +
                              kMicroBatchSetting.flag + " x " + kAccumulationSetting.flag + " is " +
                              std::to_string(*expected) +
                              "; the HF Trainer refuses this mismatch (write \"auto\" or make them agree)");
          }
        }
      }
    }
  }
  if (!ok) return;

  // DeepSpeed's _set_batch_related_parameters + _batch_assertion.
  const std::string w = std::to_string(world);
  if (train && micro && accumulation) {
    const std::optional<int64_t> product = checked_product({*micro, *accumulation, world});
    if (!product || *product != *train) {
      context.error("train_batch_size",
                    std::to_string(*train) + " != train_micro_batch_size_per_gpu " + std::to_string(*micro) +
                        " x gradient_accumulation_steps " + std::to_string(*accumulation) + " x world size " + w +
                        (product ? " (= " + std::to_string(*product) + ")" : std::string()) +
                        "; DeepSpeed requires train_batch_size = micro batch x gradient_accumulation_steps x "
                        "world size");
      return;
    }
  } else if (train && micro) {
    const std::optional<int64_t> per_step = checked_product({*micro, world});
    if (!per_step || *train % *per_step != 0) {
      context.error("train_batch_size", std::to_string(*train) +
                                            " is not divisible by train_micro_batch_size_per_gpu " +
                                            std::to_string(*micro) + " x world size " + w +
                                            ", so gradient_accumulation_steps cannot be derived");
      return;
    }
    accumulation = *train / *per_step;
  } else if (train && accumulation) {
    const std::optional<int64_t> per_micro = checked_product({*accumulation, world});
    if (!per_micro || *train % *per_micro != 0) {
      context.error("train_batch_size", std::to_string(*train) + " is not divisible by gradient_accumulation_steps " +
                                            std::to_string(*accumulation) + " x world size " + w +
                                            ", so train_micro_batch_size_per_gpu cannot be derived");
      return;
    }
    micro = *train / *per_micro;
  } else if (micro && accumulation) {
    train = checked_product({*micro, *accumulation, world});
  } else if (train) {
    if (*train % world != 0) {
      context.error("train_batch_size", std::to_string(*train) + " is not divisible by world size " + w +
                                            ", so train_micro_batch_size_per_gpu cannot be derived");
      return;
    }
    accumulation = 1;
    micro = *train / world;
  } else if (micro) {
    accumulation = 1;
    train = checked_product({*micro, world});
  } else {
    // DeepSpeed asserts here; zerosim takes the micro batch from the run settings (or 1) so that
    // a config holding only a zero_optimization block (an autotuning template) can still be used.
    const int64_t m = has_positive(settings.micro_batch_size) ? settings.micro_batch_size : 1;
    const int64_t g = accumulation ? *accumulation
                                   : (has_positive(settings.gradient_accumulation_steps)
                                          ? settings.gradient_accumulation_steps
                                          : 1);
    micro = m;
    accumulation = g;
    train = checked_product({m, g, world});
    context.warn(std::string("train_batch_size and train_micro_batch_size_per_gpu are both missing (DeepSpeed needs "
                             "one of them); zerosim uses micro batch ") +
                 std::to_string(m) +
                 (has_positive(settings.micro_batch_size) ? " from --micro-batch-size" : " (default)") +
                 " and gradient_accumulation_steps " + std::to_string(g));
  }
  if (!train) {
    context.error("train_batch_size", "micro batch x gradient_accumulation_steps x world size overflows");
    return;
  }
  out.train_batch_size = *train;
  out.micro_batch_size = *micro;
  out.gradient_accumulation_steps = *accumulation;
  resolved["train_batch_size"] = *train;
  resolved["train_micro_batch_size_per_gpu"] = *micro;
  resolved["gradient_accumulation_steps"] = *accumulation;
}

void read_gradient_clipping(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  const double setting = context.settings.max_grad_norm;
  if (const json* value = top.find("gradient_clipping")) {
    if (is_auto(*value)) {
      if (has(setting)) {
        out.gradient_clipping = setting;
        auto_filled(context, "gradient_clipping", show_number(setting), kMaxGradNormSetting);
      } else {
        auto_needs_setting(context, "gradient_clipping", kMaxGradNormSetting);
      }
    } else if (auto parsed = parse_number(context, *value, "gradient_clipping", false, Bound::kNonNegative)) {
      out.gradient_clipping = *parsed;
      if (has(setting)) {
        check_match(context, "gradient_clipping", show_number(*parsed), show_number(setting), kMaxGradNormSetting);
      }
    }
  }
  resolved["gradient_clipping"] = out.gradient_clipping;
}

void read_steps_per_print(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  if (const json* value = top.find("steps_per_print"); value != nullptr && !value->is_null()) {
    if (is_auto(*value)) {
      context.error("steps_per_print", "is \"auto\", but the HF Trainer does not fill this key; give a value");
    } else if (auto parsed = parse_int(context, *value, "steps_per_print", false, Bound::kPositive)) {
      out.steps_per_print = *parsed;
    }
  }
  resolved["steps_per_print"] = out.steps_per_print;
}

struct PrecisionExtras {
  bool fp16_master_weights = false;
  bool bf16_master_weights = false;
  bool bf16_optimizer_states = false;
};

// What read_optimizer leaves for checks that need the zero_optimization block: which optimizer
// class DeepSpeed builds (DeepSpeedCPUAdam with optimizer offload, FusedAdam without, torch's
// with torch_adam) decides whether amsgrad and set_grad_none are accepted.
struct OptimizerExtras {
  bool torch_adam = false;
  bool amsgrad = false;
  bool set_grad_none_given = false;
};

// fp16 and bf16 (and the old top-level name "bfloat16"), the loss scaler.
PrecisionExtras read_precision(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  PrecisionExtras extras;
  const RunSettings& settings = context.settings;

  // --- fp16 ---
  const Block fp16 = object_block(context, find_or_null(document, "fp16"), "fp16", true, false);
  json& resolved_fp16 = resolved_object(resolved, "fp16");
  check_keys(context, fp16, kFp16Keys, Unknown::kRefuse, &resolved_fp16);
  bool fp16_enabled = false;
  if (const json* value = fp16.find("enabled")) {
    if (is_auto(*value)) {
      fp16_enabled = settings.auto_precision == Precision::kFp16;
      context.warn(std::string("fp16.enabled is \"auto\"; filled with ") + (fp16_enabled ? "true" : "false") +
                   " from the run precision (" + precision_name(settings.auto_precision) + ")");
    } else {
      fp16_enabled = parse_bool(context, *value, "fp16.enabled", true).value_or(false);
    }
  }
  if (const json* value = fp16.find("fp16_master_weights_and_grads"); value && value->is_boolean()) {
    extras.fp16_master_weights = value->get<bool>();
  }

  // Loss scaler (DeepSpeedFP16Config, fp16/loss_scaler.py).
  double loss_scale = 0.0;
  if (const json* value = fp16.find("loss_scale")) {
    if (is_auto(*value)) {
      unfilled_auto_means_default(context, fp16, "fp16.loss_scale", "0");
    } else if (value->is_boolean()) {
      context.error("fp16.loss_scale", "expected a number >= 0 (0 means dynamic scaling), found " + show(*value));
    } else if (auto parsed = parse_number(context, *value, "fp16.loss_scale", true, Bound::kNonNegative)) {
      loss_scale = *parsed;
    }
  }
  LossScalerConfig& scaler = out.loss_scaler;
  scaler.initial_scale_power = get_int(context, fp16, "initial_scale_power", scaler.initial_scale_power, Bound::kAny);
  // DeepSpeed takes any int; zerosim keeps the scale 2^power a normal fp32 number, since it
  // multiplies fp32 gradients (a negative power is DeepSpeed's too: a scale below 1, raised to
  // min_loss_scale at the first overflow that counts).
  if (scaler.initial_scale_power < -126 || scaler.initial_scale_power > 127) {
    context.error("fp16.initial_scale_power",
                  "expected an integer in [-126, 127] (the initial scale 2^power must be a normal fp32 number), found " +
                      std::to_string(scaler.initial_scale_power));
  }
  const bool dynamic_requested = loss_scale == 0.0;
  // DeepSpeedFP16Config declares both as int and rejects a bool before pydantic would coerce
  // it; an integral float passes (2.0 -> 2), a fractional one does not.
  for (const char* key : {"loss_scale_window", "min_loss_scale"}) {
    const json* value = fp16.find(key);
    if (value == nullptr) continue;
    if (value->is_boolean()) {
      context.error(fp16.at(key), std::string("expected an integer, found ") + show(*value) +
                                      " (DeepSpeed refuses a boolean here)");
    } else if (value->is_number_float() && std::trunc(value->get<double>()) != value->get<double>()) {
      context.error(fp16.at(key), std::string("expected an integer, found ") + show(*value) +
                                      " (DeepSpeed's fp16 config declares it an int)");
    }
  }
  // DeepSpeed's validators reject a window or minimum <= 0 when scaling is dynamic.
  scaler.loss_scale_window = get_int(context, fp16, "loss_scale_window", scaler.loss_scale_window,
                                     dynamic_requested ? Bound::kPositive : Bound::kAny);
  scaler.hysteresis = get_int(context, fp16, "hysteresis", scaler.hysteresis, Bound::kPositive);
  scaler.consecutive_hysteresis = get_bool(context, fp16, "consecutive_hysteresis", scaler.consecutive_hysteresis);
  scaler.min_loss_scale = get_number(context, fp16, "min_loss_scale", scaler.min_loss_scale,
                                     dynamic_requested ? Bound::kPositive : Bound::kAny);

  // --- bf16 (or the old name bfloat16, read only when bf16 is absent) ---
  const json* bf16_value = find_or_null(document, "bf16");
  std::string bf16_path = "bf16";
  if (const json* old = find_or_null(document, "bfloat16")) {
    if (bf16_value == nullptr) {
      bf16_value = old;
      bf16_path = "bfloat16";
      context.warn("bfloat16 is the old name of bf16; read as bf16");
    } else {
      context.warn("bfloat16 is ignored because bf16 is given (DeepSpeed reads bfloat16 only without bf16)");
    }
  }
  const Block bf16 = object_block(context, bf16_value, bf16_path, true, false);
  if (bf16_path == "bfloat16") {
    if (resolved.contains("bfloat16")) resolved["bf16"] = resolved["bfloat16"];
  }
  resolved.erase("bfloat16");
  json& resolved_bf16 = resolved_object(resolved, "bf16");
  check_keys(context, bf16, kBf16Keys, Unknown::kRefuse, &resolved_bf16);
  bool bf16_enabled = false;
  if (const json* value = bf16.find("enabled")) {
    const std::string path = bf16.at("enabled");
    if (is_auto(*value)) {
      bf16_enabled = settings.auto_precision == Precision::kBf16;
      context.warn(path + " is \"auto\"; filled with " + (bf16_enabled ? "true" : "false") +
                   " from the run precision (" + precision_name(settings.auto_precision) + ")");
    } else {
      bf16_enabled = parse_bool(context, *value, path, true).value_or(false);
    }
  }
  if (const json* value = bf16.find("bf16_master_weights_and_grads"); value && value->is_boolean()) {
    extras.bf16_master_weights = value->get<bool>();
  }
  if (const json* value = bf16.find("bf16_optimizer_states"); value && value->is_boolean()) {
    extras.bf16_optimizer_states = value->get<bool>();
  }

  if (fp16_enabled && bf16_enabled) {
    context.error(bf16.at("enabled"), "cannot be true together with fp16.enabled (DeepSpeed: bfloat16 and fp16 "
                                      "modes cannot be simultaneously enabled)");
  }
  out.precision = fp16_enabled ? Precision::kFp16 : (bf16_enabled ? Precision::kBf16 : Precision::kFp32);

  // CreateLossScaler: dynamic scaling only for fp16; bf16 and fp32 use a static scale of 1.
  if (out.precision == Precision::kFp16) {
    scaler.dynamic = dynamic_requested;
    scaler.static_loss_scale = dynamic_requested ? 1.0 : loss_scale;
  } else {
    scaler.dynamic = false;
    scaler.static_loss_scale = 1.0;
  }

  resolved_fp16["enabled"] = fp16_enabled;
  resolved_fp16["loss_scale"] = loss_scale;
  resolved_fp16["initial_scale_power"] = scaler.initial_scale_power;
  resolved_fp16["loss_scale_window"] = scaler.loss_scale_window;
  resolved_fp16["hysteresis"] = scaler.hysteresis;
  resolved_fp16["consecutive_hysteresis"] = scaler.consecutive_hysteresis;
  resolved_fp16["min_loss_scale"] = scaler.min_loss_scale;
  resolved_bf16["enabled"] = bf16_enabled;
  return extras;
}

void read_communication_dtype(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  out.communication_dtype = out.precision;
  if (const json* value = top.find("communication_data_type"); value != nullptr && !value->is_null()) {
    const std::string text = value->is_string() ? lowercase(value->get_ref<const std::string&>()) : std::string();
    if (text == "fp32") {
      out.communication_dtype = Precision::kFp32;
    } else if (text == "fp16") {
      out.communication_dtype = Precision::kFp16;
    } else if (text == "bf16") {
      out.communication_dtype = Precision::kBf16;
    } else {
      context.error("communication_data_type", "expected \"fp16\", \"bf16\" or \"fp32\", found " + show(*value));
    }
  }
  resolved["communication_data_type"] = precision_name(out.communication_dtype);
}

// A pydantic alias pair (stage3_prefetch_bucket_size / prefetch_bucket_size): the value given
// under either name, the alias winning when both are given. Returns the path actually used.
const json* find_aliased(Context& context, const Block& block, std::string_view alias, std::string_view name,
                         std::string* used_path) {
  const json* by_alias = block.find(alias);
  const json* by_name = alias == name ? nullptr : block.find(name);
  if (by_alias != nullptr && by_name != nullptr) {
    context.warn(block.at(name) + " is ignored because " + block.at(alias) + " is also given (the same setting)");
  }
  if (by_alias != nullptr) {
    *used_path = block.at(alias);
    return by_alias;
  }
  *used_path = block.at(name);
  return by_name;
}

int64_t get_aliased_int(Context& context, const Block& block, std::string_view alias, std::string_view name,
                        int64_t fallback, Bound bound) {
  std::string path;
  const json* value = find_aliased(context, block, alias, name, &path);
  if (value == nullptr) return fallback;
  if (is_auto(*value)) {
    unfilled_auto_means_default(context, block, path, std::to_string(fallback));
    return fallback;
  }
  return parse_int(context, *value, path, true, bound).value_or(fallback);
}

// A zero_optimization size that the HF Trainer fills from the hidden size when "auto"
// (trainer_config_finalize); otherwise "auto" is dropped by DeepSpeed and the default is used.
int64_t get_hidden_size_key(Context& context, const Block& zero, std::string_view alias, std::string_view name,
                            int64_t fallback, bool trainer_fills, int64_t (*formula)(int64_t),
                            const char* formula_text) {
  std::string path;
  const json* value = find_aliased(context, zero, alias, name, &path);
  if (value == nullptr) return fallback;
  if (!is_auto(*value)) return parse_int(context, *value, path, true, Bound::kNonNegative).value_or(fallback);
  const int64_t hidden = context.settings.hidden_size;
  if (trainer_fills && has_positive(hidden) && !checked_product({hidden, hidden, 10})) {
    context.error(path, "is \"auto\" and --hidden-size " + std::to_string(hidden) + " is too large to fill it");
    return fallback;
  }
  if (trainer_fills && has_positive(hidden)) {
    const int64_t filled = formula(hidden);
    context.warn(path + " is \"auto\"; filled with " + std::to_string(filled) + " = " + formula_text + " from " +
                 kHiddenSizeSetting.flag + " " + std::to_string(hidden));
    return filled;
  }
  context.warn(path + " is \"auto\"; DeepSpeed drops \"auto\" here and uses the default " +
               std::to_string(fallback) +
               (trainer_fills ? " (give " + std::string(kHiddenSizeSetting.flag) + " for the HF Trainer's value " +
                                    formula_text + ")"
                              : std::string(" (the HF Trainer fills it only at stage 3)")));
  return fallback;
}

// offload_optimizer / offload_param.
void read_offload(Context& context, const Block& zero, std::string_view key, bool is_optimizer,
                  OffloadConfig& offload, json& resolved_zero) {
  const Block block = object_block(context, zero.find(key), zero.at(key), true, true);
  const std::span<const KeySpec> specs =
      is_optimizer ? std::span<const KeySpec>(kOffloadOptimizerKeys) : std::span<const KeySpec>(kOffloadParamKeys);
  json resolved_block = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, specs, Unknown::kRefuse, &resolved_block);

  offload.buffer_count = is_optimizer ? 4 : 5;
  if (const json* value = block.find("device")) {
    const std::string path = block.at("device");
    const std::string text = value->is_string() ? value->get<std::string>() : std::string();
    if (is_auto(*value)) {
      unfilled_auto_means_default(context, block, path, "\"none\"");
    } else if (text == "none") {
      offload.device = OffloadDevice::kNone;
    } else if (text == "cpu") {
      offload.device = OffloadDevice::kCpu;
    } else if (text == "nvme") {
      offload.device = OffloadDevice::kNvme;
    } else {
      context.error(path, "expected one of \"none\", \"cpu\", \"nvme\" (case-sensitive), found " + show(*value));
    }
  }
  if (const json* value = block.find("nvme_path"); value != nullptr && !value->is_null()) {
    if (value->is_string() && !is_auto(*value)) {
      offload.nvme_path = value->get<std::string>();
    } else {
      context.error(block.at("nvme_path"), "expected a path (a string), found " + show(*value));
    }
  }
  offload.buffer_count = get_int(context, block, "buffer_count", offload.buffer_count, Bound::kPositive);
  offload.pin_memory = get_bool(context, block, "pin_memory", offload.pin_memory);
  if (is_optimizer) {
    offload.pipeline_read = get_bool(context, block, "pipeline_read", offload.pipeline_read);
    offload.pipeline_write = get_bool(context, block, "pipeline_write", offload.pipeline_write);
    offload.fast_init = get_bool(context, block, "fast_init", offload.fast_init);
    offload.ratio = get_number(context, block, "ratio", offload.ratio, Bound::kNonNegative);
    if (offload.ratio > 1.0) {
      context.error(block.at("ratio"), "expected a number in [0, 1], found " + show_number(offload.ratio));
    }
  } else {
    offload.buffer_size = get_int(context, block, "buffer_size", offload.buffer_size, Bound::kPositive);
    offload.max_in_cpu = get_int(context, block, "max_in_cpu", offload.max_in_cpu, Bound::kNonNegative);
  }
  if (offload.device == OffloadDevice::kNvme && offload.nvme_path.empty()) {
    context.warn(block.at("nvme_path") + ": missing with device \"nvme\"; DeepSpeed accepts this at config time "
                                         "and fails at run time, zerosim needs a swap folder");
  }

  resolved_block["device"] = offload_device_name(offload.device);
  resolved_block["nvme_path"] = offload.nvme_path.empty() ? json() : json(offload.nvme_path);
  resolved_block["buffer_count"] = offload.buffer_count;
  resolved_block["pin_memory"] = offload.pin_memory;
  if (is_optimizer) {
    resolved_block["pipeline_read"] = offload.pipeline_read;
    resolved_block["pipeline_write"] = offload.pipeline_write;
    resolved_block["fast_init"] = offload.fast_init;
    resolved_block["ratio"] = offload.ratio;
  } else {
    resolved_block["buffer_size"] = offload.buffer_size;
    resolved_block["max_in_cpu"] = offload.max_in_cpu;
  }
  resolved_zero[std::string(key)] = std::move(resolved_block);
}

void read_zero(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  ZeroConfig& zero = out.zero;
  const json* value = find_or_null(document, "zero_optimization");
  json bool_form;  // the very old "zero_optimization": true/false
  if (value != nullptr && value->is_boolean()) {
    const bool enabled = value->get<bool>();
    bool_form = json::object();
    bool_form["stage"] = enabled ? 1 : 0;
    if (enabled) {
      int64_t allgather = 500000000;
      if (const json* size = find_or_null(document, "allgather_size")) {
        allgather = parse_int(context, *size, "allgather_size", false, Bound::kNonNegative).value_or(allgather);
      }
      bool_form["allgather_bucket_size"] = allgather;
    }
    context.warn(std::string("zero_optimization: the boolean form is deprecated; ") + (enabled ? "true" : "false") +
                 " means stage " + (enabled ? "1" : "0") + " (DeepSpeed reads it the same way)");
    value = &bool_form;
  }
  const Block block = object_block(context, value, "zero_optimization", true, false);
  json& resolved_zero = resolved["zero_optimization"];
  resolved_zero = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kZeroKeys, Unknown::kRefuse, &resolved_zero);

  if (const json* stage = block.find("stage")) {
    if (is_auto(*stage)) {
      unfilled_auto_means_default(context, block, "zero_optimization.stage", "0");
    } else {
      // Checked by hand so that the message says which stages exist.
      Context scratch(context.settings);
      std::optional<int64_t> parsed = parse_int(scratch, *stage, "zero_optimization.stage", true, Bound::kAny);
      if (!parsed || *parsed < 0 || *parsed > 3) {
        context.error("zero_optimization.stage", "expected 0, 1, 2 or 3, found " + show(*stage));
      } else {
        zero.stage = *parsed;
      }
    }
  }
  const bool stage3 = zero.stage == 3;
  // DeepSpeed's validator (zero/config.py elastic_checkpoint_deprecated) warns at stage 3, and its
  // stage-3 state_dict raises NotImplementedError (stage3.py, "Use Universal Checkpointing");
  // zerosim's checkpoints load at any world size whatever the key says.
  if (const json* elastic = block.find("elastic_checkpoint"); stage3 && elastic != nullptr && elastic->is_boolean() &&
                                                               elastic->get<bool>()) {
    context.warn("zero_optimization.elastic_checkpoint: ZeRO-3 elastic checkpointing is deprecated and no longer "
                 "supported by DeepSpeed (its stage-3 save raises NotImplementedError; use Universal Checkpointing); "
                 "zerosim ignores the key: its checkpoints load at any world size");
  }

  zero.sub_group_size = get_int(context, block, "sub_group_size", zero.sub_group_size, Bound::kNonNegative);
  zero.reduce_bucket_size = get_hidden_size_key(
      context, block, "reduce_bucket_size", "reduce_bucket_size", zero.reduce_bucket_size, true,
      [](int64_t hidden) { return hidden * hidden; }, "hidden_size^2");
  zero.allgather_bucket_size =
      get_int(context, block, "allgather_bucket_size", zero.allgather_bucket_size, Bound::kNonNegative);
  zero.prefetch_bucket_size = get_hidden_size_key(
      context, block, "stage3_prefetch_bucket_size", "prefetch_bucket_size", zero.prefetch_bucket_size, stage3,
      [](int64_t hidden) {
        const double h = static_cast<double>(hidden);
        return static_cast<int64_t>(0.9 * h * h);  // int(0.9 * hidden_size * hidden_size)
      },
      "int(0.9 x hidden_size^2)");
  zero.param_persistence_threshold = get_hidden_size_key(
      context, block, "stage3_param_persistence_threshold", "param_persistence_threshold",
      zero.param_persistence_threshold, stage3, [](int64_t hidden) { return 10 * hidden; }, "10 x hidden_size");
  zero.max_live_parameters = get_aliased_int(context, block, "stage3_max_live_parameters", "max_live_parameters",
                                             zero.max_live_parameters, Bound::kNonNegative);
  zero.max_reuse_distance = get_aliased_int(context, block, "stage3_max_reuse_distance", "max_reuse_distance",
                                            zero.max_reuse_distance, Bound::kNonNegative);
  zero.contiguous_gradients = get_bool(context, block, "contiguous_gradients", zero.contiguous_gradients);

  // overlap_comm: None (absent, null or "auto") means True for stage 3, else False.
  zero.overlap_comm = stage3;
  if (const json* overlap = block.find("overlap_comm"); overlap != nullptr && !overlap->is_null()) {
    if (is_auto(*overlap)) {
      context.warn("zero_optimization.overlap_comm is \"auto\"; DeepSpeed drops \"auto\" here and uses its "
                   "default (true for stage 3, else false)");
    } else {
      zero.overlap_comm = parse_bool(context, *overlap, "zero_optimization.overlap_comm", true).value_or(stage3);
    }
  }

  {
    std::string path;
    const json* gather = find_aliased(context, block, "stage3_gather_16bit_weights_on_model_save",
                                      "gather_16bit_weights_on_model_save", &path);
    const json* legacy = block.find("stage3_gather_fp16_weights_on_model_save");
    if (gather != nullptr && legacy != nullptr) {
      context.error("zero_optimization.stage3_gather_fp16_weights_on_model_save",
                    "cannot be given together with its replacement " + path.substr(path.find('.') + 1) +
                        " (DeepSpeed refuses both)");
    } else if (legacy != nullptr) {
      context.warn("zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated; read as "
                   "stage3_gather_16bit_weights_on_model_save");
      if (is_auto(*legacy)) {
        unfilled_auto_means_default(context, block, "zero_optimization.stage3_gather_fp16_weights_on_model_save",
                                    "false");
      } else {
        zero.gather_16bit_weights_on_model_save =
            parse_bool(context, *legacy, "zero_optimization.stage3_gather_fp16_weights_on_model_save", true)
                .value_or(false);
      }
    } else if (gather != nullptr) {
      if (is_auto(*gather)) {
        unfilled_auto_means_default(context, block, path, "false");
      } else {
        zero.gather_16bit_weights_on_model_save = parse_bool(context, *gather, path, true).value_or(false);
      }
    }
  }

  read_offload(context, block, "offload_optimizer", true, zero.offload_optimizer, resolved_zero);
  read_offload(context, block, "offload_param", false, zero.offload_param, resolved_zero);

  // Deprecated booleans that DeepSpeed maps onto the offload blocks.
  struct LegacyOffload {
    const char* key;
    const char* replacement;
    OffloadConfig* target;
  };
  for (const LegacyOffload& legacy : {LegacyOffload{"cpu_offload", "offload_optimizer", &zero.offload_optimizer},
                                      LegacyOffload{"cpu_offload_param", "offload_param", &zero.offload_param}}) {
    const json* flag = block.find(legacy.key);
    if (flag == nullptr) continue;
    const std::string path = block.at(legacy.key);
    if (block.find(legacy.replacement) != nullptr) {
      context.error(path, std::string("cannot be given together with its replacement ") + legacy.replacement +
                              " (DeepSpeed refuses both)");
      continue;
    }
    bool enabled = false;
    if (is_auto(*flag)) {
      unfilled_auto_means_default(context, block, path, "null");
    } else if (!flag->is_null()) {
      enabled = parse_bool(context, *flag, path, true).value_or(false);
    }
    context.warn(path + " is deprecated; " +
                 (enabled ? std::string("read as ") + legacy.replacement + ".device \"cpu\""
                          : std::string("false leaves ") + legacy.replacement + " off") +
                 " (use " + legacy.replacement + " instead)");
    if (enabled) {
      legacy.target->device = OffloadDevice::kCpu;
      resolved_zero[legacy.replacement]["device"] = "cpu";
    }
  }
  if (const json* pin = block.find("cpu_offload_use_pin_memory")) {
    const std::string path = block.at("cpu_offload_use_pin_memory");
    if (!pin->is_null() && !is_auto(*pin)) parse_bool(context, *pin, path, true);
    context.warn(path + " is deprecated and has no effect in DeepSpeed; use offload_optimizer.pin_memory or "
                        "offload_param.pin_memory");
    context.mark_inactive(path);
  }

  // Stage-dependent meaning.
  if (zero.offload_optimizer.ratio < 1.0 && !stage3) {
    context.error("zero_optimization.offload_optimizer.ratio",
                  "partial offloading (ratio < 1) needs stage 3, found stage " + std::to_string(zero.stage));
  }
  if (zero.offload_param.device != OffloadDevice::kNone && !stage3) {
    context.warn("zero_optimization.offload_param: ignored at stage " + std::to_string(zero.stage) +
                 " (parameter offload exists only at stage 3, as in DeepSpeed)");
    zero.offload_param.device = OffloadDevice::kNone;
    resolved_zero["offload_param"]["device"] = "none";
  }

  // The resolved block uses DeepSpeed's JSON names and drops the legacy and field-name forms.
  for (const char* key : {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                          "stage3_gather_fp16_weights_on_model_save", "prefetch_bucket_size",
                          "param_persistence_threshold", "max_live_parameters", "max_reuse_distance",
                          "gather_16bit_weights_on_model_save"}) {
    resolved_zero.erase(key);
  }
  for (const auto& [alias, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"stage3_model_persistence_threshold", "model_persistence_threshold"},
           {"stage3_module_granularity_threshold", "module_granularity_threshold"},
           {"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"},
           {"stage3_allgather_sequential", "allgather_sequential"},
           {"stage3_partition_stream_chunk_size", "partition_stream_chunk_size"}}) {
    if (resolved_zero.contains(name)) {
      if (!resolved_zero.contains(alias)) resolved_zero[alias] = resolved_zero[name];
      resolved_zero.erase(name);
    }
  }
  resolved_zero["stage"] = zero.stage;
  resolved_zero["sub_group_size"] = zero.sub_group_size;
  resolved_zero["reduce_bucket_size"] = zero.reduce_bucket_size;
  resolved_zero["allgather_bucket_size"] = zero.allgather_bucket_size;
  resolved_zero["stage3_prefetch_bucket_size"] = zero.prefetch_bucket_size;
  resolved_zero["stage3_param_persistence_threshold"] = zero.param_persistence_threshold;
  resolved_zero["stage3_max_live_parameters"] = zero.max_live_parameters;
  resolved_zero["stage3_max_reuse_distance"] = zero.max_reuse_distance;
  resolved_zero["overlap_comm"] = zero.overlap_comm;
  resolved_zero["contiguous_gradients"] = zero.contiguous_gradients;
  resolved_zero["stage3_gather_16bit_weights_on_model_save"] = zero.gather_16bit_weights_on_model_save;
}

void read_checkpoint_writer(Context& context, const Block& checkpoint_block, CheckpointConfig& checkpoint,
                            json& resolved_checkpoint) {
  const Block block =
      object_block(context, checkpoint_block.find("writer"), checkpoint_block.at("writer"), false, true);
  if (block.object == nullptr) return;  // DeepSpeed: no writer, torch.save
  json& resolved_writer = resolved_object(resolved_checkpoint, "writer");
  resolved_writer = *block.object;
  check_keys(context, block, kCheckpointWriterKeys, Unknown::kIgnore, &resolved_writer);
  // DeepSpeed upper-cases the type (default FAST once a writer is given); MOCK writes nothing.
  checkpoint.writer = CheckpointWriterType::kFast;
  if (const json* type = block.find("type")) {
    const std::string text = type->is_string() ? uppercase(type->get<std::string>()) : std::string();
    if (text == "FAST") {
      checkpoint.writer = CheckpointWriterType::kFast;
    } else if (text == "PYTHON") {
      checkpoint.writer = CheckpointWriterType::kPython;
    } else if (text == "MOCK") {
      context.error(block.at("type"), "\"mock\" writes nothing (DeepSpeed's MockFileWriter, for benchmarks): a "
                                      "checkpoint saved with it cannot be loaded; use \"fast\" or \"python\"");
    } else {
      context.error(block.at("type"), "expected \"fast\", \"python\" or \"mock\" (any case, as DeepSpeed "
                                      "upper-cases it), found " + show(*type));
    }
  }
  resolved_writer["type"] = checkpoint_writer_type_name(checkpoint.writer);
  checkpoint.io_buffer_size = get_int(context, block, "io_buffer_size", checkpoint.io_buffer_size, Bound::kPositive);
  checkpoint.io_buffer_double = get_bool(context, block, "io_buffer_double", checkpoint.io_buffer_double);
  // O_DIRECT moves whole 4096-byte blocks from aligned buffers: each half of a double buffer too.
  const int64_t unit_bytes = checkpoint.io_buffer_double ? 2 * 4096 : 4096;
  if (block.find("io_buffer_size") != nullptr && checkpoint.io_buffer_size % unit_bytes != 0) {
    context.error(block.at("io_buffer_size"),
                  "expected a multiple of " + std::to_string(unit_bytes) + " bytes (O_DIRECT moves whole 4096-byte " +
                      "blocks" + (checkpoint.io_buffer_double ? ", from each half of the double buffer" : "") +
                      "), found " + std::to_string(checkpoint.io_buffer_size));
  }
  if (const json* decoupled = block.find("decoupled"); decoupled != nullptr && *decoupled == json(true)) {
    context.warn(block.at("decoupled") + " is true: DeepSpeed then writes from a separate process; zerosim writes " +
                 "each shard from its rank (checkpoint.async_save moves the write off the training step)");
  }
  resolved_writer["io_buffer_size"] = checkpoint.io_buffer_size;
  resolved_writer["io_buffer_double"] = checkpoint.io_buffer_double;
}

void read_checkpoint(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  CheckpointConfig& checkpoint = out.checkpoint;
  const Block block = object_block(context, find_or_null(document, "checkpoint"), "checkpoint", false, true);
  json& resolved_checkpoint = resolved["checkpoint"];
  resolved_checkpoint = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kCheckpointKeys, Unknown::kIgnore, &resolved_checkpoint);
  // DeepSpeedConfig: tag_validation.upper() must be WARN, IGNORE or FAIL (default WARN); anything
  // else is a DeepSpeedConfigError (a non-string fails on .upper()).
  if (const json* validation = block.find("tag_validation")) {
    const std::string text = validation->is_string() ? uppercase(validation->get<std::string>()) : std::string();
    if (text == "WARN" || text == "IGNORE" || text == "FAIL") {
      resolved_checkpoint["tag_validation"] = text;
    } else {
      context.error(block.at("tag_validation"),
                    "expected \"Warn\", \"Ignore\" or \"Fail\" (any case, as DeepSpeed upper-cases it), found " +
                        show(*validation));
    }
  }
  read_checkpoint_writer(context, block, checkpoint, resolved_checkpoint);
  checkpoint.async_save = get_bool(context, block, "async_save", checkpoint.async_save);
  checkpoint.keep_last = get_int(context, block, "keep_last", checkpoint.keep_last, Bound::kNonNegative);
  resolved_checkpoint["async_save"] = checkpoint.async_save;
  resolved_checkpoint["keep_last"] = checkpoint.keep_last;
}

void read_zerosim(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  const Block block = object_block(context, find_or_null(document, "zerosim"), "zerosim", false, true);
  json& resolved_block = resolved["zerosim"];
  resolved_block = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kZerosimKeys, Unknown::kRefuse, &resolved_block);
  if (const json* numerics = block.find("numerics")) {
    const std::string text = numerics->is_string() ? numerics->get<std::string>() : std::string();
    if (text == "portable") {
      out.numerics = NumericsMode::kPortable;
    } else if (text == "deepspeed") {
      out.numerics = NumericsMode::kDeepSpeed;
    } else {
      context.error(block.at("numerics"), "expected \"portable\" or \"deepspeed\", found " + show(*numerics));
    }
  }
  resolved_block["numerics"] = numerics_mode_name(out.numerics);
}

void read_aio(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  AioConfig& aio = out.aio;
  const Block block = object_block(context, find_or_null(document, "aio"), "aio", false, true);
  json& resolved_aio = resolved["aio"];
  resolved_aio = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kAioKeys, Unknown::kIgnore, &resolved_aio);

  aio.block_size = get_int(context, block, "block_size", aio.block_size, Bound::kPositive);
  aio.queue_depth = get_int(context, block, "queue_depth", aio.queue_depth, Bound::kPositive);
  aio.single_submit = get_bool(context, block, "single_submit", aio.single_submit);
  aio.overlap_events = get_bool(context, block, "overlap_events", aio.overlap_events);
  aio.use_gds = get_bool(context, block, "use_gds", aio.use_gds);
  if (block.find("intra_op_parallelism") != nullptr) {
    aio.intra_op_parallelism =
        get_int(context, block, "intra_op_parallelism", aio.intra_op_parallelism, Bound::kPositive);
    if (block.find("thread_count") != nullptr) {
      context.warn("aio.thread_count is ignored because aio.intra_op_parallelism is given (thread_count is its old "
                   "name)");
      context.mark_inactive("aio.thread_count");
    }
  } else if (block.find("thread_count") != nullptr) {
    aio.intra_op_parallelism = get_int(context, block, "thread_count", aio.intra_op_parallelism, Bound::kPositive);
    context.warn("aio.thread_count is the old name of aio.intra_op_parallelism (renamed in DeepSpeed #7056); zerosim "
                 "reads it as intra_op_parallelism = " +
                 std::to_string(aio.intra_op_parallelism) +
                 ", while DeepSpeed HEAD ignores thread_count and uses intra_op_parallelism = 1");
  }
  resolved_aio.erase("thread_count");
  resolved_aio["block_size"] = aio.block_size;
  resolved_aio["queue_depth"] = aio.queue_depth;
  resolved_aio["intra_op_parallelism"] = aio.intra_op_parallelism;
  resolved_aio["single_submit"] = aio.single_submit;
  resolved_aio["overlap_events"] = aio.overlap_events;
  resolved_aio["use_gds"] = aio.use_gds;
}

// A learning-rate-like number that the HF Trainer fills from a double run setting.
std::optional<double> read_filled_number(Context& context, const Block& block, std::string_view key, double setting,
                                         const SettingName& name, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return std::nullopt;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    if (has(setting)) {
      auto_filled(context, path, show_number(setting), name);
      return setting;
    }
    auto_needs_setting(context, path, name);
    return std::nullopt;
  }
  std::optional<double> parsed = parse_number(context, *value, path, false, bound);
  if (parsed && has(setting)) check_match(context, path, show_number(*parsed), show_number(setting), name);
  return parsed;
}

std::optional<int64_t> read_filled_int(Context& context, const Block& block, std::string_view key, int64_t setting,
                                       const SettingName& name, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return std::nullopt;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    if (has(setting) && within_bound(setting, bound)) {
      auto_filled(context, path, std::to_string(setting), name);
      return setting;
    }
    auto_needs_setting(context, path, name);
    return std::nullopt;
  }
  std::optional<int64_t> parsed = parse_int(context, *value, path, false, bound);
  if (parsed && has(setting)) check_match(context, path, std::to_string(*parsed), std::to_string(setting), name);
  return parsed;
}

OptimizerExtras read_optimizer(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  OptimizerExtras extras;
  OptimizerConfig& optimizer = out.optimizer;
  const RunSettings& settings = context.settings;
  const json* value = find_or_null(document, "optimizer");
  if (value == nullptr) {
    // The HF Trainer then uses its own AdamW built from TrainingArguments.
    optimizer.present = false;
    optimizer.type = "AdamW";
    optimizer.adam_w_mode = true;
    if (has(settings.learning_rate)) optimizer.learning_rate = settings.learning_rate;
    if (has(settings.adam_beta1)) optimizer.beta1 = settings.adam_beta1;
    if (has(settings.adam_beta2)) optimizer.beta2 = settings.adam_beta2;
    if (has(settings.adam_epsilon)) optimizer.epsilon = settings.adam_epsilon;
    if (has(settings.weight_decay)) optimizer.weight_decay = settings.weight_decay;
    context.warn("optimizer: absent; zerosim uses AdamW with lr " + show_number(optimizer.learning_rate) +
                 ", betas [" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "], eps " +
                 show_number(optimizer.epsilon) + ", weight_decay " + show_number(optimizer.weight_decay) +
                 " (run settings where given, else DeepSpeedCPUAdam's defaults)");
  } else {
    optimizer.present = true;
    const Block block = object_block(context, value, "optimizer", false, false);
    json& resolved_block = resolved_object(resolved, "optimizer");
    check_keys(context, block, kOptimizerBlockKeys, Unknown::kIgnore, &resolved_block);
    if (block.object == nullptr) return extras;

    // type: DeepSpeed lower-cases the names of its own optimizers.
    const json* type = block.find("type");
    if (type == nullptr || type->is_null()) {
      context.error("optimizer.type", "missing; zerosim supports Adam and AdamW");
      return extras;
    }
    const std::string type_text = type->is_string() ? lowercase(type->get_ref<const std::string&>()) : "";
    if (type_text == "adam") {
      optimizer.type = "Adam";
    } else if (type_text == "adamw") {
      optimizer.type = "AdamW";
    } else {
      context.error("optimizer.type", "zerosim supports Adam and AdamW, found " + show(*type));
      return extras;
    }

    const Block params = object_block(context, block.find("params"), "optimizer.params", false, false);
    json& resolved_params = resolved_object(resolved_block, "params");
    check_keys(context, params, kAdamParamKeys, Unknown::kRefuse, &resolved_params);

    const bool torch_adam = get_bool(context, params, "torch_adam", false);
    const bool adam_w_mode = get_bool(context, params, "adam_w_mode", true);
    if (optimizer.type == "AdamW" && params.find("adam_w_mode") != nullptr && !adam_w_mode) {
      context.warn("optimizer.params.adam_w_mode is false but optimizer.type is AdamW; DeepSpeed uses decoupled "
                   "weight decay (AdamW) regardless");
    }
    // engine._configure_basic_optimizer: "Adam" means AdamW unless adam_w_mode is false.
    optimizer.adam_w_mode = optimizer.type == "AdamW" || adam_w_mode;

    if (auto lr = read_filled_number(context, params, "lr", settings.learning_rate, kLearningRateSetting,
                                     Bound::kNonNegative)) {
      optimizer.learning_rate = *lr;
    }
    if (const json* betas = params.find("betas")) {
      if (is_auto(*betas)) {
        if (has(settings.adam_beta1) && has(settings.adam_beta2)) {
          optimizer.beta1 = settings.adam_beta1;
          optimizer.beta2 = settings.adam_beta2;
          auto_filled(context, "optimizer.params.betas",
                      "[" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "]", kBetasSetting);
        } else {
          auto_needs_setting(context, "optimizer.params.betas", kBetasSetting);
        }
      } else {
        const bool well_formed = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() &&
                                 (*betas)[1].is_number() && (*betas)[0].get<double>() >= 0.0 &&
                                 (*betas)[0].get<double>() < 1.0 && (*betas)[1].get<double>() >= 0.0 &&
                                 (*betas)[1].get<double>() < 1.0;
        if (!well_formed) {
          context.error("optimizer.params.betas", "expected a list of two numbers in [0, 1), found " + show(*betas));
        } else {
          optimizer.beta1 = (*betas)[0].get<double>();
          optimizer.beta2 = (*betas)[1].get<double>();
          if (has(settings.adam_beta1) && has(settings.adam_beta2)) {
            check_match(context, "optimizer.params.betas",
                        "[" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "]",
                        "[" + show_number(settings.adam_beta1) + ", " + show_number(settings.adam_beta2) + "]",
                        kBetasSetting);
          }
        }
      }
    }
    if (auto eps = read_filled_number(context, params, "eps", settings.adam_epsilon, kEpsilonSetting,
                                      Bound::kNonNegative)) {
      optimizer.epsilon = *eps;
    }
    // torch.optim.AdamW (torch_adam with AdamW logic) defaults weight_decay to 0.01; FusedAdam and
    // DeepSpeedCPUAdam default it to 0.
    optimizer.weight_decay = torch_adam && optimizer.adam_w_mode ? 0.01 : 0.0;
    if (auto decay = read_filled_number(context, params, "weight_decay", settings.weight_decay, kWeightDecaySetting,
                                        Bound::kNonNegative)) {
      optimizer.weight_decay = *decay;
    }
    if (params.find("bias_correction") != nullptr && torch_adam) {
      context.error("optimizer.params.bias_correction",
                    "torch.optim.Adam(W) has no bias_correction argument (torch_adam is true)");
    }
    optimizer.bias_correction = get_bool(context, params, "bias_correction", true);
    extras.torch_adam = torch_adam;
    extras.amsgrad = get_bool(context, params, "amsgrad", false);
    extras.set_grad_none_given = params.find("set_grad_none") != nullptr;
    (void)get_bool(context, params, "set_grad_none", true);  // FusedAdam's flag: typed only
    if (params.find("max_grad_norm") != nullptr) {
      // engine._configure_basic_optimizer raises ValueError whatever the value.
      context.error(params.at("max_grad_norm"),
                    "DeepSpeed refuses it as an optimizer parameter (ValueError); use the top-level "
                    "gradient_clipping instead");
    }
  }

  json& resolved_block = resolved_object(resolved, "optimizer");
  resolved_block["type"] = optimizer.type;
  json& resolved_params = resolved_object(resolved_block, "params");
  resolved_params["lr"] = optimizer.learning_rate;
  resolved_params["betas"] = json::array({optimizer.beta1, optimizer.beta2});
  resolved_params["eps"] = optimizer.epsilon;
  resolved_params["weight_decay"] = optimizer.weight_decay;
  // torch.optim.Adam(W) (torch_adam) always corrects bias and takes no bias_correction argument.
  const json* torch_adam = resolved_params.contains("torch_adam") ? &resolved_params["torch_adam"] : nullptr;
  if (torch_adam == nullptr || !torch_adam->is_boolean() || !torch_adam->get<bool>()) {
    resolved_params["bias_correction"] = optimizer.bias_correction;
  }
  resolved_params["adam_w_mode"] = optimizer.adam_w_mode;
  return extras;
}

void read_scheduler(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  SchedulerConfig& scheduler = out.scheduler;
  const RunSettings& settings = context.settings;
  const json* value = find_or_null(document, "scheduler");
  if (value == nullptr) return;
  const Block block = object_block(context, value, "scheduler", false, false);
  if (block.object == nullptr) return;
  json& resolved_block = resolved_object(resolved, "scheduler");
  check_keys(context, block, kSchedulerBlockKeys, Unknown::kIgnore, &resolved_block);

  const json* type = block.find("type");
  if (type == nullptr || type->is_null()) {
    context.warn("scheduler: no type; DeepSpeed configures no scheduler and ignores the block");
    context.mark_inactive("scheduler");
    resolved.erase("scheduler");
    return;
  }
  static const std::vector<std::string_view> kSupported = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  const std::string type_text = type->is_string() ? type->get<std::string>() : std::string();
  std::span<const KeySpec> specs;
  if (type_text == "WarmupLR") {
    scheduler.type = SchedulerType::kWarmupLR;
    specs = kWarmupLRKeys;
  } else if (type_text == "WarmupDecayLR") {
    scheduler.type = SchedulerType::kWarmupDecayLR;
    specs = kWarmupDecayLRKeys;
  } else if (type_text == "WarmupCosineLR") {
    scheduler.type = SchedulerType::kWarmupCosineLR;
    specs = kWarmupCosineLRKeys;
  } else {
    std::string hint;
    if (type->is_string()) {
      const std::string nearest = nearest_name(type_text, kSupported);
      if (lowercase(nearest) == lowercase(type_text)) {
        hint = "; did you mean " + nearest + "? (the name is case-sensitive)";
      } else if (edit_distance(type_text, nearest) <= 3) {
        hint = "; did you mean " + nearest + "?";
      }
    }
    context.error("scheduler.type",
                  "zerosim supports WarmupLR, WarmupDecayLR and WarmupCosineLR, found " + show(*type) + hint);
    return;
  }

  // The constructors' own defaults (lr_schedules.py): WarmupLR's warmup_max_lr is None, which
  // means the optimizer's lr; WarmupDecayLR passes its own default, 0.001, up to WarmupLR.
  scheduler.warmup_max_lr = scheduler.type == SchedulerType::kWarmupDecayLR ? 1e-3 : out.optimizer.learning_rate;
  if (block.find("params") == nullptr) {
    // engine._scheduler_from_config calls the class with **params: without the key, **None
    // is a TypeError in DeepSpeed.
    context.error("scheduler.params", "missing; DeepSpeed passes it to " + type_text +
                                          " as keyword arguments and fails without it (write {} for the defaults)");
    return;
  }
  const Block params = object_block(context, block.find("params"), "scheduler.params", false, false);
  json& resolved_params = resolved_object(resolved_block, "params");
  // A parameter of another supported schedule gets a precise message; anything else is unknown.
  if (params.object != nullptr) {
    for (auto it = params.object->begin(); it != params.object->end(); ++it) {
      if (find_spec(specs, it.key()) != nullptr) continue;
      for (std::span<const KeySpec> other : {std::span<const KeySpec>(kWarmupLRKeys),
                                             std::span<const KeySpec>(kWarmupDecayLRKeys),
                                             std::span<const KeySpec>(kWarmupCosineLRKeys)}) {
        if (find_spec(other, it.key()) != nullptr) {
          context.error(params.at(it.key()), "not a parameter of " + type_text +
                                                 " (DeepSpeed passes scheduler.params to its constructor)");
          break;
        }
      }
    }
    json filtered = json::object();
    for (auto it = params.object->begin(); it != params.object->end(); ++it) {
      bool other_schedule = false;
      for (std::span<const KeySpec> other : {std::span<const KeySpec>(kWarmupLRKeys),
                                             std::span<const KeySpec>(kWarmupDecayLRKeys),
                                             std::span<const KeySpec>(kWarmupCosineLRKeys)}) {
        other_schedule = other_schedule || find_spec(other, it.key()) != nullptr;
      }
      if (find_spec(specs, it.key()) != nullptr || !other_schedule) filtered[it.key()] = it.value();
    }
    Block filtered_block = params;
    filtered_block.object = &filtered;
    check_keys(context, filtered_block, specs, Unknown::kRefuse, &resolved_params);
  }

  // DeepSpeed's constructors take a starting position, but then leave step 1 at the
  // optimizer's own lr; a run that starts mid-schedule is a resume, which zerosim takes from
  // a checkpoint (the schedule's state is its position).
  if (const json* start = params.find("last_batch_iteration")) {
    if (!(start->is_number_integer() && start->get<int64_t>() == -1)) {
      context.error(params.at("last_batch_iteration"),
                    "zerosim starts every schedule at -1 (found " + show(*start) +
                        "); to start mid-schedule, resume from a checkpoint (--resume)");
    }
  }
  const bool cosine = scheduler.type == SchedulerType::kWarmupCosineLR;
  if (!cosine) {
    if (const json* min_lr = params.find("warmup_min_lr")) {
      if (is_auto(*min_lr)) {
        scheduler.warmup_min_lr = 0.0;  // fill_only: not a Trainer argument
        context.warn("scheduler.params.warmup_min_lr is \"auto\"; filled with 0 (as the HF Trainer does)");
      } else {
        scheduler.warmup_min_lr =
            parse_number(context, *min_lr, "scheduler.params.warmup_min_lr", false, Bound::kNonNegative).value_or(0.0);
      }
    }
    if (auto max_lr = read_filled_number(context, params, "warmup_max_lr", settings.learning_rate,
                                         kLearningRateSetting, Bound::kNonNegative)) {
      scheduler.warmup_max_lr = *max_lr;
    }
  }
  // WarmupLR and WarmupCosineLR check isinstance(warmup_num_steps, int) and > 0: a JSON float
  // (5.0, 1e1) is refused, and true, a Python int, is taken as 1.
  if (const json* warmup = params.find("warmup_num_steps"); warmup != nullptr && warmup->is_number_float()) {
    context.error(params.at("warmup_num_steps"),
                  "expected a positive integer, found " + show(*warmup) +
                      " (DeepSpeed refuses a float here: warmup_num_steps must be a positive integer)");
  } else if (warmup != nullptr && warmup->is_boolean()) {
    context.warn(params.at("warmup_num_steps") + " is " + show(*warmup) +
                 "; DeepSpeed takes a boolean as the integer " + (warmup->get<bool>() ? "1" : "0") +
                 ", and so does zerosim");
    if (!warmup->get<bool>()) {
      context.error(params.at("warmup_num_steps"), "expected a positive integer, found false (0)");
    } else {
      scheduler.warmup_num_steps = 1;
    }
  } else if (auto steps = read_filled_int(context, params, "warmup_num_steps", settings.warmup_steps,
                                          kWarmupStepsSetting, Bound::kPositive)) {
    scheduler.warmup_num_steps = *steps;  // the schedule clamps it to max(2, n), as DeepSpeed does
  }
  if (const json* warmup_type = params.find("warmup_type")) {
    const std::string text = warmup_type->is_string() ? warmup_type->get<std::string>() : std::string();
    if (text == "log") {
      scheduler.warmup_type = WarmupType::kLog;
    } else if (text == "linear") {
      scheduler.warmup_type = WarmupType::kLinear;
    } else if (warmup_type->is_string() && !is_auto(*warmup_type)) {
      scheduler.warmup_type = WarmupType::kLog;
      context.warn("scheduler.params.warmup_type " + show(*warmup_type) +
                   " is unknown; DeepSpeed falls back to \"log\" and so does zerosim");
    } else {
      context.error("scheduler.params.warmup_type", "expected \"log\" or \"linear\", found " + show(*warmup_type));
    }
  }
  if (scheduler.type != SchedulerType::kWarmupLR) {
    if (params.find("total_num_steps") == nullptr) {
      context.error("scheduler.params.total_num_steps", "missing; " + type_text + " requires it");
    } else if (auto total = read_filled_int(context, params, "total_num_steps", settings.total_steps,
                                            kTotalStepsSetting, Bound::kAny)) {
      // DeepSpeed checks nothing here but warns below warmup; 0 or a negative total is accepted
      // as it is (the lr falls to its floor as soon as warmup ends). A fractional total, which
      // DeepSpeed would also take, is refused by parse_int: a step count of 5.5 is a typo.
      scheduler.total_num_steps = *total;
      if (scheduler.total_num_steps < scheduler.warmup_num_steps) {
        context.warn("scheduler.params.total_num_steps " + std::to_string(scheduler.total_num_steps) +
                     " is smaller than warmup_num_steps " + std::to_string(scheduler.warmup_num_steps) +
                     " (DeepSpeed warns too): the schedule " +
                     (cosine ? "holds cos_min_ratio" : "falls to warmup_min_lr") + " as soon as warmup ends");
      }
    }
  }
  if (cosine) {
    scheduler.warmup_min_ratio =
        get_number(context, params, "warmup_min_ratio", scheduler.warmup_min_ratio, Bound::kNonNegative);
    // DeepSpeed takes any cos_min_ratio; max(0, ...) keeps the lr >= 0 below 0, and above 1
    // the lr rises after warmup. Both run as DeepSpeed runs them, with a warning.
    scheduler.cos_min_ratio = get_number(context, params, "cos_min_ratio", scheduler.cos_min_ratio, Bound::kAny);
    if (scheduler.cos_min_ratio < 0.0 || scheduler.cos_min_ratio > 1.0) {
      context.warn("scheduler.params.cos_min_ratio " + show_number(scheduler.cos_min_ratio) + " is outside [0, 1]; " +
                   (scheduler.cos_min_ratio < 0.0 ? "the lr reaches 0 before the end of the decay"
                                                  : "the lr rises after warmup") +
                   " (DeepSpeed accepts it too)");
    }
  }

  resolved_block["type"] = type_text;
  if (!cosine) {
    resolved_params["warmup_min_lr"] = scheduler.warmup_min_lr;
    resolved_params["warmup_max_lr"] = scheduler.warmup_max_lr;
  } else {
    resolved_params["warmup_min_ratio"] = scheduler.warmup_min_ratio;
    resolved_params["cos_min_ratio"] = scheduler.cos_min_ratio;
  }
  resolved_params["warmup_num_steps"] = scheduler.warmup_num_steps;
  resolved_params["warmup_type"] = scheduler.warmup_type == WarmupType::kLog ? "log" : "linear";
  if (scheduler.type != SchedulerType::kWarmupLR) resolved_params["total_num_steps"] = scheduler.total_num_steps;
}

// The keyword arguments that only some of DeepSpeed's Adam classes take.
void check_optimizer_class_arguments(Context& context, const OptimizerExtras& extras, const ResolvedConfig& out) {
  if (!out.optimizer.present) return;
  const bool cpu_adam = !extras.torch_adam && out.zero.offload_optimizer.device != OffloadDevice::kNone;
  if (extras.amsgrad) {
    if (cpu_adam) {
      context.warn("optimizer.params.amsgrad is true, but DeepSpeedCPUAdam (optimizer offload) ignores it, and so "
                   "does zerosim: plain Adam(W) runs");
    } else {
      context.error("optimizer.params.amsgrad",
                    extras.torch_adam ? "torch's Adam(W) would run AMSGrad, which zerosim does not implement; found true"
                                      : "DeepSpeed's FusedAdam refuses AMSGrad (RuntimeError); found true");
    }
  }
  if (extras.set_grad_none_given && cpu_adam) {
    context.error("optimizer.params.set_grad_none",
                  "DeepSpeedCPUAdam (optimizer offload) takes no such argument (TypeError in DeepSpeed); only "
                  "FusedAdam does");
  }
}

Result<ResolvedConfig> resolve_document(const json& document, const RunSettings& settings) {
  if (!document.is_object()) {
    return invalid_argument("config: expected a JSON object at the top level, found " + describe(document));
  }
  Context context(settings);
  if (settings.world_size <= 0) {
    context.error("world_size", "expected a run setting > 0, found " + std::to_string(settings.world_size));
  }
  ResolvedConfig out;
  out.input = document;
  json resolved = document;

  const Block top{&document, "", false};
  check_keys(context, top, kTopLevelKeys, Unknown::kRefuse, &resolved);

  read_batch(context, top, out, resolved);
  read_gradient_clipping(context, top, out, resolved);
  read_steps_per_print(context, top, out, resolved);
  const PrecisionExtras extras = read_precision(context, document, out, resolved);
  read_communication_dtype(context, top, out, resolved);
  const OptimizerExtras optimizer_extras = read_optimizer(context, document, out, resolved);
  read_scheduler(context, document, out, resolved);
  read_zero(context, document, out, resolved);
  check_optimizer_class_arguments(context, optimizer_extras, out);
  read_aio(context, document, out, resolved);
  read_checkpoint(context, document, out, resolved);
  read_zerosim(context, document, out, resolved);
  out.scheduler.c_library_math = out.numerics == NumericsMode::kDeepSpeed;

  // DeepSpeedConfig._do_error_check.
  if (extras.fp16_master_weights && out.zero.stage == 0) {
    context.error("fp16.fp16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3, found stage 0");
  }
  if (extras.bf16_master_weights && out.zero.stage == 0) {
    context.error("bf16.bf16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3, found stage 0");
  }
  if (extras.bf16_optimizer_states && !extras.bf16_master_weights) {
    context.error("bf16.bf16_optimizer_states", "needs bf16.bf16_master_weights_and_grads to be true");
  }
  if (const json* enabled = find_or_null(document, "elasticity") != nullptr
                                ? find_or_null(*find_or_null(document, "elasticity"), "enabled")
                                : nullptr;
      enabled != nullptr && enabled->is_boolean() && enabled->get<bool>()) {
    context.warn("elasticity.enabled: zerosim does not compute elastic batch sizes; it uses the batch keys as given");
  }

  if (!context.errors.empty()) {
    std::string message;
    for (const std::string& error : context.errors) {
      if (!message.empty()) message += '\n';
      message += error;
    }
    return invalid_argument(std::move(message));
  }
  out.resolved = std::move(resolved);
  out.warnings = std::move(context.warnings);
  out.inactive_keys = std::move(context.inactive);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points. None of them throws.

Status apply_override(nlohmann::json& document, const std::string& assignment) {
  try {
    const size_t equals = assignment.find('=');
    if (equals == std::string::npos) {
      return invalid_argument("--set " + assignment + ": expected KEY=VALUE (for example zero_optimization.stage=3)");
    }
    const std::string key = assignment.substr(0, equals);
    const std::string text = assignment.substr(equals + 1);
    std::vector<std::string> segments;
    size_t start = 0;
    while (true) {
      const size_t dot = key.find('.', start);
      segments.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    for (const std::string& segment : segments) {
      if (segment.empty()) {
        return invalid_argument("--set " + assignment + ": the key \"" + key + "\" has an empty part");
      }
    }
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;

    if (document.is_null()) document = json::object();
    if (!document.is_object()) {
      return invalid_argument(key + ": cannot set it, the document is " + describe(document) + ", not an object");
    }
    json* node = &document;
    std::string path;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      path = join_path(path, segments[i]);
      auto it = node->find(segments[i]);
      if (it == node->end()) {
        node = &((*node)[segments[i]] = json::object());
      } else if (it->is_object()) {
        node = &*it;
      } else {
        return invalid_argument(path + ": cannot set " + key + " because " + path + " is " + describe(*it) +
                                ", not an object");
      }
    }
    (*node)[segments.back()] = std::move(value);
    return Status::ok_status();
  } catch (const std::exception& error) {
    return invalid_argument("--set " + assignment + ": " + error.what());
  }
}

Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source_name) {
  {
    Status nesting = check_json_nesting(text, 256, source_name);
    if (!nesting.ok()) return invalid_argument(nesting.message());
  }
  // DeepSpeed loads config files with dict_raise_error_on_duplicate_keys; so does this parser.
  struct OpenObject {
    std::set<std::string> keys;
    std::string key;  // the key whose value is being parsed
  };
  std::vector<OpenObject> open;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          open.back().key = key;
          if (!open.back().keys.insert(key).second && duplicate.empty()) {
            std::string path;
            for (const OpenObject& object : open) path = join_path(path, object.key);
            duplicate = path;
          }
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    json document = json::parse(text, callback, /*allow_exceptions=*/true, /*ignore_comments=*/true);
    if (!duplicate.empty()) {
      return invalid_argument(duplicate + ": duplicate key in " + source_name + " (DeepSpeed refuses duplicate keys)");
    }
    return document;
  } catch (const json::parse_error& error) {
    // error.byte counts the characters read, the offending one included (1-based).
    const size_t offset = std::min<size_t>(error.byte > 0 ? error.byte - 1 : 0, text.size());
    size_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    const size_t column = offset - line_start + 1;
    std::string detail = error.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    if (const size_t colon = detail.find(": "); colon != std::string::npos) detail = detail.substr(colon + 2);
    // The parser quotes what it last read, which may be any bytes of a hostile file: a terminal
    // gets them as \xNN, not raw.
    std::string printable;
    for (const char c : detail) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte >= 0x20 && byte < 0x7f) {
        printable += c;
      } else {
        static const char* const kHex = "0123456789abcdef";
        printable += std::string("\\x") + kHex[byte >> 4] + kHex[byte & 15];
      }
    }
    detail = printable;
    return invalid_argument(source_name + ":" + std::to_string(line) + ":" + std::to_string(column) +
                            ": invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
                            ": " + detail);
  } catch (const std::exception& error) {
    return invalid_argument(source_name + ": cannot parse JSON: " + error.what());
  }
}

Result<ResolvedConfig> resolve_config(const nlohmann::json& document, const RunSettings& settings) {
  try {
    return resolve_document(document, settings);
  } catch (const std::exception& error) {
    return invalid_argument(std::string("config: unexpected failure while reading the config: ") + error.what());
  }
}

std::string unknown_key_hint(std::string_view key, const std::vector<std::string_view>& valid_names) {
  return suggestion_text(key, nearest_name(key, valid_names));
}

Status check_json_nesting(std::string_view text, int max_depth, const std::string& source_name) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return data_loss(source_name + ": JSON nested deeper than " + std::to_string(max_depth) + " levels at byte " +
                         std::to_string(i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status();
}

void set_default_hyperparameters(RunSettings& settings) {
  settings.learning_rate = 1e-2;
  settings.adam_beta1 = 0.9;
  settings.adam_beta2 = 0.999;
  settings.adam_epsilon = 1e-8;
  settings.weight_decay = 0.01;
  settings.max_grad_norm = 1.0;
  settings.total_steps = 1000;
}

int64_t deepspeed_min_aio_bytes(const AioConfig& aio) { return std::max<int64_t>(int64_t{1} << 20, aio.block_size); }

}  // namespace zerosim
