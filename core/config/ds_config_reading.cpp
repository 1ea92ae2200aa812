// Small text helpers, value coercion (pydantic's lax mode where DeepSpeed reads a pydantic model),
// the typed getters and the "auto" run settings of the DeepSpeed config reader.
#include "core/config/ds_config_reading.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace zerosim::ds_config_detail {

// ---------------------------------------------------------------------------------------------
// Small text helpers.

std::string show(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string show_number(double value) { return show(json(value)); }

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

std::string suggestion_text(std::string_view key, const std::string& nearest) {
  if (edit_distance(key, nearest) <= std::max<size_t>(1, key.size() / 3)) return "did you mean " + nearest + "?";
  return "the nearest valid name is " + nearest;
}

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
// Value coercion. `lax` is pydantic's lax mode (used inside pydantic models only): strings of
// digits for ints, numeric strings for floats, "true"/"yes"/... for bools.

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

void auto_needs_setting(Context& context, const std::string& path, const SettingName& setting) {
  context.error_text(path + " is \"auto\"; give " + setting.flag + " (the HF Trainer fills it from " +
                     setting.trainer + ")");
}

void auto_filled(Context& context, const std::string& path, const std::string& value, const SettingName& setting) {
  context.warn(path + " is \"auto\"; filled with " + value + " from " + setting.flag);
}

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

}  // namespace zerosim::ds_config_detail
