// The DeepSpeed config reader's own toolkit, shared by its section files (ds_config_*.cpp):
// collected diagnostics, value coercion with pydantic's lax mode, blocks and their key tables,
// typed getters, and the run settings that fill "auto". Not an API: only the reader includes it;
// everything else uses ds_config.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/ds_config.h"

namespace zerosim::ds_config_detail {

using json = nlohmann::json;

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

// "parent.key", or "key" at the top level.
std::string join_path(std::string_view parent, std::string_view key);

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
  kActive,    // read by a section and acted on by zerosim
  kRead,      // read by a section (typed, stored), but zerosim does not act on it yet: inactive_keys
  kInactive,  // validated by its kind only and listed in inactive_keys
  kLegacy,    // a deprecated name, read by a section and mapped onto its replacement with a warning
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

// How check_keys treats a key that is not in the table.
enum class Unknown { kRefuse, kIgnore };

// ---------------------------------------------------------------------------------------------
// Run settings ("auto" sources).

struct SettingName {
  const char* flag;     // zerosim's command-line flag
  const char* trainer;  // the HF TrainingArguments / Trainer value it stands for
};

inline constexpr SettingName kMicroBatchSetting{"--micro-batch-size", "per_device_train_batch_size"};
inline constexpr SettingName kAccumulationSetting{"--gradient-accumulation-steps", "gradient_accumulation_steps"};
inline constexpr SettingName kLearningRateSetting{"--learning-rate", "learning_rate"};
inline constexpr SettingName kBetasSetting{"--adam-beta1 and --adam-beta2", "adam_beta1 and adam_beta2"};
inline constexpr SettingName kEpsilonSetting{"--adam-epsilon", "adam_epsilon"};
inline constexpr SettingName kWeightDecaySetting{"--weight-decay", "weight_decay"};
inline constexpr SettingName kMaxGradNormSetting{"--max-grad-norm", "max_grad_norm"};
inline constexpr SettingName kWarmupStepsSetting{"--warmup-steps", "warmup_steps"};
inline constexpr SettingName kTotalStepsSetting{"--total-steps", "num_training_steps"};
inline constexpr SettingName kHiddenSizeSetting{"--hidden-size", "the model's hidden_size"};

// What read_precision leaves for the checks that need the zero_optimization block.
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

// ---------------------------------------------------------------------------------------------
// Small text helpers, value coercion, typed getters and run settings (ds_config_reading.cpp).

// A value as it appears in JSON, shortened for messages. Never throws (invalid UTF-8 is replaced).
std::string show(const json& value);
std::string show_number(double value);
// "a number (3)", "a list", ...: what is in the way when a path cannot be walked.
std::string describe(const json& value);
std::string uppercase(std::string_view text);
std::string lowercase(std::string_view text);
// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("persitence").
size_t edit_distance(std::string_view a, std::string_view b);
// "did you mean X?" when X is close to what was written, else just the nearest valid name.
std::string suggestion_text(std::string_view key, const std::string& nearest);
// The candidate closest to `key` (first one on ties, so the tables' order breaks ties).
std::string nearest_name(std::string_view key, const std::vector<std::string_view>& candidates);
bool is_auto(const json& value);
const json* find_or_null(const json& object, std::string_view key);
std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors);
std::string int_expectation(Bound bound);
std::string number_expectation(Bound bound);
std::string_view trim(std::string_view text);
// "1000", "+1000", "-5" (what pydantic's lax int parsing accepts; "1e9" and "1.5" are not).
std::optional<int64_t> parse_integer_text(std::string_view text);
bool within_bound(int64_t value, Bound bound);
bool within_bound(double value, Bound bound);
std::optional<int64_t> parse_int(Context& context, const json& value, const std::string& path, bool lax,
                                 Bound bound);
std::optional<double> parse_number(Context& context, const json& value, const std::string& path, bool lax,
                                   Bound bound);
std::optional<bool> parse_bool(Context& context, const json& value, const std::string& path, bool lax);
bool unfilled_auto_means_default(Context& context, const Block& block, const std::string& path,
                                 const std::string& default_text);
int64_t get_int(Context& context, const Block& block, std::string_view key, int64_t fallback, Bound bound);
double get_number(Context& context, const Block& block, std::string_view key, double fallback, Bound bound);
bool get_bool(Context& context, const Block& block, std::string_view key, bool fallback);
void auto_needs_setting(Context& context, const std::string& path, const SettingName& setting);
void auto_filled(Context& context, const std::string& path, const std::string& value, const SettingName& setting);
// The HF Trainer refuses a concrete config value that disagrees with its argument (fill_match).
bool setting_is_defaulted(const RunSettings& settings, const SettingName& setting);
void check_match(Context& context, const std::string& path, const std::string& config_value,
                 const std::string& setting_value, const SettingName& setting);
bool has(int64_t setting);
bool has_positive(int64_t setting);
bool has(double setting);

// ---------------------------------------------------------------------------------------------
// Key tables (ds_config_keys.h) and their checks (ds_config_keys.cpp).

std::vector<std::string_view> names_of(std::span<const KeySpec> specs);
const KeySpec* find_spec(std::span<const KeySpec> specs, std::string_view name);
// Checks a value against a kind; returns the normalized value (ints as ints) or nullopt.
std::optional<json> validate_kind(Context& context, const json& value, const std::string& path, Kind kind,
                                  bool lax);
// Refuses (or, where DeepSpeed ignores them, warns about) unknown keys, lists kRead/kInactive
// keys in inactive_keys and validates kInactive keys. `resolved` (the block's copy in the
// resolved document, may be null) receives normalized values of kInactive keys.
void check_keys(Context& context, const Block& block, std::span<const KeySpec> specs, Unknown unknown,
                json* resolved);
// A block that must be an object when present. Records the error and returns an absent block
// otherwise. `null_is_absent` for the Optional[...] sub-models.
Block object_block(Context& context, const json* value, std::string path, bool pydantic, bool null_is_absent);
// The resolved document's copy of a block: an object, created if absent.
json& resolved_object(json& parent, const std::string& key);

// ---------------------------------------------------------------------------------------------
// The sections. Each reads its keys into `out`, writes what it resolved into `resolved` (the
// document as DeepSpeed would see it, "auto" filled) and records errors in the context.

// ds_config_batch.cpp
// train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps.
void read_batch(Context& context, const Block& top, ResolvedConfig& out, json& resolved);
void read_gradient_clipping(Context& context, const Block& top, ResolvedConfig& out, json& resolved);
void read_steps_per_print(Context& context, const Block& top, ResolvedConfig& out, json& resolved);
// fp16 and bf16 (and the old top-level name "bfloat16"), the loss scaler.
PrecisionExtras read_precision(Context& context, const json& document, ResolvedConfig& out, json& resolved);
void read_communication_dtype(Context& context, const Block& top, ResolvedConfig& out, json& resolved);

// ds_config_zero.cpp
void read_zero(Context& context, const json& document, ResolvedConfig& out, json& resolved);
void read_checkpoint(Context& context, const json& document, ResolvedConfig& out, json& resolved);
void read_zerosim(Context& context, const json& document, ResolvedConfig& out, json& resolved);
void read_aio(Context& context, const json& document, ResolvedConfig& out, json& resolved);

// ds_config_optimizer.cpp
OptimizerExtras read_optimizer(Context& context, const json& document, ResolvedConfig& out, json& resolved);
void read_scheduler(Context& context, const json& document, ResolvedConfig& out, json& resolved);
// The keyword arguments that only some of DeepSpeed's Adam classes take.
void check_optimizer_class_arguments(Context& context, const OptimizerExtras& extras, const ResolvedConfig& out);

}  // namespace zerosim::ds_config_detail
