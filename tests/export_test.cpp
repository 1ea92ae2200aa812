// The consolidated export (core/checkpoint/export.h): every tensor equals the gathered fp32
// masters (or their 16-bit rounding, which is the checkpoint's own 16-bit parameters), from a
// checkpoint of any world size and placement; a damaged checkpoint or an existing file is
// refused and leaves no file behind.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/export.h"
#include "core/checkpoint/safetensors.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

namespace fs = std::filesystem;

struct SavedRun {
  std::string checkpoint_directory;
  CapturedState state;  // the full tensors at the saved step
  CheckpointManifest manifest;
};

SavedRun train_and_save(const std::string& root, int world_size, bool nvme,
                        const std::vector<std::string>& frozen_parameters = {}, bool exclude_frozen = false,
                        const ModelSpec& model = ModelSpec{{9, 17, 4}}) {
  TrainingOptions options = make_options(model, Precision::kBf16, 1, 6 / world_size, world_size, 40, 5);
  options.frozen_parameters = frozen_parameters;
  if (nvme) {
    options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
    options.config.zero.offload_optimizer.nvme_path = root + "/swap";
    options.config.zero.offload_optimizer.buffer_count = 9;
  }
  options.capture_state_at_step = 3;
  CheckpointPlan saving;
  saving.save_directory = root + "/ckpt";
  saving.save_options.exclude_frozen_parameters = exclude_frozen;
  RealEnv real_env;
  Result<TrainingRun> run = run_training(options, 3, real_env.env(), saving);
  EXPECT_TRUE(run.ok()) << run.status().to_string();
  SavedRun saved;
  saved.checkpoint_directory = saving.save_directory;
  if (run.ok() && run->captured) saved.state = *run->captured;
  std::string warning;
  Result<std::string> tag = resolve_checkpoint_tag(*real_env.env().disk, saved.checkpoint_directory, "latest", &warning,
                                                   &saved.manifest);
  EXPECT_TRUE(tag.ok()) << tag.status().to_string();
  return saved;
}

const CapturedTensor& captured(const CapturedState& state, const std::string& component, const std::string& parameter) {
  for (const CapturedTensor& tensor : state.tensors) {
    if (tensor.component == component && tensor.parameter == parameter) return tensor;
  }
  ADD_FAILURE() << "no captured " << component << " of " << parameter;
  static const CapturedTensor kNone;
  return kNone;
}

TEST(Export, EveryTensorIsTheGatheredMasterAtAnyWorldSizeAndPlacement) {
  TestDirectory directory;
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  for (const auto& [world_size, nvme] : {std::pair{1, false}, std::pair{3, true}, std::pair{2, false}}) {
    SCOPED_TRACE("W=" + std::to_string(world_size) + (nvme ? ", optimizer on NVMe" : ""));
    const std::string root = directory.path() + "/w" + std::to_string(world_size);
    const SavedRun saved = train_and_save(root, world_size, nvme);
    const std::string tag_directory = saved.checkpoint_directory + "/global_step3";
    for (const DType dtype : {DType::kFp32, DType::kBf16}) {
      const std::string output = root + "/model-" + safetensors_dtype_name(dtype) + ".safetensors";
      const Result<ExportSummary> exported = export_consolidated_safetensors(disk, tag_directory, saved.manifest, dtype, output);
      ASSERT_TRUE(exported.ok()) << exported.status().to_string();
      EXPECT_EQ(exported->tensor_count, static_cast<int64_t>(saved.manifest.parameters.size()));
      EXPECT_EQ(exported->file_size_bytes, fs::file_size(output));
      EXPECT_FALSE(fs::exists(output + ".partial"));
      const Result<SafetensorsIndex> index = read_safetensors_index(disk, output);
      ASSERT_TRUE(index.ok()) << index.status().to_string();
      EXPECT_EQ(index->metadata.at("format"), "pt");
      EXPECT_EQ(index->metadata.at("zerosim_tag"), "global_step3");
      EXPECT_EQ(index->metadata.at("source_world_size"), std::to_string(world_size));
      ASSERT_EQ(index->entries.size(), saved.manifest.parameters.size());
      for (const ParameterInfo& parameter : saved.manifest.parameters) {
        const SafetensorsEntry* entry = index->find(parameter.name);
        ASSERT_NE(entry, nullptr) << parameter.name;
        EXPECT_EQ(entry->shape, parameter.shape) << parameter.name;
        EXPECT_EQ(entry->dtype, dtype);
        const Result<std::vector<std::byte>> bytes = read_safetensors_tensor(disk, output, *index, parameter.name);
        ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
        // fp32: the masters; bf16 (the model's dtype): the checkpoint's own 16-bit parameters.
        const CapturedTensor& expected = captured(saved.state, dtype == DType::kFp32 ? "master" : "params", parameter.name);
        ASSERT_EQ(bytes->size(), expected.bytes.size()) << parameter.name;
        EXPECT_EQ(std::memcmp(bytes->data(), expected.bytes.data(), bytes->size()), 0) << parameter.name;
      }
    }
  }
}

// The transformer, saved at W=3: every parameter under its Hugging Face name, and the tied
// embedding a second time as lm_head.weight (GPT2LMHeadModel's state-dict names), the same bits.
TEST(Export, TheTransformersTiedEmbeddingIsWrittenUnderBothNames) {
  TestDirectory directory;
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  const SavedRun saved =
      train_and_save(directory.path(), 3, /*nvme=*/false, {}, false, transformer_model(GptSpec{1, 8, 2, 12, 5}));
  const std::string output = directory.path() + "/model.safetensors";
  const Result<ExportSummary> exported =
      export_consolidated_safetensors(disk, saved.checkpoint_directory + "/global_step3", saved.manifest, DType::kFp32, output);
  ASSERT_TRUE(exported.ok()) << exported.status().to_string();
  EXPECT_EQ(exported->tensor_count, static_cast<int64_t>(saved.manifest.parameters.size()) + 1);
  const Result<SafetensorsIndex> index = read_safetensors_index(disk, output);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  ASSERT_EQ(index->entries.size(), saved.manifest.parameters.size() + 1);
  const CapturedTensor& wte = captured(saved.state, "master", "transformer.wte.weight");
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    const Result<std::vector<std::byte>> bytes = read_safetensors_tensor(disk, output, *index, name);
    ASSERT_TRUE(bytes.ok()) << name << ": " << bytes.status().to_string();
    ASSERT_EQ(bytes->size(), wte.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(bytes->data(), wte.bytes.data(), bytes->size()), 0) << name;
    EXPECT_EQ(index->find(name)->shape, (std::vector<int64_t>{12, 8})) << name;
  }
  EXPECT_EQ(index->find("lm_head.target_frequency"), nullptr) << "buffers are not parameters";
}

// A frozen parameter (its 16-bit value alone in the checkpoint) is exported from that value,
// which is its master; one excluded from the checkpoint is left out and named in the metadata.
TEST(Export, FrozenParametersComeFromTheirValueAndExcludedOnesAreNamed) {
  TestDirectory directory;
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  for (const bool exclude : {false, true}) {
    SCOPED_TRACE(exclude ? "excluded on save" : "saved with their values");
    const std::string root = directory.path() + (exclude ? "/excluded" : "/saved");
    const SavedRun saved = train_and_save(root, 2, /*nvme=*/true, {"layers.0.bias", "layers.1.weight"}, exclude);
    ASSERT_EQ(saved.manifest.excluded_parameters.size(), exclude ? 2u : 0u);
    const std::string output = root + "/model.safetensors";
    const Result<ExportSummary> exported =
        export_consolidated_safetensors(disk, saved.checkpoint_directory + "/global_step3", saved.manifest, DType::kFp32, output);
    ASSERT_TRUE(exported.ok()) << exported.status().to_string();
    EXPECT_EQ(exported->tensor_count, exclude ? 2 : 4);
    const Result<SafetensorsIndex> index = read_safetensors_index(disk, output);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    EXPECT_EQ(index->metadata.count("excluded_parameters"), exclude ? 1u : 0u);
    if (exclude) {
      EXPECT_EQ(index->metadata.at("excluded_parameters"), "layers.0.bias,layers.1.weight");
    }
    for (const ParameterInfo& parameter : saved.manifest.parameters) {
      const SafetensorsEntry* entry = index->find(parameter.name);
      if (exclude && !parameter.requires_grad) {
        EXPECT_EQ(entry, nullptr) << parameter.name;
        continue;
      }
      ASSERT_NE(entry, nullptr) << parameter.name;
      const Result<std::vector<std::byte>> bytes = read_safetensors_tensor(disk, output, *index, parameter.name);
      ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
      const CapturedTensor& expected = captured(saved.state, "master", parameter.name);
      ASSERT_EQ(bytes->size(), expected.bytes.size()) << parameter.name;
      EXPECT_EQ(std::memcmp(bytes->data(), expected.bytes.data(), bytes->size()), 0) << parameter.name;
    }
  }
}

TEST(Export, ADamagedShardOrAnExistingFileIsRefusedAndNoFileIsLeft) {
  TestDirectory directory;
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  const SavedRun saved = train_and_save(directory.path(), 3, false);
  const std::string tag_directory = saved.checkpoint_directory + "/global_step3";
  const std::string output = directory.path() + "/model.safetensors";
  std::ofstream(output) << "the user's file";
  const Result<ExportSummary> exists = export_consolidated_safetensors(disk, tag_directory, saved.manifest, DType::kFp32, output);
  ASSERT_FALSE(exists.ok());
  EXPECT_EQ(exists.status().code(), StatusCode::kAlreadyExists) << exists.status().to_string();
  std::ifstream kept(output);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "the user's file");

  // A flipped byte in the last shard's data: the checksum refuses it, nothing is exported.
  const std::string shard = tag_directory + "/rank-00002-of-00003.safetensors";
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-5, std::ios::end);
    const char byte = static_cast<char>(file.get());
    file.seekp(-5, std::ios::end);
    file.put(static_cast<char>(byte ^ 0x10));
  }
  const std::string second = directory.path() + "/second.safetensors";
  const Result<ExportSummary> damaged = export_consolidated_safetensors(disk, tag_directory, saved.manifest, DType::kFp32, second);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss) << damaged.status().to_string();
  EXPECT_NE(damaged.status().message().find("rank-00002-of-00003.safetensors"), std::string::npos)
      << damaged.status().to_string();
  EXPECT_FALSE(fs::exists(second));
  EXPECT_FALSE(fs::exists(second + ".partial"));
}

}  // namespace
}  // namespace zerosim
