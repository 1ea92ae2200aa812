#include "core/checkpoint/manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/checkpoint/commit.h"

namespace zerosim {

using nlohmann::json;

const char* checkpoint_state_name(CheckpointState state) {
  switch (state) {
    case CheckpointState::kParam: return "param";
    case CheckpointState::kMaster: return "master";
    case CheckpointState::kExpAvg: return "exp_avg";
    case CheckpointState::kExpAvgSq: return "exp_avg_sq";
  }
  return "?";
}

std::string checkpoint_tensor_name(const std::string& parameter, CheckpointState state) {
  return parameter + "/" + checkpoint_state_name(state);
}

std::string shard_file_name(int rank, int world_size) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "rank-%05d-of-%05d.safetensors", rank, world_size);
  return buffer;
}

Fragment owned_fragment(int64_t element_count, int rank, int world_size) {
  const int64_t partition_size = (element_count + world_size - 1) / world_size;
  const int64_t begin = std::min<int64_t>(element_count, partition_size * rank);
  const int64_t end = std::min<int64_t>(element_count, begin + partition_size);
  return Fragment{begin, end - begin};
}

std::string format_hash_128(uint64_t high64, uint64_t low64) {
  char buffer[33];
  std::snprintf(buffer, sizeof buffer, "%016llx%016llx", static_cast<unsigned long long>(high64),
                static_cast<unsigned long long>(low64));
  return buffer;
}

static std::string hash_hex(XXH128_hash_t hash) { return format_hash_128(hash.high64, hash.low64); }

std::string xxh3_128_hex(std::string_view text) { return hash_hex(XXH3_128bits(text.data(), text.size())); }

StreamingHash::StreamingHash() : state_(XXH3_createState()) {
  ZEROSIM_CHECK(state_ != nullptr, "XXH3_createState failed");
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
StreamingHash::~StreamingHash() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void StreamingHash::update(std::span<const std::byte> bytes) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}
std::string StreamingHash::hex() const { return hash_hex(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

Result<std::string> file_checksum(Disk& disk, const std::string& path, uint64_t* size_bytes) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
  StreamingHash hash;
  std::vector<std::byte> chunk(std::min<uint64_t>(size, 8u << 20));
  for (uint64_t offset = 0; offset < size; offset += chunk.size()) {
    const size_t length = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - offset));
    const std::span<std::byte> piece(chunk.data(), length);
    ZEROSIM_RETURN_IF_ERROR(file->read_exact(offset, piece));
    hash.update(piece);
  }
  const std::string hex = hash.hex();
  ZEROSIM_RETURN_IF_ERROR(file->close());
  if (size_bytes != nullptr) *size_bytes = size;
  return hex;
}

Status validate_manifest_file_name(const std::string& name, const std::string& manifest_path, const std::string& key) {
  Status valid = validate_checkpoint_tag(name);  // the same rule: a plain name that cannot leave its directory
  if (!valid.ok()) {
    return data_loss(manifest_path + ": " + key + " '" + name +
                     "' is not a plain file name inside the checkpoint (no '/', no '..', nothing absolute)");
  }
  return Status();
}

std::span<const CheckpointState> stored_checkpoint_states(bool requires_grad, bool excluded) {
  if (requires_grad) return kCheckpointStates;
  if (excluded) return {};
  return std::span<const CheckpointState>(kCheckpointStates, 1);  // kParam
}

int64_t checkpoint_format_version_for(const ModelSpec& model, const std::vector<ParameterInfo>& parameters) {
  if (model.is_transformer()) return kCheckpointFormatVersionWithTransformer;
  const bool any_frozen =
      std::any_of(parameters.begin(), parameters.end(), [](const ParameterInfo& parameter) { return !parameter.requires_grad; });
  return any_frozen ? kCheckpointFormatVersionWithFrozenParameters : kCheckpointFormatVersionWithoutFrozenParameters;
}

bool CheckpointManifest::excludes(const std::string& parameter) const {
  return std::find(excluded_parameters.begin(), excluded_parameters.end(), parameter) != excluded_parameters.end();
}

json manifest_to_json(const CheckpointManifest& manifest) {
  json parameters = json::array();
  for (const ParameterInfo& parameter : manifest.parameters) {
    json entry = {{"name", parameter.name}, {"shape", parameter.shape}, {"element_count", parameter.element_count},
                  {"layer_index", parameter.layer_index}};
    // Written only for a frozen parameter, so a checkpoint without one reads as before.
    if (!parameter.requires_grad) entry["requires_grad"] = false;
    if (manifest.excludes(parameter.name)) entry["excluded"] = true;
    parameters.push_back(std::move(entry));
  }
  json shards = json::array();
  for (const ShardRecord& shard : manifest.shards) {
    shards.push_back({{"rank", shard.rank}, {"file", shard.file}, {"size_bytes", shard.size_bytes},
                      {"xxh3_128", shard.xxh3_128}});
  }
  json model;
  if (const std::optional<GptSpec>& gpt = manifest.model.gpt) {
    model = {{"gpt", {{"layers", gpt->layers}, {"embd", gpt->embd}, {"heads", gpt->heads}, {"vocab", gpt->vocab},
                      {"block", gpt->block}}}};
  } else {
    model = {{"layer_widths", manifest.model.layer_widths}};
  }
  json buffers = json::array();
  for (const BufferInfo& buffer : manifest.buffers) buffers.push_back({{"name", buffer.name}, {"shape", buffer.shape}});
  json data = {{"sample_count", manifest.data.sample_count}, {"feature_count", manifest.data.feature_count},
               {"class_count", manifest.data.class_count}, {"seed", manifest.data.seed}};
  // Written only for a token file, so that every other checkpoint reads as before.
  if (!manifest.data.token_file.empty()) data["token_file"] = manifest.data.token_file;
  if (!manifest.data.token_file_xxh3_128.empty()) data["token_file_xxh3_128"] = manifest.data.token_file_xxh3_128;
  json document{
      {"format", kCheckpointFormatName},
      {"format_version", manifest.format_version},
      {"zerosim_version", manifest.zerosim_version},
      {"tag", manifest.tag},
      {"config", manifest.config},
      {"config_hash", manifest.config_hash},
      {"model", model},
      {"data", data},
      {"seed", manifest.seed},
      {"precision", precision_name(manifest.precision)},
      {"optimizer", {{"type", manifest.optimizer_type}, {"adam_w_mode", manifest.adam_w_mode}}},
      {"train_batch_size", manifest.train_batch_size},
      {"micro_batch_size", manifest.micro_batch_size},
      {"layout", {{"world_size", manifest.world_size}, {"sub_group_size", manifest.sub_group_size},
                  {"parameters", parameters}}},
      {"counters",
       {{"global_steps", manifest.global_steps}, {"skipped_steps", manifest.skipped_steps},
        {"global_samples", manifest.global_samples}, {"optimizer_steps", manifest.optimizer_steps}}},
      {"scheduler", {{"last_batch_iteration", manifest.scheduler_last_batch_iteration},
                     {"learning_rate", manifest.scheduler_learning_rate}}},
      {"loss_scaler",
       {{"current_scale", manifest.loss_scaler.current_scale},
        {"current_iteration", manifest.loss_scaler.current_iteration},
        {"last_overflow_iteration", manifest.loss_scaler.last_overflow_iteration},
        {"current_hysteresis", manifest.loss_scaler.current_hysteresis}}},
      {"rng", {{"shuffle_stream", {{"seed", manifest.shuffle_stream.seed},
                                   {"stream_id", manifest.shuffle_stream.stream_id},
                                   {"counter", manifest.shuffle_stream.counter}}}}},
      {"data_position", manifest.data_position},
      {"shards", shards},
  };
  if (!manifest.buffers.empty()) document["buffers"] = buffers;
  // Written only when set, so a checkpoint of a run that never restarted its optimizer reads as before.
  if (manifest.steps_before_optimizer != 0) document["counters"]["steps_before_optimizer"] = manifest.steps_before_optimizer;
  return document;
}

namespace {

// Typed access to a manifest with errors that name the file and the dotted key.
class ManifestReader {
 public:
  explicit ManifestReader(const std::string& path) : path_(path) {}

  Status error(const std::string& key, const std::string& what) const {
    return data_loss(path_ + ": " + key + ": " + what);
  }
  Result<const json*> field(const json& object, const std::string& parent, const std::string& key) const {
    const std::string dotted = parent.empty() ? key : parent + "." + key;
    if (!object.is_object() || !object.contains(key)) return error(dotted, "missing");
    return &object.at(key);
  }
  Result<const json*> object(const json& parent_object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(parent_object, parent, key));
    if (!value->is_object()) return error(dotted(parent, key), "expected an object, found " + value->dump());
    return value;
  }
  Result<int64_t> integer(const json& object, const std::string& parent, const std::string& key, int64_t minimum) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_number_integer()) return error(dotted(parent, key), "expected an integer, found " + value->dump());
    if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return error(dotted(parent, key), "out of range: " + value->dump());
    }
    const int64_t number = value->get<int64_t>();
    if (number < minimum) {
      return error(dotted(parent, key), "expected >= " + std::to_string(minimum) + ", found " + std::to_string(number));
    }
    return number;
  }
  Result<uint64_t> unsigned_integer(const json& object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_number_unsigned()) return error(dotted(parent, key), "expected an unsigned integer, found " + value->dump());
    return value->get<uint64_t>();
  }
  Result<double> number(const json& object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_number()) return error(dotted(parent, key), "expected a number, found " + value->dump());
    return value->get<double>();
  }
  Result<std::string> text(const json& object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_string()) return error(dotted(parent, key), "expected a string, found " + value->dump());
    return value->get<std::string>();
  }
  Result<bool> boolean(const json& object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_boolean()) return error(dotted(parent, key), "expected true or false, found " + value->dump());
    return value->get<bool>();
  }
  Result<std::vector<int64_t>> integers(const json& object, const std::string& parent, const std::string& key) const {
    ZEROSIM_ASSIGN_OR_RETURN(const json* value, field(object, parent, key));
    if (!value->is_array()) return error(dotted(parent, key), "expected a list, found " + value->dump());
    std::vector<int64_t> out;
    for (const json& item : *value) {
      if (!item.is_number_unsigned() || item.get<uint64_t>() > (uint64_t{1} << 40)) {
        return error(dotted(parent, key), "expected non-negative integers below 2^40, found " + item.dump());
      }
      out.push_back(item.get<int64_t>());
    }
    return out;
  }

 private:
  static std::string dotted(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
  }
  std::string path_;
};

Result<Precision> parse_precision(const std::string& text, const ManifestReader& reader) {
  for (Precision precision : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
    if (text == precision_name(precision)) return precision;
  }
  return reader.error("precision", "unknown precision '" + text + "'");
}

}  // namespace

namespace {

// format, format_version, zerosim_version, tag, and the config with its hash.
Status read_identity(const json& document, const ManifestReader& reader, const std::string& path,
                     CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string format, reader.text(document, "", "format"));
  if (format != kCheckpointFormatName) {
    return reader.error("format", std::string("expected '") + kCheckpointFormatName + "', found '" + format + "'");
  }
  ZEROSIM_ASSIGN_OR_RETURN(manifest.format_version, reader.integer(document, "", "format_version", 0));
  if (manifest.format_version < kCheckpointFormatVersionWithoutFrozenParameters ||
      manifest.format_version > kCheckpointFormatVersion) {
    return unimplemented(path + ": format_version: this zerosim reads versions " +
                         std::to_string(kCheckpointFormatVersionWithoutFrozenParameters) + " to " +
                         std::to_string(kCheckpointFormatVersion) + ", found " +
                         std::to_string(manifest.format_version));
  }
  ZEROSIM_ASSIGN_OR_RETURN(manifest.zerosim_version, reader.text(document, "", "zerosim_version"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.tag, reader.text(document, "", "tag"));
  ZEROSIM_ASSIGN_OR_RETURN(const json* config, reader.object(document, "", "config"));
  manifest.config = *config;
  ZEROSIM_ASSIGN_OR_RETURN(manifest.config_hash, reader.text(document, "", "config_hash"));
  if (manifest.config_hash != xxh3_128_hex(manifest.config.dump())) {
    return reader.error("config_hash", "expected " + xxh3_128_hex(manifest.config.dump()) + " (the hash of config), found " +
                                           manifest.config_hash);
  }
  return Status();
}

// The model the checkpoint was saved from (an MLP's widths, or a transformer's shape).
Status read_model(const json& document, const ManifestReader& reader, const std::string& path,
                  CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* model, reader.object(document, "", "model"));
  if (model->contains("gpt")) {
    if (manifest.format_version < kCheckpointFormatVersionWithTransformer) {
      return reader.error("model.gpt", "a transformer in a format_version " + std::to_string(manifest.format_version) +
                                           " manifest (the transformer came with version " +
                                           std::to_string(kCheckpointFormatVersionWithTransformer) + ")");
    }
    if (model->size() != 1) return reader.error("model", "a transformer's model holds \"gpt\" alone");
    ZEROSIM_ASSIGN_OR_RETURN(const json* gpt, reader.object(*model, "model", "gpt"));
    if (gpt->size() != 5) return reader.error("model.gpt", "expected layers, embd, heads, vocab and block, found " + gpt->dump());
    GptSpec spec;
    ZEROSIM_ASSIGN_OR_RETURN(spec.layers, reader.integer(*gpt, "model.gpt", "layers", 1));
    ZEROSIM_ASSIGN_OR_RETURN(spec.embd, reader.integer(*gpt, "model.gpt", "embd", 1));
    ZEROSIM_ASSIGN_OR_RETURN(spec.heads, reader.integer(*gpt, "model.gpt", "heads", 1));
    ZEROSIM_ASSIGN_OR_RETURN(spec.vocab, reader.integer(*gpt, "model.gpt", "vocab", 1));
    ZEROSIM_ASSIGN_OR_RETURN(spec.block, reader.integer(*gpt, "model.gpt", "block", 1));
    manifest.model = transformer_model(spec);
    Status model_valid = validate_model_spec(manifest.model);
    if (!model_valid.ok()) return reader.error("model.gpt", model_valid.message());
  } else {
    ZEROSIM_ASSIGN_OR_RETURN(manifest.model.layer_widths, reader.integers(*model, "model", "layer_widths"));
    // Bounded before anything is built from them (a hostile manifest must not allocate or overflow).
    if (manifest.model.layer_widths.size() > 4096) {
      return reader.error("model.layer_widths", "expected at most 4096 widths, found " +
                                                    std::to_string(manifest.model.layer_widths.size()));
    }
    for (int64_t width : manifest.model.layer_widths) {
      if (width > (int64_t{1} << 24)) return reader.error("model.layer_widths", "width " + std::to_string(width) + " exceeds 2^24");
    }
    Status model_valid = validate_model_spec(manifest.model);
    if (!model_valid.ok()) return reader.error("model.layer_widths", model_valid.message());
  }
  return Status();
}

// The dataset: its shape and seed, and a token file with its digest when it has one.
Status read_data(const json& document, const ManifestReader& reader, const std::string& path,
                 CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* data, reader.object(document, "", "data"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.data.sample_count, reader.integer(*data, "data", "sample_count", 1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.data.feature_count, reader.integer(*data, "data", "feature_count", 1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.data.class_count, reader.integer(*data, "data", "class_count", 1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.data.seed, reader.unsigned_integer(*data, "data", "seed"));
  if (data->contains("token_file")) {
    ZEROSIM_ASSIGN_OR_RETURN(manifest.data.token_file, reader.text(*data, "data", "token_file"));
    if (manifest.data.token_file.empty() || !manifest.model.is_transformer()) {
      return reader.error("data.token_file", "written only for a transformer trained on a token file, found '" +
                                                 manifest.data.token_file + "'");
    }
  }
  if (data->contains("token_file_xxh3_128")) {
    ZEROSIM_ASSIGN_OR_RETURN(manifest.data.token_file_xxh3_128, reader.text(*data, "data", "token_file_xxh3_128"));
    if (manifest.data.token_file.empty() || manifest.data.token_file_xxh3_128.size() != 32 ||
        manifest.data.token_file_xxh3_128.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return reader.error("data.token_file_xxh3_128", "expected 32 hex digits beside token_file, found '" +
                                                          manifest.data.token_file_xxh3_128 + "'");
    }
  }
  return Status();
}

// The run's settings a load checks against its own: seed, precision, optimizer, batch.
Status read_run_settings(const json& document, const ManifestReader& reader, const std::string& path,
                         CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(manifest.seed, reader.unsigned_integer(document, "", "seed"));
  ZEROSIM_ASSIGN_OR_RETURN(std::string precision, reader.text(document, "", "precision"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.precision, parse_precision(precision, reader));
  ZEROSIM_ASSIGN_OR_RETURN(const json* optimizer, reader.object(document, "", "optimizer"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.optimizer_type, reader.text(*optimizer, "optimizer", "type"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.adam_w_mode, reader.boolean(*optimizer, "optimizer", "adam_w_mode"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.train_batch_size, reader.integer(document, "", "train_batch_size", 1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.micro_batch_size, reader.integer(document, "", "micro_batch_size", 1));
  return Status();
}

// The model's persistent buffers, each once, in the model's order, with the model's shape.
Status read_buffers(const json& document, const ManifestReader& reader, const std::string& path,
                    CheckpointManifest& manifest) {
  if (document.contains("buffers")) {
    // Persistent buffers of the model, each once, with the model's shape; which of the model's
    // persistent buffers a load needs is the engine's to decide (it refuses a missing one).
    const json& buffers = document["buffers"];
    if (!buffers.is_array() || buffers.empty()) {
      return reader.error("buffers", "expected a non-empty list (written only for a model with persistent buffers)");
    }
    const std::vector<BufferInfo> model_buffer_list = model_buffers(manifest.model);
    for (size_t b = 0; b < buffers.size(); ++b) {
      const std::string parent = "buffers[" + std::to_string(b) + "]";
      if (!buffers[b].is_object() || buffers[b].size() != 2) return reader.error(parent, "expected {\"name\", \"shape\"}");
      ZEROSIM_ASSIGN_OR_RETURN(std::string name, reader.text(buffers[b], parent, "name"));
      ZEROSIM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, reader.integers(buffers[b], parent, "shape"));
      const auto known = std::find_if(model_buffer_list.begin(), model_buffer_list.end(),
                                      [&](const BufferInfo& buffer) { return buffer.name == name && buffer.persistent; });
      if (known == model_buffer_list.end() || known->shape != shape) {
        return reader.error(parent, "'" + name + "' " + json(shape).dump() + " is not a persistent buffer of the model " +
                                        model_spec_to_string(manifest.model));
      }
      for (const BufferInfo& earlier : manifest.buffers) {
        if (earlier.name == name) return reader.error(parent, "'" + name + "' is listed twice");
      }
      // In the model's order, which is the shards' data order.
      if (!manifest.buffers.empty()) {
        const auto previous = std::find_if(model_buffer_list.begin(), model_buffer_list.end(),
                                           [&](const BufferInfo& buffer) { return buffer.name == manifest.buffers.back().name; });
        if (previous > known) return reader.error(parent, "'" + name + "' is listed after '" + previous->name + "' (the model's order puts it first)");
      }
      manifest.buffers.push_back(*known);
    }
  }
  return Status();
}

// The partition layout: world size, sub-group size, and every parameter of the model in order.
Status read_layout(const json& document, const ManifestReader& reader, const std::string& path,
                   CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* layout, reader.object(document, "", "layout"));
  ZEROSIM_ASSIGN_OR_RETURN(int64_t world_size, reader.integer(*layout, "layout", "world_size", 1));
  if (world_size > 4096) return reader.error("layout.world_size", "expected <= 4096, found " + std::to_string(world_size));
  manifest.world_size = static_cast<int>(world_size);
  ZEROSIM_ASSIGN_OR_RETURN(manifest.sub_group_size, reader.integer(*layout, "layout", "sub_group_size", 1));
  ZEROSIM_ASSIGN_OR_RETURN(const json* parameters, reader.field(*layout, "layout", "parameters"));
  // The parameters must be exactly those of the model the manifest names, in order.
  const std::vector<ParameterInfo> expected_parameters = model_parameters(manifest.model);
  if (!parameters->is_array() || parameters->size() != expected_parameters.size()) {
    return reader.error("layout.parameters", "expected a list of " + std::to_string(expected_parameters.size()) +
                                                 " parameters (the model's), found " +
                                                 std::to_string(parameters->is_array() ? parameters->size() : 0));
  }
  for (size_t i = 0; i < expected_parameters.size(); ++i) {
    const std::string parent = "layout.parameters[" + std::to_string(i) + "]";
    ParameterInfo parameter;
    ZEROSIM_ASSIGN_OR_RETURN(parameter.name, reader.text((*parameters)[i], parent, "name"));
    ZEROSIM_ASSIGN_OR_RETURN(parameter.shape, reader.integers((*parameters)[i], parent, "shape"));
    ZEROSIM_ASSIGN_OR_RETURN(parameter.element_count, reader.integer((*parameters)[i], parent, "element_count", 1));
    ZEROSIM_ASSIGN_OR_RETURN(parameter.layer_index, reader.integer((*parameters)[i], parent, "layer_index", 0));
    // Optional keys, present only for a frozen parameter: requires_grad false, and excluded true
    // when its value was left out. Any other value is a damaged manifest.
    for (const auto& [key, value] : (*parameters)[i].items()) {
      if (key == "requires_grad") {
        if (value != json(false)) return reader.error(parent + ".requires_grad", "expected false (written only for a frozen parameter), found " + value.dump());
        parameter.requires_grad = false;
      } else if (key == "excluded") {
        if (value != json(true)) return reader.error(parent + ".excluded", "expected true (written only for an excluded parameter), found " + value.dump());
        manifest.excluded_parameters.push_back(parameter.name);
      } else if (key != "name" && key != "shape" && key != "element_count" && key != "layer_index") {
        return reader.error(parent + "." + key, "unknown key (no writer of format version " +
                                                    std::to_string(kCheckpointFormatVersion) + " writes it)");
      }
    }
    if (!parameter.requires_grad && manifest.format_version < kCheckpointFormatVersionWithFrozenParameters) {
      return reader.error(parent + ".requires_grad", "a frozen parameter in a format_version " +
                                                         std::to_string(manifest.format_version) +
                                                         " manifest (frozen parameters came with version " +
                                                         std::to_string(kCheckpointFormatVersionWithFrozenParameters) + ")");
    }
    if (manifest.excludes(parameter.name) && parameter.requires_grad) {
      return reader.error(parent + ".excluded", "only a frozen parameter (requires_grad false) can be excluded");
    }
    const ParameterInfo& expected = expected_parameters[i];
    if (parameter.name != expected.name || parameter.shape != expected.shape ||
        parameter.element_count != expected.element_count || parameter.layer_index != expected.layer_index) {
      return reader.error(parent, "does not match the model " + model_spec_to_string(manifest.model) + " (expected " +
                                      expected.name + " of " + std::to_string(expected.element_count) + " elements)");
    }
    manifest.parameters.push_back(std::move(parameter));
  }
  return Status();
}

// The counters, consistent with each other.
Status read_counters(const json& document, const ManifestReader& reader, const std::string& path,
                     CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* counters, reader.object(document, "", "counters"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.global_steps, reader.integer(*counters, "counters", "global_steps", 0));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.skipped_steps, reader.integer(*counters, "counters", "skipped_steps", 0));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.global_samples, reader.integer(*counters, "counters", "global_samples", 0));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.optimizer_steps, reader.integer(*counters, "counters", "optimizer_steps", 0));
  if (counters->contains("steps_before_optimizer")) {
    ZEROSIM_ASSIGN_OR_RETURN(manifest.steps_before_optimizer,
                             reader.integer(*counters, "counters", "steps_before_optimizer", 0));
  }
  if (manifest.skipped_steps > manifest.global_steps ||
      manifest.optimizer_steps != manifest.global_steps - manifest.skipped_steps - manifest.steps_before_optimizer) {
    return reader.error("counters", "inconsistent: optimizer_steps " + std::to_string(manifest.optimizer_steps) +
                                        " != global_steps " + std::to_string(manifest.global_steps) +
                                        " - skipped_steps " + std::to_string(manifest.skipped_steps) +
                                        " - steps_before_optimizer " + std::to_string(manifest.steps_before_optimizer));
  }
  return Status();
}

// The scheduler, the loss scaler, the shuffling RNG and the data position.
Status read_scalar_state(const json& document, const ManifestReader& reader, const std::string& path,
                         CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* scheduler, reader.object(document, "", "scheduler"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.scheduler_last_batch_iteration,
                           reader.integer(*scheduler, "scheduler", "last_batch_iteration", -1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.scheduler_learning_rate, reader.number(*scheduler, "scheduler", "learning_rate"));
  ZEROSIM_ASSIGN_OR_RETURN(const json* scaler, reader.object(document, "", "loss_scaler"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.loss_scaler.current_scale, reader.number(*scaler, "loss_scaler", "current_scale"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.loss_scaler.current_iteration,
                           reader.integer(*scaler, "loss_scaler", "current_iteration", 0));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.loss_scaler.last_overflow_iteration,
                           reader.integer(*scaler, "loss_scaler", "last_overflow_iteration", -1));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.loss_scaler.current_hysteresis,
                           reader.integer(*scaler, "loss_scaler", "current_hysteresis", 0));
  ZEROSIM_ASSIGN_OR_RETURN(const json* rng, reader.object(document, "", "rng"));
  ZEROSIM_ASSIGN_OR_RETURN(const json* stream, reader.object(*rng, "rng", "shuffle_stream"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.shuffle_stream.seed, reader.unsigned_integer(*stream, "rng.shuffle_stream", "seed"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.shuffle_stream.stream_id,
                           reader.unsigned_integer(*stream, "rng.shuffle_stream", "stream_id"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.shuffle_stream.counter,
                           reader.unsigned_integer(*stream, "rng.shuffle_stream", "counter"));
  ZEROSIM_ASSIGN_OR_RETURN(manifest.data_position, reader.integer(document, "", "data_position", 0));
  if (manifest.data_position != manifest.global_samples) {
    return reader.error("data_position", "expected counters.global_samples " + std::to_string(manifest.global_samples) +
                                             ", found " + std::to_string(manifest.data_position));
  }
  return Status();
}

// One shard per rank, in rank order, each named once, with its size and digest.
Status read_shards(const json& document, const ManifestReader& reader, const std::string& path,
                   CheckpointManifest& manifest) {
  ZEROSIM_ASSIGN_OR_RETURN(const json* shards, reader.field(document, "", "shards"));
  if (!shards->is_array() || shards->size() != static_cast<size_t>(manifest.world_size)) {
    return reader.error("shards", "expected a list of " + std::to_string(manifest.world_size) +
                                      " shards (one per rank), found " +
                                      std::to_string(shards->is_array() ? shards->size() : 0));
  }
  for (size_t i = 0; i < shards->size(); ++i) {
    const std::string parent = "shards[" + std::to_string(i) + "]";
    ShardRecord shard;
    ZEROSIM_ASSIGN_OR_RETURN(int64_t rank, reader.integer((*shards)[i], parent, "rank", 0));
    if (rank != static_cast<int64_t>(i)) {
      return reader.error(parent + ".rank", "expected " + std::to_string(i) + ", found " + std::to_string(rank));
    }
    shard.rank = static_cast<int>(rank);
    ZEROSIM_ASSIGN_OR_RETURN(shard.file, reader.text((*shards)[i], parent, "file"));
    ZEROSIM_RETURN_IF_ERROR(validate_manifest_file_name(shard.file, path, parent + ".file"));
    if (shard.file == kManifestFileName) return reader.error(parent + ".file", "names the manifest itself");
    ZEROSIM_ASSIGN_OR_RETURN(shard.size_bytes, reader.unsigned_integer((*shards)[i], parent, "size_bytes"));
    ZEROSIM_ASSIGN_OR_RETURN(shard.xxh3_128, reader.text((*shards)[i], parent, "xxh3_128"));
    if (shard.xxh3_128.size() != 32 ||
        shard.xxh3_128.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return reader.error(parent + ".xxh3_128", "expected 32 lowercase hex digits, found '" + shard.xxh3_128 + "'");
    }
    for (const ShardRecord& other : manifest.shards) {
      if (other.file == shard.file) return reader.error(parent + ".file", "'" + shard.file + "' is listed twice");
    }
    manifest.shards.push_back(std::move(shard));
  }
  return Status();
}
}  // namespace

Result<CheckpointManifest> manifest_from_json(const json& document, const std::string& path) {
  const ManifestReader reader(path);
  if (!document.is_object()) return reader.error("(document)", "expected a JSON object");
  CheckpointManifest manifest;
  // Every key is one a writer of this format puts there: another is a damaged name (the key it
  // stood for is then missing, or it was the optional seal), never something to ignore.
  static constexpr std::string_view kTopLevelKeys[] = {
      "format", "format_version", "zerosim_version", "tag", "config", "config_hash", "model", "data", "seed",
      "precision", "optimizer", "train_batch_size", "micro_batch_size", "layout", "counters", "scheduler",
      "loss_scaler", "rng", "data_position", "shards", "buffers", kManifestChecksumKey};
  for (const auto& [key, value] : document.items()) {
    if (std::find(std::begin(kTopLevelKeys), std::end(kTopLevelKeys), key) == std::end(kTopLevelKeys)) {
      return data_loss(path + ": " + key + ": unknown key (no writer of format version " +
                       std::to_string(kCheckpointFormatVersion) + " writes it: a damaged manifest?)");
    }
  }
  ZEROSIM_RETURN_IF_ERROR(read_identity(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_model(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_data(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_run_settings(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_buffers(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_layout(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_counters(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_scalar_state(document, reader, path, manifest));
  ZEROSIM_RETURN_IF_ERROR(read_shards(document, reader, path, manifest));
  return manifest;
}

namespace {
// The seal of a manifest object that holds no seal.
std::string manifest_seal_of_unsealed(const nlohmann::json& manifest) { return xxh3_128_hex(manifest.dump()); }

// Takes the seal out of `manifest` (an object) and compares it with the rest's hash; the seal
// goes back in either way. In place: a manifest is not copied to be hashed.
Status check_seal_in_place(nlohmann::json& manifest, const std::string& path) {
  auto found = manifest.find(kManifestChecksumKey);
  if (found == manifest.end()) return Status();
  nlohmann::json recorded = std::move(*found);
  manifest.erase(found);
  const std::string expected = manifest_seal_of_unsealed(manifest);
  const bool matches = recorded.is_string() && recorded.get_ref<const std::string&>() == expected;
  const std::string recorded_text = matches ? std::string() : recorded.dump();
  manifest[kManifestChecksumKey] = std::move(recorded);
  if (matches) return Status();
  return data_loss(path + ": " + kManifestChecksumKey + ": the manifest does not match its own checksum (recorded " +
                   recorded_text + ", content hashes to " + expected + "): damaged at rest");
}
}  // namespace

void seal_manifest(nlohmann::json& manifest) {
  manifest.erase(kManifestChecksumKey);
  manifest[kManifestChecksumKey] = manifest_seal_of_unsealed(manifest);
}

Status check_manifest_seal(const nlohmann::json& manifest, const std::string& path) {
  if (!manifest.is_object() || !manifest.contains(kManifestChecksumKey)) return Status();
  nlohmann::json copy = manifest;
  return check_seal_in_place(copy, path);
}

Result<CheckpointManifest> read_manifest(Disk& disk, const std::string& tag_directory) {
  const std::string path = tag_directory + "/" + kManifestFileName;
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(path));
  if (!exists) return not_found(path + " does not exist (the save never committed, or this is not a checkpoint)");
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
  if (size > (64u << 20)) return data_loss(path + ": " + std::to_string(size) + " bytes is larger than any manifest");
  std::string text(size, '\0');
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(0, std::as_writable_bytes(std::span<char>(text))));
  ZEROSIM_RETURN_IF_ERROR(file->close());
  ZEROSIM_RETURN_IF_ERROR(check_json_nesting(text, kMaxManifestJsonDepth, path));
  json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return data_loss(path + ": not valid JSON (torn or corrupted manifest)");
  if (document.is_object()) ZEROSIM_RETURN_IF_ERROR(check_seal_in_place(document, path));
  // The seal hashes the parsed content, so a flip that keeps the meaning ('e' and 'E' in an
  // exponent, say) passes it; the bytes of a sealed manifest are also exactly what the writer
  // wrote (save_checkpoint: dump(2) and a newline), and anything else is damage at rest.
  if (document.is_object() && document.contains(kManifestChecksumKey)) {
    const std::string canonical = document.dump(2) + "\n";
    if (canonical != text) {
      size_t first = 0;
      while (first < text.size() && first < canonical.size() && text[first] == canonical[first]) ++first;
      return data_loss(path + ": byte " + std::to_string(first) + " differs from what the manifest's content is written as "
                       "(the seal matches, so the change kept the meaning): damaged at rest");
    }
  }
  return manifest_from_json(document, path);
}

Result<CheckpointManifest> read_complete_tag(Disk& disk, const std::string& checkpoint_directory,
                                             const std::string& tag) {
  ZEROSIM_RETURN_IF_ERROR(validate_checkpoint_tag(tag));
  const std::string tag_directory = checkpoint_directory + "/" + tag;
  ZEROSIM_ASSIGN_OR_RETURN(CheckpointManifest manifest, read_manifest(disk, tag_directory));
  if (manifest.tag != tag) {
    return data_loss(tag_directory + "/" + kManifestFileName + ": tag: expected '" + tag + "' (its directory), found '" +
                     manifest.tag + "'");
  }
  for (const ShardRecord& shard : manifest.shards) {
    const std::string path = tag_directory + "/" + shard.file;
    ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(path));
    if (!exists) return data_loss("missing shard " + path + " (rank " + std::to_string(shard.rank) + " of the manifest)");
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
    ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
    ZEROSIM_RETURN_IF_ERROR(file->close());
    ZEROSIM_RETURN_IF_ERROR(check_shard_size(path, shard, size));
  }
  return manifest;
}

Status check_shard_size(const std::string& path, const ShardRecord& record, uint64_t size_bytes) {
  if (size_bytes == record.size_bytes) return Status();
  return data_loss("shard " + path + ": expected " + std::to_string(record.size_bytes) + " bytes (manifest), found " +
                   std::to_string(size_bytes) + (size_bytes < record.size_bytes ? " (truncated)" : ""));
}

Status check_tag_complete(Disk& disk, const std::string& checkpoint_directory, const std::string& tag) {
  return read_complete_tag(disk, checkpoint_directory, tag).status();
}

Result<std::vector<std::string>> list_complete_tags(Disk& disk, const std::string& checkpoint_directory) {
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk.list_directory(checkpoint_directory));
  std::vector<std::pair<int64_t, std::string>> complete;
  for (const std::string& name : names) {
    if (name == "latest" || !validate_checkpoint_tag(name).ok()) continue;
    Result<CheckpointManifest> manifest = read_complete_tag(disk, checkpoint_directory, name);
    if (manifest.ok()) {
      complete.emplace_back(manifest->global_steps, name);
    } else if (manifest.status().code() == StatusCode::kIoError) {
      return manifest.status();  // not a verdict on the tag: report it
    }
  }
  std::sort(complete.begin(), complete.end());
  std::vector<std::string> tags;
  for (auto& [step, name] : complete) tags.push_back(std::move(name));
  return tags;
}

namespace {

constexpr const char* kInvalidCommittedMarker = " was committed (its manifest exists) but is invalid: ";

}  // namespace

bool is_invalid_committed_checkpoint(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument && status.message().find(kInvalidCommittedMarker) != std::string::npos;
}

namespace {

// Why a tag that is not complete is so: "" when it was never committed (no manifest, or a
// missing or short shard: what a crash leaves), else the reason its committed manifest is invalid.
Result<std::string> invalid_committed_reason(Disk& disk, const std::string& checkpoint_directory, const std::string& tag,
                                             const Status& incomplete) {
  const std::string tag_directory = checkpoint_directory + "/" + tag;
  ZEROSIM_ASSIGN_OR_RETURN(bool committed, disk.exists(tag_directory + "/" + kManifestFileName));
  if (!committed) return std::string();
  Result<CheckpointManifest> read = read_manifest(disk, tag_directory);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kIoError) return read.status();
    return read.status().message();
  }
  if (read->tag != tag) return incomplete.message();
  return std::string();  // the manifest is valid: a shard is missing or short
}

}  // namespace

Result<std::string> resolve_checkpoint_tag(Disk& disk, const std::string& checkpoint_directory,
                                           const std::string& requested, std::string* warning,
                                           CheckpointManifest* manifest, bool fallback_on_invalid) {
  ZEROSIM_ASSIGN_OR_RETURN(bool directory_exists, disk.exists(checkpoint_directory));
  if (!directory_exists) return not_found("checkpoint directory " + checkpoint_directory + " does not exist");
  auto resolved = [&](const std::string& tag, CheckpointManifest&& read) -> Result<std::string> {
    if (manifest != nullptr) *manifest = std::move(read);
    return tag;
  };
  if (requested != "latest") {
    ZEROSIM_ASSIGN_OR_RETURN(CheckpointManifest read, read_complete_tag(disk, checkpoint_directory, requested));
    return resolved(requested, std::move(read));
  }
  // Only a missing or damaged checkpoint is a reason to fall back: an I/O error is reported,
  // or ranks that see different errors would load different steps.
  auto falls_back = [](const Status& status) {
    return status.code() == StatusCode::kNotFound || status.code() == StatusCode::kDataLoss;
  };
  Result<std::string> pointed = read_latest_tag(disk, checkpoint_directory);
  std::string reason;
  if (pointed.ok()) {
    Result<CheckpointManifest> complete = read_complete_tag(disk, checkpoint_directory, pointed.value());
    if (complete.ok()) return resolved(pointed.value(), std::move(complete).value());
    if (!falls_back(complete.status())) return complete.status();
    reason = checkpoint_directory + "/latest names '" + pointed.value() + "', which is not a complete checkpoint (" +
             complete.status().message() + ")";
  } else {
    if (!falls_back(pointed.status())) return pointed.status();
    reason = pointed.status().message();
  }
  // Falling back passes over every tag that is not complete: each must be one a crash left.
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk.list_directory(checkpoint_directory));
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (name == "latest" || !validate_checkpoint_tag(name).ok()) continue;
    const Status complete = check_tag_complete(disk, checkpoint_directory, name);
    if (complete.ok() || !falls_back(complete)) continue;
    ZEROSIM_ASSIGN_OR_RETURN(std::string invalid, invalid_committed_reason(disk, checkpoint_directory, name, complete));
    if (invalid.empty()) continue;
    const std::string passed_over = "checkpoint " + checkpoint_directory + "/" + name + kInvalidCommittedMarker + invalid;
    if (!fallback_on_invalid) {
      return invalid_argument(passed_over + "; a crash does not leave that, so it is not passed over (load an older tag "
                              "by name, or allow it with --fallback-on-invalid)");
    }
    reason += "; passed over " + passed_over;
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> tags, list_complete_tags(disk, checkpoint_directory));
  if (tags.empty()) return not_found("no complete checkpoint in " + checkpoint_directory + ": " + reason);
  if (warning != nullptr) *warning = "warning: " + reason + "; loading the newest complete tag '" + tags.back() + "'";
  if (manifest == nullptr) return tags.back();
  ZEROSIM_ASSIGN_OR_RETURN(CheckpointManifest read, read_complete_tag(disk, checkpoint_directory, tags.back()));
  return resolved(tags.back(), std::move(read));
}

Status apply_retention(Disk& disk, const std::string& checkpoint_directory, int64_t keep_last,
                       std::vector<std::string>* removed) {
  if (keep_last <= 0) return Status();
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> tags, list_complete_tags(disk, checkpoint_directory));
  Result<std::string> latest = read_latest_tag(disk, checkpoint_directory);
  const std::string protected_tag = latest.ok() ? latest.value() : std::string();
  // The newest keep_last tags stay, and so does the one `latest` names, wherever it is.
  const int64_t removable = static_cast<int64_t>(tags.size()) - keep_last;
  for (int64_t i = 0; i < removable; ++i) {
    const std::string& tag = tags[static_cast<size_t>(i)];
    if (tag == protected_tag) continue;
    ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(checkpoint_directory + "/" + tag));
    if (removed != nullptr) removed->push_back(tag);
  }
  return disk.sync_directory(checkpoint_directory);
}

namespace {

void flatten(const json& value, const std::string& prefix, std::map<std::string, json>& out) {
  if (value.is_object() && (!value.empty() || prefix.empty())) {
    for (const auto& [key, item] : value.items()) flatten(item, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out[prefix] = value;
  }
}

// Keys whose value changes where state lives or what is logged, never a number of the run.
bool is_layout_only_key(const std::string& key) {
  static const char* const kPrefixes[] = {
      "steps_per_print", "wall_clock_breakdown", "checkpoint", "aio", "tensorboard", "wandb", "csv_monitor", "comet",
      "comms_logger", "flops_profiler", "timers", "dump_state", "memory_breakdown",
      "zero_optimization.offload_optimizer", "zero_optimization.offload_param", "zero_optimization.sub_group_size",
      "zero_optimization.reduce_bucket_size", "zero_optimization.allgather_bucket_size",
      "zero_optimization.stage3_", "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients",
      "zero_optimization.gather_16bit_weights_on_model_save", "zero_optimization.stage3_gather_16bit_weights_on_model_save",
      // Where DeepSpeed's stage 1/2 shards put the optimizer state; zerosim's load at any W anyway.
      "zero_optimization.elastic_checkpoint",
      // With train_batch_size and the micro batch unchanged, the accumulation only follows the
      // world size: the same micro-batches are folded in the same global order.
      "gradient_accumulation_steps"};
  for (const char* prefix : kPrefixes) {
    if (key.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

Result<ResumeCompatibility> check_resume_compatibility(const CheckpointManifest& manifest, const ResumeTarget& target,
                                                       const std::string& manifest_path) {
  const ResolvedConfig& config = *target.config;
  auto breaking = [&](const std::string& key, const std::string& saved, const std::string& now) {
    return invalid_argument("cannot resume from " + manifest_path + ": " + key + " differs (checkpoint " + saved +
                               ", this run " + now + "); this change breaks resume");
  };
  if (manifest.model != *target.model) {
    return breaking("model shape", model_spec_to_string(manifest.model), model_spec_to_string(*target.model));
  }
  if (manifest.precision != config.precision) {
    return breaking("parameter dtype (fp16/bf16.enabled)", precision_name(manifest.precision),
                    precision_name(config.precision));
  }
  ResumeCompatibility result;
  if (manifest.optimizer_type != config.optimizer.type || manifest.adam_w_mode != config.optimizer.adam_w_mode) {
    auto describe = [](const std::string& type, bool adam_w_mode) {
      return type + (adam_w_mode ? " (decoupled weight decay)" : " (L2 weight decay)");
    };
    if (target.loads_optimizer_state) {
      return breaking("optimizer type", describe(manifest.optimizer_type, manifest.adam_w_mode),
                      describe(config.optimizer.type, config.optimizer.adam_w_mode));
    }
    result.notes.push_back("note: optimizer type differs (checkpoint " +
                           describe(manifest.optimizer_type, manifest.adam_w_mode) + ", this run " +
                           describe(config.optimizer.type, config.optimizer.adam_w_mode) +
                           "); the optimizer starts fresh, so the change is allowed");
  }
  const DatasetSpec& data = *target.data;
  // A token file is its contents: the same digest under another path is the same data (noted);
  // without a digest on either side, the path is all there is to compare.
  DatasetSpec compared_data = data;
  if (!manifest.data.token_file_xxh3_128.empty() && manifest.data.token_file_xxh3_128 == data.token_file_xxh3_128 &&
      manifest.data.token_file != data.token_file) {
    result.notes.push_back("note: the token file is " + data.token_file + " now (the checkpoint's was " +
                           manifest.data.token_file + "); the same contents (xxh3_128 " + data.token_file_xxh3_128 + ")");
    compared_data.token_file = manifest.data.token_file;
  }
  if (!(manifest.data == compared_data)) {
    const bool transformer = manifest.model.is_transformer();
    auto describe = [transformer](const DatasetSpec& spec) {
      std::string text = transformer ? std::to_string(spec.sample_count) + " windows of " +
                                           std::to_string(spec.feature_count) + " tokens, vocabulary " +
                                           std::to_string(spec.class_count)
                                     : std::to_string(spec.sample_count) + " samples, " +
                                           std::to_string(spec.feature_count) + " features, " +
                                           std::to_string(spec.class_count) + " classes";
      text += ", seed " + std::to_string(spec.seed);
      if (!spec.token_file.empty()) {
        text += ", token file " + spec.token_file + " (xxh3_128 " +
                (spec.token_file_xxh3_128.empty() ? std::string("unknown") : spec.token_file_xxh3_128) + ")";
      }
      return text;
    };
    if (target.loads_data_position) {
      return breaking("dataset (the data position would mean other samples)", describe(manifest.data), describe(data));
    }
    result.notes.push_back("note: dataset differs (checkpoint " + describe(manifest.data) + ", this run " +
                           describe(data) + "); the data position starts at 0, so the change is allowed");
  }

  std::string frozen_now, unfrozen, excluded;
  for (size_t p = 0; p < manifest.parameters.size(); ++p) {
    const ParameterInfo& saved = manifest.parameters[p];
    const bool trainable_now = target.parameters == nullptr || (*target.parameters)[p].requires_grad;
    if (!saved.requires_grad && trainable_now && target.loads_optimizer_state) {
      return invalid_argument("cannot resume from " + manifest_path + ": parameter " + saved.name +
                              " is frozen in the checkpoint (it holds no optimizer state for it) but trainable in "
                              "this run; freeze it again, or load with load_optimizer_states=false "
                              "(--load-optimizer-states false) for a fresh optimizer");
    }
    if (saved.requires_grad && !trainable_now) frozen_now += (frozen_now.empty() ? "" : ", ") + saved.name;
    if (!saved.requires_grad && trainable_now) unfrozen += (unfrozen.empty() ? "" : ", ") + saved.name;
    if (manifest.excludes(saved.name)) excluded += (excluded.empty() ? "" : ", ") + saved.name;
  }
  if (!frozen_now.empty()) {
    result.notes.push_back("note: " + frozen_now + " frozen in this run but trainable when saved: the values are "
                           "loaded, the optimizer state for them is dropped");
  }
  if (!unfrozen.empty()) {
    result.notes.push_back("note: " + unfrozen + " frozen when saved, trainable in this run: they train from their "
                           "saved values with the fresh optimizer");
  }
  if (!excluded.empty()) {
    result.notes.push_back(
        manifest.seed == target.seed
            ? "note: the checkpoint excluded frozen parameters (exclude_frozen_parameters): " + excluded +
                  " keep this run's own values (initialised from seed " + std::to_string(target.seed) + ")"
            : "warning: the checkpoint excluded frozen parameters (exclude_frozen_parameters): " + excluded +
                  " keep this run's own values, initialised from seed " + std::to_string(target.seed) +
                  ", not the checkpoint's seed " + std::to_string(manifest.seed) +
                  ": they differ from the values the saving run had");
  } else if (manifest.seed != target.seed) {
    result.notes.push_back("note: seed differs (checkpoint " + std::to_string(manifest.seed) + ", this run " +
                           std::to_string(target.seed) + "); it only initialises parameters, which come from the "
                           "checkpoint: no effect");
  }
  std::map<std::string, json> saved, now;
  flatten(manifest.config, "", saved);
  flatten(config.resolved.is_object() ? config.resolved : json::object(), "", now);
  std::vector<std::string> keys;
  for (const auto& [key, value] : saved) keys.push_back(key);
  for (const auto& [key, value] : now) {
    if (!saved.count(key)) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    const auto saved_value = saved.find(key);
    const auto now_value = now.find(key);
    const std::string saved_text = saved_value == saved.end() ? "absent" : saved_value->second.dump();
    const std::string now_text = now_value == now.end() ? "absent" : now_value->second.dump();
    if (saved_text == now_text) continue;
    if (is_layout_only_key(key)) {
      result.notes.push_back("note: " + key + " changed from " + saved_text + " to " + now_text +
                             " (safe: it does not change the numbers of the run)");
    } else {
      result.notes.push_back("warning: " + key + " changed from " + saved_text + " to " + now_text +
                             "; resume is allowed, but the continued run will differ from the uninterrupted one");
    }
  }
  return result;
}

}  // namespace zerosim
