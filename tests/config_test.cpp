// Tests for core/config/ds_config: the DeepSpeed JSON reader.
//
// The corpus (tests/data/ds_configs, see sources.md there) holds 18 real configs plus the seed
// bug report's config; each must get DeepSpeed HEAD's verdict (13 and 18 rejected, the others
// accepted once run settings fill their "auto" values). The rest pins down coercions, error
// messages (dotted key path, expected, found, nearest name), "auto" filling, batch derivation,
// legacy keys and --set overrides.
#include "core/config/ds_config.h"
#include "core/engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace zerosim {
namespace {

using json = nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::ostringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

json load_corpus(const std::string& name) {
  const std::string path = std::string(ZEROSIM_TEST_DATA_DIR) + "/ds_configs/" + name;
  Result<json> parsed = parse_json_text(read_text(path), name);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? parsed.value() : json::object();
}

// What an HF Trainer run would pass: every setting given.
RunSettings trainer_settings() {
  RunSettings settings;
  settings.world_size = 2;
  settings.micro_batch_size = 4;
  settings.gradient_accumulation_steps = 1;
  settings.learning_rate = 2e-5;
  settings.adam_beta1 = 0.9;
  settings.adam_beta2 = 0.98;
  settings.adam_epsilon = 1e-6;
  settings.weight_decay = 0.01;
  settings.max_grad_norm = 0.5;
  settings.warmup_steps = 50;
  settings.total_steps = 1000;
  settings.auto_precision = Precision::kBf16;
  settings.hidden_size = 128;
  return settings;
}

Result<ResolvedConfig> resolve_text(const std::string& text, const RunSettings& settings = RunSettings()) {
  Result<json> parsed = parse_json_text(text, "test.json");
  if (!parsed.ok()) return parsed.status();
  return resolve_config(parsed.value(), settings);
}

// The error message of a config that must be rejected (empty, and a test failure, otherwise).
std::string rejection(const Result<ResolvedConfig>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  return result.status().message();
}

std::string rejection_of(const std::string& text, const RunSettings& settings = RunSettings()) {
  return rejection(resolve_text(text, settings));
}

ResolvedConfig accepted(const Result<ResolvedConfig>& result) {
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? result.value() : ResolvedConfig();
}

ResolvedConfig accepted_text(const std::string& text, const RunSettings& settings = RunSettings()) {
  return accepted(resolve_text(text, settings));
}

bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& line : lines) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

bool contains_auto(const json& value) {
  if (value.is_string()) return value.get<std::string>() == "auto";
  if (value.is_structured()) {
    for (const json& child : value) {
      if (contains_auto(child)) return true;
    }
  }
  return false;
}

const json* find_dotted(const json& document, const std::string& dotted) {
  const json* node = &document;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(key)) return nullptr;
    node = &(*node)[key];
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// ---------------------------------------------------------------------------------------------
// The corpus: DeepSpeed HEAD's verdict for every file, plus properties of every accepted one.

struct CorpusCase {
  const char* file;
  bool trainer;   // resolved with trainer_settings() (the file has "auto" values) or defaults
  bool accepted;  // DeepSpeed HEAD's verdict (sources.md)
};

const CorpusCase kCorpus[] = {
    {"01_ds_autotuning_template_zero3.json", false, true},
    {"02_ds_examples_sdma_allgather_zero3_bf16.json", false, true},
    {"03_ds_tests_torch_compile_z3_bf16.json", false, true},
    {"04_ds_tests_megatron_gpt2_bs8_zero2_cpu_offload_legacy.json", false, true},
    {"05_ds_tests_bingbertsquad_bsz24_fp16_zero2.json", false, true},
    {"06_ds_tests_unit_ds_batch_config_no_zero_block.json", false, true},
    {"07_accelerate_zero_stage3_offload_config_auto.json", true, true},
    {"08_accelerate_zero_stage1_config_auto.json", true, true},
    {"09_accelerate_tests_ds_config_zero3_auto_fp16_bf16.json", true, true},
    {"10_accelerate_tests_ds_config_zero3_model_only.json", false, true},
    {"11_dse_sglang_zero3_param_nvme_aio_auto.json", false, true},
    {"12_dse_bf16_master_weight_zero3_bf16_full.json", false, true},
    {"13_dse_megatron_zero3_infinity_nvme_thread_count_HISTORICAL.json", false, false},
    {"14_dse_autotuning_fp16_z3_minimal_auto.json", true, true},
    {"15_dse_zenflow_zero2_cpu_offload_bf16.json", false, true},
    {"16_hf_transformers_tests_ds_config_zero3_legacy_keys.json", false, true},
    {"17_hf_transformers_tests_ds_config_zero2_auto.json", true, true},
    {"18_dse_branch_zero_infer_offload_nvme_odd_keys.json", false, false},
    {"seed_ds_config.json", true, true},
};

class CorpusVerdict : public ::testing::TestWithParam<CorpusCase> {};

TEST_P(CorpusVerdict, MatchesDeepSpeedAndResolvesToAFixedPoint) {
  const CorpusCase& corpus = GetParam();
  const RunSettings settings = corpus.trainer ? trainer_settings() : RunSettings();
  const json document = load_corpus(corpus.file);
  Result<ResolvedConfig> result = resolve_config(document, settings);
  ASSERT_EQ(result.ok(), corpus.accepted) << corpus.file << ": "
                                          << (result.ok() ? "accepted" : result.status().message());
  if (!corpus.accepted) {
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(), StartsWith("zero_optimization."));
    return;
  }
  const ResolvedConfig& config = result.value();
  EXPECT_EQ(config.input, document);
  EXPECT_FALSE(contains_auto(config.resolved)) << config.resolved.dump(1);
  EXPECT_GT(config.train_batch_size, 0);
  EXPECT_EQ(config.train_batch_size,
            config.micro_batch_size * config.gradient_accumulation_steps * settings.world_size);
  for (const std::string& path : config.inactive_keys) {
    EXPECT_NE(find_dotted(document, path), nullptr) << "inactive key not in the input: " << path;
  }
  // The resolved document is self-contained: read again (same world size, no other run
  // settings) it resolves to itself, with no "auto" left to fill.
  RunSettings same_world;
  same_world.world_size = settings.world_size;
  Result<ResolvedConfig> again = resolve_config(config.resolved, same_world);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value().resolved, config.resolved);
  EXPECT_EQ(again.value().zero.stage, config.zero.stage);
  EXPECT_EQ(again.value().precision, config.precision);
  EXPECT_EQ(again.value().optimizer.learning_rate, config.optimizer.learning_rate);
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusVerdict, ::testing::ValuesIn(kCorpus),
                         [](const ::testing::TestParamInfo<CorpusCase>& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.find('_', name.find('_') + 1));
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(Corpus, Config01OnlyAZeroBlockWithScientificNotation) {
  ResolvedConfig config = accepted(resolve_config(load_corpus("01_ds_autotuning_template_zero3.json"), {}));
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_EQ(config.zero.sub_group_size, 1000000000000);
  EXPECT_TRUE(config.resolved["zero_optimization"]["sub_group_size"].is_number_integer());
  EXPECT_EQ(config.zero.allgather_bucket_size, 500000000);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 500000000);
  EXPECT_EQ(config.zero.param_persistence_threshold, 1000000);
  EXPECT_FALSE(config.zero.overlap_comm);
  EXPECT_FALSE(config.zero.contiguous_gradients);
  EXPECT_FALSE(config.optimizer.present);
  EXPECT_EQ(config.micro_batch_size, 1);
  EXPECT_TRUE(any_contains(config.warnings, "train_micro_batch_size_per_gpu are both missing"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "zero_optimization.overlap_comm"));
}

// DeepSpeed warns about elastic_checkpoint at stage 3 only (zero/config.py elastic_checkpoint_deprecated).
TEST(ZeroConfig, ElasticCheckpointAtStageThreeWarnsAsDeepSpeedDoes) {
  const auto warned = [](int stage, bool elastic) {
    const nlohmann::json document = {{"train_micro_batch_size_per_gpu", 1},
                                     {"zero_optimization", {{"stage", stage}, {"elastic_checkpoint", elastic}}}};
    const ResolvedConfig config = accepted(resolve_config(document, {}));
    return any_contains(config.warnings, "elastic checkpointing is deprecated");
  };
  EXPECT_TRUE(warned(3, true));
  EXPECT_FALSE(warned(3, false));
  EXPECT_FALSE(warned(2, true));
}

TEST(Corpus, Config02Bf16AdamWWarmupLR) {
  ResolvedConfig config = accepted(resolve_config(load_corpus("02_ds_examples_sdma_allgather_zero3_bf16.json"), {}));
  EXPECT_EQ(config.precision, Precision::kBf16);
  EXPECT_EQ(config.communication_dtype, Precision::kBf16);
  EXPECT_EQ(config.optimizer.type, "AdamW");
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 1e-5);
  EXPECT_DOUBLE_EQ(config.optimizer.weight_decay, 0.01);
  EXPECT_EQ(config.scheduler.type, SchedulerType::kWarmupLR);
  EXPECT_EQ(config.scheduler.warmup_num_steps, 10);
  EXPECT_TRUE(config.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 50000000);
  EXPECT_EQ(config.train_batch_size, 1);
  EXPECT_FALSE(config.loss_scaler.dynamic);  // only fp16 scales dynamically
}

TEST(Corpus, Config03TrainBatchOnlySplitsOverTheWorld) {
  RunSettings settings;
  settings.world_size = 2;
  ResolvedConfig config = accepted(resolve_config(load_corpus("03_ds_tests_torch_compile_z3_bf16.json"), settings));
  EXPECT_EQ(config.train_batch_size, 8);
  EXPECT_EQ(config.micro_batch_size, 4);
  EXPECT_EQ(config.gradient_accumulation_steps, 1);
  EXPECT_EQ(config.optimizer.type, "Adam");
  EXPECT_TRUE(config.optimizer.adam_w_mode);  // "Adam" means AdamW unless adam_w_mode is false
  EXPECT_DOUBLE_EQ(config.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(config.optimizer.weight_decay, 3e-7);
  EXPECT_TRUE(any_contains(config.inactive_keys, "prescale_gradients"));
}

TEST(Corpus, Config04LegacyCpuOffload) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("04_ds_tests_megatron_gpt2_bs8_zero2_cpu_offload_legacy.json"), {}));
  EXPECT_EQ(config.zero.stage, 2);
  EXPECT_EQ(config.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(any_contains(config.warnings, "cpu_offload"));
  EXPECT_TRUE(any_contains(config.warnings, "offload_optimizer"));
  EXPECT_FALSE(config.resolved["zero_optimization"].contains("cpu_offload"));
  EXPECT_EQ(config.resolved["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(config.zero.reduce_bucket_size, 7000000);
  EXPECT_EQ(config.precision, Precision::kFp16);
  EXPECT_TRUE(config.loss_scaler.dynamic);
  EXPECT_FALSE(config.optimizer.present);
  EXPECT_TRUE(any_contains(config.inactive_keys, "activation_checkpointing"));
}

TEST(Corpus, Config05DerivesAccumulationAndRefusesAnIndivisibleWorld) {
  const json document = load_corpus("05_ds_tests_bingbertsquad_bsz24_fp16_zero2.json");
  ResolvedConfig config = accepted(resolve_config(document, {}));
  EXPECT_EQ(config.gradient_accumulation_steps, 8);
  EXPECT_FALSE(config.optimizer.bias_correction);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 3e-5);
  RunSettings world2;
  world2.world_size = 2;
  EXPECT_EQ(accepted(resolve_config(document, world2)).gradient_accumulation_steps, 4);
  RunSettings world5;
  world5.world_size = 5;
  const std::string message = rejection(resolve_config(document, world5));
  EXPECT_THAT(message, StartsWith("train_batch_size: 24 is not divisible"));
  EXPECT_THAT(message, HasSubstr("train_micro_batch_size_per_gpu 3 x world size 5"));
}

TEST(Corpus, Config06NoZeroBlockDynamicLossScale) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("06_ds_tests_unit_ds_batch_config_no_zero_block.json"), {}));
  EXPECT_EQ(config.zero.stage, 0);
  EXPECT_EQ(config.micro_batch_size, 2);
  EXPECT_TRUE(config.loss_scaler.dynamic);
  EXPECT_EQ(config.loss_scaler.initial_scale_power, 16);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 0.00015);
  EXPECT_EQ(config.resolved["zero_optimization"]["stage"], 0);
}

TEST(Corpus, Config07AutoEverywhere) {
  const json document = load_corpus("07_accelerate_zero_stage3_offload_config_auto.json");
  ResolvedConfig config = accepted(resolve_config(document, trainer_settings()));
  EXPECT_EQ(config.micro_batch_size, 4);
  EXPECT_EQ(config.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(config.gradient_clipping, 0.5);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 2e-5);
  EXPECT_EQ(config.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(config.scheduler.total_num_steps, 1000);
  EXPECT_EQ(config.scheduler.warmup_num_steps, 50);
  EXPECT_DOUBLE_EQ(config.scheduler.warmup_max_lr, 2e-5);
  EXPECT_EQ(config.zero.reduce_bucket_size, 128 * 128);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 14745);  // int(0.9 * 128 * 128)
  EXPECT_EQ(config.zero.param_persistence_threshold, 1280);
  EXPECT_EQ(config.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_EQ(config.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(config.zero.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(any_contains(config.warnings, "stage3_gather_16bit_weights_on_model_save is \"auto\""));
  // Without run settings, each "auto" that needs one is named with its flag.
  const std::string message = rejection(resolve_config(document, {}));
  EXPECT_THAT(message, HasSubstr("train_micro_batch_size_per_gpu is \"auto\"; give --micro-batch-size"));
  EXPECT_THAT(message, HasSubstr("optimizer.params.lr is \"auto\"; give --learning-rate"));
  EXPECT_THAT(message, HasSubstr("scheduler.params.total_num_steps is \"auto\"; give --total-steps"));
}

TEST(Corpus, Config08StageOneWithTorchAdam) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("08_accelerate_zero_stage1_config_auto.json"), trainer_settings()));
  EXPECT_EQ(config.zero.stage, 1);
  EXPECT_EQ(config.zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(config.zero.reduce_bucket_size, 16384);
  EXPECT_TRUE(any_contains(config.inactive_keys, "optimizer.params.torch_adam"));
  EXPECT_DOUBLE_EQ(config.optimizer.weight_decay, 0.01);
}

TEST(Corpus, Config09PrecisionAutoFollowsTheRun) {
  const json document = load_corpus("09_accelerate_tests_ds_config_zero3_auto_fp16_bf16.json");
  ResolvedConfig bf16 = accepted(resolve_config(document, trainer_settings()));
  EXPECT_EQ(bf16.precision, Precision::kBf16);
  EXPECT_EQ(bf16.resolved["fp16"]["enabled"], false);
  EXPECT_EQ(bf16.resolved["bf16"]["enabled"], true);
  RunSettings fp16_run = trainer_settings();
  fp16_run.auto_precision = Precision::kFp16;
  ResolvedConfig fp16 = accepted(resolve_config(document, fp16_run));
  EXPECT_EQ(fp16.precision, Precision::kFp16);
  EXPECT_TRUE(fp16.loss_scaler.dynamic);
  EXPECT_FALSE(fp16.zero.gather_16bit_weights_on_model_save);
}

TEST(Corpus, Config10ModelOnly) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("10_accelerate_tests_ds_config_zero3_model_only.json"), {}));
  EXPECT_EQ(config.precision, Precision::kFp32);  // both "auto", the run is fp32
  EXPECT_EQ(config.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_EQ(config.zero.reduce_bucket_size, 1000000000);
  EXPECT_EQ(config.micro_batch_size, 1);
  EXPECT_FALSE(config.optimizer.present);
  EXPECT_EQ(config.scheduler.type, SchedulerType::kNone);
}

TEST(Corpus, Config11ParamNvmeAndNewAioKeys) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("11_dse_sglang_zero3_param_nvme_aio_auto.json"), {}));
  EXPECT_EQ(config.zero.offload_param.device, OffloadDevice::kNvme);
  EXPECT_EQ(config.zero.offload_param.nvme_path, "/local_nvme/sglang");
  EXPECT_EQ(config.zero.offload_param.buffer_size, 100000000);  // "auto" dropped, default
  EXPECT_EQ(config.zero.max_live_parameters, 1000000000);
  EXPECT_EQ(config.aio.block_size, 8388608);
  EXPECT_EQ(config.aio.queue_depth, 32);
  EXPECT_EQ(config.aio.intra_op_parallelism, 8);
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization.offload_param.buffer_size is \"auto\""));
  EXPECT_TRUE(any_contains(config.warnings, "give --hidden-size"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "aio.use_gds"));
}

TEST(Corpus, Config12Bf16MasterWeightsAreFlagged) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("12_dse_bf16_master_weight_zero3_bf16_full.json"), {}));
  EXPECT_EQ(config.precision, Precision::kBf16);
  EXPECT_EQ(config.zero.param_persistence_threshold, 0);
  EXPECT_TRUE(any_contains(config.warnings, "bf16.bf16_master_weights_and_grads is true"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "torch_autocast"));
}

TEST(Corpus, Config13TypoIsRefusedWithTheNearestName) {
  const std::string message =
      rejection(resolve_config(load_corpus("13_dse_megatron_zero3_infinity_nvme_thread_count_HISTORICAL.json"), {}));
  EXPECT_THAT(message, StartsWith("zero_optimization.stage3_param_persitence_threshold: unknown key; "
                                  "did you mean stage3_param_persistence_threshold?"));
}

TEST(Corpus, Config14MinimalAuto) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("14_dse_autotuning_fp16_z3_minimal_auto.json"), trainer_settings()));
  EXPECT_EQ(config.micro_batch_size, 4);
  EXPECT_EQ(config.gradient_accumulation_steps, 1);
  EXPECT_EQ(config.train_batch_size, 8);
  EXPECT_EQ(config.precision, Precision::kFp16);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 2e-5);  // no optimizer block: the run's AdamW
  EXPECT_DOUBLE_EQ(config.optimizer.beta2, 0.98);
}

TEST(Corpus, Config15ZenFlowIsInactive) {
  ResolvedConfig config = accepted(resolve_config(load_corpus("15_dse_zenflow_zero2_cpu_offload_bf16.json"), {}));
  EXPECT_EQ(config.zero.stage, 2);
  EXPECT_EQ(config.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(config.micro_batch_size, 8);
  EXPECT_TRUE(any_contains(config.inactive_keys, "zero_optimization.zenflow"));
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization.zenflow is given"));
}

TEST(Corpus, Config16LegacyGatherKeyAndLegalZeros) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("16_hf_transformers_tests_ds_config_zero3_legacy_keys.json"), {}));
  EXPECT_TRUE(any_contains(config.warnings, "stage3_gather_fp16_weights_on_model_save"));
  EXPECT_TRUE(config.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(config.zero.sub_group_size, 100000000000000);
  EXPECT_EQ(config.zero.reduce_bucket_size, 0);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 0);
  const json& zero = config.resolved["zero_optimization"];
  EXPECT_FALSE(zero.contains("stage3_gather_fp16_weights_on_model_save"));
  EXPECT_EQ(zero["stage3_gather_16bit_weights_on_model_save"], true);
}

TEST(Corpus, Config17BetasAuto) {
  ResolvedConfig config =
      accepted(resolve_config(load_corpus("17_hf_transformers_tests_ds_config_zero2_auto.json"), trainer_settings()));
  EXPECT_DOUBLE_EQ(config.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(config.optimizer.beta2, 0.98);
  EXPECT_DOUBLE_EQ(config.optimizer.epsilon, 1e-6);
  EXPECT_EQ(config.gradient_accumulation_steps, 1);
  EXPECT_EQ(config.resolved["optimizer"]["params"]["betas"], json::array({0.9, 0.98}));
}

TEST(Corpus, Config18OddKeysAreRefused) {
  const std::string message =
      rejection(resolve_config(load_corpus("18_dse_branch_zero_infer_offload_nvme_odd_keys.json"), {}));
  EXPECT_THAT(message, HasSubstr("zero_optimization._stage3_param_persistence_threshold: unknown key"));
  EXPECT_THAT(message, HasSubstr("zero_optimization.stage3_max_reuse_distance: expected an integer >= 0, found -1"));
}

TEST(Corpus, SeedConfigNvmeOptimizerWithAutoFilled) {
  const json document = load_corpus("seed_ds_config.json");
  ResolvedConfig config = accepted(resolve_config(document, trainer_settings()));
  const OffloadConfig& offload = config.zero.offload_optimizer;
  EXPECT_EQ(offload.device, OffloadDevice::kNvme);
  EXPECT_EQ(offload.nvme_path, "/lscratch/27396327/offload/optimizer");
  EXPECT_EQ(offload.buffer_count, 4);
  EXPECT_DOUBLE_EQ(offload.ratio, 1.0);
  EXPECT_EQ(config.aio.intra_op_parallelism, 4);
  EXPECT_EQ(config.aio.block_size, 10485760);
  EXPECT_TRUE(any_contains(config.warnings, "aio.thread_count"));
  EXPECT_TRUE(any_contains(config.warnings, "intra_op_parallelism"));
  EXPECT_FALSE(config.resolved["aio"].contains("thread_count"));
  EXPECT_EQ(config.steps_per_print, 100000);
  EXPECT_TRUE(config.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 1000000000);
  // "auto" from the run settings.
  EXPECT_EQ(config.precision, Precision::kBf16);
  EXPECT_EQ(config.micro_batch_size, 4);
  EXPECT_EQ(config.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(config.gradient_clipping, 0.5);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 2e-5);
  EXPECT_DOUBLE_EQ(config.optimizer.epsilon, 1e-6);
  EXPECT_DOUBLE_EQ(config.scheduler.warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(config.scheduler.warmup_max_lr, 2e-5);
  EXPECT_EQ(config.scheduler.warmup_num_steps, 50);
  EXPECT_EQ(config.zero.reduce_bucket_size, 16384);
  EXPECT_EQ(config.zero.param_persistence_threshold, 1280);
  EXPECT_TRUE(any_contains(config.inactive_keys, "zero_optimization.offload_optimizer.fast_init"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "zero_optimization.offload_optimizer.pin_memory"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "wall_clock_breakdown"));

  const std::string message = rejection(resolve_config(document, {}));
  EXPECT_THAT(message, HasSubstr("optimizer.params.betas is \"auto\"; give --adam-beta1 and --adam-beta2"));
  EXPECT_THAT(message, HasSubstr("gradient_clipping is \"auto\"; give --max-grad-norm"));
  EXPECT_THAT(message, HasSubstr("scheduler.params.warmup_num_steps is \"auto\"; give --warmup-steps"));
}

// ---------------------------------------------------------------------------------------------
// JSON text.

TEST(ParseJson, SyntaxErrorNamesSourceLineAndColumn) {
  Result<json> parsed = parse_json_text("{\n  \"a\": 1,\n  \"b\": ,\n}\n", "bad.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), StartsWith("bad.json:3:8: "));
  EXPECT_THAT(parsed.status().message(), HasSubstr("line 3, column 8"));
}

TEST(ParseJson, TruncatedAndEmptyInput) {
  Result<json> truncated = parse_json_text("{\"zero_optimization\": {\"stage\": 3}", "cut.json");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), StartsWith("cut.json:1:"));
  Result<json> empty = parse_json_text("", "empty.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), StartsWith("empty.json:1:1:"));
}

TEST(ParseJson, DuplicateKeysAreRefusedLikeDeepSpeed) {
  Result<json> parsed = parse_json_text(R"({"zero_optimization": {"stage": 2, "stage": 3}})", "dup.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), StartsWith("zero_optimization.stage: duplicate key in dup.json"));
}

TEST(ParseJson, CommentsAreAcceptedLikeHjson) {
  Result<json> parsed = parse_json_text("{\n  // ZeRO-3\n  \"zero_optimization\": {\"stage\": 3} /* end */\n}",
                                        "commented.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed.value()["zero_optimization"]["stage"], 3);
}

TEST(ResolveConfig, TopLevelMustBeAnObject) {
  EXPECT_THAT(rejection(resolve_config(json::array({1, 2}), {})),
              HasSubstr("expected a JSON object at the top level, found a list"));
  EXPECT_THAT(rejection_of("3"), HasSubstr("expected a JSON object at the top level"));
}

// ---------------------------------------------------------------------------------------------
// Types and coercions (pydantic lax mode inside zero_optimization, fp16, bf16, offload_*).

TEST(Coercion, IntegralFloatsStringsOfDigitsAndBooleans) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": "3", "stage3_max_live_parameters": "1000", "stage3_max_reuse_distance": true,
      "sub_group_size": 1e9, "reduce_bucket_size": 5e8}})");
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_EQ(config.zero.max_live_parameters, 1000);
  EXPECT_EQ(config.zero.max_reuse_distance, 1);
  EXPECT_EQ(config.zero.sub_group_size, 1000000000);
  EXPECT_EQ(config.resolved["zero_optimization"]["stage3_max_live_parameters"], 1000);
  EXPECT_EQ(accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3.0}})").zero.stage, 3);
}

TEST(Coercion, RefusalsNameKeyExpectationAndValue) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 8, "zero_optimization": {"sub_group_size": 1.5}})",
       "zero_optimization.sub_group_size: expected an integer >= 0, found 1.5"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage3_max_live_parameters": "1e9"}})",
       "zero_optimization.stage3_max_live_parameters: expected an integer >= 0, found \"1e9\""},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage3_max_live_parameters": null}})",
       "zero_optimization.stage3_max_live_parameters: expected an integer >= 0, found null"},
      {R"({"train_batch_size": 8, "zero_optimization": {"sub_group_size": "big"}})",
       "zero_optimization.sub_group_size: expected an integer >= 0, found \"big\""},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})",
       "zero_optimization.stage: expected 0, 1, 2 or 3, found 4"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"device": "NVMe"}}})",
       "zero_optimization.offload_optimizer.device: expected one of \"none\", \"cpu\", \"nvme\" (case-sensitive), "
       "found \"NVMe\""},
      {R"({"train_batch_size": 8, "zero_optimization": [3]})", "zero_optimization: expected an object, found [3]"},
      {R"({"train_batch_size": 8, "fp16": true})", "fp16: expected an object, found true"},
      {R"({"train_batch_size": 8, "zero_optimization": {"overlap_comm": "maybe"}})",
       "zero_optimization.overlap_comm: expected true or false, found \"maybe\""},
      {R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": "fast"}})",
       "optimizer.params: expected an object, found \"fast\""},
      {R"({"train_batch_size": "8"})", "train_batch_size: expected an integer > 0, found \"8\" (a string;"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": "1e-3"}}})",
       "optimizer.params.lr: expected a number >= 0, found \"1e-3\""},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"ratio": 1.5}}})",
       "zero_optimization.offload_optimizer.ratio: expected a number in [0, 1], found 1.5"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"nvme_path": 7}}})",
       "zero_optimization.offload_optimizer.nvme_path: expected a path (a string), found 7"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(rejection_of(c.text), StartsWith(c.message)) << c.text;
  }
}

TEST(Coercion, NegativeAndZeroSizesAreRefused) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 0})", "train_batch_size: expected an integer > 0, found 0"},
      {R"({"train_micro_batch_size_per_gpu": -1})", "train_micro_batch_size_per_gpu: expected an integer > 0, found -1"},
      {R"({"train_batch_size": 8, "gradient_accumulation_steps": 0})",
       "gradient_accumulation_steps: expected an integer > 0, found 0"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"buffer_count": 0}}})",
       "zero_optimization.offload_optimizer.buffer_count: expected an integer > 0, found 0"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_param": {"buffer_size": -5}}})",
       "zero_optimization.offload_param.buffer_size: expected an integer > 0, found -5"},
      {R"({"train_batch_size": 8, "aio": {"block_size": 0}})", "aio.block_size: expected an integer > 0, found 0"},
      {R"({"train_batch_size": 8, "aio": {"queue_depth": -8}})", "aio.queue_depth: expected an integer > 0, found -8"},
      {R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale_window": 0}})",
       "fp16.loss_scale_window: expected an integer > 0, found 0"},
      {R"({"train_batch_size": 8, "fp16": {"enabled": true, "min_loss_scale": 0}})",
       "fp16.min_loss_scale: expected a number > 0, found 0"},
      {R"({"train_batch_size": 8, "fp16": {"loss_scale": -1}})", "fp16.loss_scale: expected a number >= 0"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage3_max_reuse_distance": -1}})",
       "zero_optimization.stage3_max_reuse_distance: expected an integer >= 0, found -1"},
      {R"({"train_batch_size": 8, "gradient_clipping": -1.0})", "gradient_clipping: expected a number >= 0, found -1.0"},
      {R"({"train_batch_size": 8, "steps_per_print": 0})", "steps_per_print: expected an integer > 0, found 0"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(rejection_of(c.text), StartsWith(c.message)) << c.text;
  }
}

TEST(Coercion, LegalZeros) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "gradient_clipping": 0, "zero_optimization": {
      "stage": 3, "reduce_bucket_size": 0, "stage3_prefetch_bucket_size": 0, "sub_group_size": 0,
      "stage3_param_persistence_threshold": 0}})");
  EXPECT_EQ(config.zero.reduce_bucket_size, 0);
  EXPECT_EQ(config.zero.prefetch_bucket_size, 0);
  EXPECT_EQ(config.zero.sub_group_size, 0);
  EXPECT_DOUBLE_EQ(config.gradient_clipping, 0.0);
}

TEST(Coercion, FieldNamesAreAcceptedBesideAliases) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "prefetch_bucket_size": 123, "max_live_parameters": 7}})");
  EXPECT_EQ(config.zero.prefetch_bucket_size, 123);
  EXPECT_EQ(config.zero.max_live_parameters, 7);
  const json& zero = config.resolved["zero_optimization"];
  EXPECT_EQ(zero["stage3_prefetch_bucket_size"], 123);
  EXPECT_FALSE(zero.contains("prefetch_bucket_size"));
}

// ---------------------------------------------------------------------------------------------
// Unknown keys.

TEST(UnknownKeys, RefusedWithTheNearestValidName) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train_batch_size": 8, "zero_optimization": {"stage3_param_persitence_threshold": 1}})",
       "zero_optimization.stage3_param_persitence_threshold: unknown key; did you mean "
       "stage3_param_persistence_threshold?"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"devcie": "cpu"}}})",
       "zero_optimization.offload_optimizer.devcie: unknown key; did you mean device?"},
      {R"({"train_batch_size": 8, "zero_optimization": {"offload_param": {"buffer_cnt": 4}}})",
       "zero_optimization.offload_param.buffer_cnt: unknown key; did you mean buffer_count?"},
      {R"({"train_batch_size": 8, "fp16": {"loss_scale_windows": 100}})",
       "fp16.loss_scale_windows: unknown key; did you mean loss_scale_window?"},
      {R"({"train_batch_size": 8, "bf16": {"enable": true}})", "bf16.enable: unknown key; did you mean enabled?"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}})",
       "optimizer.params.weight_decy: unknown key; did you mean weight_decay?"},
      {R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 5}}})",
       "scheduler.params.warmup_num_step: unknown key; did you mean warmup_num_steps?"},
      {R"({"train_batch_size": 8, "gradient_clippping": 1.0})",
       "gradient_clippping: unknown key; did you mean gradient_clipping?"},
      {R"({"train_batch_size": 8, "zero_optimisation": {"stage": 3}})",
       "zero_optimisation: unknown key; did you mean zero_optimization?"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(rejection_of(c.text), StartsWith(c.message)) << c.text;
  }
}

TEST(UnknownKeys, AioAndOptimizerBlockKeysAreIgnoredWithAWarningLikeDeepSpeed) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "aio": {"queue_dept": 4},
      "optimizer": {"type": "AdamW", "param": {"lr": 0.5}}})");
  EXPECT_EQ(config.aio.queue_depth, 8);
  EXPECT_DOUBLE_EQ(config.optimizer.learning_rate, 1e-3);
  EXPECT_TRUE(any_contains(config.warnings, "aio.queue_dept: unknown key, ignored as DeepSpeed ignores it; did you "
                                            "mean queue_depth?"));
  EXPECT_TRUE(any_contains(config.warnings, "optimizer.param: unknown key"));
  EXPECT_TRUE(any_contains(config.inactive_keys, "aio.queue_dept"));
}

TEST(UnknownKeys, ErrorsAreCollectedNotJustTheFirst) {
  const std::string message =
      rejection_of(R"({"train_batch_size": 8, "zero_optimization": {"stagee": 3, "sub_group_size": -1}})");
  EXPECT_THAT(message, HasSubstr("zero_optimization.stagee: unknown key; did you mean stage?"));
  EXPECT_THAT(message, HasSubstr("zero_optimization.sub_group_size: expected an integer >= 0, found -1"));
}

TEST(UnknownKeys, AFarNameIsStillNamedButNotGuessed) {
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "foo": 1})"),
              StartsWith("foo: unknown key; the nearest valid name is aio"));
}

// ---------------------------------------------------------------------------------------------
// "auto".

TEST(Auto, EachTrainerKeyNamesItsRunSetting) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train_micro_batch_size_per_gpu": "auto"})",
       "train_micro_batch_size_per_gpu is \"auto\"; give --micro-batch-size"},
      {R"({"train_batch_size": 8, "gradient_accumulation_steps": "auto"})",
       "gradient_accumulation_steps is \"auto\"; give --gradient-accumulation-steps"},
      {R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2})",
       "train_batch_size is \"auto\"; give --gradient-accumulation-steps"},
      {R"({"train_batch_size": 8, "gradient_clipping": "auto"})", "gradient_clipping is \"auto\"; give --max-grad-norm"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"eps": "auto"}}})",
       "optimizer.params.eps is \"auto\"; give --adam-epsilon"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"weight_decay": "auto"}}})",
       "optimizer.params.weight_decay is \"auto\"; give --weight-decay"},
      {R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}}})",
       "scheduler.params.warmup_max_lr is \"auto\"; give --learning-rate"},
      {R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto"}}})",
       "scheduler.params.total_num_steps is \"auto\"; give --total-steps"},
      {R"({"train_batch_size": 8, "aio": {"block_size": "auto"}})",
       "aio.block_size: is \"auto\", but the HF Trainer does not fill this key"},
      {R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "auto"}}})",
       "scheduler.params.warmup_type: expected \"log\" or \"linear\", found \"auto\""},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(rejection_of(c.text), StartsWith(c.message)) << c.text;
  }
}

TEST(Auto, PydanticKeysFallBackToTheDefaultWithAWarning) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "reduce_bucket_size": "auto", "stage3_max_live_parameters": "auto", "allgather_partitions": "auto",
      "offload_optimizer": {"device": "cpu", "pin_memory": "auto"}}, "fp16": {"hysteresis": "auto"}})");
  EXPECT_EQ(config.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(config.zero.max_live_parameters, 1000000000);
  EXPECT_TRUE(config.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(config.loss_scaler.hysteresis, 2);
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization.reduce_bucket_size is \"auto\"; DeepSpeed drops"));
  EXPECT_TRUE(any_contains(config.warnings, "give --hidden-size"));
  EXPECT_EQ(config.resolved["zero_optimization"]["allgather_partitions"], true);
  EXPECT_FALSE(contains_auto(config.resolved));
}

TEST(Auto, HiddenSizeKeysFollowTheTrainerFormulasOnlyAtStage3) {
  RunSettings settings;
  settings.hidden_size = 1000;
  const std::string zero_keys = R"("reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto")";
  ResolvedConfig stage3 =
      accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, )" + zero_keys + "}}", settings);
  EXPECT_EQ(stage3.zero.reduce_bucket_size, 1000000);
  EXPECT_EQ(stage3.zero.prefetch_bucket_size, 900000);
  EXPECT_EQ(stage3.zero.param_persistence_threshold, 10000);
  ResolvedConfig stage2 =
      accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, )" + zero_keys + "}}", settings);
  EXPECT_EQ(stage2.zero.reduce_bucket_size, 1000000);
  EXPECT_EQ(stage2.zero.prefetch_bucket_size, 50000000);
  EXPECT_EQ(stage2.zero.param_persistence_threshold, 100000);
}

TEST(Auto, AConcreteValueThatDisagreesWithTheRunIsRefusedLikeTheTrainer) {
  RunSettings settings;
  settings.learning_rate = 2e-5;
  settings.micro_batch_size = 4;
  const std::string message = rejection_of(
      R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}})", settings);
  EXPECT_THAT(message, HasSubstr("train_micro_batch_size_per_gpu: the config gives 2 but --micro-batch-size is 4"));
  EXPECT_THAT(message, HasSubstr("optimizer.params.lr: the config gives 1e-05 but --learning-rate is 2e-05"));
}

// ---------------------------------------------------------------------------------------------
// Batch sizes (DeepSpeed's _set_batch_related_parameters and _batch_assertion).

TEST(Batch, AnyTwoDetermineTheThird) {
  RunSettings world4;
  world4.world_size = 4;
  ResolvedConfig from_micro_and_accumulation =
      accepted_text(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})", world4);
  EXPECT_EQ(from_micro_and_accumulation.train_batch_size, 24);
  ResolvedConfig from_train_and_accumulation =
      accepted_text(R"({"train_batch_size": 24, "gradient_accumulation_steps": 3})", world4);
  EXPECT_EQ(from_train_and_accumulation.micro_batch_size, 2);
  ResolvedConfig from_micro_only = accepted_text(R"({"train_micro_batch_size_per_gpu": 5})", world4);
  EXPECT_EQ(from_micro_only.train_batch_size, 20);
  EXPECT_EQ(from_micro_only.gradient_accumulation_steps, 1);
  EXPECT_EQ(from_micro_only.resolved["train_batch_size"], 20);
}

TEST(Batch, InconsistentTripleNamesAllThreeAndTheWorldSize) {
  RunSettings world2;
  world2.world_size = 2;
  const std::string message = rejection_of(
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", world2);
  EXPECT_THAT(message, StartsWith("train_batch_size: 32 != train_micro_batch_size_per_gpu 4 x "
                                  "gradient_accumulation_steps 2 x world size 2 (= 16)"));
}

TEST(Batch, NonDivisibleTrainBatch) {
  RunSettings world3;
  world3.world_size = 3;
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8})", world3),
              StartsWith("train_batch_size: 8 is not divisible by world size 3"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 12, "gradient_accumulation_steps": 5})", world3),
              StartsWith("train_batch_size: 12 is not divisible by gradient_accumulation_steps 5 x world size 3"));
  RunSettings world0;
  world0.world_size = 0;
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8})", world0), StartsWith("world_size: expected a run setting > 0"));
}

// ---------------------------------------------------------------------------------------------
// Precision, loss scaler, communication dtype.

TEST(Precision, Fp16AndBf16BothEnabledIsRefused) {
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
              StartsWith("bf16.enabled: cannot be true together with fp16.enabled"));
}

TEST(Precision, StaticAndDynamicLossScale) {
  ResolvedConfig fixed = accepted_text(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 128}})");
  EXPECT_FALSE(fixed.loss_scaler.dynamic);
  EXPECT_DOUBLE_EQ(fixed.loss_scaler.static_loss_scale, 128.0);
  ResolvedConfig dynamic = accepted_text(R"({"train_batch_size": 8, "fp16": {"enabled": true,
      "initial_scale_power": 12, "loss_scale_window": 50, "hysteresis": 3, "consecutive_hysteresis": true,
      "min_loss_scale": 2.0}})");
  EXPECT_TRUE(dynamic.loss_scaler.dynamic);
  EXPECT_EQ(dynamic.loss_scaler.initial_scale_power, 12);
  EXPECT_EQ(dynamic.loss_scaler.loss_scale_window, 50);
  EXPECT_EQ(dynamic.loss_scaler.hysteresis, 3);
  EXPECT_TRUE(dynamic.loss_scaler.consecutive_hysteresis);
  EXPECT_DOUBLE_EQ(dynamic.loss_scaler.min_loss_scale, 2.0);  // an integral float passes, as in pydantic
  EXPECT_EQ(dynamic.communication_dtype, Precision::kFp16);
  // DeepSpeedFP16Config declares both ints and refuses a bool before coercing it.
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "min_loss_scale": 0.25}})"),
              StartsWith("fp16.min_loss_scale: expected an integer, found 0.25"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale_window": true}})"),
              StartsWith("fp16.loss_scale_window: expected an integer, found true"));
  // A negative power is DeepSpeed's too (a scale below 1); beyond fp32's normal range is not.
  EXPECT_EQ(accepted_text(R"({"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": -2}})")
                .loss_scaler.initial_scale_power,
            -2);
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "initial_scale_power": -127}})"),
              StartsWith("fp16.initial_scale_power: expected an integer in [-126, 127]"));
}

TEST(Precision, CommunicationDataType) {
  ResolvedConfig config =
      accepted_text(R"({"train_batch_size": 8, "bf16": {"enabled": true}, "communication_data_type": "FP32"})");
  EXPECT_EQ(config.communication_dtype, Precision::kFp32);
  EXPECT_EQ(config.resolved["communication_data_type"], "fp32");
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "communication_data_type": "int8"})"),
              StartsWith("communication_data_type: expected \"fp16\", \"bf16\" or \"fp32\", found \"int8\""));
}

TEST(Precision, OldBfloat16Name) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "bfloat16": {"enabled": true}})");
  EXPECT_EQ(config.precision, Precision::kBf16);
  EXPECT_TRUE(any_contains(config.warnings, "bfloat16 is the old name of bf16"));
  EXPECT_FALSE(config.resolved.contains("bfloat16"));
  EXPECT_EQ(config.resolved["bf16"]["enabled"], true);
}

// ---------------------------------------------------------------------------------------------
// Optimizer and scheduler.

TEST(Optimizer, TypesAndModes) {
  ResolvedConfig lower = accepted_text(R"({"train_batch_size": 8, "optimizer": {"type": "adamw"}})");
  EXPECT_EQ(lower.optimizer.type, "AdamW");
  EXPECT_TRUE(lower.optimizer.present);
  ResolvedConfig classic = accepted_text(
      R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "betas": [0.5, 0.6]}}})");
  EXPECT_FALSE(classic.optimizer.adam_w_mode);
  EXPECT_DOUBLE_EQ(classic.optimizer.beta2, 0.6);
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}})"),
              StartsWith("optimizer.type: zerosim supports Adam and AdamW, found \"Lamb\""));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1}}})"),
              StartsWith("optimizer.type: missing"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})"),
              StartsWith("optimizer.params.betas: expected a list of two numbers in [0, 1), found [0.9]"));
  EXPECT_THAT(
      rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})"),
      StartsWith("optimizer.params.betas: expected a list of two numbers in [0, 1)"));
  // Which Adam DeepSpeed builds decides: FusedAdam refuses AMSGrad, DeepSpeedCPUAdam (optimizer
  // offload) ignores it, and only FusedAdam takes set_grad_none.
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})"),
              StartsWith("optimizer.params.amsgrad: DeepSpeed's FusedAdam refuses AMSGrad"));
  const ResolvedConfig offloaded = accepted_text(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
      "params": {"amsgrad": true}}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_THAT(offloaded.warnings, Contains(HasSubstr("DeepSpeedCPUAdam (optimizer offload) ignores it")));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"set_grad_none":
      true}}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})"),
              StartsWith("optimizer.params.set_grad_none: DeepSpeedCPUAdam (optimizer offload) takes no such argument"));
  accepted_text(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"set_grad_none": true}}})");
  // engine._configure_basic_optimizer raises ValueError for it, whatever the value.
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}})"),
              StartsWith("optimizer.params.max_grad_norm: DeepSpeed refuses it as an optimizer parameter"));
}

TEST(Checkpoint, TagValidationTakesDeepSpeedsThreeModesInAnyCase) {
  const ResolvedConfig config =
      accepted_text(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "fail"}})");
  EXPECT_EQ(config.resolved.at("checkpoint").at("tag_validation"), "FAIL");
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": "Strict"}})"),
              StartsWith("checkpoint.tag_validation: expected \"Warn\", \"Ignore\" or \"Fail\""));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"tag_validation": 1}})"),
              StartsWith("checkpoint.tag_validation: expected"));
}

// checkpoint.writer as DeepSpeed's get_checkpoint_writer_config reads it: the type in any case
// (FAST when a writer is given without one), io_buffer_size 64 MiB and io_buffer_double true by
// default; "mock" writes nothing and is refused; a buffer O_DIRECT cannot move is named.
TEST(Checkpoint, TheWriterBlockTakesDeepSpeedsTypesAndBufferSettings) {
  const ResolvedConfig none = accepted_text(R"({"train_batch_size": 8})");
  EXPECT_EQ(none.checkpoint.writer, CheckpointWriterType::kNone);
  const ResolvedConfig fast = accepted_text(R"({"train_batch_size": 8, "checkpoint": {"writer": {}}})");
  EXPECT_EQ(fast.checkpoint.writer, CheckpointWriterType::kFast);
  EXPECT_EQ(fast.checkpoint.io_buffer_size, int64_t{64} << 20);
  EXPECT_TRUE(fast.checkpoint.io_buffer_double);
  EXPECT_EQ(fast.resolved.at("checkpoint").at("writer").at("type"), "FAST");
  const ResolvedConfig python = accepted_text(
      R"({"train_batch_size": 8, "checkpoint": {"writer": {"type": "Python", "io_buffer_size": 12288, "io_buffer_double": false}}})");
  EXPECT_EQ(python.checkpoint.writer, CheckpointWriterType::kPython);
  EXPECT_EQ(python.checkpoint.io_buffer_size, 12288);
  EXPECT_FALSE(python.checkpoint.io_buffer_double);
  const CheckpointIoOptions python_io = checkpoint_io_options_from(python, /*cpus_per_rank=*/16);
  EXPECT_FALSE(python_io.direct_io);
  EXPECT_EQ(python_io.threads, 1);
  EXPECT_EQ(python_io.buffer_bytes, 12288u);
  EXPECT_FALSE(python_io.double_buffered);
  const ResolvedConfig fast_aio = accepted_text(
      R"({"train_batch_size": 8, "aio": {"block_size": 262144, "queue_depth": 16, "intra_op_parallelism": 2},
          "checkpoint": {"writer": {"type": "fast", "io_buffer_size": 1048576}}})");
  const CheckpointIoOptions fast_io = checkpoint_io_options_from(fast_aio, /*cpus_per_rank=*/1);
  EXPECT_TRUE(fast_io.direct_io);
  EXPECT_EQ(fast_io.buffer_bytes, 524288u) << "halved for the double buffer";
  EXPECT_TRUE(fast_io.double_buffered);
  EXPECT_EQ(fast_io.aio.block_size_bytes, 262144);
  EXPECT_EQ(fast_io.aio.queue_depth, 16);
  EXPECT_EQ(fast_io.aio.intra_op_parallelism, 2);
  const CheckpointIoOptions default_io = checkpoint_io_options_from(none, /*cpus_per_rank=*/0);
  EXPECT_FALSE(default_io.direct_io);
  EXPECT_EQ(default_io.threads, 4) << "CPUs not known (the simulator): the fixed default";
  // Without a writer, one CPU stays with the rank and the I/O threads take the rest, 1 to 4.
  for (const auto& [cpus, threads] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 2}, std::pair{4, 3},
                                      std::pair{5, 4}, std::pair{64, 4}}) {
    const CheckpointIoOptions io = checkpoint_io_options_from(none, cpus);
    EXPECT_EQ(io.threads, threads) << cpus << " CPUs per rank";
    EXPECT_FALSE(io.direct_io);
    EXPECT_EQ(io.buffer_bytes, default_io.buffer_bytes);
  }
  EXPECT_EQ(checkpoint_io_options_from(python, /*cpus_per_rank=*/1).threads, 1) << "python is one thread everywhere";
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"writer": {"type": "mock"}}})"),
              StartsWith("checkpoint.writer.type: \"mock\" writes nothing"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"writer": {"type": ""}}})"),
              StartsWith("checkpoint.writer.type: expected \"fast\", \"python\" or \"mock\""));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"writer": {"io_buffer_size": 12288}}})"),
              StartsWith("checkpoint.writer.io_buffer_size: expected a multiple of 8192 bytes"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"writer": {"io_buffer_size": 0}}})"),
              StartsWith("checkpoint.writer.io_buffer_size"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "checkpoint": {"writer": "fast"}})"),
              StartsWith("checkpoint.writer: expected an object"));
  const ResolvedConfig decoupled =
      accepted_text(R"({"train_batch_size": 8, "checkpoint": {"writer": {"decoupled": true, "buffer": 1}}})");
  EXPECT_TRUE(any_contains(decoupled.warnings, "checkpoint.writer.decoupled"));
  EXPECT_TRUE(any_contains(decoupled.warnings, "checkpoint.writer.buffer: unknown key"));
}

TEST(Numerics, PortableByDefaultDeepSpeedOnRequestAndNothingElse) {
  EXPECT_EQ(accepted_text(R"({"train_batch_size": 8})").numerics, NumericsMode::kPortable);
  const ResolvedConfig deepspeed = accepted_text(R"({"train_batch_size": 8, "zerosim": {"numerics": "deepspeed"}})");
  EXPECT_EQ(deepspeed.numerics, NumericsMode::kDeepSpeed);
  EXPECT_TRUE(deepspeed.scheduler.c_library_math);
  EXPECT_EQ(deepspeed.resolved.at("zerosim").at("numerics"), "deepspeed");
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zerosim": {"numerics": "exact"}})"),
              StartsWith("zerosim.numerics: expected \"portable\" or \"deepspeed\", found \"exact\""));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zerosim": {"numerics": ""}})"),
              StartsWith("zerosim.numerics: expected"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zerosim": {"numeric": "deepspeed"}})"),
              HasSubstr("numerics"));
}

// zerosim.deepspeed_release: an X.Y.Z release; before 0.15.3 the warm-up's first step runs at
// the optimizer's lr. Anything else is refused by name.
TEST(Numerics, ADeepSpeedReleaseIsXYZAndDecidesTheSchedulersFirstStep) {
  const std::string batch = R"({"train_batch_size": 8, )";
  EXPECT_FALSE(accepted_text(R"({"train_batch_size": 8})").deepspeed_release.has_value());
  EXPECT_FALSE(accepted_text(R"({"train_batch_size": 8})").scheduler.first_step_at_optimizer_lr);
  const ResolvedConfig old = accepted_text(batch + R"("zerosim": {"deepspeed_release": "0.14.5"}})");
  ASSERT_TRUE(old.deepspeed_release.has_value());
  EXPECT_EQ(*old.deepspeed_release, (DeepSpeedRelease{0, 14, 5}));
  EXPECT_TRUE(old.scheduler.first_step_at_optimizer_lr);
  EXPECT_EQ(old.resolved.at("zerosim").at("deepspeed_release"), "0.14.5");
  EXPECT_TRUE(accepted_text(batch + R"("zerosim": {"deepspeed_release": "0.15.2"}})").scheduler.first_step_at_optimizer_lr);
  EXPECT_FALSE(accepted_text(batch + R"("zerosim": {"deepspeed_release": "0.15.3"}})").scheduler.first_step_at_optimizer_lr);
  EXPECT_FALSE(accepted_text(batch + R"("zerosim": {"deepspeed_release": "1.0.0"}})").scheduler.first_step_at_optimizer_lr);
  for (const char* bad : {R"("")", R"("0.14")", R"("v0.14.5")", R"("0.14.5rc1")", R"("0..5")", R"(0.14)", R"(null)"}) {
    EXPECT_THAT(rejection_of(batch + R"("zerosim": {"deepspeed_release": )" + bad + "}}"),
                StartsWith("zerosim.deepspeed_release: expected a DeepSpeed release as \"X.Y.Z\""))
        << bad;
  }
}

// DeepSpeed's constructors' defaults and checks (lr_schedules.py; golden verdicts in
// deepspeed_fidelity_test).
TEST(Scheduler, DeepSpeedsOwnDefaultsAndVerdicts) {
  const ResolvedConfig decay = accepted_text(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
      "params": {"lr": 0.003}}, "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}}})");
  EXPECT_DOUBLE_EQ(decay.scheduler.warmup_max_lr, 0.001);  // WarmupDecayLR's own default, not the lr
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_num_steps": 5.0}}})"),
              StartsWith("scheduler.params.warmup_num_steps: expected a positive integer, found 5.0"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR"}})"),
              StartsWith("scheduler.params: missing"));
  const ResolvedConfig zero_total = accepted_text(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR",
      "params": {"total_num_steps": 0, "warmup_num_steps": 5}}})");
  EXPECT_EQ(zero_total.scheduler.total_num_steps, 0);
  EXPECT_THAT(zero_total.warnings, Contains(HasSubstr("total_num_steps 0 is smaller than warmup_num_steps 5")));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params":
      {"last_batch_iteration": 5}}})"),
              StartsWith("scheduler.params.last_batch_iteration: zerosim starts every schedule at -1"));
}

TEST(Scheduler, TypesAndParameters) {
  ResolvedConfig warmup = accepted_text(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
      "params": {"lr": 0.003}}, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1,
      "warmup_type": "linear"}}})");
  EXPECT_DOUBLE_EQ(warmup.scheduler.warmup_max_lr, 0.003);  // defaults to the optimizer's lr
  EXPECT_EQ(warmup.scheduler.warmup_num_steps, 1);          // stored as given; the schedule clamps
  EXPECT_EQ(warmup.scheduler.warmup_type, WarmupType::kLinear);
  ResolvedConfig cosine = accepted_text(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR",
      "params": {"total_num_steps": 100, "cos_min_ratio": 0.1}}})");
  EXPECT_EQ(cosine.scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(cosine.scheduler.total_num_steps, 100);
  EXPECT_DOUBLE_EQ(cosine.scheduler.cos_min_ratio, 0.1);
  EXPECT_STREQ(scheduler_type_name(cosine.scheduler.type), "WarmupCosineLR");

  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle"}})"),
              StartsWith("scheduler.type: zerosim supports WarmupLR, WarmupDecayLR and WarmupCosineLR, found "
                         "\"OneCycle\""));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "warmuplr"}})"),
              HasSubstr("did you mean WarmupLR? (the name is case-sensitive)"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR", "params": {}}})"),
              StartsWith("scheduler.params.total_num_steps: missing; WarmupDecayLR requires it"));
  EXPECT_THAT(
      rejection_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 9}}})"),
      StartsWith("scheduler.params.total_num_steps: not a parameter of WarmupLR"));
}

// ---------------------------------------------------------------------------------------------
// Legacy forms.

TEST(Legacy, BareBooleanZeroOptimizationMeansStage1) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "zero_optimization": true, "allgather_size": 7})");
  EXPECT_EQ(config.zero.stage, 1);
  EXPECT_EQ(config.zero.allgather_bucket_size, 7);
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization: the boolean form is deprecated"));
  EXPECT_TRUE(config.resolved["zero_optimization"].is_object());
}

TEST(Legacy, DeprecatedKeyTogetherWithItsReplacementIsRefused) {
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zero_optimization": {"cpu_offload": true,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}})"),
              StartsWith("zero_optimization.cpu_offload: cannot be given together with its replacement "
                         "offload_optimizer"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zero_optimization": {"stage3_gather_fp16_weights_on_model_save":
      true, "stage3_gather_16bit_weights_on_model_save": false}})"),
              StartsWith("zero_optimization.stage3_gather_fp16_weights_on_model_save: cannot be given together"));
}

TEST(Legacy, AioThreadCountDefersToIntraOpParallelism) {
  ResolvedConfig config =
      accepted_text(R"({"train_batch_size": 8, "aio": {"thread_count": 2, "intra_op_parallelism": 3}})");
  EXPECT_EQ(config.aio.intra_op_parallelism, 3);
  EXPECT_TRUE(any_contains(config.warnings, "aio.thread_count is ignored"));
}

TEST(Stage, ParamOffloadBelowStage3IsIgnoredAndPartialOffloadNeedsStage3) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_param": {"device": "cpu"}}})");
  EXPECT_EQ(config.zero.offload_param.device, OffloadDevice::kNone);
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization.offload_param: ignored at stage 2"));
  EXPECT_THAT(rejection_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})"),
              StartsWith("zero_optimization.offload_optimizer.ratio: partial offloading (ratio < 1) needs stage 3"));
  ResolvedConfig no_path = accepted_text(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_TRUE(any_contains(no_path.warnings, "zero_optimization.offload_optimizer.nvme_path: missing"));
  EXPECT_STREQ(offload_device_name(no_path.zero.offload_optimizer.device), "nvme");
}

// ---------------------------------------------------------------------------------------------
// --set overrides.

TEST(Override, CreatesNestedObjectsAndParsesValues) {
  json document = json::object();
  ASSERT_TRUE(apply_override(document, "zero_optimization.offload_optimizer.device=nvme").ok());
  ASSERT_TRUE(apply_override(document, "zero_optimization.offload_optimizer.nvme_path=/mnt/nvme 0").ok());
  ASSERT_TRUE(apply_override(document, "zero_optimization.stage=3").ok());
  ASSERT_TRUE(apply_override(document, "zero_optimization.sub_group_size=1e9").ok());
  ASSERT_TRUE(apply_override(document, "optimizer={\"type\": \"AdamW\"}").ok());
  ASSERT_TRUE(apply_override(document, "optimizer.params.betas=[0.8, 0.9]").ok());
  ASSERT_TRUE(apply_override(document, "train_micro_batch_size_per_gpu=\"auto\"").ok());
  ASSERT_TRUE(apply_override(document, "fp16.enabled=true").ok());
  EXPECT_EQ(document["zero_optimization"]["offload_optimizer"]["device"], "nvme");
  EXPECT_EQ(document["zero_optimization"]["offload_optimizer"]["nvme_path"], "/mnt/nvme 0");
  EXPECT_EQ(document["zero_optimization"]["stage"], 3);
  EXPECT_EQ(document["train_micro_batch_size_per_gpu"], "auto");
  EXPECT_EQ(document["fp16"]["enabled"], true);

  RunSettings settings;
  settings.micro_batch_size = 2;
  ResolvedConfig config = accepted(resolve_config(document, settings));
  EXPECT_EQ(config.zero.offload_optimizer.device, OffloadDevice::kNvme);
  EXPECT_EQ(config.zero.sub_group_size, 1000000000);
  EXPECT_DOUBLE_EQ(config.optimizer.beta1, 0.8);
  EXPECT_EQ(config.micro_batch_size, 2);
  EXPECT_EQ(config.input, document);
}

TEST(Override, ErrorsNameThePath) {
  json document = {{"zero_optimization", {{"stage", 3}}}};
  Status blocked = apply_override(document, "zero_optimization.stage.value=1");
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(blocked.message(), StartsWith("zero_optimization.stage: cannot set zero_optimization.stage.value "
                                            "because zero_optimization.stage is a number (3), not an object"));
  EXPECT_EQ(document["zero_optimization"]["stage"], 3);  // untouched

  Status no_equals = apply_override(document, "zero_optimization.stage");
  ASSERT_FALSE(no_equals.ok());
  EXPECT_THAT(no_equals.message(), HasSubstr("expected KEY=VALUE"));
  Status empty_part = apply_override(document, "zero_optimization..stage=1");
  ASSERT_FALSE(empty_part.ok());
  EXPECT_THAT(empty_part.message(), HasSubstr("has an empty part"));
  json list = json::array();
  EXPECT_FALSE(apply_override(list, "a=1").ok());
}

// ---------------------------------------------------------------------------------------------
// Names, inactive keys and robustness.

TEST(Names, EnumNames) {
  EXPECT_STREQ(precision_name(Precision::kFp32), "fp32");
  EXPECT_STREQ(precision_name(Precision::kFp16), "fp16");
  EXPECT_STREQ(precision_name(Precision::kBf16), "bf16");
  EXPECT_STREQ(offload_device_name(OffloadDevice::kNone), "none");
  EXPECT_STREQ(offload_device_name(OffloadDevice::kCpu), "cpu");
  EXPECT_STREQ(scheduler_type_name(SchedulerType::kNone), "none");
  EXPECT_STREQ(scheduler_type_name(SchedulerType::kWarmupDecayLR), "WarmupDecayLR");
}

TEST(InactiveKeys, ListsBlocksAndKeysZerosimDoesNotActOn) {
  ResolvedConfig config = accepted_text(R"({"train_batch_size": 8, "steps_per_print": 5, "wall_clock_breakdown": true,
      "tensorboard": {"enabled": true}, "zero_optimization": {"stage": 3, "overlap_comm": true,
      "zero_quantized_weights": true, "offload_optimizer": {"device": "nvme", "nvme_path": "/x", "fast_init": true}},
      "aio": {"use_gds": false}})");
  for (const char* key : {"steps_per_print", "wall_clock_breakdown", "tensorboard", "zero_optimization.overlap_comm",
                          "zero_optimization.zero_quantized_weights", "zero_optimization.offload_optimizer.fast_init",
                          "aio.use_gds"}) {
    EXPECT_TRUE(any_contains(config.inactive_keys, key)) << key;
  }
  EXPECT_FALSE(any_contains(config.inactive_keys, "zero_optimization.stage"));
  EXPECT_FALSE(any_contains(config.inactive_keys, "zero_optimization.offload_optimizer.device"));
  EXPECT_TRUE(any_contains(config.warnings, "zero_optimization.zero_quantized_weights is true, which changes"));
}

// Replaces every leaf of every corpus file by odd values: the reader must answer (accept, or
// refuse with kInvalidArgument), never throw or crash.
TEST(Robustness, OddValuesAnywhereNeverThrow) {
  const std::vector<json> odd = {json(), json::array(), json::object(), json("x"), json("auto"),
                                 json(-1),  json(1.5),   json(true),     json(1e300), json(std::string("\xff\xfe"))};
  int answered = 0;
  for (const CorpusCase& corpus : kCorpus) {
    const json document = load_corpus(corpus.file);
    const json flat = document.flatten();
    for (auto it = flat.begin(); it != flat.end(); ++it) {
      for (const json& value : odd) {
        json mutated = document;
        mutated[json::json_pointer(it.key())] = value;
        Result<ResolvedConfig> result = resolve_config(mutated, trainer_settings());
        if (!result.ok()) {
          EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
          EXPECT_FALSE(result.status().message().empty());
          EXPECT_THAT(result.status().message(), Not(HasSubstr("unexpected failure"))) << it.key();
        }
        ++answered;
      }
    }
  }
  EXPECT_GT(answered, 1000);
}

}  // namespace
}  // namespace zerosim
