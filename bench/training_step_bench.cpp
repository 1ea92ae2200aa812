// One ZeRO-3 training step of an MLP or a transformer (--model gpt:...) through run_training, on the CPU or --device cuda, at W
// ranks (threads; with cuda, rank r on GPU r mod the GPUs visible): the median wall time of a
// step over the steps after the first two, as JSON. The peer (PyTorch FSDP2 on the same model,
// batch and dtype) is bench/fsdp2_step.py; bench/training_step_vs_fsdp2.sh runs both.
// Flags: --device cpu|cuda|cuda-fast|none --world-size W --model 1024,4096,4096,1024 --micro-batch N
// --steps K --precision fp32|fp16|bf16 [--sequence-length T] (the transformer's tokens per sample;
// default its block) [--threads-per-rank N] (each rank's CPU compute threads;
// default the host's cores divided among the W ranks, 1 at least). The transformer's peer is bench/gpt_step_peer.py (bench/gpt_step_vs_torch.sh).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cuda/device_compute_backend.h"
#include "core/engine/engine.h"
#include "bench/flag_value.h"

namespace {

// --device none: a backend that computes nothing (zero gradients, no update), so the step's time
// is the engine's own work: gathers and casts, the gradient exchange, the norm, the parameter
// casts. What a faster backend cannot remove.
class NoComputeBackend final : public zerosim::ComputeBackend {
 public:
  std::string name() const override { return "none"; }
  zerosim::Status begin_micro_batch(const zerosim::MicroBatchInput&) override { return {}; }
  zerosim::Status forward(int64_t, std::span<const std::vector<float>>) override { return {}; }
  zerosim::Result<float> loss(float) override { return 0.0f; }
  // The engine zeroes the gradients; nothing is added.
  zerosim::Status backward(int64_t, std::span<const std::vector<float>>, std::span<std::vector<float>>) override {
    return {};
  }
  zerosim::Status adam_update(const zerosim::AdamStepScalars&, float, float*, const float*, float*, float*,
                              size_t) override {
    return {};
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace zerosim;
  std::string device = "cuda", model_text = "1024,4096,4096,1024", precision_text = "bf16";
  int world_size = 2;
  int64_t micro_batch = 64, steps = 8, sequence_length = 0;
  int threads_per_rank = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    require_value(i, argc, argv[i]);
    if (flag == "--device") device = argv[i + 1];
    else if (flag == "--world-size") world_size = static_cast<int>(whole_number(flag, argv[i + 1]));
    else if (flag == "--model") model_text = argv[i + 1];
    else if (flag == "--micro-batch") micro_batch = whole_number(flag, argv[i + 1]);
    else if (flag == "--steps") steps = whole_number(flag, argv[i + 1]);
    else if (flag == "--precision") precision_text = argv[i + 1];
    else if (flag == "--sequence-length") sequence_length = whole_number(flag, argv[i + 1]);  // transformer: tokens per sample
    else if (flag == "--threads-per-rank") {
      threads_per_rank = static_cast<int>(whole_number(flag, argv[i + 1]));
      if (threads_per_rank < 1 || threads_per_rank > 1024) {
        std::fprintf(stderr, "--threads-per-rank %s: must be in 1..1024\n", argv[i + 1]);
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  Result<ModelSpec> model = parse_model_spec(model_text);
  if (!model.ok() || steps < 3) {
    std::fprintf(stderr, "--model %s / --steps %lld: %s\n", model_text.c_str(), static_cast<long long>(steps),
                 model.ok() ? "need at least 3 steps" : model.status().to_string().c_str());
    return 2;
  }
  TrainingOptions options;
  options.model = *model;
  options.world_size = world_size;
  if (threads_per_rank == 0) {  // not given
    threads_per_rank = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, world_size));
  }
  options.threads_per_rank = threads_per_rank;
  ResolvedConfig& config = options.config;
  config.precision = config.communication_dtype = precision_text == "fp32"   ? Precision::kFp32
                                                  : precision_text == "fp16" ? Precision::kFp16
                                                                             : Precision::kBf16;
  config.micro_batch_size = micro_batch;
  config.gradient_accumulation_steps = 1;
  config.train_batch_size = micro_batch * world_size;
  config.optimizer.learning_rate = 1e-4;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 1.0;
  config.loss_scaler.dynamic = config.precision == Precision::kFp16;
  options.data = dataset_for_model(*model, 1 << 16, options.data.seed);
  if (sequence_length > 0) options.data.feature_count = sequence_length;
  if (device == "none") {
    options.compute = ComputeDevice{"none", [](int, int, const ModelSpec&, DType) -> Result<std::unique_ptr<ComputeBackend>> {
                                      return std::unique_ptr<ComputeBackend>(new NoComputeBackend());
                                    }};
  } else if (device == "cuda" || device == "cuda-fast") {
    Result<ComputeBackendFactory> factory =
        cuda_compute_backend_factory(device == "cuda" ? CudaGemm::kDeterministic : CudaGemm::kCublas);
    if (!factory.ok()) {
      std::fprintf(stderr, "%s\n", factory.status().to_string().c_str());
      return 3;
    }
    options.compute = ComputeDevice{device, std::move(factory).value()};
  }
  RealEnv real_env;
  Result<TrainingRun> run = run_training(options, steps, real_env.env());
  if (!run.ok()) {
    std::fprintf(stderr, "training failed: %s\n", run.status().to_string().c_str());
    return 1;
  }
  // The optimizer phase's share (overflow check, norm, AdamW, parameter casts) shows where a
  // step's time goes: the rest is the micro-steps (gathers, compute, gradient exchange).
  // The split: each phase's median over the same steps (rank 0's clock).
  std::vector<double> step_ms, optimizer_ms, data_ms, forward_ms, backward_ms, other_ms;
  for (size_t k = 2; k < run->steps.size(); ++k) {
    const StepRecord& record = run->steps[k];
    step_ms.push_back(static_cast<double>(record.step_ns) / 1e6);
    optimizer_ms.push_back(static_cast<double>(record.optimizer_ns) / 1e6);
    data_ms.push_back(static_cast<double>(record.data_ns) / 1e6);
    forward_ms.push_back(static_cast<double>(record.forward_ns) / 1e6);
    backward_ms.push_back(static_cast<double>(record.backward_ns) / 1e6);
    other_ms.push_back(static_cast<double>(record.step_ns - record.optimizer_ns - record.data_ns - record.forward_ns -
                                           record.backward_ns) /
                       1e6);
  }
  auto median_of = [](std::vector<double>& values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  const double median = median_of(step_ms);
  int64_t parameters = 0;
  for (const ParameterInfo& parameter : model_parameters(*model)) parameters += parameter.element_count;
  const nlohmann::json output = {{"engine", "zerosim"},
                                 {"device", device},
                                 {"world_size", world_size},
                                 {"threads_per_rank", threads_per_rank},
                                 {"model", model_text},
                                 {"parameters", parameters},
                                 {"precision", precision_text},
                                 {"global_batch", config.train_batch_size},
                                 {"sequence_length", model->is_transformer() ? options.data.feature_count : 0},
                                 {"step_ms_median", median},
                                 {"optimizer_ms_median", median_of(optimizer_ms)},
                                 {"data_ms_median", median_of(data_ms)},
                                 {"forward_ms_median", median_of(forward_ms)},
                                 {"backward_and_exchange_ms_median", median_of(backward_ms)},
                                 {"host_other_ms_median", median_of(other_ms)},
                                 {"samples_per_s", static_cast<double>(config.train_batch_size) / (median / 1e3)},
                                 {"final_loss", run->steps.back().loss}};
  std::printf("%s\n", output.dump().c_str());
  return 0;
}
