// Checkpoints: save, kill and resume reproduce the uninterrupted run bit for bit at every
// step (any world size on resume, swap directory deleted or stale), shards are reproducible,
// async saves equal synchronous ones, and the loader refuses every damaged or foreign input
// with an error that names it.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"
#include "core/checkpoint/shard_reader.h"
#include "core/env/comm.h"
#include "faults/faulty_disk.h"
#include "sim/crash_explorer.h"
#include "tests/forwarding_disk.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

namespace fs = std::filesystem;

// The file's bytes, empty when it cannot be read. One read into a buffer of the file's size:
// shards here are tens of MB, and a vector grown byte by byte is slow under the sanitizers.
std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::vector<char> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return {};
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

CheckpointPlan save_to(const std::string& directory, int64_t every_steps = 0) {
  CheckpointPlan plan;
  plan.save_directory = directory;
  plan.save_every_steps = every_steps;
  return plan;
}

CheckpointPlan resume_from(const std::string& directory, const std::string& tag = "latest") {
  CheckpointPlan plan;
  plan.resume_directory = directory;
  plan.resume_tag = tag;
  return plan;
}

CheckpointPlan resume_and_save(const std::string& resume_directory, const std::string& save_directory) {
  CheckpointPlan plan = resume_from(resume_directory);
  plan.save_directory = save_directory;
  return plan;
}

Result<TrainingRun> train(const TrainingOptions& options, int64_t steps, const CheckpointPlan& plan, Env env = {}) {
  RealEnv real_env;
  if (env.disk == nullptr) env = real_env.env();
  return run_training(options, steps, env, plan);
}

// Where the optimizer state and the parameters live: 0 memory, 1 cpu, 2 optimizer on NVMe,
// 3 parameters on NVMe, 4 both.
void place_state(TrainingOptions& options, int placement, const std::string& nvme_path) {
  OffloadConfig& optimizer = options.config.zero.offload_optimizer;
  OffloadConfig& params = options.config.zero.offload_param;
  optimizer.device = placement == 1 ? OffloadDevice::kCpu
                     : placement == 2 || placement == 4 ? OffloadDevice::kNvme
                                                        : OffloadDevice::kNone;
  params.device = placement >= 3 ? OffloadDevice::kNvme : OffloadDevice::kNone;
  optimizer.nvme_path = nvme_path;
  params.nvme_path = nvme_path;
  optimizer.buffer_count = 9;
}

const char* placement_name(int placement) {
  static const char* const kNames[] = {"memory", "cpu", "nvme-optimizer", "nvme-params", "nvme-both"};
  return kNames[placement];
}

// The oracle of the crash explorer: the state right after the load, then every step.
std::string compare_steps(const TrainingRun& reference, const TrainingRun& resumed, int64_t first_step) {
  return first_divergence(reference, resumed, first_step);
}

// Resume equivalence: K steps uninterrupted against S steps, save, destroy the
// engines, build new ones from the config and the checkpoint (another world size, another
// placement of the state, the swap directory deleted or not), continue to K.
RC_GTEST_PROP(CheckpointProperty, SaveDestroyResumeIsBitIdenticalAtEveryStep, ()) {
  // One case in three resumes the transformer: the tied wte one partition, restored once.
  const bool transformer = *rc::gen::element(false, false, true);
  ModelSpec model;
  if (transformer) {
    model = draw_transformer();
  } else {
    model.layer_widths = {*rc::gen::inRange<int64_t>(2, 16), *rc::gen::inRange<int64_t>(2, 24),
                          *rc::gen::inRange<int64_t>(2, 5)};
  }
  const int world_size = *rc::gen::inRange(1, 5);
  const int resume_world_size = *rc::gen::inRange(1, 5);
  const int64_t micro_batch = *rc::gen::inRange<int64_t>(1, 3);
  // W * W' micro-batches per step: the global batch is whole at both world sizes.
  const int64_t micro_batches = world_size * resume_world_size;
  const int64_t total_steps = *rc::gen::inRange<int64_t>(1, 7);
  const int64_t save_step = *rc::gen::inRange<int64_t>(0, total_steps + 1);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const int64_t sub_group_size = *rc::gen::element<int64_t>(1, 40, 1000000000);
  const int64_t resume_sub_group_size = *rc::gen::element<int64_t>(1, 40, 1000000000);
  const int placement = *rc::gen::inRange(0, 5);
  const int resume_placement = *rc::gen::inRange(0, 5);
  const bool delete_swap_directory = *rc::gen::arbitrary<bool>();
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  RC_TAG(placement_name(placement), placement_name(resume_placement), world_size == resume_world_size,
         transformer ? "gpt" : "mlp");

  TestDirectory directory;
  const std::string checkpoint_directory = directory.path() + "/checkpoints";
  const std::string nvme_path = directory.path() + "/swap";
  TrainingOptions reference = make_options(model, precision, micro_batch, micro_batches / world_size, world_size,
                                           sub_group_size, seed);
  reference.config.loss_scaler.initial_scale_power = 20;  // some fp16 overflows, skipped steps
  reference.digest_every_step = true;
  TrainingOptions first = reference;
  place_state(first, placement, nvme_path);
  TrainingOptions resumed = make_options(model, precision, micro_batch, micro_batches / resume_world_size,
                                         resume_world_size, resume_sub_group_size, seed);
  resumed.config.loss_scaler = reference.config.loss_scaler;
  resumed.digest_every_step = true;
  place_state(resumed, resume_placement, nvme_path);

  Result<TrainingRun> uninterrupted = train(reference, total_steps, {});
  RC_ASSERT(uninterrupted.ok());
  Result<TrainingRun> before = train(first, save_step, save_to(checkpoint_directory));
  if (!before.ok()) RC_FAIL(before.status().to_string());
  if (delete_swap_directory) fs::remove_all(nvme_path);
  Result<TrainingRun> after = train(resumed, total_steps, resume_from(checkpoint_directory));
  if (!after.ok()) RC_FAIL(after.status().to_string());
  const std::string difference = compare_steps(*uninterrupted, *after, save_step);
  if (!difference.empty()) RC_FAIL("resumed run differs at " + difference);
  RC_ASSERT(first_difference(uninterrupted->digests, after->digests) == std::string());
}

// DeepSpeed's load options and a change of the frozen set: a load with them gives, at every
// step, the bits of the model of that load (RankEngine::reset_as_loaded, applied to the
// uninterrupted run's live state at the saved step, never through a file), at any world size,
// placement and precision, with frozen values saved or left out of the checkpoint.
RC_GTEST_PROP(CheckpointProperty, ALoadWithOptionsFollowsItsModelAtEveryStep, ()) {
  ModelSpec model;
  model.layer_widths = {*rc::gen::inRange<int64_t>(2, 12), *rc::gen::inRange<int64_t>(2, 16),
                        *rc::gen::inRange<int64_t>(2, 5)};
  const int world_size = *rc::gen::inRange(1, 4);
  const int resume_world_size = *rc::gen::inRange(1, 4);
  const int64_t micro_batches = world_size * resume_world_size;
  const int64_t save_step = *rc::gen::inRange<int64_t>(0, 4);
  const int64_t total_steps = save_step + *rc::gen::inRange<int64_t>(1, 4);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const int placement = *rc::gen::inRange(0, 5);
  const int resume_placement = *rc::gen::inRange(0, 5);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  CheckpointLoadOptions load;
  switch (*rc::gen::element(0, 1, 2, 3, 4)) {
    case 0: load.optimizer_states = false; break;
    case 1: load.lr_scheduler_states = false; break;
    case 2: load.optimizer_states = false, load.lr_scheduler_states = false; break;
    case 3: load.module_only = true; break;
    default: break;  // everything: only the frozen set changes
  }
  // Frozen parameters (of the 4: two layers' weight and bias), in the saving run and in the
  // resumed one; a parameter frozen when saved comes back trainable only with a fresh optimizer
  // (the checkpoint holds no optimizer state for it; a full load refuses that).
  const auto frozen_names = [](unsigned mask) {
    std::vector<std::string> names;
    for (unsigned p = 0; p < 4; ++p) {
      if ((mask >> p) & 1u) names.push_back("layers." + std::to_string(p / 2) + (p % 2 == 0 ? ".weight" : ".bias"));
    }
    return names;
  };
  const unsigned saved_frozen = *rc::gen::element(0u, 0u, 1u, 2u, 5u, 12u);
  unsigned resumed_frozen = *rc::gen::element(saved_frozen, 0u, 1u, 4u, 6u, 8u);
  if (!load.fresh_optimizer()) resumed_frozen |= saved_frozen;
  if (resumed_frozen == 15u) resumed_frozen = saved_frozen;
  const bool exclude_frozen = saved_frozen != 0 && *rc::gen::arbitrary<bool>();
  RC_TAG(load.describe(), saved_frozen != resumed_frozen, exclude_frozen);

  TestDirectory directory;
  const std::string checkpoint_directory = directory.path() + "/checkpoints";
  const std::string nvme_path = directory.path() + "/swap";
  TrainingOptions first = make_options(model, precision, 1, micro_batches / world_size, world_size, 40, seed);
  first.config.loss_scaler.initial_scale_power = 20;  // some fp16 overflows around the load
  first.digest_every_step = true;
  first.frozen_parameters = frozen_names(saved_frozen);
  TrainingOptions modelled = first;
  place_state(first, placement, nvme_path);
  TrainingOptions resumed = make_options(model, precision, 1, micro_batches / resume_world_size, resume_world_size, 40, seed);
  resumed.frozen_parameters = frozen_names(resumed_frozen);
  resumed.config.loss_scaler = first.config.loss_scaler;
  resumed.digest_every_step = true;
  place_state(resumed, resume_placement, nvme_path);

  CheckpointPlan model_of_load;
  model_of_load.modelled_loads = {{save_step, load, frozen_names(resumed_frozen),
                                   exclude_frozen ? frozen_names(saved_frozen) : std::vector<std::string>{}}};
  Result<TrainingRun> expected = train(modelled, total_steps, model_of_load);
  if (!expected.ok()) RC_FAIL(expected.status().to_string());
  CheckpointPlan saving = save_to(checkpoint_directory);
  saving.save_at_steps = {save_step};
  saving.save_options.exclude_frozen_parameters = exclude_frozen;
  Result<TrainingRun> before = train(first, save_step, saving);
  if (!before.ok()) RC_FAIL(before.status().to_string());
  CheckpointPlan loading = resume_from(checkpoint_directory);
  loading.resume_load = load;
  Result<TrainingRun> after = train(resumed, total_steps, loading);
  if (!after.ok()) RC_FAIL(after.status().to_string());
  RC_ASSERT(after->loaded_checkpoint_step == save_step);
  TrainingRun& model_run = *expected;
  if (load.module_only) {
    // The model counts its steps from 0 again after the saved step: total_steps more.
    RC_ASSERT(model_run.steps.size() == static_cast<size_t>(save_step + total_steps));
    keep_steps_after(model_run, save_step);
  }
  const std::string difference = compare_steps(model_run, *after, load.module_only ? 0 : save_step);
  if (!difference.empty()) RC_FAIL("the load with " + load.describe() + " differs from its model at " + difference);
  RC_ASSERT(first_difference(model_run.digests, after->digests) == std::string());
}

// A chain of resumes through a load option: saved at step 2, resumed with the option to step 4
// and saved there, then resumed in full to step 6. The second resume loads step 4's checkpoint
// (a run resumed with a fresh optimizer or the module only saves consistent counters) and ends
// with the bits of the one resume with the option straight to step 6.
TEST(CheckpointLoadOptions, AChainThroughEachOptionLoadsItsOwnSavesAndEndsAsOneResume) {
  const TrainingOptions options = make_options(ModelSpec{{5, 7, 3}}, Precision::kFp16, 1, 1, 2, 16, 7);
  for (int option = 0; option < 4; ++option) {
    CheckpointLoadOptions load;
    if (option == 0) load.optimizer_states = false;
    if (option == 1) load.lr_scheduler_states = false;
    if (option == 2) load.optimizer_states = false, load.lr_scheduler_states = false;
    if (option == 3) load.module_only = true;
    SCOPED_TRACE(load.describe());
    TestDirectory directory;
    const std::string chain = directory.path() + "/chain", straight = directory.path() + "/straight";
    ASSERT_TRUE(train(options, 2, save_to(chain)).ok());
    ASSERT_TRUE(train(options, 2, save_to(straight)).ok());
    CheckpointPlan with_option = resume_and_save(chain, chain);
    with_option.resume_load = load;
    ASSERT_TRUE(train(options, 4, with_option).ok());
    Result<TrainingRun> resumed = train(options, 6, resume_from(chain));
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    EXPECT_EQ(resumed->loaded_checkpoint_step, 4);
    EXPECT_TRUE(resumed->notes.empty() || std::none_of(resumed->notes.begin(), resumed->notes.end(), [](const std::string& note) {
      return note.find("not a complete checkpoint") != std::string::npos;
    })) << ::testing::PrintToString(resumed->notes);
    CheckpointPlan once = resume_from(straight);
    once.resume_load = load;
    Result<TrainingRun> expected = train(options, 6, once);
    ASSERT_TRUE(expected.ok()) << expected.status().to_string();
    EXPECT_EQ(first_differing_component(expected->digests, resumed->digests), "");
    EXPECT_EQ(expected->digests.state, resumed->digests.state);
  }
}

// The loader's policy: only what a crash leaves (a tag never committed) is passed over. A
// committed checkpoint with a flipped counter, resealed (the counters fail validation) or not
// (the seal fails), is refused naming the tag and the reason; with fallback_on_invalid the
// older tag is loaded and the note names the tag passed over and why.
TEST(CheckpointLoadPolicy, ACommittedCheckpointThatFailsValidationIsRefusedUnlessAskedToFallBack) {
  const TrainingOptions options = make_options(ModelSpec{{5, 7, 3}}, Precision::kFp16, 1, 1, 2, 16, 7);
  for (const bool reseal : {true, false}) {
    SCOPED_TRACE(reseal ? "resealed" : "seal broken");
    TestDirectory directory;
    const std::string checkpoints = directory.path() + "/checkpoints";
    ASSERT_TRUE(train(options, 4, save_to(checkpoints, 2)).ok());
    const std::string manifest_path = checkpoints + "/global_step4/" + kManifestFileName;
    std::ifstream in(manifest_path);
    nlohmann::json manifest = nlohmann::json::parse(in);
    in.close();
    manifest["counters"]["optimizer_steps"] = manifest["counters"]["optimizer_steps"].get<int64_t>() + 1;
    if (reseal) seal_manifest(manifest);
    std::ofstream(manifest_path, std::ios::trunc) << manifest.dump(2) << "\n";  // as the writer writes it
    Result<TrainingRun> refused = train(options, 6, resume_from(checkpoints));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().to_string();
    EXPECT_NE(refused.status().message().find("global_step4 was committed (its manifest exists) but is invalid"),
              std::string::npos)
        << refused.status().to_string();
    EXPECT_NE(refused.status().message().find(reseal ? "counters: inconsistent" : "does not match its own checksum"),
              std::string::npos)
        << refused.status().to_string();
    CheckpointPlan fall_back = resume_from(checkpoints);
    fall_back.resume_load.fallback_on_invalid = true;
    Result<TrainingRun> loaded = train(options, 6, fall_back);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->loaded_checkpoint_step, 2);
    EXPECT_TRUE(std::any_of(loaded->notes.begin(), loaded->notes.end(), [](const std::string& note) {
      return note.find("passed over checkpoint") != std::string::npos && note.find("global_step4") != std::string::npos;
    })) << ::testing::PrintToString(loaded->notes);
  }
  // What a crash leaves is still passed over without the flag: a tag without its manifest.
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/checkpoints";
  ASSERT_TRUE(train(options, 4, save_to(checkpoints, 2)).ok());
  std::filesystem::remove(checkpoints + "/global_step4/" + kManifestFileName);
  Result<TrainingRun> fell_back = train(options, 6, resume_from(checkpoints));
  ASSERT_TRUE(fell_back.ok()) << fell_back.status().to_string();
  EXPECT_EQ(fell_back->loaded_checkpoint_step, 2);
}

// The seal hashes the parsed content: a change that keeps the meaning ('e' to 'E' in an
// exponent, whitespace) passes it, and the bytes differing from what the writer wrote still
// refuse the tag.
TEST(CheckpointLoadPolicy, AManifestFlipThatKeepsItsMeaningIsStillDamage) {
  const TrainingOptions options = make_options(ModelSpec{{5, 7, 3}}, Precision::kFp32, 1, 1, 1, 16, 7);
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/checkpoints";
  ASSERT_TRUE(train(options, 2, save_to(checkpoints, 2)).ok());
  const std::string manifest_path = checkpoints + "/global_step2/" + kManifestFileName;
  std::ifstream in(manifest_path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  // Whitespace after the opening brace: the same JSON (as 'E' for 'e' in an exponent is, the
  // flipped bit a campaign found).
  const size_t at = 1;
  text.insert(at, " ");
  std::ofstream(manifest_path, std::ios::binary | std::ios::trunc) << text;
  RealEnv real_env;
  const Result<CheckpointManifest> read = read_manifest(*real_env.env().disk, checkpoints + "/global_step2");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("byte " + std::to_string(at) + " differs"), std::string::npos) << read.status().to_string();
}

// A crash can tear the tag `latest` names after the pointer moved (a lost write); the load
// passes over it, and the resumed run's save of that same tag replaces it (it was refused as
// "the tag latest names", and the resumed run could never save there).
TEST(CheckpointLoadPolicy, ATornTagThatLatestNamesIsReplacedByTheResumedRunsSave) {
  const TrainingOptions options = make_options(ModelSpec{{5, 7, 3}}, Precision::kFp32, 1, 1, 2, 16, 7);
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/checkpoints";
  ASSERT_TRUE(train(options, 4, save_to(checkpoints, 2)).ok());
  std::filesystem::resize_file(checkpoints + "/global_step4/rank-00001-of-00002.safetensors", 100);
  Result<TrainingRun> resumed = train(options, 6, [&] {
    CheckpointPlan plan = resume_from(checkpoints);
    plan.save_directory = checkpoints;
    plan.save_every_steps = 2;
    return plan;
  }());
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->loaded_checkpoint_step, 2);
  RealEnv real_env;
  EXPECT_TRUE(read_complete_tag(*real_env.env().disk, checkpoints, "global_step4").ok());
  Result<std::string> latest = read_latest_tag(*real_env.env().disk, checkpoints);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(*latest, "global_step6");
}

// What each option restores, on the engine's state right after the load, and the lr of the
// first updates (DeepSpeed keeps the optimizer's lr in its param_groups: a fresh optimizer's is
// the lr a fresh scheduler starts with; the scheduler's next step replaces it).
TEST(CheckpointLoadOptions, EachOptionRestoresWhatItPromises) {
  TestDirectory directory;
  // bf16: no overflow skips a step, so the schedule advances at every step.
  TrainingOptions options = make_options(ModelSpec{{6, 7, 3}}, Precision::kBf16, 1, 2, 1, 40, 31);
  options.config.scheduler.warmup_num_steps = 10;  // the lr still rises at the save
  const Result<TrainingRun> uninterrupted = train(options, 5, {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().to_string();
  ASSERT_TRUE(train(options, 3, save_to(directory.path())).ok());
  RealEnv real_env;
  auto loaded = [&](const CheckpointLoadOptions& load, const std::function<void(RankEngine&)>& check) {
    SCOPED_TRACE(load.describe());
    ThreadCommWorld world(1);
    RankEngine engine(options, world.comm(0), real_env.env());
    std::vector<std::string> notes;
    ASSERT_TRUE(engine.initialize_from_checkpoint(directory.path(), "latest", &notes, load).ok());
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.back().find(load.describe()), std::string::npos) << notes.back();
    check(engine);
  };
  auto master_is_widened_params = [](RankEngine& engine) {
    std::vector<float> widened(engine.master_partition().size());
    cast_to_fp32(DType::kBf16, engine.param_partition().data(), widened.data(), widened.size());
    return std::memcmp(widened.data(), engine.master_partition().data(), widened.size() * sizeof(float)) == 0;
  };
  auto all_zero = [](std::span<const float> values) {
    return std::all_of(values.begin(), values.end(), [](float value) { return value == 0.0f; });
  };
  const double fresh_lr = uninterrupted->steps[0].learning_rate;
  CheckpointLoadOptions no_optimizer;
  no_optimizer.optimizer_states = false;
  loaded(no_optimizer, [&](RankEngine& engine) {
    EXPECT_EQ(engine.counters().global_steps, 3);
    EXPECT_EQ(engine.counters().optimizer_steps, 0);
    EXPECT_TRUE(all_zero(engine.exp_avg_partition()));
    EXPECT_TRUE(all_zero(engine.exp_avg_sq_partition()));
    EXPECT_TRUE(master_is_widened_params(engine));
    EXPECT_EQ(engine.scalar_state().scheduler_last_batch_iteration, 2);  // restored: three steps taken
    const Result<StepRecord> first = engine.train_step();
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->learning_rate, fresh_lr);  // the fresh optimizer's lr
    const Result<StepRecord> second = engine.train_step();
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->learning_rate, uninterrupted->steps[4].learning_rate);  // the restored schedule's
  });
  CheckpointLoadOptions no_scheduler;
  no_scheduler.lr_scheduler_states = false;
  loaded(no_scheduler, [&](RankEngine& engine) {
    EXPECT_EQ(engine.counters().optimizer_steps, 3);
    EXPECT_FALSE(all_zero(engine.exp_avg_partition()));
    EXPECT_EQ(engine.scalar_state().scheduler_last_batch_iteration, -1);
    const Result<StepRecord> first = engine.train_step();
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->learning_rate, uninterrupted->steps[3].learning_rate);  // the checkpoint's lr
    const Result<StepRecord> second = engine.train_step();
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(second->learning_rate, uninterrupted->steps[1].learning_rate);  // the schedule's first step again
  });
  CheckpointLoadOptions module_only;
  module_only.module_only = true;
  loaded(module_only, [&](RankEngine& engine) {
    EXPECT_EQ(engine.counters().global_steps, 0);
    EXPECT_EQ(engine.counters().global_samples, 0);
    EXPECT_EQ(engine.counters().optimizer_steps, 0);
    EXPECT_EQ(engine.loaded_checkpoint_step(), 3);
    EXPECT_TRUE(all_zero(engine.exp_avg_partition()));
    EXPECT_TRUE(master_is_widened_params(engine));
    EXPECT_EQ(engine.scalar_state().scheduler_last_batch_iteration, -1);
  });
}

// The "deepspeed" numerics (ds_config.h NumericsMode): the bits depend on W, but a checkpoint
// still resumes bit for bit at the same W, from any placement of the state and with the
// gradients on NVMe, through skipped fp16 steps.
RC_GTEST_PROP(CheckpointProperty, DeepSpeedNumericsResumeIsBitIdenticalAtTheSameWorldSize, ()) {
  ModelSpec model;
  model.layer_widths = {*rc::gen::inRange<int64_t>(2, 16), *rc::gen::inRange<int64_t>(2, 24),
                        *rc::gen::inRange<int64_t>(2, 5)};
  const int world_size = *rc::gen::inRange(1, 5);
  const int64_t micro_batch = *rc::gen::inRange<int64_t>(1, 3);
  const int64_t accumulation = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t total_steps = *rc::gen::inRange<int64_t>(1, 7);
  const int64_t save_step = *rc::gen::inRange<int64_t>(0, total_steps + 1);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const int64_t sub_group_size = *rc::gen::element<int64_t>(1, 40, 1000000000);
  const int placement = *rc::gen::inRange(0, 5);
  const int resume_placement = *rc::gen::inRange(0, 5);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  RC_TAG(placement_name(placement), placement_name(resume_placement));

  TestDirectory directory;
  const std::string checkpoint_directory = directory.path() + "/checkpoints";
  const std::string nvme_path = directory.path() + "/swap";
  TrainingOptions reference = make_options(model, precision, micro_batch, accumulation, world_size, sub_group_size, seed);
  reference.config.numerics = NumericsMode::kDeepSpeed;
  reference.config.scheduler.c_library_math = true;
  reference.config.loss_scaler.initial_scale_power = 18;  // some fp16 overflows, skipped steps
  reference.digest_every_step = true;
  TrainingOptions first = reference;
  place_state(first, placement, nvme_path);
  TrainingOptions resumed = reference;
  place_state(resumed, resume_placement, nvme_path);

  Result<TrainingRun> uninterrupted = train(reference, total_steps, {});
  RC_ASSERT(uninterrupted.ok());
  Result<TrainingRun> before = train(first, save_step, save_to(checkpoint_directory));
  if (!before.ok()) RC_FAIL(before.status().to_string());
  Result<TrainingRun> after = train(resumed, total_steps, resume_from(checkpoint_directory));
  if (!after.ok()) RC_FAIL(after.status().to_string());
  const std::string difference = compare_steps(*uninterrupted, *after, save_step);
  if (!difference.empty()) RC_FAIL("resumed run differs at " + difference);
  RC_ASSERT(first_difference(uninterrupted->digests, after->digests) == std::string());
}

TEST(Checkpoint, ResumeWithTheSwapDirectoryDeletedMatchesTheUninterruptedRun) {
  TestDirectory directory;
  const std::string nvme_path = directory.path() + "/swap";
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp16, 2, 2, 2, 100, 5);
  place_state(options, 4, nvme_path);
  options.digest_every_step = true;
  Result<TrainingRun> uninterrupted = train(options, 8, {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().to_string();
  ASSERT_TRUE(train(options, 4, save_to(directory.path() + "/ckpt")).ok());
  fs::remove_all(nvme_path);
  ASSERT_FALSE(fs::exists(nvme_path));
  Result<TrainingRun> resumed = train(options, 8, resume_from(directory.path() + "/ckpt"));
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(compare_steps(*uninterrupted, *resumed, 4), "");
}

// The seed bug report's operator action: swap files of a later step copied back by hand
// before resuming. The resume writes every swap file afresh from the checkpoint, so the
// stale ones are never read and the run matches the uninterrupted one.
TEST(Checkpoint, StaleSwapFilesCopiedBackBeforeResumeAreNeverRead) {
  TestDirectory directory;
  const std::string nvme_path = directory.path() + "/swap";
  const std::string stale_copy = directory.path() + "/stale";
  TrainingOptions options = make_options(ModelSpec{}, Precision::kBf16, 2, 1, 2, 100, 9);
  place_state(options, 4, nvme_path);
  options.digest_every_step = true;
  Result<TrainingRun> uninterrupted = train(options, 6, {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().to_string();

  // Save at step 3, run on to step 5 and copy the swap directory as it is then.
  class CopyAtStepEnd final : public CrashPointHook {
   public:
    CopyAtStepEnd(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
    void hit(std::string_view site, int rank) override {
      if (site != "engine.step_end" || rank != 0 || ++steps_ != 5) return;
      fs::copy(from_, to_, fs::copy_options::recursive);
    }
   private:
    std::string from_, to_;
    int steps_ = 0;
  };
  RealEnv real_env;
  CopyAtStepEnd copier(nvme_path, stale_copy);
  Env env = real_env.env();
  env.crash_points = &copier;
  // W = 2 ranks on threads: only rank 0 copies, after its step 5; the other rank's files may be
  // mid-step, which is as stale as it gets.
  ASSERT_TRUE(train(options, 5, save_to(directory.path() + "/ckpt", 3), env).ok());
  ASSERT_TRUE(fs::exists(stale_copy));
  fs::remove_all(nvme_path);
  fs::copy(stale_copy, nvme_path, fs::copy_options::recursive);
  fs::remove_all(directory.path() + "/ckpt/global_step5");  // resume from step 3
  ASSERT_TRUE(publish_latest_tag(*real_env.env().disk, directory.path() + "/ckpt", "global_step3").ok());
  Result<TrainingRun> resumed = train(options, 6, resume_from(directory.path() + "/ckpt"));
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(compare_steps(*uninterrupted, *resumed, 3), "");
}

TEST(Checkpoint, SaveLoadSaveGivesByteIdenticalShardsAlsoThroughAnotherWorldSize) {
  TestDirectory directory;
  const std::string a = directory.path() + "/a", b = directory.path() + "/b", c = directory.path() + "/c";
  const ModelSpec model{{11, 7, 3}};  // the bias of 3 is smaller than W = 4
  TrainingOptions two = make_options(model, Precision::kFp16, 1, 6, 2, 20, 3);
  TrainingOptions four = make_options(model, Precision::kFp16, 1, 3, 4, 7, 3);
  place_state(four, 4, directory.path() + "/swap");
  ASSERT_TRUE(train(two, 3, save_to(a)).ok());
  // Load at W = 2 and save again at once: the same bytes.
  ASSERT_TRUE(train(two, 3, resume_and_save(a, b)).ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string shard = "/global_step3/" + shard_file_name(rank, 2);
    const std::vector<char> original = file_bytes(a + shard);
    ASSERT_FALSE(original.empty());
    EXPECT_EQ(original, file_bytes(b + shard)) << shard;
  }
  // Through W = 4 (state on NVMe) and back to W = 2: still the same bytes.
  ASSERT_TRUE(train(four, 3, resume_and_save(a, b + "4")).ok());
  ASSERT_TRUE(train(two, 3, resume_and_save(b + "4", c)).ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string shard = "/global_step3/" + shard_file_name(rank, 2);
    EXPECT_EQ(file_bytes(a + shard), file_bytes(c + shard)) << shard;
  }
}

// DeepSpeed's checkpoint.writer settings change how the shards move, never what they hold: the
// buffered default, "python" (one thread) and "fast" (O_DIRECT through libaio, double-buffered
// or not) write the same bytes, and a load through any of them at another world size resumes
// to a save of the same bytes. The small buffers make each shard many refills of both groups.
TEST(Checkpoint, EveryCheckpointWriterWritesAndReadsTheSameShards) {
  TestDirectory directory;
  const ModelSpec model{{64, 96, 10}};
  TrainingOptions two = make_options(model, Precision::kBf16, 1, 6, 2, 20, 5);
  TrainingOptions four = make_options(model, Precision::kBf16, 1, 3, 4, 7, 5);
  struct Writer {
    const char* name;
    CheckpointWriterType type;
    int64_t io_buffer_size;
    bool io_buffer_double;
  };
  const Writer writers[] = {{"none", CheckpointWriterType::kNone, 0, true},
                            {"python", CheckpointWriterType::kPython, 16384, true},
                            {"fast", CheckpointWriterType::kFast, 16384, true},
                            {"fast-single", CheckpointWriterType::kFast, 12288, false}};
  auto with_writer = [](TrainingOptions options, const Writer& writer) {
    options.config.checkpoint.writer = writer.type;
    if (writer.io_buffer_size > 0) options.config.checkpoint.io_buffer_size = writer.io_buffer_size;
    options.config.checkpoint.io_buffer_double = writer.io_buffer_double;
    return options;
  };
  const std::string reference = directory.path() + "/none";
  for (const Writer& writer : writers) {
    SCOPED_TRACE(testing::Message() << "writer " << writer.name << "; replay: ctest -R EveryCheckpointWriter");
    const std::string saved = directory.path() + "/" + writer.name;
    Result<TrainingRun> run = train(with_writer(two, writer), 3, save_to(saved));
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    for (const std::string& note : run->notes) {
      EXPECT_EQ(note.find("O_DIRECT is refused"), std::string::npos) << "this machine's disk takes O_DIRECT: " << note;
    }
    for (int rank = 0; rank < 2; ++rank) {
      const std::string shard = "/global_step3/" + shard_file_name(rank, 2);
      ASSERT_FALSE(file_bytes(saved + shard).empty()) << shard;
      EXPECT_EQ(file_bytes(reference + shard), file_bytes(saved + shard)) << shard;
    }
    // Loaded through this writer's settings at W = 4 (each rank's partition from two shards),
    // saved there, loaded back at W = 2: the bytes of the first save.
    ASSERT_TRUE(train(with_writer(four, writer), 3, resume_and_save(saved, saved + "-4")).ok());
    ASSERT_TRUE(train(with_writer(two, writer), 3, resume_and_save(saved + "-4", saved + "-2")).ok());
    for (int rank = 0; rank < 2; ++rank) {
      const std::string shard = "/global_step3/" + shard_file_name(rank, 2);
      EXPECT_EQ(file_bytes(reference + shard), file_bytes(saved + "-2" + shard)) << shard;
    }
  }
}

// A Disk that holds every write to a shard file until the training thread has finished a
// given step: if async saves did not overlap with training, the write would wait for a step
// that cannot come, and the gate reports that it opened on its timeout instead.
class GatedDisk final : public ForwardingDisk {
 public:
  explicit GatedDisk(Disk& base) : ForwardingDisk(base) {}
  void open_gate() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  bool opened_by_timeout() const { return opened_by_timeout_; }

  Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) override {
    if (path.find(".safetensors") != std::string::npos && options.mode == OpenMode::kCreateTruncate) {
      std::unique_lock lock(mutex_);
      if (!changed_.wait_for(lock, std::chrono::seconds(20), [&] { return open_; })) opened_by_timeout_ = true;
    }
    return base_.open(path, options);
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
  bool opened_by_timeout_ = false;
};

class OpenGateAfterStep final : public CrashPointHook {
 public:
  OpenGateAfterStep(GatedDisk& disk, int step) : disk_(disk), step_(step) {}
  void hit(std::string_view site, int rank) override {
    if (site == "engine.step_end" && rank == 0 && ++steps_ == step_) disk_.open_gate();
  }
 private:
  GatedDisk& disk_;
  int step_;
  int steps_ = 0;
};

TEST(Checkpoint, AsyncSaveWritesTheSameShardsAsASynchronousSaveWhileTrainingGoesOn) {
  TestDirectory directory;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp16, 2, 2, 2, 100, 21);
  place_state(options, 2, directory.path() + "/swap");
  TrainingOptions async_options = options;
  async_options.config.checkpoint.async_save = true;
  ASSERT_TRUE(train(options, 6, save_to(directory.path() + "/sync", 3)).ok());

  RealEnv real_env;
  GatedDisk gated(*real_env.env().disk);
  OpenGateAfterStep gate(gated, 5);  // the save of step 3 may write only once step 5 has run
  Env env = real_env.env();
  env.disk = &gated;
  env.crash_points = &gate;
  Result<TrainingRun> async_run =
      train(async_options, 6, save_to(directory.path() + "/async", 3), env);
  ASSERT_TRUE(async_run.ok()) << async_run.status().to_string();
  EXPECT_FALSE(gated.opened_by_timeout()) << "the async save blocked training";
  for (const char* tag : {"global_step3", "global_step6"}) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string shard = std::string("/") + tag + "/" + shard_file_name(rank, 2);
      const std::vector<char> synchronous = file_bytes(directory.path() + "/sync" + shard);
      ASSERT_FALSE(synchronous.empty()) << shard;
      EXPECT_EQ(synchronous, file_bytes(directory.path() + "/async" + shard)) << shard;
    }
  }
  std::string latest;
  std::ifstream(directory.path() + "/async/latest") >> latest;
  EXPECT_EQ(latest, "global_step6");
}

// With the rank's CPUs known (Env::cpus_per_rank), an async snapshot's large pieces are copied
// by several threads: the shards are byte for byte the single-threaded ones, and a resume from
// them continues the run, read as one stream a shard (the default) or by several I/O threads
// (TrainingOptions::parallel_checkpoint_reads). The hidden matrix's master and moments (12.6
// MB each at W = 1) are above the parallel copy's 8 MiB threshold.
TEST(Checkpoint, AnAsyncSnapshotCopiedBySeveralThreadsWritesTheSameShards) {
  TestDirectory directory;
  const TrainingOptions options = make_options(ModelSpec{{64, 2048, 1536, 16}}, Precision::kFp16, 2, 1, 1, 100000000, 23);
  TrainingOptions async_options = options;
  async_options.config.checkpoint.async_save = true;
  ASSERT_TRUE(train(options, 2, save_to(directory.path() + "/sync", 1)).ok());
  RealEnv real_env;
  Env env = real_env.env();
  env.cpus_per_rank = 5;  // 5 snapshot copy threads; 4 read threads when reads are parallel
  ASSERT_TRUE(train(async_options, 2, save_to(directory.path() + "/async", 1), env).ok());
  for (const char* tag : {"global_step1", "global_step2"}) {
    const std::string shard = std::string("/") + tag + "/" + shard_file_name(0, 1);
    const std::vector<char> synchronous = file_bytes(directory.path() + "/sync" + shard);
    ASSERT_GT(synchronous.size(), size_t{40} << 20) << shard;
    EXPECT_TRUE(synchronous == file_bytes(directory.path() + "/async" + shard)) << shard << "; replay: ctest -R AnAsyncSnapshot";
  }
  CheckpointPlan resume = resume_from(directory.path() + "/async", "global_step1");
  Result<TrainingRun> uninterrupted = train(options, 2, CheckpointPlan{});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().to_string();
  for (const bool parallel_reads : {false, true}) {
    TrainingOptions resume_options = options;
    resume_options.parallel_checkpoint_reads = parallel_reads;
    Result<TrainingRun> resumed = train(resume_options, 2, resume, env);
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    EXPECT_EQ(first_differing_component(uninterrupted->digests, resumed->digests), "")
        << "the run resumed from the multi-threaded snapshot (parallel reads " << parallel_reads
        << ") departs from the uninterrupted one";
  }
}

TEST(Checkpoint, AFailedBackgroundWriteLeavesThePreviousCheckpointAsLatest) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 2, 100, 4);
  options.config.checkpoint.async_save = true;
  RealEnv real_env;
  FaultyDisk faulty(*real_env.env().disk,
                    {{"*global_step4/rank-00001*", FaultOperation::kSync, 0, FaultKind::kIoError, 0, 0}});
  Env env = real_env.env();
  env.disk = &faulty;
  Result<TrainingRun> run = train(options, 6, save_to(checkpoints, 2), env);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("global_step4"), std::string::npos) << run.status().to_string();
  Result<std::string> latest = read_latest_tag(*real_env.env().disk, checkpoints);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest.value(), "global_step2");
  EXPECT_FALSE(fs::exists(checkpoints + "/global_step4/manifest.json"));
  // And the previous checkpoint loads.
  options.config.checkpoint.async_save = false;
  Result<TrainingRun> resumed = train(options, 3, resume_from(checkpoints));
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->final_state.counters.global_steps, 3);
}

TEST(Checkpoint, SavingInTheMiddleOfGradientAccumulationIsRefused) {
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 3, 1, 100, 4);
  TestDirectory directory;
  RealEnv real_env;
  class SaveMidStep final : public CrashPointHook {
   public:
    RankEngine* engine = nullptr;
    std::string directory;
    Status status;
    void hit(std::string_view site, int) override {
      if (site == "optimizer.sub_group_stepped" && engine != nullptr && status.ok()) {
        status = engine->save_checkpoint(directory, "mid");
        if (status.ok()) status = internal_error("saved");
      }
    }
  } hook;
  hook.directory = directory.path();
  Env env = real_env.env();
  env.crash_points = &hook;
  ThreadCommWorld world(1);
  RankEngine engine(options, world.comm(0), env);
  hook.engine = &engine;
  ASSERT_TRUE(engine.initialize().ok());
  ASSERT_TRUE(engine.train_step().ok());
  EXPECT_EQ(hook.status.code(), StatusCode::kFailedPrecondition) << hook.status.to_string();
  EXPECT_NE(hook.status.message().find("middle of step 1"), std::string::npos) << hook.status.to_string();
  EXPECT_FALSE(fs::exists(directory.path() + "/mid"));
  // Between steps it works.
  hook.engine = nullptr;
  EXPECT_TRUE(engine.save_checkpoint(directory.path(), "between").ok());
}

// A crash (the hook throws, as a killed process stops) at each commit site of the second save:
// the first checkpoint stays loadable, and resuming from `latest` continues bit for bit from
// whichever tag `latest` names.
TEST(Checkpoint, ACrashAtAnyCommitSiteLeavesALoadableCheckpoint) {
  struct Crash {};
  class CrashAtSite final : public CrashPointHook {
   public:
    CrashAtSite(std::string site, int occurrence) : site_(std::move(site)), occurrence_(occurrence) {}
    void hit(std::string_view site, int rank) override {
      std::lock_guard lock(mutex_);
      if (site == site_ && rank == 0 && ++count_ == occurrence_) throw Crash{};
    }
   private:
    std::mutex mutex_;
    std::string site_;
    int occurrence_;
    int count_ = 0;
  };
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp16, 2, 1, 2, 100, 12);
  options.digest_every_step = true;
  Result<TrainingRun> uninterrupted = train(options, 6, {});
  ASSERT_TRUE(uninterrupted.ok());
  for (const char* site : {"ckpt.shard_written", "ckpt.manifest_written", "ckpt.latest_published"}) {
    SCOPED_TRACE(site);
    TestDirectory directory;
    const std::string checkpoints = directory.path() + "/ckpt";
    RealEnv real_env;
    CrashAtSite crash(site, 2);  // during the save of step 4
    Env env = real_env.env();
    env.crash_points = &crash;
    const Result<TrainingRun> killed = train(options, 6, save_to(checkpoints, 2), env);
    ASSERT_FALSE(killed.ok());
    Result<std::string> latest = read_latest_tag(*real_env.env().disk, checkpoints);
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    const int64_t expected_step = std::string(site) == "ckpt.latest_published" ? 4 : 2;
    EXPECT_EQ(latest.value(), checkpoint_tag_for_step(expected_step));
    Result<TrainingRun> resumed = train(options, 6, resume_from(checkpoints));
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    EXPECT_EQ(compare_steps(*uninterrupted, *resumed, expected_step), "");
    // The resumed run saves into the same directory again, through the tag the crash left
    // complete but unpublished (after ckpt.manifest_written), and publishes it.
    CheckpointPlan continue_saving = resume_and_save(checkpoints, checkpoints);
    continue_saving.save_every_steps = 2;
    Result<TrainingRun> saving_again = train(options, 6, continue_saving);
    ASSERT_TRUE(saving_again.ok()) << saving_again.status().to_string();
    EXPECT_EQ(read_latest_tag(*real_env.env().disk, checkpoints).value(), "global_step6");
  }
}

TEST(Checkpoint, ADiskFullDuringASaveIsANamedErrorAndThePreviousCheckpointStays) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TrainingOptions options = make_options(ModelSpec{}, Precision::kBf16, 2, 1, 2, 100, 13);
  RealEnv real_env;
  FaultyDisk full(*real_env.env().disk,
                  {{"*global_step2/rank-00000*", FaultOperation::kWrite, 1, FaultKind::kNoSpace, 0, 0}});
  Env env = real_env.env();
  env.disk = &full;
  const Result<TrainingRun> run = train(options, 3, save_to(checkpoints, 1), env);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("global_step2/rank-00000-of-00002.safetensors"), std::string::npos)
      << run.status().to_string();
  Result<std::string> latest = read_latest_tag(*real_env.env().disk, checkpoints);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest.value(), "global_step1");
  EXPECT_TRUE(train(options, 3, resume_from(checkpoints)).ok());
}

// ---------------------------------------------------------------------------------------------
// The loader's checks.

class CheckpointLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = make_options(ModelSpec{}, Precision::kFp16, 2, 1, 2, 100, 8);
    ASSERT_TRUE(train(options_, 2, save_to(checkpoints(), 1)).ok());
  }
  std::string checkpoints() const { return directory_.path() + "/ckpt"; }
  std::string tag_directory(const std::string& tag = "global_step2") const { return checkpoints() + "/" + tag; }
  Status resume(const TrainingOptions& options, std::vector<std::string>* notes = nullptr,
                const std::string& tag = "latest") {
    Result<TrainingRun> run = train(options, 3, resume_from(checkpoints(), tag));
    if (run.ok() && notes != nullptr) *notes = run->notes;
    return run.status();
  }
  void edit_manifest(const std::function<void(nlohmann::json&)>& edit) {
    const std::string path = tag_directory() + "/manifest.json";
    const std::vector<char> bytes = file_bytes(path);
    nlohmann::json manifest = nlohmann::json::parse(bytes.begin(), bytes.end());
    edit(manifest);
    zerosim::seal_manifest(manifest);  // an edit made as the writer would seal it: validation's turn
    const std::string text = manifest.dump(2) + "\n";  // as the writer writes it
    write_bytes(path, std::vector<char>(text.begin(), text.end()));
  }
  static void expect_error(const Status& status, StatusCode code, std::initializer_list<std::string> parts) {
    EXPECT_EQ(status.code(), code) << status.to_string();
    for (const std::string& part : parts) EXPECT_NE(status.message().find(part), std::string::npos) << status.to_string();
  }

  TestDirectory directory_;
  TrainingOptions options_;
};

TEST_F(CheckpointLoader, AMissingShardIsNamed) {
  fs::remove(tag_directory("global_step2") + "/" + shard_file_name(1, 2));
  fs::remove(tag_directory("global_step1") + "/" + shard_file_name(1, 2));
  expect_error(resume(options_), StatusCode::kNotFound, {"no complete checkpoint", "rank-00001-of-00002"});
  // Asked for by name, the tag is refused with the file's name.
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss,
               {"missing shard", "global_step2/rank-00001-of-00002.safetensors"});
}

TEST_F(CheckpointLoader, AFlippedByteIsAChecksumMismatchNamingTheShard) {
  const std::string shard = tag_directory() + "/" + shard_file_name(0, 2);
  std::vector<char> bytes = file_bytes(shard);
  bytes[bytes.size() - 3] ^= 0x10;
  write_bytes(shard, bytes);
  expect_error(resume(options_), StatusCode::kDataLoss, {"checksum mismatch", shard, "expected xxh3_128"});
}

// At another world size each rank reads parts of shards in one pass and checks each whole at
// the end of it: a flipped byte in a tensor the load reads is refused, not trained on.
TEST_F(CheckpointLoader, AFlippedByteIsAChecksumMismatchAlsoAtAnotherWorldSize) {
  const std::string shard = tag_directory() + "/" + shard_file_name(1, 2);
  std::vector<char> bytes = file_bytes(shard);
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(shard, bytes);
  for (const int world_size : {1, 3}) {
    SCOPED_TRACE(testing::Message() << "resumed at W = " << world_size);
    const TrainingOptions other = make_options(ModelSpec{}, Precision::kFp16, 2, 1, world_size, 100, 8);
    expect_error(resume(other, nullptr, "global_step2"), StatusCode::kDataLoss,
                 {"checksum mismatch", shard, "expected xxh3_128"});
  }
}

TEST_F(CheckpointLoader, ATruncatedShardIsNamedWithBothSizes) {
  const std::string shard = tag_directory() + "/" + shard_file_name(1, 2);
  std::vector<char> bytes = file_bytes(shard);
  const size_t full_size = bytes.size();
  bytes.resize(full_size - 100);
  write_bytes(shard, bytes);
  // `latest` names a tag that is no longer complete: the newest complete one is loaded, with a warning.
  std::vector<std::string> notes;
  ASSERT_TRUE(resume(options_, &notes).ok());
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("warning"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("global_step1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("truncated"), std::string::npos) << notes[0];
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss,
               {shard, "expected " + std::to_string(full_size), "found " + std::to_string(full_size - 100), "truncated"});
}

TEST_F(CheckpointLoader, AnUnknownFormatVersionIsRefused) {
  edit_manifest([](nlohmann::json& manifest) { manifest["format_version"] = 4; });
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kUnimplemented,
               {"manifest.json", "format_version", "reads versions 1 to 3, found 4"});
  edit_manifest([](nlohmann::json& manifest) { manifest["format_version"] = 0; });
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kUnimplemented, {"found 0"});
}

// A manifest is written atomically: one torn under its own name was damaged at rest, not by a
// crash. Never loaded; `latest` does not pass over it unless asked to.
TEST_F(CheckpointLoader, ATornManifestIsNeverLoadedAndLatestFallsBackOnlyWhenAsked) {
  const std::string path = tag_directory() + "/manifest.json";
  std::vector<char> bytes = file_bytes(path);
  bytes.resize(bytes.size() / 2);
  write_bytes(path, bytes);
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss, {path, "not valid JSON"});
  expect_error(resume(options_, nullptr), StatusCode::kInvalidArgument,
               {"global_step2 was committed (its manifest exists) but is invalid", "not valid JSON", "--fallback-on-invalid"});
  CheckpointPlan plan = resume_from(checkpoints());
  plan.resume_load.fallback_on_invalid = true;
  Result<TrainingRun> run = train(options_, 3, plan);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  ASSERT_FALSE(run->notes.empty());
  EXPECT_NE(run->notes[0].find("loading the newest complete tag 'global_step1'"), std::string::npos) << run->notes[0];
  EXPECT_NE(run->notes[0].find("passed over checkpoint"), std::string::npos) << run->notes[0];
}

TEST_F(CheckpointLoader, APartialTagWithoutManifestIsNotLoaded) {
  fs::remove(tag_directory() + "/manifest.json");
  std::vector<std::string> notes;
  ASSERT_TRUE(resume(options_, &notes).ok());
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("global_step2"), std::string::npos) << notes[0];
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kNotFound, {"manifest.json does not exist"});
}

TEST_F(CheckpointLoader, PathsFromTheManifestMustStayInsideTheCheckpoint) {
  for (const std::string hostile : {"../global_step1/rank-00000-of-00002.safetensors", "/etc/passwd", "a/b",
                                    "..", "manifest.json"}) {
    edit_manifest([&](nlohmann::json& manifest) { manifest["shards"][0]["file"] = hostile; });
    const Status status = resume(options_, nullptr, "global_step2");
    expect_error(status, StatusCode::kDataLoss, {"shards[0].file"});
  }
}

TEST_F(CheckpointLoader, AManifestThatLiesAboutTheLayoutOrCountersIsRefused) {
  edit_manifest([](nlohmann::json& manifest) { manifest["layout"]["parameters"][1]["element_count"] = 36; });
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss, {"layout.parameters[1]"});
  edit_manifest([](nlohmann::json& manifest) {
    manifest["layout"]["parameters"][1]["element_count"] = 37;
    manifest["counters"]["optimizer_steps"] = 5;
  });
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss, {"counters", "optimizer_steps 5"});
  edit_manifest([](nlohmann::json& manifest) {
    manifest["counters"]["optimizer_steps"] = manifest["counters"]["global_steps"].get<int64_t>() -
                                              manifest["counters"]["skipped_steps"].get<int64_t>();
    manifest["config"]["steps_per_print"] = 7;  // the hash no longer matches
  });
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss, {"config_hash"});
}

TEST_F(CheckpointLoader, HostileManifestsAreRefusedWithoutCrashingOrAllocating) {
  // Nested a hundred thousand levels deep: refused before parsing (the parser recurses).
  const std::string path = tag_directory() + "/manifest.json";
  std::string nested = "{\"config\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  write_bytes(path, std::vector<char>(nested.begin(), nested.end()));
  expect_error(resume(options_, nullptr, "global_step2"), StatusCode::kDataLoss, {path, "nested deeper than 64"});
  // Millions of layer widths: refused before a parameter list is built from them.
  ASSERT_TRUE(train(options_, 2, save_to(checkpoints() + "-again")).ok());
  const std::string other = checkpoints() + "-again/global_step2/manifest.json";
  const std::vector<char> bytes = file_bytes(other);
  nlohmann::json manifest = nlohmann::json::parse(bytes.begin(), bytes.end());
  manifest["model"]["layer_widths"] = std::vector<int64_t>(3000000, 1000);
  zerosim::seal_manifest(manifest);
  const std::string text = manifest.dump(2) + "\n";  // as the writer writes it
  write_bytes(other, std::vector<char>(text.begin(), text.end()));
  RealEnv real_env;
  const Result<CheckpointManifest> read = read_manifest(*real_env.env().disk, checkpoints() + "-again/global_step2");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("at most 4096 widths"), std::string::npos) << read.status().to_string();
}

TEST_F(CheckpointLoader, ShardMetadataOfTheWrongTypeIsADataLossNamingTheTensor) {
  // Rank 0's shard rewritten with a string where the global offset belongs (size and checksum
  // made consistent, so only the metadata is wrong).
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  Result<CheckpointManifest> manifest = read_manifest(disk, tag_directory());
  ASSERT_TRUE(manifest.ok());
  const std::string path = tag_directory() + "/" + shard_file_name(0, 2);
  Result<SafetensorsIndex> index = read_safetensors_index(disk, path);
  ASSERT_TRUE(index.ok());
  std::vector<std::vector<std::byte>> data;
  std::vector<SafetensorsTensor> tensors;
  for (const SafetensorsEntry& entry : index->entries) {
    data.push_back(read_safetensors_tensor(disk, path, *index, entry.name).value());
  }
  for (size_t i = 0; i < index->entries.size(); ++i) {
    tensors.push_back({index->entries[i].name, index->entries[i].dtype, index->entries[i].shape, data[i]});
  }
  std::map<std::string, std::string> metadata = index->metadata;
  metadata["layers.0.weight/master"] = R"({"global_offset": "0", "global_shape": [37, 13]})";
  ASSERT_TRUE(write_safetensors(disk, path, tensors, metadata, true).ok());
  uint64_t size = 0;
  manifest->shards[0].xxh3_128 = file_checksum(disk, path, &size).value();
  manifest->shards[0].size_bytes = size;
  CheckpointShardReader reader(disk, tag_directory(), *manifest);
  const Status verified = reader.verify_shard(0);
  expect_error(verified, StatusCode::kDataLoss, {path, "__metadata__.layers.0.weight/master", "global_offset"});
}

TEST_F(CheckpointLoader, ChangesThatBreakResumeAreRefusedNamingBothValues) {
  TrainingOptions other_model = options_;
  other_model.model.layer_widths = {13, 36, 29, 5};
  expect_error(resume(other_model), StatusCode::kInvalidArgument,
               {"model shape", "checkpoint 13,37,29,5", "this run 13,36,29,5"});
  TrainingOptions other_dtype = options_;
  other_dtype.config.precision = Precision::kBf16;
  other_dtype.config.communication_dtype = Precision::kBf16;
  expect_error(resume(other_dtype), StatusCode::kInvalidArgument, {"parameter dtype", "fp16", "bf16"});
  TrainingOptions other_optimizer = options_;
  other_optimizer.config.optimizer.adam_w_mode = false;
  expect_error(resume(other_optimizer), StatusCode::kInvalidArgument, {"optimizer type", "L2 weight decay"});
  TrainingOptions other_data = options_;
  other_data.data.seed = 99;
  expect_error(resume(other_data), StatusCode::kInvalidArgument, {"dataset", "seed 99"});
}

// A load that keeps no optimizer state may change the optimizer; one that restarts the data
// position (module only) may change the dataset. Each says so in a note.
TEST_F(CheckpointLoader, AFreshOptimizerMayChangeItsTypeAndAModuleOnlyLoadTheDataset) {
  auto resume_with = [&](const TrainingOptions& options, const CheckpointLoadOptions& load, std::vector<std::string>* notes) {
    CheckpointPlan plan = resume_from(checkpoints());
    plan.resume_load = load;
    Result<TrainingRun> run = train(options, 3, plan);
    if (run.ok()) *notes = run->notes;
    return run.status();
  };
  auto has_note = [](const std::vector<std::string>& notes, const std::string& part) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& note) { return note.find(part) != std::string::npos; });
  };
  TrainingOptions other_optimizer = options_;
  other_optimizer.config.optimizer.adam_w_mode = false;
  CheckpointLoadOptions fresh_optimizer;
  fresh_optimizer.optimizer_states = false;
  std::vector<std::string> notes;
  ASSERT_TRUE(resume_with(other_optimizer, fresh_optimizer, &notes).ok());
  EXPECT_TRUE(has_note(notes, "optimizer type differs")) << ::testing::PrintToString(notes);
  TrainingOptions other_data = options_;
  other_data.data.seed = 99;
  expect_error(resume_with(other_data, fresh_optimizer, &notes), StatusCode::kInvalidArgument, {"dataset", "seed 99"});
  CheckpointLoadOptions module_only;
  module_only.module_only = true;
  ASSERT_TRUE(resume_with(other_data, module_only, &notes).ok());
  EXPECT_TRUE(has_note(notes, "dataset differs")) << ::testing::PrintToString(notes);
  TrainingOptions other_model = options_;
  other_model.model.layer_widths = {13, 36, 29, 5};
  expect_error(resume_with(other_model, module_only, &notes), StatusCode::kInvalidArgument, {"model shape"});
}

// Frozen parameters: a checkpoint holds a frozen parameter's value alone (or nothing, when
// excluded), so it cannot come back trainable with the optimizer's state; freezing a trainable
// one drops its state with a note; excluded values come from this run's seed, with a warning
// when that is not the checkpoint's; the manifest's frozen keys are validated.
TEST(CheckpointFrozenParameters, ChangesOfTheFrozenSetAndTheManifestKeys) {
  TestDirectory directory;
  auto has = [](const std::vector<std::string>& notes, const std::string& part) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& note) { return note.find(part) != std::string::npos; });
  };
  TrainingOptions options = make_options(ModelSpec{{7, 9, 3}}, Precision::kBf16, 1, 1, 2, 16, 8);
  options.frozen_parameters = {"layers.0.weight"};
  const std::string saved = directory.path() + "/saved";
  ASSERT_TRUE(train(options, 2, save_to(saved)).ok());

  TrainingOptions unfrozen = options;
  unfrozen.frozen_parameters.clear();
  Result<TrainingRun> refused = train(unfrozen, 3, resume_from(saved));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("parameter layers.0.weight is frozen in the checkpoint"), std::string::npos)
      << refused.status().to_string();
  CheckpointPlan fresh_optimizer = resume_from(saved);
  fresh_optimizer.resume_load.optimizer_states = false;
  EXPECT_TRUE(train(unfrozen, 3, fresh_optimizer).ok());

  TrainingOptions more_frozen = options;
  more_frozen.frozen_parameters.push_back("layers.1.bias");
  Result<TrainingRun> frozen_now = train(more_frozen, 3, resume_from(saved));
  ASSERT_TRUE(frozen_now.ok()) << frozen_now.status().to_string();
  EXPECT_TRUE(has(frozen_now->notes, "layers.1.bias frozen in this run but trainable when saved"))
      << ::testing::PrintToString(frozen_now->notes);

  const std::string excluded = directory.path() + "/excluded";
  CheckpointPlan excluding = save_to(excluded);
  excluding.save_options.exclude_frozen_parameters = true;
  ASSERT_TRUE(train(options, 2, excluding).ok());
  TrainingOptions other_seed = options;
  other_seed.seed = 9;
  Result<TrainingRun> reseeded = train(other_seed, 3, resume_from(excluded));
  ASSERT_TRUE(reseeded.ok()) << reseeded.status().to_string();
  EXPECT_TRUE(has(reseeded->notes, "warning: the checkpoint excluded frozen parameters")) << ::testing::PrintToString(reseeded->notes);
  EXPECT_TRUE(has(reseeded->notes, "not the checkpoint's seed 8")) << ::testing::PrintToString(reseeded->notes);

  // The manifest's keys: requires_grad only false, excluded only true and only when frozen.
  const std::string tag_directory = excluded + "/global_step2";
  {
    RealEnv real_env;
    const Result<CheckpointManifest> read = read_manifest(*real_env.env().disk, tag_directory);
    ASSERT_TRUE(read.ok()) << read.status().to_string();
    EXPECT_EQ(read->format_version, 2) << "a checkpoint with a frozen parameter is written as version 2";
    TrainingOptions none_frozen = options;
    none_frozen.frozen_parameters.clear();
    ASSERT_TRUE(train(none_frozen, 1, save_to(directory.path() + "/none")).ok());
    const Result<CheckpointManifest> plain = read_manifest(*real_env.env().disk, directory.path() + "/none/global_step1");
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    EXPECT_EQ(plain->format_version, 1) << "without a frozen parameter the checkpoint stays version 1";
  }
  const std::vector<char> original = file_bytes(tag_directory + "/manifest.json");
  for (const auto& [edit, expected] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& m) { m["layout"]["parameters"][0]["requires_grad"] = true; }, "requires_grad: expected false"},
           {[](nlohmann::json& m) { m["layout"]["parameters"][1]["excluded"] = true; }, "only a frozen parameter"},
           {[](nlohmann::json& m) { m["layout"]["parameters"][0]["excluded"] = "yes"; }, "excluded: expected true"},
           {[](nlohmann::json& m) { m["layout"]["parameters"][2]["frozen"] = true; }, "frozen: unknown key"},
           {[](nlohmann::json& m) { m["format_version"] = 1; }, "a frozen parameter in a format_version 1 manifest"}}) {
    nlohmann::json manifest = nlohmann::json::parse(original.begin(), original.end());
    edit(manifest);
    seal_manifest(manifest);
    const std::string text = manifest.dump(2) + "\n";  // as the writer writes it
    write_bytes(tag_directory + "/manifest.json", std::vector<char>(text.begin(), text.end()));
    RealEnv real_env;
    const Result<CheckpointManifest> read = read_manifest(*real_env.env().disk, tag_directory);
    ASSERT_FALSE(read.ok()) << expected;
    EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(read.status().message().find(expected), std::string::npos) << read.status().to_string();
  }
}

TEST_F(CheckpointLoader, SafeChangesAreAllowedWithANoteAndNumericChangesWithAWarning) {
  TrainingOptions changed = options_;
  changed.config.resolved = nlohmann::json::object();
  // The saved config was empty (these options are built in code); give the resuming run keys.
  changed.config.resolved["steps_per_print"] = 7;
  changed.config.resolved["checkpoint"] = {{"keep_last", 3}};
  changed.config.resolved["optimizer"] = {{"params", {{"lr", 0.5}}}};
  // Before: "warning: ... the continued run will differ", although the run is bit-identical.
  changed.config.resolved["zero_optimization"] = {{"elastic_checkpoint", true}};
  std::vector<std::string> notes;
  ASSERT_TRUE(resume(changed, &notes).ok());
  auto has_note = [&](const std::string& first, const std::string& second) {
    for (const std::string& note : notes) {
      if (note.find(first) != std::string::npos && note.find(second) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_note("note: steps_per_print", "safe")) << ::testing::PrintToString(notes);
  EXPECT_TRUE(has_note("note: checkpoint.keep_last", "safe")) << ::testing::PrintToString(notes);
  EXPECT_TRUE(has_note("note: zero_optimization.elastic_checkpoint", "safe")) << ::testing::PrintToString(notes);
  EXPECT_TRUE(has_note("warning: optimizer.params.lr", "will differ")) << ::testing::PrintToString(notes);
}

TEST_F(CheckpointLoader, ACommittedTagIsNeverOverwritten) {
  TrainingOptions options = options_;
  const Result<TrainingRun> again = train(options, 2, save_to(checkpoints()));
  expect_error(again.status(), StatusCode::kFailedPrecondition, {"global_step2", "already exists"});
}

TEST_F(CheckpointLoader, ResumingPastTheRequestedStepsIsRefused) {
  const Result<TrainingRun> run = train(options_, 1, resume_from(checkpoints()));
  expect_error(run.status(), StatusCode::kInvalidArgument, {"at step 2", "past the 1 steps"});
}

TEST(CheckpointRetention, KeepsTheNewestTagsAndNeverTheOneLatestNames) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TrainingOptions options = make_options(ModelSpec{{5, 4, 3}}, Precision::kFp32, 1, 1, 1, 100, 2);
  options.config.checkpoint.keep_last = 2;
  ASSERT_TRUE(train(options, 5, save_to(checkpoints, 1)).ok());
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  Result<std::vector<std::string>> tags = list_complete_tags(disk, checkpoints);
  ASSERT_TRUE(tags.ok());
  EXPECT_EQ(tags.value(), (std::vector<std::string>{"global_step4", "global_step5"}));
  // `latest` pointed back at the older tag: retention keeps it even past keep_last.
  ASSERT_TRUE(publish_latest_tag(disk, checkpoints, "global_step4").ok());
  std::vector<std::string> removed;
  ASSERT_TRUE(apply_retention(disk, checkpoints, 1, &removed).ok());
  EXPECT_EQ(removed, std::vector<std::string>{});
  ASSERT_TRUE(publish_latest_tag(disk, checkpoints, "global_step5").ok());
  ASSERT_TRUE(apply_retention(disk, checkpoints, 1, &removed).ok());
  EXPECT_EQ(removed, std::vector<std::string>{"global_step4"});
}

TEST(CheckpointShards, ShardsAreSafetensorsWithGlobalOffsetsAndReassembleAtAnyWorldSize) {
  TestDirectory directory;
  const ModelSpec model{{3, 2, 2}};  // biases of 2 elements: rank 2 of 3 owns nothing of them
  TrainingOptions options = make_options(model, Precision::kBf16, 1, 1, 3, 100, 6);
  ASSERT_TRUE(train(options, 1, save_to(directory.path())).ok());
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  const std::string tag_directory = directory.path() + "/global_step1";
  Result<CheckpointManifest> manifest = read_manifest(disk, tag_directory);
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  EXPECT_EQ(manifest->world_size, 3);
  Result<SafetensorsIndex> index = read_safetensors_index(disk, tag_directory + "/" + shard_file_name(2, 3));
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->find("layers.0.bias/master"), nullptr);  // owns nothing of a 2-element bias
  const SafetensorsEntry* weight = index->find("layers.0.weight/param");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype, DType::kBf16);
  EXPECT_EQ(weight->shape, std::vector<int64_t>{2});  // 6 elements over 3 ranks
  EXPECT_EQ(nlohmann::json::parse(index->metadata.at("layers.0.weight/exp_avg"))["global_offset"], 4);
  // Every fragment read through the reader equals the same range read straight from the file.
  CheckpointShardReader reader(disk, tag_directory, *manifest);
  std::vector<std::byte> whole(6 * sizeof(float));
  ASSERT_TRUE(reader.read(0, CheckpointState::kMaster, 0, 6, whole).ok());
  for (int rank = 0; rank < 3; ++rank) {
    const std::string path = tag_directory + "/" + shard_file_name(rank, 3);
    Result<SafetensorsIndex> shard = read_safetensors_index(disk, path);
    ASSERT_TRUE(shard.ok());
    Result<std::vector<std::byte>> fragment = read_safetensors_tensor(disk, path, *shard, "layers.0.weight/master");
    ASSERT_TRUE(fragment.ok());
    EXPECT_EQ(std::memcmp(fragment->data(), whole.data() + rank * 2 * sizeof(float), fragment->size()), 0);
  }
}

}  // namespace
}  // namespace zerosim
