// Key checks of the DeepSpeed config reader: unknown keys refused or warned about, keys zerosim
// reads but does not act on listed, inactive keys validated by their kind.
#include "core/config/ds_config_reading.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zerosim::ds_config_detail {

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

json& resolved_object(json& parent, const std::string& key) {
  json& node = parent[key];
  if (!node.is_object()) node = json::object();
  return node;
}

}  // namespace zerosim::ds_config_detail
