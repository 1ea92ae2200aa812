// The engine's side of ResidentState (core/engine/compute_backend.h), on machines without a
// GPU: when a backend keeps the partitions, the engine must hand them over before a step, copy
// them back before anything reads the host arrays (saves, sync and async; digests; the final
// gather), hand them over again after anything rewrites them (a load, reset_as_loaded), and
// run the micro-steps and the optimizer step against them.
//
// The backend here is a test double: HostResidentState keeps its own copies of the partitions
// in host memory and computes with the host path's arithmetic (the gather's casts, the
// exchange's rank-order fold through the communication dtype, exact bins, AdamW, the 16-bit
// casts), reading the other ranks' copies directly as the CUDA implementation reads their
// device buffers. So any difference from the plain CPU run is the engine's protocol: a state
// read stale, written back late, or handed over twice. The CUDA implementation's arithmetic is
// held to the same runs on the GPU machine (device_engine_test).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/compute_backend.h"
#include "core/engine/engine.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

struct ProtocolCounts {
  std::atomic<int> adopts{0}, copies_to_host{0}, steps_ended{0};
  std::atomic<int> optimizer_states_adopted{0}, gradient_copies{0}, parameter_copies{0};
  std::atomic<int> micro_batches_made{0};
  std::atomic<int> prefetched_gradient_copies{0};  // offloaded: a sub-group asked for after its prefetch  // MLP micro-batches the backend made from sample indices
};

class HostResidentState final : public ResidentState {
 public:
  HostResidentState(ComputeBackend& compute, ProtocolCounts& counts) : compute_(compute), counts_(counts) {}

  Result<bool> adopt(Comm& comm, const PartitionLayout& layout, DType model_dtype, DType communication_dtype,
                     std::span<const std::byte> params, std::span<const float> master, std::span<const float> exp_avg,
                     std::span<const float> exp_avg_sq) override {
    ++counts_.adopts;
    comm_ = &comm;
    layout_ = layout;
    model_dtype_ = model_dtype;
    communication_dtype_ = communication_dtype;
    params_.assign(params.begin(), params.end());
    master_.assign(master.begin(), master.end());
    exp_avg_.assign(exp_avg.begin(), exp_avg.end());
    exp_avg_sq_.assign(exp_avg_sq.begin(), exp_avg_sq.end());
    if (!master.empty()) ++counts_.optimizer_states_adopted;
    accumulator_.assign(static_cast<size_t>(layout.flat_element_count), 0.0f);
    full_gradients_.resize(layout.parameters.size());
    const std::byte* mine = params_.data();
    peer_params_.assign(static_cast<size_t>(comm.world_size()), nullptr);
    ZEROSIM_RETURN_IF_ERROR(comm.all_gather(std::as_bytes(std::span<const std::byte* const>(&mine, 1)),
                                            std::as_writable_bytes(std::span<const std::byte*>(peer_params_))));
    return true;
  }
  Status copy_to_host(std::span<std::byte> params, std::span<float> master, std::span<float> exp_avg,
                      std::span<float> exp_avg_sq) override {
    ++counts_.copies_to_host;
    EXPECT_EQ(master.size(), master_.size()) << "the optimizer's state is copied back from where it was adopted";
    std::copy(params_.begin(), params_.end(), params.begin());
    std::copy(master_.begin(), master_.end(), master.begin());
    std::copy(exp_avg_.begin(), exp_avg_.end(), exp_avg.begin());
    std::copy(exp_avg_sq_.begin(), exp_avg_sq_.end(), exp_avg_sq.begin());
    return Status();
  }
  // Two staging buffers in turn, as the CUDA backend's pinned ones: the span returned last time
  // is poisoned (the device's next copy overwrites it), so an engine that read it after the
  // next call would compute NaNs; a range asked for right after its prefetch is counted.
  Result<std::span<const float>> gradients_on_host(size_t offset, size_t count, size_t next_offset,
                                                   size_t next_count) override {
    ++counts_.gradient_copies;
    if (prefetched_ && prefetched_offset_ == offset && prefetched_count_ == count) ++counts_.prefetched_gradient_copies;
    std::vector<float>& last = staging_[returned_slot_];
    std::fill(last.begin(), last.end(), std::numeric_limits<float>::quiet_NaN());
    returned_slot_ = 1 - returned_slot_;
    std::vector<float>& staged = staging_[returned_slot_];
    staged.assign(accumulator_.begin() + static_cast<std::ptrdiff_t>(offset),
                  accumulator_.begin() + static_cast<std::ptrdiff_t>(offset + count));
    prefetched_ = next_count > 0;
    prefetched_offset_ = next_offset;
    prefetched_count_ = next_count;
    return std::span<const float>(staged);
  }
  Status parameters_from_host(size_t offset, std::span<const std::byte> params) override {
    ++counts_.parameter_copies;
    std::copy(params.begin(), params.end(), params_.begin() + static_cast<std::ptrdiff_t>(offset * dtype_size_bytes(model_dtype_)));
    return Status();
  }
  Status forward(int64_t stage, ParameterRange gathered) override {
    gather(gathered);
    return compute_.forward(stage, gathered_);
  }
  Status backward(int64_t stage, ParameterRange gathered, ParameterRange gradients,
                  std::span<const uint8_t> fresh) override {
    gather(gathered);
    for (int64_t p = gradients.first; p < gradients.end; ++p) {
      std::vector<float>& gradient = full_gradients_[static_cast<size_t>(p)];
      gradient.resize(static_cast<size_t>(layout_.parameters[static_cast<size_t>(p)].element_count));
      if (fresh[static_cast<size_t>(p - gradients.first)]) std::fill(gradient.begin(), gradient.end(), 0.0f);
    }
    return compute_.backward(stage, gathered_,
                             std::span<std::vector<float>>(full_gradients_.data() + gradients.first,
                                                           static_cast<size_t>(gradients.size())));
  }
  Status reduce_layer(const LayerRange& layer) override {
    std::vector<const float*> mine;
    for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
      mine.push_back(full_gradients_[static_cast<size_t>(p)].data());
    }
    const int world_size = layout_.world_size;
    std::vector<const float*> everyone(mine.size() * static_cast<size_t>(world_size));
    ZEROSIM_RETURN_IF_ERROR(comm_->all_gather(std::as_bytes(std::span<const float* const>(mine)),
                                              std::as_writable_bytes(std::span<const float*>(everyone))));
    const int rank = comm_->rank();
    for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      for (int64_t k = 0; k < partition.owned_count(rank); ++k) {
        float sum = accumulator_[static_cast<size_t>(partition.flat_offset + k)];
        for (int source = 0; source < world_size; ++source) {
          const float* chunk = everyone[static_cast<size_t>(source) * mine.size() +
                                        static_cast<size_t>(p - layer.first_parameter)] +
                               partition.owned_begin(rank);
          sum = sum + round_through(communication_dtype_, chunk[k]);
        }
        accumulator_[static_cast<size_t>(partition.flat_offset + k)] = sum;
      }
    }
    return comm_->barrier();  // no rank rewrites its gradients while another reads them
  }
  Result<ExactSquareSum> gradient_squares() override {
    ExactSquareSum sum;
    sum.add_squares(accumulator_);
    return sum;
  }
  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, size_t offset, size_t count) override {
    EXPECT_FALSE(master_.empty()) << "AdamW asked of a backend that does not hold the optimizer's state";
    zerosim::adam_update(best_simd_path(), scalars, grad_multiplier, master_.data() + offset,
                         accumulator_.data() + offset, exp_avg_.data() + offset, exp_avg_sq_.data() + offset, count);
    return Status();
  }
  Status store_parameters(size_t offset, size_t count) override {
    EXPECT_FALSE(master_.empty()) << "16-bit parameters asked from a master the backend does not hold";
    cast_from_fp32(model_dtype_, master_.data() + offset, params_.data() + offset * dtype_size_bytes(model_dtype_),
                   count);
    return Status();
  }
  Status zero_gradients() override {
    std::fill(accumulator_.begin(), accumulator_.end(), 0.0f);
    return Status();
  }
  Status end_step() override {
    ++counts_.steps_ended;
    return comm_->barrier();  // every rank's new parameters before any rank's next gather
  }

 private:
  // Every rank's owned elements of each parameter of `range`, cast into the full tensors.
  void gather(ParameterRange range) {
    gathered_.resize(static_cast<size_t>(range.size()));
    const size_t element_bytes = dtype_size_bytes(model_dtype_);
    for (int64_t p = range.first; p < range.end; ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      std::vector<float>& full = gathered_[static_cast<size_t>(p - range.first)];
      full.assign(static_cast<size_t>(partition.element_count), 0.0f);
      for (int source = 0; source < layout_.world_size; ++source) {
        if (partition.owned_count(source) == 0) continue;
        cast_to_fp32(model_dtype_,
                     peer_params_[static_cast<size_t>(source)] + static_cast<size_t>(partition.flat_offset) * element_bytes,
                     full.data() + partition.owned_begin(source), static_cast<size_t>(partition.owned_count(source)));
      }
    }
  }

  ComputeBackend& compute_;
  ProtocolCounts& counts_;
  Comm* comm_ = nullptr;
  PartitionLayout layout_;
  DType model_dtype_ = DType::kFp32, communication_dtype_ = DType::kFp32;
  std::vector<std::byte> params_;
  std::vector<float> master_, exp_avg_, exp_avg_sq_, accumulator_;
  std::vector<const std::byte*> peer_params_;
  std::vector<std::vector<float>> gathered_, full_gradients_;
  std::vector<float> staging_[2];
  int returned_slot_ = 0;
  bool prefetched_ = false;
  size_t prefetched_offset_ = 0, prefetched_count_ = 0;
};

// The CPU backend, with HostResidentState as its resident partitions; like the CUDA backend it
// makes the MLP's micro-batches from their sample indices (here with SyntheticDataset, on the
// host), so the indices the engine hands over (each rank's, each micro-step's, after a resume)
// are held to the host path's samples too.
class ResidentCpuBackend final : public ComputeBackend {
 public:
  ResidentCpuBackend(const ModelSpec& model, ProtocolCounts& counts)
      : compute_(make_cpu_compute_backend(model, best_simd_path())), resident_(*compute_, counts), counts_(counts) {}
  std::string name() const override { return "cpu-resident"; }
  Result<bool> make_synthetic_batches(const SyntheticDataset& dataset) override {
    dataset_.emplace(dataset.spec());
    return true;
  }
  Status begin_micro_batch(const MicroBatchInput& batch) override {
    if (!dataset_) return compute_->begin_micro_batch(batch);
    if (!batch.features.empty() || !batch.labels.empty() ||
        batch.sample_indices.size() != static_cast<size_t>(batch.samples)) {
      return internal_error("a micro-batch the backend makes must come as its sample indices alone");
    }
    const size_t feature_count = static_cast<size_t>(dataset_->spec().feature_count);
    features_.resize(batch.sample_indices.size() * feature_count);
    labels_.resize(batch.sample_indices.size());
    for (size_t s = 0; s < batch.sample_indices.size(); ++s) {
      dataset_->features(batch.sample_indices[s], features_.data() + s * feature_count);
    }
    dataset_->labels_of(features_, labels_);
    ++counts_.micro_batches_made;
    MicroBatchInput made = batch;
    made.features = features_;
    made.labels = labels_;
    made.sample_indices = {};
    return compute_->begin_micro_batch(made);
  }
  Status forward(int64_t stage, std::span<const std::vector<float>> parameters) override {
    return compute_->forward(stage, parameters);
  }
  Result<float> loss(float gradient_scale) override { return compute_->loss(gradient_scale); }
  Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                  std::span<std::vector<float>> gradients) override {
    return compute_->backward(stage, parameters, gradients);
  }
  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master, const float* gradient,
                     float* exp_avg, float* exp_avg_sq, size_t count) override {
    return compute_->adam_update(scalars, grad_multiplier, master, gradient, exp_avg, exp_avg_sq, count);
  }
  ResidentState* resident_state() override { return &resident_; }

 private:
  std::unique_ptr<ComputeBackend> compute_;
  HostResidentState resident_;
  ProtocolCounts& counts_;
  std::optional<SyntheticDataset> dataset_;
  std::vector<float> features_;
  std::vector<int32_t> labels_;
};

ComputeDevice resident_cpu(ProtocolCounts& counts) {
  return ComputeDevice{"cpu-resident", [&counts](int, int, const ModelSpec& model, DType) -> Result<std::unique_ptr<ComputeBackend>> {
                         return std::unique_ptr<ComputeBackend>(std::make_unique<ResidentCpuBackend>(model, counts));
                       }};
}

struct Case {
  ModelSpec model;
  Precision precision;
  int world_size;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const ModelSpec& model : {ModelSpec{{64, 256, 128, 10}}, transformer_model(GptSpec{2, 24, 3, 41, 6})}) {
    for (const auto& [precision, world_size] : {std::pair{Precision::kFp32, 1}, std::pair{Precision::kFp16, 1},
                                                std::pair{Precision::kBf16, 3}, std::pair{Precision::kFp16, 2},
                                                std::pair{Precision::kFp32, 3}}) {
      all.push_back({model, precision, world_size});
    }
  }
  return all;
}

std::string describe(const Case& test) {
  return model_spec_to_string(test.model) + " " + precision_name(test.precision) + " W=" + std::to_string(test.world_size);
}

// How many sub-groups each rank's flat partition splits into.
int sub_group_count(const TrainingOptions& options) {
  Result<std::vector<ParameterInfo>> parameters = training_parameters(options);
  EXPECT_TRUE(parameters.ok()) << parameters.status().to_string();
  if (!parameters.ok()) return 1;
  return static_cast<int>(
      make_partition_layout(*parameters, options.world_size, options.config.zero.sub_group_size).sub_groups.size());
}

TrainingOptions options_for(const Case& test) {
  TrainingOptions options = make_options(test.model, test.precision, 3, 2, test.world_size, 700, 29);
  // fp16: a scale that overflows in the first steps, so skipped steps are in the runs.
  if (test.precision == Precision::kFp16) options.config.loss_scaler.initial_scale_power = 20;
  return options;
}

// Runs `on_host` and `resident` for `steps` steps, each under its own checkpoint plan, and
// expects the same bits at every step. Returns the resident run for further checks, or nothing
// (a failure recorded) when either run failed.
std::optional<TrainingRun> expect_the_host_runs_bits(const TrainingOptions& on_host, const CheckpointPlan& host_plan,
                                                     const TrainingOptions& resident,
                                                     const CheckpointPlan& resident_plan, int64_t steps,
                                                     const std::string& what) {
  Result<TrainingRun> expected = train_on_real_env(on_host, steps, host_plan);
  Result<TrainingRun> actual = train_on_real_env(resident, steps, resident_plan);
  if (!expected.ok() || !actual.ok()) {
    ADD_FAILURE() << what << ": " << expected.status().to_string() << " " << actual.status().to_string();
    return std::nullopt;
  }
  EXPECT_EQ(first_step_difference(*expected, *actual), "") << what;
  return std::move(actual).value();
}

// Both runs saving every 2 steps for 5 steps into `directory`/host and /resident: the same
// bits. Returns the resident run, or nothing.
std::optional<TrainingRun> expect_saves_alike(const TrainingOptions& on_host, const TrainingOptions& resident,
                                              const std::string& directory) {
  CheckpointPlan host_saves, resident_saves;
  host_saves.save_directory = directory + "/host";
  resident_saves.save_directory = directory + "/resident";
  host_saves.save_every_steps = resident_saves.save_every_steps = 2;
  return expect_the_host_runs_bits(on_host, host_saves, resident, resident_saves, 5, "saving");
}

// The resident run's checkpoint in `directory`/resident resumed on both to `resume_to_step`:
// the same bits, and the resumed resident run says it kept its partitions.
void expect_resumes_alike(const TrainingOptions& on_host, const TrainingOptions& resident, const std::string& directory,
                          int64_t resume_to_step) {
  CheckpointPlan resume;
  resume.resume_directory = directory + "/resident";
  std::optional<TrainingRun> resumed =
      expect_the_host_runs_bits(on_host, resume, resident, resume, resume_to_step, "resumed");
  if (resumed) {
    EXPECT_TRUE(notes_say_partitions_were_resident(*resumed));
  }
}

// reset_as_loaded without the optimizer's state (module only, or a fresh optimizer) after
// `after_step`, on both: the same bits.
void expect_resets_alike(const TrainingOptions& on_host, const TrainingOptions& resident, int64_t after_step,
                         bool module_only) {
  CheckpointPlan reset;
  CheckpointLoadOptions load;
  load.optimizer_states = false;
  load.module_only = module_only;
  reset.modelled_loads = {{after_step, load, std::nullopt, {}}};
  expect_the_host_runs_bits(on_host, reset, resident, reset, 5,
                            "reset after step " + std::to_string(after_step) +
                                (module_only ? ", module only" : ", fresh optimizer"));
}

TEST(ResidentState, StepsAgainstResidentPartitionsHaveTheHostPathsBits) {
  for (const Case& test : cases()) {
    for (bool digest_every_step : {true, false}) {
      SCOPED_TRACE(describe(test) + (digest_every_step ? ", digests every step" : ", digests at the end"));
      ProtocolCounts counts;
      TrainingOptions on_host = options_for(test);
      on_host.digest_every_step = digest_every_step;
      TrainingOptions resident = on_host;
      resident.compute = resident_cpu(counts);
      Result<TrainingRun> expected = train_on_real_env(on_host, 6);
      Result<TrainingRun> actual = train_on_real_env(resident, 6);
      ASSERT_TRUE(expected.ok()) << expected.status().to_string();
      ASSERT_TRUE(actual.ok()) << actual.status().to_string();
      EXPECT_EQ(first_step_difference(*expected, *actual), "");
      EXPECT_TRUE(notes_say_partitions_were_resident(*actual));
      EXPECT_FALSE(notes_say_partitions_were_resident(*expected));
      // Handed over once per rank; copied back per digest (or once, for the final gather).
      EXPECT_EQ(counts.adopts.load(), test.world_size);
      EXPECT_EQ(counts.copies_to_host.load(), test.world_size * (digest_every_step ? 6 : 1));
      EXPECT_GT(counts.steps_ended.load(), 0);
      // The MLP's batches made by the backend: every micro-batch of every rank (6 steps of 2).
      EXPECT_EQ(counts.micro_batches_made.load(), test.model.is_transformer() ? 0 : test.world_size * 6 * 2);
    }
  }
}

TEST(ResidentState, SavesLoadsAndResetsMoveThePartitionsBetweenBackendAndHost) {
  for (const Case& test : cases()) {
    ProtocolCounts counts;
    TrainingOptions on_host = options_for(test);
    on_host.digest_every_step = true;
    TrainingOptions resident = on_host;
    resident.compute = resident_cpu(counts);
    for (bool async : {false, true}) {
      SCOPED_TRACE(describe(test) + (async ? ", async saves" : ", sync saves"));
      TestDirectory directory;
      TrainingOptions host_saving = on_host, resident_saving = resident;
      host_saving.config.checkpoint.async_save = resident_saving.config.checkpoint.async_save = async;
      ASSERT_TRUE(expect_saves_alike(host_saving, resident_saving, directory.path()));
      expect_resumes_alike(host_saving, resident_saving, directory.path(), 8);
    }
    // A reset saves nothing: once a case, not once per kind of save.
    SCOPED_TRACE(describe(test) + ", resets");
    for (int64_t after_step : {int64_t{0}, int64_t{2}}) {
      for (bool module_only : {false, true}) expect_resets_alike(on_host, resident, after_step, module_only);
    }
  }
}

TEST(ResidentState, ARunWithoutAStepNeverHandsThePartitionsOverNorSaysSo) {
  ProtocolCounts counts;
  TrainingOptions options = options_for(cases().front());
  options.compute = resident_cpu(counts);
  Result<TrainingRun> run = train_on_real_env(options, 0);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(counts.adopts.load(), 0);
  EXPECT_FALSE(notes_say_partitions_were_resident(*run));
}

// An offloaded optimizer (cpu, or nvme with its swapper) keeps master and moments on the host
// and steps them on the CPU; the backend keeps the 16-bit parameters and the accumulator, hands
// each sub-group's gradients over and takes its new parameters back: the host path's bits, the
// host state never behind (nothing is copied back for a digest or a save), and the saves resume.
TEST(ResidentState, AnOffloadedOptimizerStepsOnTheHostAgainstResidentParametersAndGradients) {
  for (const Case& test : {Case{ModelSpec{{64, 256, 128, 10}}, Precision::kBf16, 2},
                           Case{ModelSpec{{64, 256, 128, 10}}, Precision::kFp16, 1},
                           Case{transformer_model(GptSpec{2, 24, 3, 41, 6}), Precision::kFp32, 3}}) {
    for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
      SCOPED_TRACE(describe(test) + ", optimizer offloaded to " + offload_device_name(device));
      TestDirectory directory;
      ProtocolCounts counts;
      TrainingOptions on_host = options_for(test);
      on_host.digest_every_step = true;
      on_host.config.zero.offload_optimizer.device = device;
      // Several sub-groups, so that the copies go sub-group by sub-group.
      on_host.config.zero.sub_group_size = 5000;
      if (device == OffloadDevice::kNvme) {
        on_host.config.zero.offload_optimizer.nvme_path = directory.path() + "/swap";
        on_host.config.zero.offload_optimizer.buffer_count = 9;
      }
      TrainingOptions resident = on_host;
      resident.compute = resident_cpu(counts);
      std::optional<TrainingRun> saving = expect_saves_alike(on_host, resident, directory.path());
      ASSERT_TRUE(saving);
      EXPECT_TRUE(notes_say_partitions_were_resident(*saving));
      // The saving run's hand-overs and copies (before the resumes add theirs).
      EXPECT_EQ(counts.adopts.load(), test.world_size);
      EXPECT_EQ(counts.optimizer_states_adopted.load(), 0);
      EXPECT_EQ(counts.copies_to_host.load(), 0);
      EXPECT_GT(counts.gradient_copies.load(), test.world_size * 2);
      EXPECT_EQ(counts.gradient_copies.load(), counts.parameter_copies.load());
      // Every sub-group but each step's first was prefetched by the call before it.
      EXPECT_GT(counts.prefetched_gradient_copies.load(), 0);
      EXPECT_EQ(counts.gradient_copies.load() - counts.prefetched_gradient_copies.load(),
                counts.gradient_copies.load() / sub_group_count(on_host));
      expect_resumes_alike(on_host, resident, directory.path(), 7);
      // reset_as_loaded with a fresh optimizer after step 2: the master rebuilt on the host,
      // the parameters handed over again.
      expect_resets_alike(on_host, resident, 2, false);
    }
  }
}

TEST(ResidentState, OffloadedParametersAndFrozenParametersKeepThePartitionsOnTheHost) {
  const Case test{ModelSpec{{64, 256, 128, 10}}, Precision::kBf16, 2};
  TestDirectory directory;
  for (bool offload_parameters : {true, false}) {
    SCOPED_TRACE(offload_parameters ? "parameters on NVMe" : "a frozen parameter");
    ProtocolCounts counts;
    TrainingOptions options = options_for(test);
    options.compute = resident_cpu(counts);
    if (offload_parameters) {
      options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
      options.config.zero.offload_optimizer.nvme_path = directory.path();
      options.config.zero.offload_optimizer.buffer_count = 9;
      options.config.zero.offload_param.device = OffloadDevice::kNvme;
      options.config.zero.offload_param.nvme_path = directory.path();
    } else {
      options.frozen_parameters = {"layers.0.bias"};
    }
    Result<TrainingRun> run = train_on_real_env(options, 3);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    EXPECT_EQ(counts.adopts.load(), 0);
    EXPECT_FALSE(notes_say_partitions_were_resident(*run));
  }
}

// A load that freezes a parameter the run trained (the restart's frozen set): from there on the
// host path steps (the backend's resident path steps every parameter), so the engine takes the
// partitions back and builds the host's gradient storage again, which it let go while the
// backend held the gradients. With the optimizer in memory, on the CPU and on NVMe: the host
// run's bits, and the backend held the partitions before the load.
TEST(ResidentState, ALoadThatFreezesAParameterMovesTheRunBackToTheHostPath) {
  const Case test{ModelSpec{{64, 256, 128, 10}}, Precision::kBf16, 2};
  for (OffloadDevice device : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    SCOPED_TRACE(std::string("optimizer offload ") + offload_device_name(device));
    TestDirectory directory;
    ProtocolCounts counts;
    TrainingOptions on_host = options_for(test);
    on_host.digest_every_step = true;
    on_host.config.zero.offload_optimizer.device = device;
    if (device == OffloadDevice::kNvme) {
      on_host.config.zero.offload_optimizer.nvme_path = directory.path() + "/swap";
      on_host.config.zero.offload_optimizer.buffer_count = 9;
    }
    TrainingOptions resident = on_host;
    resident.compute = resident_cpu(counts);
    CheckpointPlan freezing;
    CheckpointLoadOptions fresh_optimizer;
    fresh_optimizer.optimizer_states = false;
    freezing.modelled_loads = {{2, fresh_optimizer, std::vector<std::string>{"layers.0.bias"}, {}}};
    std::optional<TrainingRun> run = expect_the_host_runs_bits(on_host, freezing, resident, freezing, 5,
                                                               "layers.0.bias frozen by a load after step 2");
    ASSERT_TRUE(run);
    EXPECT_EQ(counts.adopts.load(), test.world_size);  // before the load, not after
  }
}

}  // namespace
}  // namespace zerosim
