#include "core/checkpoint/export.h"

#include <algorithm>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/shard_reader.h"

namespace zerosim {
namespace {

// Elements converted at a time: 4 MiB of fp32 in, at most as much out.
constexpr int64_t kExportChunkElements = int64_t{1} << 20;

Result<std::string> manifest_seal(Disk& disk, const std::string& tag_directory) {
  const std::string path = tag_directory + "/" + kManifestFileName;
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, read_whole_file(disk, path));
  const nlohmann::json document = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data()),
                                                        reinterpret_cast<const char*>(bytes.data()) + bytes.size(),
                                                        nullptr, /*allow_exceptions=*/false);
  const auto seal = document.is_object() ? document.find("manifest_xxh3_128") : document.end();
  if (!document.is_object() || seal == document.end() || !seal->is_string()) {
    return data_loss(path + ": manifest_xxh3_128: missing (the manifest changed since it was read?)");
  }
  return seal->get<std::string>();
}

}  // namespace

Result<ExportSummary> export_consolidated_safetensors(Disk& disk, const std::string& tag_directory,
                                                      const CheckpointManifest& manifest, DType dtype,
                                                      const std::string& output_path) {
  if (output_path.empty()) return invalid_argument("export: the output path is empty");
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(output_path));
  if (exists) return Status(StatusCode::kAlreadyExists, "export: " + output_path + " exists; choose another path or remove it first");
  ZEROSIM_ASSIGN_OR_RETURN(std::string seal, manifest_seal(disk, tag_directory));

  // What the file holds: (name, parameter) in order; the transformer's tied head is wte again
  // under Hugging Face's second name, lm_head.weight (one parameter in the checkpoint).
  std::vector<std::pair<std::string, size_t>> entries;
  std::vector<SafetensorsTensorSpec> specs;
  ExportSummary summary;
  for (size_t p = 0; p < manifest.parameters.size(); ++p) {
    const ParameterInfo& parameter = manifest.parameters[p];
    if (manifest.excludes(parameter.name)) {
      summary.excluded_parameters.push_back(parameter.name);
    } else {
      entries.emplace_back(parameter.name, p);
    }
  }
  if (manifest.model.is_transformer() && !manifest.excludes(manifest.parameters[0].name)) {
    entries.emplace_back("lm_head.weight", 0);  // transformer.wte.weight, tied
  }
  for (const auto& [name, p] : entries) specs.push_back({name, dtype, manifest.parameters[p].shape});
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"zerosim_checkpoint", tag_directory},
      {"zerosim_tag", manifest.tag},
      {"global_steps", std::to_string(manifest.global_steps)},
      {"source_world_size", std::to_string(manifest.world_size)},
      {"source_precision", precision_name(manifest.precision)},
      {"manifest_xxh3_128", seal},
      {"dtype", safetensors_dtype_name(dtype)},
      {"zerosim_version", manifest.zerosim_version}};
  if (!summary.excluded_parameters.empty()) {
    std::string names;
    for (const std::string& name : summary.excluded_parameters) names += (names.empty() ? "" : ",") + name;
    metadata["excluded_parameters"] = names;
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::byte> header, encode_safetensors_header(output_path, specs, metadata));

  const std::string temporary_path = output_path + ".partial";
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(temporary_path, {OpenMode::kCreateTruncate}));
  auto write_everything = [&]() -> Status {
    ZEROSIM_RETURN_IF_ERROR(file->write_all(0, header));
    uint64_t offset = header.size();
    CheckpointShardReader reader(disk, tag_directory, manifest);
    const size_t out_bytes = dtype_size_bytes(dtype);
    std::vector<float> masters;
    std::vector<std::byte> converted, values;
    for (const auto& [name, p] : entries) {
      const ParameterInfo& parameter = manifest.parameters[p];
      const size_t stored_states = manifest.stored_states(p).size();
      for (int64_t begin = 0; begin < parameter.element_count; begin += kExportChunkElements) {
        const int64_t count = std::min(kExportChunkElements, parameter.element_count - begin);
        masters.resize(static_cast<size_t>(count));
        if (stored_states == 1) {
          // Frozen: its 16-bit value, which its master would be widened (it is never updated).
          const DType precision = manifest.precision;
          values.resize(static_cast<size_t>(count) * dtype_size_bytes(precision));
          ZEROSIM_RETURN_IF_ERROR(reader.read(static_cast<int64_t>(p), CheckpointState::kParam, begin, count, values));
          cast_to_fp32(precision, values.data(), masters.data(), masters.size());
        } else {
          ZEROSIM_RETURN_IF_ERROR(reader.read(static_cast<int64_t>(p), CheckpointState::kMaster, begin, count,
                                              std::as_writable_bytes(std::span<float>(masters))));
        }
        converted.resize(static_cast<size_t>(count) * out_bytes);
        cast_from_fp32(dtype, masters.data(), converted.data(), masters.size());
        ZEROSIM_RETURN_IF_ERROR(file->write_all(offset, converted));
        offset += converted.size();
      }
      summary.element_count += parameter.element_count;
      ++summary.tensor_count;
    }
    // A shard the export read nothing from (a rank that owned no element) is verified too:
    // a damaged checkpoint is never exported.
    for (int rank = 0; rank < manifest.world_size; ++rank) {
      if (!reader.has_opened(rank)) ZEROSIM_RETURN_IF_ERROR(reader.verify_shard(rank));
    }
    summary.file_size_bytes = offset;
    ZEROSIM_RETURN_IF_ERROR(file->sync());
    return file->close();
  };
  if (Status written = write_everything(); !written.ok()) {
    (void)disk.remove_file(temporary_path);  // best effort: the error that matters is `written`
    return written;
  }
  ZEROSIM_RETURN_IF_ERROR(disk.rename(temporary_path, output_path));
  ZEROSIM_RETURN_IF_ERROR(disk.sync_directory(parent_directory(output_path)));
  return summary;
}

}  // namespace zerosim
