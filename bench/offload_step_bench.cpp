// The optimizer step with its state on NVMe against max(I/O time, compute time) of the same
// step (goal <= 1.15 with pipelining on):
//   compute: the optimizer phase of the same run with the state in memory;
//   I/O:     the swappers doing the step's transfers with no arithmetic in between: every
//            sub-group's optimizer state read and written with the same pipelining, and its
//            gradient partitions read;
//   offload: the optimizer phase with the state swapped through libaio.
// Each is the median over the steps after the first. Flags: --dir D --hidden N --steps K
// --sub-group-size N --device cpu|cuda.
//
// --device cuda (the GPU machine): the 16-bit parameters and the gradients stay on the GPU,
// master and moments on the host or NVMe, AdamW on the CPU (ZeRO-Offload / ZeRO-Infinity):
//   CPU Adam: the optimizer phase of the CPU device with the state in memory;
//   copies + CPU Adam: the GPU run with the optimizer offloaded to cpu (each sub-group's
//            gradients to the host, its new 16-bit parameters back, AdamW between);
//   I/O:     the optimizer state read and written (the gradients never go to NVMe there);
//   offload: the GPU run with the optimizer on NVMe.
// and the ratio offload / max(I/O, copies + CPU Adam), with max(I/O, CPU Adam) beside it; and
// the peak host RSS of the NVMe run on the GPU beside the same run on the CPU device (each
// peak measured from the process's RSS before that run, both after the CUDA context exists;
// Linux's /proc/self/clear_refs resets the peak).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/cuda/device_compute_backend.h"
#include "core/engine/engine.h"
#include "bench/flag_value.h"

namespace {

using namespace zerosim;

double median_ms(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// The process's resident set (VmRSS) or its peak (VmHWM), in MiB; -1 where /proc says nothing.
double resident_mib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::atof(line.c_str() + std::strlen(field) + 1) / 1024.0;
  }
  return -1.0;
}

// Starts a new peak: VmHWM falls to the current RSS (Linux 4.0 and later).
bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

TrainingOptions make_options(int64_t hidden, int64_t sub_group_size) {
  TrainingOptions options;
  options.model.layer_widths = {hidden, hidden, hidden, 8};
  ResolvedConfig& config = options.config;
  config.precision = config.communication_dtype = Precision::kBf16;
  config.micro_batch_size = 1;
  config.gradient_accumulation_steps = 1;
  config.train_batch_size = 1;
  config.optimizer.learning_rate = 1e-4;
  config.optimizer.weight_decay = 0.01;
  config.zero.sub_group_size = sub_group_size;
  config.loss_scaler.dynamic = false;
  options.data.feature_count = hidden;
  options.data.class_count = 8;
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  std::string directory = "/tmp";
  int64_t hidden = 2048;
  int64_t steps = 6;
  int64_t sub_group_size = 1 << 20;
  std::string device = "cpu";
  for (int i = 1; i < argc; i += 2) {
    require_value(i, argc, argv[i]);
    const std::string flag = argv[i];
    if (flag == "--dir") directory = argv[i + 1];
    else if (flag == "--hidden") hidden = whole_number(flag, argv[i + 1]);
    else if (flag == "--steps") steps = whole_number(flag, argv[i + 1]);
    else if (flag == "--sub-group-size") sub_group_size = whole_number(flag, argv[i + 1]);
    else if (flag == "--device") device = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  RealEnv real_env;
  TrainingOptions in_memory = make_options(hidden, sub_group_size);
  TrainingOptions on_nvme = in_memory;
  on_nvme.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  on_nvme.config.zero.offload_optimizer.nvme_path = directory;
  on_nvme.config.zero.offload_optimizer.buffer_count = 9;
  on_nvme.config.zero.offload_optimizer.pipeline_read = true;
  on_nvme.config.zero.offload_optimizer.pipeline_write = true;
  on_nvme.config.aio.block_size = 1 << 20;
  on_nvme.config.aio.queue_depth = 8;
  on_nvme.run_id = "offload-step-bench";

  auto optimizer_times = [&](const TrainingOptions& options, const char* what) -> std::vector<double> {
    Result<TrainingRun> run = run_training(options, steps, real_env.env());
    if (!run.ok()) {
      std::fprintf(stderr, "%s run failed: %s\n", what, run.status().to_string().c_str());
      std::exit(1);
    }
    std::vector<double> times;
    for (size_t s = 1; s < run->steps.size(); ++s) times.push_back(static_cast<double>(run->steps[s].optimizer_ns) * 1e-6);
    return times;
  };
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device %s: expected cpu or cuda\n", device.c_str());
    return 2;
  }
  const double compute_ms = median_ms(optimizer_times(in_memory, "in-memory"));
  double copies_and_adam_ms = 0.0;
  const bool on_gpu = device == "cuda";
  if (on_gpu) {
    Result<ComputeBackendFactory> factory = cuda_compute_backend_factory(CudaGemm::kDeterministic);
    if (!factory.ok()) {
      std::fprintf(stderr, "%s\n", factory.status().to_string().c_str());
      return 3;
    }
    on_nvme.compute = ComputeDevice{"cuda", std::move(factory).value()};
    TrainingOptions on_cpu_memory = on_nvme;
    on_cpu_memory.config.zero.offload_optimizer.device = OffloadDevice::kCpu;
    copies_and_adam_ms = median_ms(optimizer_times(on_cpu_memory, "cpu-offloaded"));
  }
  // Peak host RSS over the NVMe run, above the RSS it starts from.
  struct PeakRss {
    double start_mib = -1, peak_mib = -1;
  };
  auto measured_peak = [&](auto&& run) {
    PeakRss rss;
    const bool reset = reset_peak_rss();
    rss.start_mib = resident_mib("VmRSS:");
    run();
    if (reset) rss.peak_mib = resident_mib("VmHWM:");
    return rss;
  };
  double offload_ms = 0.0;
  const PeakRss offload_rss = measured_peak([&] { offload_ms = median_ms(optimizer_times(on_nvme, "nvme")); });
  PeakRss host_path_rss;
  if (on_gpu) {
    TrainingOptions on_cpu_device = on_nvme;
    on_cpu_device.compute = ComputeDevice{};
    host_path_rss = measured_peak([&] { optimizer_times(on_cpu_device, "nvme (cpu device)"); });
  }

  // I/O alone: the same sub-groups through the same swapper, with the same pipelining.
  const PartitionLayout layout =
      make_partition_layout(mlp_parameters(in_memory.model), 1, in_memory.config.zero.sub_group_size);
  OptimizerSwapperOptions swap_options;
  swap_options.nvme_path = directory;
  swap_options.run_id = "offload-step-bench-io";
  for (const SubGroup& group : layout.sub_groups) swap_options.sub_group_element_counts.push_back(group.element_count);
  swap_options.aio.block_size_bytes = 1 << 20;
  swap_options.aio.queue_depth = 8;
  swap_options.buffer_count = 9;
  swap_options.pipeline_read = swap_options.pipeline_write = true;
  Result<std::unique_ptr<OptimizerSwapper>> swapper = OptimizerSwapper::create(*real_env.env().disk, swap_options, nullptr);
  if (!swapper.ok()) {
    std::fprintf(stderr, "swapper: %s\n", swapper.status().to_string().c_str());
    return 1;
  }
  PartitionSwapperOptions gradient_options;
  gradient_options.nvme_path = directory;
  gradient_options.run_id = "offload-step-bench-io";
  for (const ParameterPartition& partition : layout.parameters) {
    gradient_options.partition_element_counts.push_back(partition.partition_size);
  }
  gradient_options.dtype = DType::kFp32;
  gradient_options.kind = SwapTensorKind::kGradients;
  gradient_options.aio = swap_options.aio;
  Result<std::unique_ptr<PartitionSwapper>> gradients =
      PartitionSwapper::create(*real_env.env().disk, gradient_options, nullptr);
  if (!gradients.ok()) {
    std::fprintf(stderr, "gradient swapper: %s\n", gradients.status().to_string().c_str());
    return 1;
  }
  std::vector<std::byte> gradient_bytes;
  for (size_t p = 0; p < layout.parameters.size(); ++p) {
    gradient_bytes.assign(static_cast<size_t>(layout.parameters[p].partition_size) * sizeof(float), std::byte{0});
    if (!(*gradients)->write(static_cast<int>(p), 0, gradient_bytes).ok()) return 1;
  }
  std::unique_ptr<Clock> clock = make_steady_clock();
  for (size_t g = 0; g < layout.sub_groups.size(); ++g) {
    std::vector<float> zeros(static_cast<size_t>(layout.sub_groups[g].element_count), 0.0f);
    if (!(*swapper)->write_initial(static_cast<int>(g), zeros).ok()) return 1;
  }
  std::vector<double> io_times;
  for (int64_t step = 0; step < steps - 1; ++step) {
    const uint64_t start = clock->now_ns();
    for (size_t g = 0; g < layout.sub_groups.size(); ++g) {
      if (!(*swapper)->acquire(static_cast<int>(g), step).ok()) return 1;
      if (g + 1 < layout.sub_groups.size() && !(*swapper)->prefetch(static_cast<int>(g + 1), step).ok()) return 1;
      for (int64_t p = layout.sub_groups[g].first_parameter; !on_gpu && p < layout.sub_groups[g].end_parameter; ++p) {
        gradient_bytes.resize(static_cast<size_t>(layout.parameters[static_cast<size_t>(p)].partition_size) * sizeof(float));
        if (!(*gradients)->read(static_cast<int>(p), 0, gradient_bytes).ok()) return 1;
      }
      if (!(*swapper)->release(static_cast<int>(g), step + 1).ok()) return 1;
    }
    if (!(*swapper)->flush().ok()) return 1;
    io_times.push_back(static_cast<double>(clock->now_ns() - start) * 1e-6);
  }
  const double io_ms = median_ms(io_times);
  const double bound_ms = std::max(io_ms, on_gpu ? copies_and_adam_ms : compute_ms);
  int64_t elements = 0;
  for (const SubGroup& group : layout.sub_groups) elements += group.element_count;
  std::printf("offload_step_bench: %lld parameters in %zu sub-groups, optimizer state %.1f MiB on %s\n",
              static_cast<long long>(elements), layout.sub_groups.size(), elements * 12.0 / 1048576.0,
              directory.c_str());
  std::printf("  compute (CPU, state in memory) %8.2f ms\n", compute_ms);
  if (on_gpu) std::printf("  copies + CPU Adam (GPU run, optimizer offloaded to cpu) %8.2f ms\n", copies_and_adam_ms);
  std::printf("  I/O alone                   %8.2f ms  (state read + written%s: %.0f MB/s)\n", io_ms,
              on_gpu ? "" : ", gradients read", elements * (12.0 * 2 + (on_gpu ? 0.0 : 4.0)) / (io_ms * 1e-3) / 1e6);
  std::printf("  offloaded step (%s)        %8.2f ms\n", device.c_str(), offload_ms);
  std::printf("  offloaded / max(I/O, %s) = %.3f (goal <= 1.15)\n", on_gpu ? "copies + CPU Adam" : "compute",
              offload_ms / bound_ms);
  if (on_gpu) {
    std::printf("  offloaded / max(I/O, CPU Adam alone) = %.3f\n", offload_ms / std::max(io_ms, compute_ms));
  }
  std::printf("  peak host RSS, NVMe run on %s: %.0f MiB (from %.0f: +%.0f)\n", device.c_str(), offload_rss.peak_mib,
              offload_rss.start_mib, offload_rss.peak_mib - offload_rss.start_mib);
  if (on_gpu) {
    std::printf("  peak host RSS, the same run on the cpu device: %.0f MiB (from %.0f: +%.0f)\n", host_path_rss.peak_mib,
                host_path_rss.start_mib, host_path_rss.peak_mib - host_path_rss.start_mib);
  }
  return 0;
}
