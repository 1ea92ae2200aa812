#include "tools/ckpt_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"
#include "core/checkpoint/export.h"
#include "core/checkpoint/shard_reader.h"
#include "core/env/disk.h"
#include "core/model/mlp.h"
#include "core/tensor/dtype.h"

namespace zerosim {

int checkpoint_exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
    case StatusCode::kNotFound: return 2;
    case StatusCode::kIoError:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition: return 3;
    default: return 1;  // kDataLoss, kUnimplemented (format version), kOutOfRange, kInternal, ...
  }
}

namespace {

using nlohmann::json;

std::string format_text(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string format_text(const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  va_list measuring;
  va_copy(measuring, arguments);
  const int length = std::vsnprintf(nullptr, 0, format, measuring);
  va_end(measuring);
  std::string text(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, arguments);
  va_end(arguments);
  return text;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// "ckpt/" and "ckpt" name the same directory; the messages should print one spelling.
std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

int report_failure(const char* command, const Status& status) {
  std::fprintf(stderr, "zerosim: ckpt %s failed: %s\n", command, status.to_string().c_str());
  return checkpoint_exit_code_for(status);
}

// A resolved checkpoint: its tag and manifest, and the warning when `latest` fell back.
struct OpenedCheckpoint {
  std::string directory;
  std::string tag;
  std::string tag_directory;
  std::string fallback_warning;
  CheckpointManifest manifest;
};

// " (complete tags: a, b)" for an error that names a tag which is not there.
std::string complete_tags_text(Disk& disk, const std::string& directory) {
  Result<std::vector<std::string>> tags = list_complete_tags(disk, directory);
  if (!tags.ok()) return "";
  if (tags->empty()) return " (it holds no complete tag)";
  std::string text = " (complete tags: ";
  for (size_t i = 0; i < tags->size(); ++i) text += (i > 0 ? ", " : "") + (*tags)[i];
  return text + ")";
}

Result<OpenedCheckpoint> open_checkpoint(Disk& disk, const CheckpointLocationFlags& location) {
  OpenedCheckpoint opened;
  opened.directory = without_trailing_slashes(location.directory);
  const std::string& directory = opened.directory;
  // The Disk seam has no stat; a regular file given as the directory deserves its own message
  // rather than the ENOTDIR of the first read under it.
  std::error_code error;
  const std::filesystem::file_status file_status = std::filesystem::status(directory, error);
  if (!std::filesystem::exists(file_status)) return not_found("checkpoint directory " + directory + " does not exist");
  if (!std::filesystem::is_directory(file_status)) {
    return invalid_argument(directory + " is not a directory (expected a checkpoint directory holding tags and `latest`)");
  }
  if (location.tag != "latest") {
    ZEROSIM_RETURN_IF_ERROR(validate_checkpoint_tag(location.tag));
    ZEROSIM_ASSIGN_OR_RETURN(bool tag_exists, disk.exists(directory + "/" + location.tag));
    if (!tag_exists) return not_found("no tag '" + location.tag + "' in " + directory + complete_tags_text(disk, directory));
  }
  Result<std::string> resolved = resolve_checkpoint_tag(disk, directory, location.tag, &opened.fallback_warning);
  if (!resolved.ok()) {
    // A committed checkpoint that fails validation is damage, for the ckpt commands (exit 1).
    if (is_invalid_committed_checkpoint(resolved.status())) return data_loss(resolved.status().message());
    // Resolution answers kNotFound both for "no checkpoint here" (bad input) and for "the tag
    // asked for, or the one `latest` names, is incomplete" (damage); tell them apart here.
    if (resolved.status().code() != StatusCode::kNotFound) return resolved.status();
    ZEROSIM_ASSIGN_OR_RETURN(bool latest_exists, disk.exists(directory + "/latest"));
    if (location.tag != "latest" || latest_exists) return data_loss(resolved.status().message());
    ZEROSIM_ASSIGN_OR_RETURN(bool is_tag_directory, disk.exists(directory + "/" + kManifestFileName));
    if (is_tag_directory) {
      return not_found(resolved.status().message() + "; " + directory +
                       " holds a manifest, so it looks like one tag: pass its parent directory and --tag");
    }
    return resolved.status();
  }
  opened.tag = resolved.value();
  opened.tag_directory = directory + "/" + opened.tag;
  Result<CheckpointManifest> manifest = read_manifest(disk, opened.tag_directory);
  if (!manifest.ok()) {
    // The tag was complete a moment ago: a manifest gone now is damage (or a concurrent
    // retention), not a wrong argument.
    if (manifest.status().code() == StatusCode::kNotFound) return data_loss(manifest.status().message());
    return manifest.status();
  }
  opened.manifest = std::move(manifest).value();
  return opened;
}

void print_fallback_warning(const OpenedCheckpoint& opened) {
  if (!opened.fallback_warning.empty()) std::fprintf(stderr, "zerosim: %s\n", opened.fallback_warning.c_str());
}

uint64_t total_shard_bytes(const CheckpointManifest& manifest) {
  uint64_t total = 0;
  for (const ShardRecord& shard : manifest.shards) total += shard.size_bytes;
  return total;
}

// ---- diff -------------------------------------------------------------------------------

struct ScalarDifference {
  std::string name;
  std::string text;  // "2 vs 4", with bits and ULP distance for floating-point values
  json document;
};

struct TensorDifference {
  std::string tensor;  // "<parameter>/<state>"
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
  int64_t element_count = 0;
  int64_t element_index = -1;  // flat, row-major: the first element whose bits differ
  uint64_t bits_a = 0;
  uint64_t bits_b = 0;
  float value_a = 0.0f;
  float value_b = 0.0f;
  uint64_t ulp_distance = 0;
  int64_t differing_elements = 0;
};

struct DiffOutcome {
  std::vector<ScalarDifference> scalar_differences;
  std::optional<TensorDifference> tensor_difference;
  int64_t tensors_to_compare = 0;
  int64_t tensors_compared = 0;
  int64_t elements_compared = 0;
  std::vector<std::string> notes;
};

class ScalarComparison {
 public:
  explicit ScalarComparison(std::vector<ScalarDifference>& differences) : differences_(differences) {}

  void integer(const char* name, int64_t a, int64_t b) {
    if (a != b) add(name, format_text("%" PRId64 " vs %" PRId64, a, b), json{{"a", a}, {"b", b}});
  }
  void unsigned_integer(const char* name, uint64_t a, uint64_t b) {
    if (a != b) add(name, format_text("%" PRIu64 " vs %" PRIu64, a, b), json{{"a", a}, {"b", b}});
  }
  void text(const char* name, const std::string& a, const std::string& b) {
    if (a != b) add(name, a + " vs " + b, json{{"a", a}, {"b", b}});
  }
  // Bitwise, as the tensors: a value that merely prints the same still differs.
  void real(const char* name, double a, double b) {
    const uint64_t bits_a = std::bit_cast<uint64_t>(a);
    const uint64_t bits_b = std::bit_cast<uint64_t>(b);
    if (bits_a == bits_b) return;
    const uint64_t distance = ulp_distance(a, b);
    add(name,
        format_text("%.17g (0x%016" PRIx64 ") vs %.17g (0x%016" PRIx64 "), ulp distance %" PRIu64, a, bits_a, b, bits_b,
                    distance),
        json{{"a", a},
             {"b", b},
             {"a_bits", format_text("0x%016" PRIx64, bits_a)},
             {"b_bits", format_text("0x%016" PRIx64, bits_b)},
             {"ulp_distance", distance}});
  }

 private:
  void add(const char* name, std::string text, json document) {
    document["name"] = name;
    differences_.push_back(ScalarDifference{name, std::move(text), std::move(document)});
  }
  std::vector<ScalarDifference>& differences_;
};

// The state that decides every later step; the layout (world size, sub-groups, shard files)
// is not in it: any world size reassembles the same tensors.
void compare_scalars(const CheckpointManifest& a, const CheckpointManifest& b, DiffOutcome& outcome) {
  ScalarComparison compare(outcome.scalar_differences);
  compare.text("precision", precision_name(a.precision), precision_name(b.precision));
  compare.integer("counters.global_steps", a.global_steps, b.global_steps);
  compare.integer("counters.skipped_steps", a.skipped_steps, b.skipped_steps);
  compare.integer("counters.global_samples", a.global_samples, b.global_samples);
  compare.integer("counters.optimizer_steps", a.optimizer_steps, b.optimizer_steps);
  compare.integer("scheduler.last_batch_iteration", a.scheduler_last_batch_iteration, b.scheduler_last_batch_iteration);
  compare.real("scheduler.learning_rate", a.scheduler_learning_rate, b.scheduler_learning_rate);
  compare.real("loss_scaler.current_scale", a.loss_scaler.current_scale, b.loss_scaler.current_scale);
  compare.integer("loss_scaler.current_iteration", a.loss_scaler.current_iteration, b.loss_scaler.current_iteration);
  compare.integer("loss_scaler.last_overflow_iteration", a.loss_scaler.last_overflow_iteration,
                  b.loss_scaler.last_overflow_iteration);
  compare.integer("loss_scaler.current_hysteresis", a.loss_scaler.current_hysteresis, b.loss_scaler.current_hysteresis);
  compare.unsigned_integer("rng.shuffle_stream.seed", a.shuffle_stream.seed, b.shuffle_stream.seed);
  compare.unsigned_integer("rng.shuffle_stream.stream_id", a.shuffle_stream.stream_id, b.shuffle_stream.stream_id);
  compare.unsigned_integer("rng.shuffle_stream.counter", a.shuffle_stream.counter, b.shuffle_stream.counter);
  compare.integer("data_position", a.data_position, b.data_position);
  // What each holds per parameter (trainable: four states; frozen: its value; excluded: none):
  // state, not layout (a frozen parameter has no optimizer state to continue from).
  for (size_t p = 0; p < a.parameters.size() && p < b.parameters.size(); ++p) {
    auto held = [&](const CheckpointManifest& manifest) {
      std::string names;
      for (CheckpointState state : manifest.stored_states(p)) names += (names.empty() ? "" : ",") + std::string(checkpoint_state_name(state));
      return names.empty() ? std::string("nothing (excluded)") : names;
    };
    const std::string key = "parameters." + a.parameters[p].name + ".stored";
    compare.text(key.c_str(), held(a), held(b));
  }
}

// Settings that are not training state but change what a resume from either would do next:
// said as notes, never counted as a difference (W=2 and W=3 runs of one global batch differ
// in gradient_accumulation_steps, hence in the config hash, yet hold the same state).
void note_setting_differences(const CheckpointManifest& a, const CheckpointManifest& b, DiffOutcome& outcome) {
  std::vector<ScalarDifference> settings;
  ScalarComparison compare(settings);
  compare.unsigned_integer("seed", a.seed, b.seed);
  compare.integer("data.sample_count", a.data.sample_count, b.data.sample_count);
  compare.unsigned_integer("data.seed", a.data.seed, b.data.seed);
  compare.text("optimizer.type", a.optimizer_type, b.optimizer_type);
  compare.text("optimizer.adam_w_mode", a.adam_w_mode ? "true" : "false", b.adam_w_mode ? "true" : "false");
  compare.integer("train_batch_size", a.train_batch_size, b.train_batch_size);
  compare.integer("micro_batch_size", a.micro_batch_size, b.micro_batch_size);
  compare.text("config_hash", a.config_hash, b.config_hash);
  for (const ScalarDifference& setting : settings) {
    outcome.notes.push_back("setting " + setting.name + " differs (not training state, not compared): " + setting.text);
  }
}

// Models of different shapes cannot be compared element by element: bad input, naming both.
Status check_same_model(const OpenedCheckpoint& a, const OpenedCheckpoint& b) {
  const std::vector<ParameterInfo>& parameters_a = a.manifest.parameters;
  const std::vector<ParameterInfo>& parameters_b = b.manifest.parameters;
  std::string first_difference;
  for (size_t i = 0; i < std::max(parameters_a.size(), parameters_b.size()) && first_difference.empty(); ++i) {
    if (i >= parameters_a.size() || i >= parameters_b.size()) {
      first_difference = format_text("%zu vs %zu parameters", parameters_a.size(), parameters_b.size());
    } else if (parameters_a[i].name != parameters_b[i].name || parameters_a[i].shape != parameters_b[i].shape) {
      first_difference = "parameter " + std::to_string(i) + " is " + parameters_a[i].name + " " +
                         shape_text(parameters_a[i].shape) + " vs " + parameters_b[i].name + " " +
                         shape_text(parameters_b[i].shape);
    }
  }
  if (first_difference.empty()) return Status();
  return invalid_argument("cannot compare models of different shapes: " + a.tag_directory + " holds model " +
                          model_spec_to_string(a.manifest.model) + ", " + b.tag_directory + " holds model " +
                          model_spec_to_string(b.manifest.model) + " (" + first_difference + ")");
}

uint64_t element_bits(const std::byte* element, size_t element_bytes) {
  if (element_bytes == 2) {
    uint16_t bits;
    std::memcpy(&bits, element, sizeof bits);
    return bits;
  }
  uint32_t bits;
  std::memcpy(&bits, element, sizeof bits);
  return bits;
}

// Reads in chunks so that memory stays bounded whatever a parameter's size: two chunks at a time.
constexpr int64_t kDiffChunkElements = int64_t{1} << 22;

// Compares one state of one parameter bitwise; fills `difference` when any element differs.
Status compare_tensor(CheckpointShardReader& reader_a, CheckpointShardReader& reader_b, int64_t parameter_index,
                      const ParameterInfo& parameter, CheckpointState state, std::optional<TensorDifference>& difference) {
  const DType dtype = reader_a.state_dtype(state);
  const size_t element_bytes = dtype_size_bytes(dtype);
  const int64_t chunk_elements = std::min(parameter.element_count, kDiffChunkElements);
  std::vector<std::byte> chunk_a(static_cast<size_t>(chunk_elements) * element_bytes);
  std::vector<std::byte> chunk_b(chunk_a.size());
  for (int64_t begin = 0; begin < parameter.element_count; begin += chunk_elements) {
    const int64_t count = std::min(chunk_elements, parameter.element_count - begin);
    const size_t byte_count = static_cast<size_t>(count) * element_bytes;
    const std::span<std::byte> span_a(chunk_a.data(), byte_count);
    const std::span<std::byte> span_b(chunk_b.data(), byte_count);
    ZEROSIM_RETURN_IF_ERROR(reader_a.read(parameter_index, state, begin, count, span_a));
    ZEROSIM_RETURN_IF_ERROR(reader_b.read(parameter_index, state, begin, count, span_b));
    if (std::memcmp(chunk_a.data(), chunk_b.data(), byte_count) == 0) continue;
    for (int64_t i = 0; i < count; ++i) {
      const std::byte* element_a = chunk_a.data() + static_cast<size_t>(i) * element_bytes;
      const std::byte* element_b = chunk_b.data() + static_cast<size_t>(i) * element_bytes;
      if (std::memcmp(element_a, element_b, element_bytes) == 0) continue;
      if (!difference) {
        TensorDifference found;
        found.tensor = checkpoint_tensor_name(parameter.name, state);
        found.dtype = dtype;
        found.shape = parameter.shape;
        found.element_count = parameter.element_count;
        found.element_index = begin + i;
        found.bits_a = element_bits(element_a, element_bytes);
        found.bits_b = element_bits(element_b, element_bytes);
        cast_to_fp32(dtype, element_a, &found.value_a, 1);
        cast_to_fp32(dtype, element_b, &found.value_b, 1);
        found.ulp_distance = ulp_distance_bits(found.bits_a, found.bits_b, static_cast<int>(element_bytes * 8));
        difference = std::move(found);
      }
      ++difference->differing_elements;
    }
  }
  return Status();
}

// Every parameter in order, every state in shard order, up to and including the first tensor
// that differs: one differing tensor is the answer, the rest would only cost reading.
Status compare_tensors(Disk& disk, const OpenedCheckpoint& a, const OpenedCheckpoint& b, DiffOutcome& outcome) {
  CheckpointShardReader reader_a(disk, a.tag_directory, a.manifest);
  CheckpointShardReader reader_b(disk, b.tag_directory, b.manifest);
  const bool same_model_dtype = a.manifest.precision == b.manifest.precision;
  if (!same_model_dtype) {
    outcome.notes.push_back(std::string("the param tensors are not compared: they are ") +
                            precision_name(a.manifest.precision) + " vs " + precision_name(b.manifest.precision));
  }
  // The states both hold (a frozen parameter holds its value alone; the difference in what is
  // held is a scalar difference of its own).
  auto compared_states = [&](size_t p) {
    std::vector<CheckpointState> states;
    const std::span<const CheckpointState> in_b = b.manifest.stored_states(p);
    for (CheckpointState state : a.manifest.stored_states(p)) {
      if (state == CheckpointState::kParam && !same_model_dtype) continue;
      if (std::find(in_b.begin(), in_b.end(), state) != in_b.end()) states.push_back(state);
    }
    return states;
  };
  // The persistent buffers (a transformer's): which each holds, and the first element that
  // differs, bitwise. Whole and small, so each is read at once from shard 0.
  {
    ScalarComparison compare(outcome.scalar_differences);
    auto index_in = [](const CheckpointManifest& manifest, const std::string& name) -> std::optional<size_t> {
      for (size_t i = 0; i < manifest.buffers.size(); ++i) {
        if (manifest.buffers[i].name == name) return i;
      }
      return std::nullopt;
    };
    std::vector<std::string> names;
    for (const BufferInfo& buffer : a.manifest.buffers) names.push_back(buffer.name);
    for (const BufferInfo& buffer : b.manifest.buffers) {
      if (!index_in(a.manifest, buffer.name)) names.push_back(buffer.name);
    }
    for (const std::string& name : names) {
      const std::optional<size_t> in_a = index_in(a.manifest, name), in_b = index_in(b.manifest, name);
      const std::string key = "buffers." + name;
      if (!in_a || !in_b) {
        compare.text((key + ".stored").c_str(), in_a ? "yes" : "no", in_b ? "yes" : "no");
        continue;
      }
      std::vector<float> values_a(static_cast<size_t>(a.manifest.buffers[*in_a].element_count));
      std::vector<float> values_b(static_cast<size_t>(b.manifest.buffers[*in_b].element_count));
      ZEROSIM_RETURN_IF_ERROR(reader_a.read_buffer(0, *in_a, values_a));
      ZEROSIM_RETURN_IF_ERROR(reader_b.read_buffer(0, *in_b, values_b));
      for (size_t k = 0; k < values_a.size() && k < values_b.size(); ++k) {
        if (std::bit_cast<uint32_t>(values_a[k]) == std::bit_cast<uint32_t>(values_b[k])) continue;
        compare.real((key + "[" + std::to_string(k) + "]").c_str(), values_a[k], values_b[k]);
        break;
      }
    }
  }
  outcome.tensors_to_compare = 0;
  for (size_t p = 0; p < a.manifest.parameters.size(); ++p) {
    outcome.tensors_to_compare += static_cast<int64_t>(compared_states(p).size());
  }
  for (size_t p = 0; p < a.manifest.parameters.size(); ++p) {
    const ParameterInfo& parameter = a.manifest.parameters[p];
    for (CheckpointState state : compared_states(p)) {
      ZEROSIM_RETURN_IF_ERROR(
          compare_tensor(reader_a, reader_b, static_cast<int64_t>(p), parameter, state, outcome.tensor_difference));
      ++outcome.tensors_compared;
      outcome.elements_compared += parameter.element_count;
      if (outcome.tensor_difference) return Status();
    }
  }
  return Status();
}

// The flat index as a row-major index into the shape: "[2, 5]".
std::vector<int64_t> unflatten(int64_t flat_index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] <= 0) continue;
    index[d] = flat_index % shape[d];
    flat_index /= shape[d];
  }
  return index;
}

std::string element_bits_text(uint64_t bits, DType dtype) {
  return dtype_size_bytes(dtype) == 2 ? format_text("0x%04" PRIx64, bits) : format_text("0x%08" PRIx64, bits);
}

json tensor_difference_json(const TensorDifference& difference) {
  return json{{"tensor", difference.tensor},
              {"dtype", dtype_name(difference.dtype)},
              {"shape", difference.shape},
              {"element_count", difference.element_count},
              {"element_index", difference.element_index},
              {"index", unflatten(difference.element_index, difference.shape)},
              {"a", difference.value_a},
              {"b", difference.value_b},
              {"a_bits", element_bits_text(difference.bits_a, difference.dtype)},
              {"b_bits", element_bits_text(difference.bits_b, difference.dtype)},
              {"ulp_distance", difference.ulp_distance},
              {"differing_elements", difference.differing_elements}};
}

std::string tensor_difference_text(const TensorDifference& difference) {
  return format_text("tensor %s (%s %s): element %" PRId64 " (index %s): %.9g (%s) vs %.9g (%s), ulp distance %" PRIu64
                     "; %" PRId64 " of %" PRId64 " elements differ",
                     difference.tensor.c_str(), dtype_name(difference.dtype), shape_text(difference.shape).c_str(),
                     difference.element_index, shape_text(unflatten(difference.element_index, difference.shape)).c_str(),
                     static_cast<double>(difference.value_a), element_bits_text(difference.bits_a, difference.dtype).c_str(),
                     static_cast<double>(difference.value_b), element_bits_text(difference.bits_b, difference.dtype).c_str(),
                     difference.ulp_distance, difference.differing_elements, difference.element_count);
}

json side_json(const OpenedCheckpoint& opened) {
  return json{{"tag_directory", opened.tag_directory},
              {"world_size", opened.manifest.world_size},
              {"global_steps", opened.manifest.global_steps}};
}

}  // namespace

// ---- the commands ---------------------------------------------------------------------------

int run_checkpoint_verify_command(const CheckpointVerifyFlags& flags) {
  std::unique_ptr<Disk> disk = make_posix_disk();
  // Completeness (manifest valid, every shard present with its size) is checked by resolving.
  Result<OpenedCheckpoint> opened = open_checkpoint(*disk, flags.location);
  if (!opened.ok()) return report_failure("verify", opened.status());
  print_fallback_warning(*opened);
  const CheckpointManifest& manifest = opened->manifest;
  CheckpointShardReader reader(*disk, opened->tag_directory, manifest);
  for (size_t rank = 0; rank < manifest.shards.size(); ++rank) {
    Status shard = reader.verify_shard(static_cast<int>(rank));
    if (!shard.ok()) return report_failure("verify", shard);
  }
  const std::string summary = format_text("%zu shards, %" PRIu64 " bytes, step %" PRId64, manifest.shards.size(),
                                          total_shard_bytes(manifest), manifest.global_steps);
  if (!opened->fallback_warning.empty()) {
    // A resume would work, but from an older tag: the newest save is lost, which is what a
    // verification is run to find out.
    std::fprintf(stderr,
                 "zerosim: ckpt verify failed: %s/latest does not name a complete checkpoint (see the warning above); "
                 "%s, the tag a resume falls back to, verifies: %s\n",
                 opened->directory.c_str(), opened->tag_directory.c_str(), summary.c_str());
    return 1;
  }
  std::printf("ok: %s: %s\n", opened->tag_directory.c_str(), summary.c_str());
  return 0;
}

int run_checkpoint_inspect_command(const CheckpointInspectFlags& flags) {
  std::unique_ptr<Disk> disk = make_posix_disk();
  Result<OpenedCheckpoint> opened = open_checkpoint(*disk, flags.location);
  if (!opened.ok()) return report_failure("inspect", opened.status());
  print_fallback_warning(*opened);
  const CheckpointManifest& manifest = opened->manifest;
  if (flags.json) {
    json output = manifest_to_json(manifest);
    output["tag_directory"] = opened->tag_directory;
    std::printf("%s\n", output.dump(2).c_str());
    return 0;
  }
  auto row = [](const char* key, const std::string& value) { std::printf("%-26s %s\n", key, value.c_str()); };
  row("tag_directory", opened->tag_directory);
  row("tag", manifest.tag);
  row("format_version", std::to_string(manifest.format_version));
  row("zerosim_version", manifest.zerosim_version);
  row("model", model_spec_to_string(manifest.model));
  row("precision", precision_name(manifest.precision));
  row("optimizer", manifest.optimizer_type + (manifest.adam_w_mode ? " (adam_w_mode)" : ""));
  row("seed", std::to_string(manifest.seed));
  row("data", format_text("%" PRId64 " samples, %" PRId64 " features, %" PRId64 " classes, seed %" PRIu64,
                          manifest.data.sample_count, manifest.data.feature_count, manifest.data.class_count,
                          manifest.data.seed));
  row("train_batch_size", std::to_string(manifest.train_batch_size));
  row("micro_batch_size", std::to_string(manifest.micro_batch_size));
  row("world_size", std::to_string(manifest.world_size));
  row("sub_group_size", std::to_string(manifest.sub_group_size));
  row("global_steps", std::to_string(manifest.global_steps));
  row("skipped_steps", std::to_string(manifest.skipped_steps));
  row("global_samples", std::to_string(manifest.global_samples));
  row("optimizer_steps", std::to_string(manifest.optimizer_steps));
  row("lr", format_text("%.17g (scheduler last_batch_iteration %" PRId64 ")", manifest.scheduler_learning_rate,
                        manifest.scheduler_last_batch_iteration));
  row("loss_scale", format_text("%.17g", manifest.loss_scaler.current_scale));
  row("loss_scaler.iteration", std::to_string(manifest.loss_scaler.current_iteration));
  row("loss_scaler.last_overflow", std::to_string(manifest.loss_scaler.last_overflow_iteration));
  row("loss_scaler.hysteresis", std::to_string(manifest.loss_scaler.current_hysteresis));
  row("rng.shuffle_stream", format_text("seed %" PRIu64 ", stream %" PRIu64 ", counter %" PRIu64,
                                        manifest.shuffle_stream.seed, manifest.shuffle_stream.stream_id,
                                        manifest.shuffle_stream.counter));
  row("data_position", std::to_string(manifest.data_position));
  row("config_hash", manifest.config_hash);

  size_t name_width = std::strlen("parameter");
  for (const ParameterInfo& parameter : manifest.parameters) name_width = std::max(name_width, parameter.name.size());
  std::printf("\nparameters (%zu):\n", manifest.parameters.size());
  std::printf("  %-*s  %-16s  %12s  %s\n", static_cast<int>(name_width), "parameter", "shape", "elements", "stored");
  for (const ParameterInfo& parameter : manifest.parameters) {
    const char* stored = parameter.requires_grad                ? "value and optimizer state"
                         : manifest.excludes(parameter.name)    ? "nothing (frozen, excluded on save)"
                                                                : "value (frozen)";
    std::printf("  %-*s  %-16s  %12" PRId64 "  %s\n", static_cast<int>(name_width), parameter.name.c_str(),
                shape_text(parameter.shape).c_str(), parameter.element_count, stored);
  }
  size_t file_width = std::strlen("file");
  for (const ShardRecord& shard : manifest.shards) file_width = std::max(file_width, shard.file.size());
  std::printf("\nshards (%zu, %" PRIu64 " bytes):\n", manifest.shards.size(), total_shard_bytes(manifest));
  std::printf("  %4s  %-*s  %14s  %s\n", "rank", static_cast<int>(file_width), "file", "bytes", "xxh3_128");
  for (const ShardRecord& shard : manifest.shards) {
    std::printf("  %4d  %-*s  %14" PRIu64 "  %s\n", shard.rank, static_cast<int>(file_width), shard.file.c_str(),
                shard.size_bytes, shard.xxh3_128.c_str());
  }
  return 0;
}

int run_checkpoint_diff_command(const CheckpointDiffFlags& flags) {
  std::unique_ptr<Disk> disk = make_posix_disk();
  Result<OpenedCheckpoint> a = open_checkpoint(*disk, flags.a);
  if (!a.ok()) return report_failure("diff", a.status());
  Result<OpenedCheckpoint> b = open_checkpoint(*disk, flags.b);
  if (!b.ok()) return report_failure("diff", b.status());
  print_fallback_warning(*a);
  print_fallback_warning(*b);
  Status same_model = check_same_model(*a, *b);
  if (!same_model.ok()) return report_failure("diff", same_model);

  DiffOutcome outcome;
  compare_scalars(a->manifest, b->manifest, outcome);
  note_setting_differences(a->manifest, b->manifest, outcome);
  Status tensors = compare_tensors(*disk, *a, *b, outcome);
  if (!tensors.ok()) return report_failure("diff", tensors);
  const bool identical = outcome.scalar_differences.empty() && !outcome.tensor_difference;

  if (flags.json) {
    json output{{"a", side_json(*a)},
                {"b", side_json(*b)},
                {"identical", identical},
                {"scalar_differences", json::array()},
                {"tensor_difference", nullptr},
                {"tensors_compared", outcome.tensors_compared},
                {"elements_compared", outcome.elements_compared},
                {"notes", outcome.notes}};
    for (const ScalarDifference& difference : outcome.scalar_differences) {
      output["scalar_differences"].push_back(difference.document);
    }
    if (outcome.tensor_difference) output["tensor_difference"] = tensor_difference_json(*outcome.tensor_difference);
    std::printf("%s\n", output.dump(2).c_str());
    return identical ? 0 : 1;
  }
  for (const std::string& note : outcome.notes) std::fprintf(stderr, "zerosim: note: %s\n", note.c_str());
  std::printf("a: %s (world size %d, step %" PRId64 ")\n", a->tag_directory.c_str(), a->manifest.world_size,
              a->manifest.global_steps);
  std::printf("b: %s (world size %d, step %" PRId64 ")\n", b->tag_directory.c_str(), b->manifest.world_size,
              b->manifest.global_steps);
  if (identical) {
    std::printf("identical: %" PRId64 " tensors, %" PRId64 " elements\n", outcome.tensors_compared,
                outcome.elements_compared);
    return 0;
  }
  for (const ScalarDifference& difference : outcome.scalar_differences) {
    std::printf("differs: %s: %s\n", difference.name.c_str(), difference.text.c_str());
  }
  if (outcome.tensor_difference) {
    std::printf("differs: %s\n", tensor_difference_text(*outcome.tensor_difference).c_str());
    std::printf("different: %zu scalar(s) and tensor %s (%" PRId64 " of %" PRId64
                " tensors compared: the comparison stops at the first differing tensor)\n",
                outcome.scalar_differences.size(), outcome.tensor_difference->tensor.c_str(), outcome.tensors_compared,
                outcome.tensors_to_compare);
  } else {
    std::printf("different: %zu scalar(s); tensors identical: %" PRId64 " tensors, %" PRId64 " elements\n",
                outcome.scalar_differences.size(), outcome.tensors_compared, outcome.elements_compared);
  }
  return 1;
}

int run_checkpoint_export_command(const CheckpointExportFlags& flags) {
  std::unique_ptr<Disk> disk = make_posix_disk();
  const DType dtype = flags.dtype == "fp16" ? DType::kFp16 : flags.dtype == "bf16" ? DType::kBf16 : DType::kFp32;
  Result<OpenedCheckpoint> opened = open_checkpoint(*disk, flags.location);
  if (!opened.ok()) return report_failure("export", opened.status());
  print_fallback_warning(*opened);
  Result<ExportSummary> exported =
      export_consolidated_safetensors(*disk, opened->tag_directory, opened->manifest, dtype, flags.output_path);
  if (!exported.ok()) return report_failure("export", exported.status());
  std::printf("exported %s (step %" PRId64 ", world size %d) to %s: %" PRId64 " tensors, %" PRId64
              " elements, %s, %" PRIu64 " bytes\n",
              opened->tag_directory.c_str(), opened->manifest.global_steps, opened->manifest.world_size,
              flags.output_path.c_str(), exported->tensor_count, exported->element_count, flags.dtype.c_str(),
              exported->file_size_bytes);
  if (!exported->excluded_parameters.empty()) {
    std::string names;
    for (const std::string& name : exported->excluded_parameters) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "note: %s left out: frozen parameters the checkpoint excluded (exclude_frozen_parameters); "
                 "the file's metadata names them in excluded_parameters\n", names.c_str());
  }
  return 0;
}

void add_checkpoint_commands(CLI::App& app, CheckpointCommands& commands) {
  CLI::App* group = app.add_subcommand("ckpt", "Verify, inspect and compare checkpoints");
  group->require_subcommand(1);
  const char* tag_help = "Tag in the directory (default: what `latest` names, as a resume resolves it)";

  CheckpointVerifyFlags& verify = commands.verify_flags;
  commands.verify = group->add_subcommand(
      "verify", "Check a checkpoint's manifest, shard sizes, checksums, headers and tensor sets: exit 0 or 1 with the reason");
  commands.verify->add_option("directory", verify.location.directory, "Checkpoint directory (holds the tags and `latest`)")
      ->required();
  commands.verify->add_option("--tag", verify.location.tag, tag_help);

  CheckpointInspectFlags& inspect = commands.inspect_flags;
  commands.inspect = group->add_subcommand("inspect", "Print a checkpoint's manifest: counters, scheduler, loss scaler, "
                                                      "data position, parameters and shards");
  commands.inspect->add_option("directory", inspect.location.directory, "Checkpoint directory (holds the tags and `latest`)")
      ->required();
  commands.inspect->add_option("--tag", inspect.location.tag, tag_help);
  commands.inspect->add_flag("--json", inspect.json, "Print the manifest as one JSON object, plus tag_directory");

  CheckpointDiffFlags& diff = commands.diff_flags;
  commands.diff = group->add_subcommand(
      "diff", "Compare two checkpoints' training state bitwise (any world sizes): exit 0 identical, 1 different");
  commands.diff->add_option("a", diff.a.directory, "First checkpoint directory")->required();
  commands.diff->add_option("b", diff.b.directory, "Second checkpoint directory (may be the first, with another tag)")
      ->required();
  commands.diff->add_option("--tag-a", diff.a.tag, tag_help);
  commands.diff->add_option("--tag-b", diff.b.tag, tag_help);
  commands.diff->add_flag("--json", diff.json,
                          "Print one JSON object: a, b, identical, scalar_differences, tensor_difference, notes");

  CheckpointExportFlags& exported = commands.export_flags;
  commands.export_command = group->add_subcommand(
      "export", "Write the consolidated model (every parameter's full tensor from the fp32 masters, PyTorch names) "
                "as one safetensors file, from a checkpoint of any world size");
  commands.export_command->add_option("directory", exported.location.directory, "Checkpoint directory")->required();
  commands.export_command->add_option("--tag", exported.location.tag, tag_help);
  commands.export_command->add_option("--dtype", exported.dtype, "fp32 (the masters), or fp16 / bf16 (rounded to nearest even)")
      ->required()
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  commands.export_command->add_option("-o,--output", exported.output_path, "The safetensors file to write (must not exist)")
      ->required();
}

std::optional<int> run_checkpoint_command(const CheckpointCommands& commands) {
  if (commands.verify != nullptr && commands.verify->parsed()) return run_checkpoint_verify_command(commands.verify_flags);
  if (commands.inspect != nullptr && commands.inspect->parsed()) {
    return run_checkpoint_inspect_command(commands.inspect_flags);
  }
  if (commands.diff != nullptr && commands.diff->parsed()) return run_checkpoint_diff_command(commands.diff_flags);
  if (commands.export_command != nullptr && commands.export_command->parsed()) {
    return run_checkpoint_export_command(commands.export_flags);
  }
  return std::nullopt;
}

}  // namespace zerosim
