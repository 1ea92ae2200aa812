#include "tools/train_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/checkpoint/manifest.h"
#include "core/cuda/device_compute_backend.h"
#include "core/cuda/nccl_comm.h"
#include "core/engine/engine.h"
#include "core/env/defects.h"
#include "tools/default_config.h"
#include "tools/export_run.h"
#include "tools/mpi_launch.h"

namespace zerosim {

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented: return 2;
    case StatusCode::kIoError:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition: return 3;
    default: return 1;
  }
}

Result<ComputeDevice> compute_device_named(const std::string& name) {
  if (name == "cpu") return ComputeDevice{};
  if (name != "cuda" && name != "cuda-fast") return invalid_argument("--device " + name + ": expected cpu, cuda or cuda-fast");
  ZEROSIM_ASSIGN_OR_RETURN(ComputeBackendFactory factory,
                           cuda_compute_backend_factory(name == "cuda" ? CudaGemm::kDeterministic : CudaGemm::kCublas));
  return ComputeDevice{name, std::move(factory)};
}

void add_device_flag(CLI::App& command, std::string& device) {
  command.add_option("--device", device,
                     "Where the forward, backward and AdamW run: cpu; cuda (rank r on GPU r mod the GPUs "
                     "visible), the CPU's bits; or cuda-fast (cuBLAS GEMMs: reproducible on one GPU model, "
                     "not the CPU's bits)")
      ->check(CLI::IsMember({"cpu", "cuda", "cuda-fast"}));
}

void add_config_flags(CLI::App& command, ConfigFlags& flags, bool config_is_positional) {
  if (config_is_positional) {
    command.add_option("file", flags.config_path, "DeepSpeed JSON config")->required();
  } else {
    command.add_option("--config", flags.config_path, "DeepSpeed JSON config (default: the embedded seed-shaped config)");
  }
  command.add_option("--set", flags.overrides, "Override a config key: --set zero_optimization.sub_group_size=4096")
      ->allow_extra_args(false);
  RunSettings& settings = flags.settings;
  // Defaults for the run settings; load_config() marks the ones the user did not give, so
  // that they only fill "auto" and are never compared against a concrete config value.
  settings.micro_batch_size = 4;
  settings.gradient_accumulation_steps = 2;
  set_default_hyperparameters(settings);
  settings.warmup_steps = 5;
  settings.hidden_size = 37;
  command.add_option("--world-size", settings.world_size, "Ranks (threads in this process)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  struct SettingFlag {
    const char* names;
    const char* flag;  // the canonical name, as config errors print it
    const char* help;
  };
  auto add_setting = [&](const SettingFlag& setting, auto& value) {
    CLI::Option* option = command.add_option(setting.names, value, setting.help);
    flags.setting_options.emplace_back(setting.flag, option);
  };
  add_setting({"--micro-batch-size", "--micro-batch-size", "Fills train_micro_batch_size_per_gpu \"auto\" (default 4)"},
              settings.micro_batch_size);
  add_setting({"--gradient-accumulation-steps", "--gradient-accumulation-steps",
               "Fills gradient_accumulation_steps \"auto\" (default 2; derived when train_batch_size is given)"},
              settings.gradient_accumulation_steps);
  add_setting({"--learning-rate,--lr", "--learning-rate", "Fills optimizer lr and warmup_max_lr \"auto\" (default 1e-2)"},
              settings.learning_rate);
  add_setting({"--adam-beta1", "--adam-beta1", "Fills betas \"auto\" (default 0.9)"}, settings.adam_beta1);
  add_setting({"--adam-beta2", "--adam-beta2", "Fills betas \"auto\" (default 0.999)"}, settings.adam_beta2);
  add_setting({"--adam-epsilon", "--adam-epsilon", "Fills eps \"auto\" (default 1e-8)"}, settings.adam_epsilon);
  add_setting({"--weight-decay", "--weight-decay", "Fills weight_decay \"auto\" (default 0.01)"}, settings.weight_decay);
  add_setting({"--max-grad-norm", "--max-grad-norm", "Fills gradient_clipping \"auto\" (default 1.0)"},
              settings.max_grad_norm);
  add_setting({"--warmup-steps", "--warmup-steps", "Fills warmup_num_steps \"auto\" (default 5)"},
              settings.warmup_steps);
  add_setting({"--total-steps", "--total-steps", "Fills total_num_steps \"auto\" (default 1000)"}, settings.total_steps);
  add_setting({"--hidden-size", "--hidden-size",
               "Fills reduce_bucket_size and the stage-3 bucket keys \"auto\" (default 37)"},
              settings.hidden_size);
  command.add_option("--precision", flags.precision_text, "What fp16/bf16 \"enabled\": \"auto\" resolves to")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
}

Result<ResolvedConfig> load_config(const ConfigFlags& flags) {
  std::string text;
  std::string source = "<embedded default config>";
  if (flags.config_path.empty()) {
    text = kDefaultConfigJson;
  } else {
    std::ifstream stream(flags.config_path, std::ios::binary);
    if (!stream) return not_found("config file " + flags.config_path + " cannot be opened");
    std::stringstream buffer;
    buffer << stream.rdbuf();
    if (stream.bad()) return io_error("config file " + flags.config_path + " could not be read");
    text = buffer.str();
    source = flags.config_path;
  }
  ZEROSIM_ASSIGN_OR_RETURN(nlohmann::json document, parse_json_text(text, source));
  for (const std::string& assignment : flags.overrides) ZEROSIM_RETURN_IF_ERROR(apply_override(document, assignment));
  RunSettings settings = flags.settings;
  for (const auto& [flag, value] :
       {std::pair{"--learning-rate", settings.learning_rate}, std::pair{"--adam-beta1", settings.adam_beta1},
        std::pair{"--adam-beta2", settings.adam_beta2}, std::pair{"--adam-epsilon", settings.adam_epsilon},
        std::pair{"--weight-decay", settings.weight_decay}, std::pair{"--max-grad-norm", settings.max_grad_norm}}) {
    if (!std::isfinite(value) || value < 0.0) {
      return invalid_argument(std::string(flag) + ": expected a finite value >= 0, found " + std::to_string(value));
    }
  }
  for (const auto& [flag, option] : flags.setting_options) {
    const bool derived = std::find(flags.derived_flags.begin(), flags.derived_flags.end(), flag) != flags.derived_flags.end();
    if (option->count() == 0 && !derived) settings.defaulted_flags.push_back(flag);
  }
  settings.auto_precision = flags.precision_text == "fp16"   ? Precision::kFp16
                            : flags.precision_text == "bf16" ? Precision::kBf16
                                                             : Precision::kFp32;
  return resolve_config(document, settings);
}

int run_config_check_command(const ConfigFlags& flags) {
  Result<ResolvedConfig> config = load_config(flags);
  if (!config.ok()) {
    std::fprintf(stderr, "zerosim: config check failed: %s\n", config.status().to_string().c_str());
    return 2;
  }
  for (const std::string& warning : config->warnings) std::fprintf(stderr, "zerosim: warning: %s\n", warning.c_str());
  std::printf("%s\n", config->resolved.dump(2).c_str());
  if (!config->inactive_keys.empty()) {
    std::printf("\nRead but not acted on yet (%zu):\n", config->inactive_keys.size());
    for (const std::string& key : config->inactive_keys) std::printf("  %s\n", key.c_str());
  }
  return 0;
}

namespace {

nlohmann::json step_to_json(const StepRecord& step) {
  return nlohmann::json{{"step", step.step},
                        {"loss", step.loss},
                        {"lr", step.learning_rate},
                        {"loss_scale", step.loss_scale},
                        {"grad_norm", step.grad_norm},
                        {"skipped", step.skipped}};
}

}  // namespace

namespace {

// On --resume: what the run takes from the checkpoint. The model, seed and dataset size that
// were not given come from the manifest, and so does the global batch: a defaulted
// accumulation is derived from the checkpoint's train_batch_size at this world size, so that
// a resume at another world size folds the same micro-batches (elastic resume, as DeepSpeed
// keeps train_batch_size fixed and changes the accumulation).
Status adopt_checkpoint_settings(TrainFlags& flags) {
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  std::string warning;
  CheckpointManifest manifest;
  ZEROSIM_RETURN_IF_ERROR(resolve_checkpoint_tag(disk, flags.resume_directory, "latest", &warning, &manifest,
                                                 flags.fallback_on_invalid).status());
  if (flags.model_option == nullptr || flags.model_option->count() == 0) {
    flags.model_text = model_spec_to_string(manifest.model);
  }
  if (flags.seed_option == nullptr || flags.seed_option->count() == 0) flags.seed = manifest.seed;
  // The frozen set too, unless --freeze gives this run's own.
  if (flags.frozen_parameters.empty()) {
    for (const ParameterInfo& parameter : manifest.parameters) {
      if (!parameter.requires_grad) flags.frozen_parameters.push_back(parameter.name);
    }
  }
  const bool token_file_given = flags.token_file_option != nullptr && flags.token_file_option->count() > 0;
  if ((flags.dataset_size_option == nullptr || flags.dataset_size_option->count() == 0) && !token_file_given) {
    flags.dataset_size = manifest.data.sample_count;
    flags.token_file = manifest.data.token_file;
  }
  RunSettings& settings = flags.config.settings;
  bool accumulation_given = false, micro_batch_given = false;
  for (const auto& [flag, option] : flags.config.setting_options) {
    if (flag == "--gradient-accumulation-steps") accumulation_given = option->count() > 0;
    if (flag == "--micro-batch-size") micro_batch_given = option->count() > 0;
  }
  if (!micro_batch_given) settings.micro_batch_size = manifest.micro_batch_size;
  if (!accumulation_given) {
    const int64_t per_step = settings.micro_batch_size * settings.world_size;
    if (per_step <= 0 || manifest.train_batch_size % per_step != 0) {
      return invalid_argument("the checkpoint's train_batch_size " + std::to_string(manifest.train_batch_size) +
                              " is not a multiple of micro batch " + std::to_string(settings.micro_batch_size) +
                              " x world size " + std::to_string(settings.world_size) +
                              "; choose a world size that divides it, or give --gradient-accumulation-steps");
    }
    settings.gradient_accumulation_steps = manifest.train_batch_size / per_step;
    flags.config.derived_flags.push_back("--gradient-accumulation-steps");
    settings.derived_from.emplace_back(
        "--gradient-accumulation-steps",
        "the checkpoint's train_batch_size " + std::to_string(manifest.train_batch_size) + " / (micro batch " +
            std::to_string(settings.micro_batch_size) + " x " + std::to_string(settings.world_size) + " ranks)");
    if (!micro_batch_given) {
      flags.config.derived_flags.push_back("--micro-batch-size");
      settings.derived_from.emplace_back("--micro-batch-size", "the checkpoint's micro batch " +
                                                                   std::to_string(manifest.micro_batch_size));
    }
  }
  return Status();
}

}  // namespace

Result<LaunchedRank> launched_rank_from_environment() {
  // The first of `names` that is set, at least `minimum`; `absent` when none is set, else an
  // error naming them.
  auto read = [](std::initializer_list<const char*> names, const char* what, std::optional<int> absent = std::nullopt,
                 long minimum = 0) -> Result<int> {
    for (const char* name : names) {
      const char* value = std::getenv(name);
      if (value == nullptr) continue;
      char* end = nullptr;
      errno = 0;
      const long parsed = std::strtol(value, &end, 10);
      if (errno != 0 || end == value || *end != '\0' || parsed < minimum || parsed > 1 << 20) {
        return invalid_argument(std::string(name) + "=" + value +
                                (minimum > 0 ? ": expected a positive integer" : ": expected a non-negative integer"));
      }
      return static_cast<int>(parsed);
    }
    if (absent) return *absent;
    std::string listed;
    for (const char* name : names) listed += std::string(listed.empty() ? "" : ", ") + name;
    return invalid_argument(std::string("--rendezvous: the ") + what + " is not in the environment (none of " + listed +
                            " is set): start each process with a launcher (torchrun-style, mpirun, srun) or set them");
  };
  LaunchedRank launched;
  ZEROSIM_ASSIGN_OR_RETURN(launched.rank, read({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, "rank"));
  ZEROSIM_ASSIGN_OR_RETURN(launched.world_size,
                           read({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, "world size"));
  ZEROSIM_ASSIGN_OR_RETURN(launched.local_rank,
                           read({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, "local rank"));
  ZEROSIM_ASSIGN_OR_RETURN(launched.local_world_size,
                           read({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, "local world size",
                                /*absent=*/0, /*minimum=*/1));
  if (launched.world_size < 1 || launched.rank >= launched.world_size) {
    return invalid_argument("--rendezvous: rank " + std::to_string(launched.rank) + " is not a rank of a world of " +
                            std::to_string(launched.world_size));
  }
  if (launched.local_world_size > launched.world_size ||
      (launched.local_world_size > 0 && launched.local_rank >= launched.local_world_size)) {
    return invalid_argument("--rendezvous: local rank " + std::to_string(launched.local_rank) + " of " +
                            std::to_string(launched.local_world_size) + " ranks on this host, in a world of " +
                            std::to_string(launched.world_size) + ": the launcher's variables disagree");
  }
  return launched;
}

namespace {

// What a SIGTERM or SIGINT handler may touch: lock-free atomics. The run reads the flag after
// each step (CheckpointPlan::stop_requested); the signal's number goes into the message.
std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void request_stop(int signal_number) {
  if (stop_requested.load()) {
    // The second signal: the user means it. The default action, at once.
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  // The number before the flag: whoever sees the flag finds the number.
  stop_signal.store(signal_number);
  stop_requested.store(true);
}

// Installs request_stop for SIGTERM and SIGINT; the previous handlers come back on destruction.
class StopOnSignals {
 public:
  StopOnSignals() {
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    installed_ = ::sigaction(SIGTERM, &action, &previous_term_) == 0 && ::sigaction(SIGINT, &action, &previous_int_) == 0;
  }
  ~StopOnSignals() {
    if (!installed_) return;
    ::sigaction(SIGTERM, &previous_term_, nullptr);
    ::sigaction(SIGINT, &previous_int_, nullptr);
  }
  bool installed() const { return installed_; }

 private:
  bool installed_ = false;
  struct sigaction previous_term_ {}, previous_int_ {};
};

// The launch (one process, or one rank of several: --mpi, --rendezvous) and the flags that only
// make sense together, settled before anything is read: the world size from the launcher, the
// checkpoint's settings on --resume. Returns the exit code of a refusal, already explained.
std::optional<int> settle_launch_and_flags(const MpiLaunch* mpi, TrainFlags& flags,
                                           std::optional<LaunchedRank>& launched) {
  if (mpi != nullptr) {
    launched = LaunchedRank{mpi->rank(), mpi->world_size(), mpi->local_rank(), mpi->local_world_size()};
  } else if (!flags.rendezvous_path.empty()) {
    Result<LaunchedRank> from_environment = launched_rank_from_environment();
    if (!from_environment.ok()) {
      std::fprintf(stderr, "zerosim: %s\n", from_environment.status().message().c_str());
      return 2;
    }
    launched = *from_environment;
  }
  if (launched) {
    // The launcher decides the world size; a --world-size that contradicts it is a mistake.
    const bool world_size_given = flags.world_size_option != nullptr && flags.world_size_option->count() > 0;
    if (world_size_given && flags.config.settings.world_size != launched->world_size) {
      std::fprintf(stderr, "zerosim: rank %d: --world-size %lld but %s started %d processes\n", launched->rank,
                   static_cast<long long>(flags.config.settings.world_size),
                   mpi != nullptr ? "MPI" : "the launcher (WORLD_SIZE)", launched->world_size);
      return 2;
    }
    flags.config.settings.world_size = launched->world_size;
  }
  if (!flags.resume_directory.empty()) {
    Status adopted = adopt_checkpoint_settings(flags);
    if (!adopted.ok()) {
      std::fprintf(stderr, "zerosim: --resume %s: %s\n", flags.resume_directory.c_str(), adopted.to_string().c_str());
      return exit_code_for(adopted);
    }
  }
  if (flags.exclude_frozen_parameters && flags.frozen_parameters.empty()) {
    std::fprintf(stderr, "zerosim: --exclude-frozen-parameters: no parameter is frozen (give --freeze NAME, or resume "
                 "from a checkpoint that froze some)\n");
    return 2;
  }
  if (!flags.export_directory.empty() && flags.model_text.rfind("gpt:", 0) == 0) {
    std::fprintf(stderr, "zerosim: --export-run with a transformer: the reference scripts (scripts/torch_reference/) "
                 "train the MLP; `zerosim gpt-check-export` and python/check_gpt_in_torch.py check the transformer\n");
    return 2;
  }
  if (!flags.export_directory.empty() && !flags.frozen_parameters.empty()) {
    std::fprintf(stderr, "zerosim: --export-run with --freeze: the reference scripts (scripts/torch_reference/) train "
                 "every parameter, so the export would not describe this run\n");
    return 2;
  }
  return std::nullopt;
}

// The transformer's token file: scanned once (every token in the vocabulary, and the digest that
// names its contents in the checkpoints), its path made absolute, its windows the dataset.
std::optional<int> use_token_file(const TrainFlags& flags, const ModelSpec& model, TrainingOptions& options) {
  if (!model.is_transformer()) {
    std::fprintf(stderr, "zerosim: --dataset %s: token files are for a transformer (--model gpt:...); the MLP "
                 "trains on synthetic samples\n", flags.token_file.c_str());
    return 2;
  }
  // One pass over the whole file before training: every token in the vocabulary, and the
  // digest that names its contents in the checkpoints (a resume compares it, not the path).
  // The path is made absolute, so that a resume from another directory finds it.
  std::error_code absolute_error;
  const std::string path = std::filesystem::absolute(flags.token_file, absolute_error).lexically_normal().string();
  const std::string origin = flags.resume_directory.empty() || (flags.token_file_option != nullptr &&
                                                                flags.token_file_option->count() > 0)
                                 ? "--dataset"
                                 : "the checkpoint's token file";
  RealEnv token_env;
  Result<TokenFileSummary> summary =
      TokenDataset::scan_file(absolute_error ? flags.token_file : path, model.gpt->vocab, *token_env.env().disk);
  if (!summary.ok()) {
    std::fprintf(stderr, "zerosim: %s: %s\n", origin.c_str(), summary.status().to_string().c_str());
    return exit_code_for(summary.status());
  }
  const int64_t token_count = static_cast<int64_t>(summary->size_bytes / 2);
  if (token_count < options.data.feature_count + 1) {
    std::fprintf(stderr, "zerosim: %s: %s holds %lld tokens, fewer than one window of %lld + 1\n", origin.c_str(),
                 path.c_str(), static_cast<long long>(token_count), static_cast<long long>(options.data.feature_count));
    return 2;
  }
  options.data.token_file = absolute_error ? flags.token_file : path;
  options.data.token_file_xxh3_128 = summary->xxh3_128;
  options.data.sample_count = (token_count - 1) / options.data.feature_count;
  return std::nullopt;
}

// --run-id, or by default a digest of everything that determines the run, so that a rerun of the
// same command finds the same swap directory and another run does not.
std::string run_id_for(const TrainFlags& flags, const TrainingOptions& options) {
  if (!flags.run_id.empty()) return flags.run_id;
  std::string identity = options.config.resolved.dump() + "|" + flags.model_text + "|" +
                               std::to_string(flags.seed) + "|" + std::to_string(options.world_size) + "|" +
                               std::to_string(flags.dataset_size) +
                               (flags.token_file.empty() ? "" : "|" + flags.token_file);
  for (const std::string& name : flags.frozen_parameters) identity += "|frozen:" + name;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "run-%016llx",
                static_cast<unsigned long long>(XXH3_64bits(identity.data(), identity.size())));
  return buffer;
}

// The run's options from the flags: the config (its warnings printed), the model, the device, the
// data, the swap directory's name and this machine's memory. Returns the exit code of a refusal.
std::optional<int> training_options_from(const TrainFlags& flags, TrainingOptions& options) {
  Result<ResolvedConfig> config = load_config(flags.config);
  if (!config.ok()) {
    std::fprintf(stderr, "zerosim: %s\n", config.status().to_string().c_str());
    return exit_code_for(config.status());
  }
  Result<ModelSpec> model = parse_model_spec(flags.model_text);
  if (!model.ok()) {
    std::fprintf(stderr, "zerosim: --model: %s\n", model.status().to_string().c_str());
    return 2;
  }
  // The "auto" resolutions are expected on every run of an HF-style config: count them here,
  // `zerosim config check` lists them one by one.
  size_t auto_fills = 0;
  for (const std::string& warning : config->warnings) {
    if (warning.find("is \"auto\"") != std::string::npos) {
      ++auto_fills;
      continue;
    }
    std::fprintf(stderr, "zerosim: warning: %s\n", warning.c_str());
  }
  if (auto_fills > 0) {
    std::fprintf(stderr, "zerosim: note: %zu \"auto\" values filled from the run settings "
                 "(`zerosim config check` lists them)\n", auto_fills);
  }
  if (config->zero.stage != 3) {
    std::fprintf(stderr, "zerosim: note: zero_optimization.stage is %lld; zerosim partitions as stage 3 "
                 "(the results are the same bits)\n", static_cast<long long>(config->zero.stage));
  }
  Result<ComputeDevice> compute = compute_device_named(flags.device);
  if (!compute.ok()) {
    std::fprintf(stderr, "zerosim: %s\n", compute.status().to_string().c_str());
    return exit_code_for(compute.status());
  }
  options.compute = std::move(compute).value();
  options.config = std::move(config).value();
  options.model = *model;
  options.seed = flags.seed;
  options.frozen_parameters = flags.frozen_parameters;
  options.world_size = static_cast<int>(flags.config.settings.world_size);
  options.threads_per_rank = flags.threads_per_rank;
  options.data = dataset_for_model(*model, flags.dataset_size, flags.seed);
  if (!flags.token_file.empty()) {
    if (const std::optional<int> refused = use_token_file(flags, *model, options)) return refused;
  }
  options.run_id = run_id_for(flags, options);

  // Refuse up front what cannot fit this machine's memory (the estimate is in the error).
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) options.memory_limit_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  return std::nullopt;
}

// Saves and the resume from the flags; a signal handler, when installed, stops the run after a
// step (and saves it with --save-on-signal); with ZEROSIM_STATE_LOG set, `zerosim exec`'s state
// log gets one line per step, after its save.
CheckpointPlan checkpoint_plan_from(const TrainFlags& flags, bool stop_handler_installed) {
  CheckpointPlan checkpoints;
  checkpoints.save_directory = flags.save_directory;
  checkpoints.save_every_steps = flags.save_every_steps;
  checkpoints.save_options.exclude_frozen_parameters = flags.exclude_frozen_parameters;
  checkpoints.resume_directory = flags.resume_directory;
  checkpoints.resume_load.optimizer_states = flags.load_optimizer_states;
  checkpoints.resume_load.lr_scheduler_states = flags.load_lr_scheduler_states;
  checkpoints.resume_load.module_only = flags.load_module_only;
  checkpoints.resume_load.fallback_on_invalid = flags.fallback_on_invalid;
  if (stop_handler_installed) checkpoints.stop_requested = &stop_requested;
  checkpoints.save_on_stop = flags.save_on_signal;
  // zerosim exec's state log (scenarios/exec_harness.h): one line per step, after its save.
  const char* state_log_path = std::getenv("ZEROSIM_STATE_LOG");
  if (state_log_path != nullptr && state_log_path[0] != '\0') {
    const std::string path = state_log_path;
    checkpoints.after_step = [path](const StepRecord& record, const ComponentDigests& digests, bool saved) {
      nlohmann::json line = {{"step", record.step},
                             {"loss", static_cast<double>(record.loss)},
                             {"components",
                              {{"params", digests.params}, {"master", digests.master}, {"exp_avg", digests.exp_avg},
                               {"exp_avg_sq", digests.exp_avg_sq}, {"counters", digests.counters},
                               {"scheduler", digests.scheduler}, {"loss_scaler", digests.loss_scaler},
                               {"rng", digests.rng}, {"data", digests.data}}}};
      if (!digests.buffers.empty()) line["components"]["buffers"] = digests.buffers;
      if (saved) line["checkpoint"] = true;
      std::ofstream log(path, std::ios::app);
      log << line.dump() << "\n";
    };
  }
  return checkpoints;
}

// The --defect names, switched on in this run. Returns the exit code of a refusal.
std::optional<int> defects_from(const TrainFlags& flags, DefectSet& defects) {
  for (const std::string& name : flags.defect_names) {
    const std::optional<Defect> defect = defect_from_name(name);
    if (!defect) {
      std::fprintf(stderr, "zerosim: --defect %s: unknown defect (zerosim defects lists them)\n", name.c_str());
      return 2;
    }
    defects.enable(*defect);
  }
  return std::nullopt;
}

// The run: W ranks on this process's threads, or this process as one rank of a launch (NCCL
// between the processes, staged through this rank's GPU; a second communicator for async saves).
Result<TrainingRun> run_ranks(const TrainFlags& flags, const TrainingOptions& options, const CheckpointPlan& checkpoints,
                              const DefectSet& defects, const std::optional<LaunchedRank>& launched,
                              const MpiLaunch* mpi, RealEnv& real_env) {
  if (!launched) {
    Env env = real_env.env();
    env.cpus_per_rank = cpus_per_rank_on_host(options.world_size);  // the ranks are this process's threads
    if (!flags.defect_names.empty()) env.defects = &defects;
    return run_training(options, flags.steps, env, checkpoints);
  }
  // One rank of several processes: NCCL between the processes, staged through this rank's
  // GPU (the partitions live in host memory); a second communicator for async saves.
  Env env = real_env.env();
  env.cpus_per_rank = cpus_per_rank_on_host(launched->local_world_size);  // 0 when the launcher does not say
  auto connect = [&](const std::string& path) -> Result<std::unique_ptr<Comm>> {
    std::unique_ptr<Comm> device_comm;
    if (mpi != nullptr) {
      const NcclIdShare share = [mpi](const Status& prepared, std::span<const std::byte> id_on_rank0) {
        return mpi->share_from_rank0(prepared, id_on_rank0);
      };
      ZEROSIM_ASSIGN_OR_RETURN(device_comm, create_nccl_process_comm(
                                                NcclProcess{launched->rank, launched->world_size, launched->local_rank}, share));
    } else {
      NcclRendezvous rendezvous{launched->rank, launched->world_size, launched->local_rank, path};
      ZEROSIM_ASSIGN_OR_RETURN(device_comm, create_nccl_process_comm(rendezvous, *env.disk, *env.clock));
    }
    return make_host_staged_comm(std::move(device_comm), launched->local_rank);
  };
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<Comm> training_comm, connect(flags.rendezvous_path));
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<Comm> checkpoint_comm, connect(flags.rendezvous_path + ".checkpoint"));
  return run_training_rank(options, flags.steps, *training_comm, checkpoint_comm.get(), env, checkpoints);
}

// What a run stopped by a signal says: where it stopped, and whether that step was saved.
void print_stopped_run(const TrainFlags& flags, const TrainingRun& run) {
  const int signal_number = stop_signal.load();
  const int64_t stopped_at = run.steps.empty() ? 0 : run.steps.back().step;
  std::string saved;
  if (run.last_saved_step == stopped_at && !flags.save_directory.empty()) {
    saved = "saved " + flags.save_directory + "/" + checkpoint_tag_for_step(stopped_at) + "; resume with --resume " +
            flags.save_directory;
  } else if (flags.save_directory.empty()) {
    saved = "not saved (no --save-dir)";
  } else {
    saved = "not saved (--save-on-signal saves on a signal)" +
            (run.last_saved_step >= 0 ? "; the last checkpoint is " + flags.save_directory + "/" +
                                             checkpoint_tag_for_step(run.last_saved_step)
                                       : std::string());
  }
  std::fprintf(stderr, "zerosim: %s: stopped after step %lld of %lld; %s\n",
               signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "signal",
               static_cast<long long>(stopped_at), static_cast<long long>(flags.steps), saved.c_str());
}

// The run's notes, then the steps and digests (a table, or one JSON object with --json).
void print_run(const TrainFlags& flags, const TrainingOptions& options, const TrainingRun& run) {
  for (const std::string& note : run.notes) {
    // Checkpoint notes carry their own "note:" or "warning:".
    const bool labelled = note.rfind("note:", 0) == 0 || note.rfind("warning:", 0) == 0;
    std::fprintf(stderr, "zerosim: %s%s\n", labelled ? "" : "note: ", note.c_str());
  }
  if (flags.json) {
    nlohmann::json output;
    output["steps"] = nlohmann::json::array();
    for (const StepRecord& step : run.steps) output["steps"].push_back(step_to_json(step));
    output["state_digest"] = run.digests.state;
    output["component_digests"] = {{"params", run.digests.params},       {"master", run.digests.master},
                                   {"exp_avg", run.digests.exp_avg},     {"exp_avg_sq", run.digests.exp_avg_sq},
                                   {"counters", run.digests.counters},   {"scheduler", run.digests.scheduler},
                                   {"loss_scaler", run.digests.loss_scaler}, {"rng", run.digests.rng},
                                   {"data", run.digests.data}};
    if (!run.digests.buffers.empty()) output["component_digests"]["buffers"] = run.digests.buffers;
    output["world_size"] = options.world_size;
    output["device"] = options.compute.name;
    output["precision"] = precision_name(options.config.precision);
    output["model"] = flags.model_text;
    std::printf("%s\n", output.dump(2).c_str());
    return;
  }
  std::printf("zerosim train: model %s, world size %d on %s, %s, train_batch_size %lld = %lld x %lld x %d\n",
              flags.model_text.c_str(), options.world_size, options.compute.name.c_str(),
              precision_name(options.config.precision),
              static_cast<long long>(options.config.train_batch_size),
              static_cast<long long>(options.config.micro_batch_size),
              static_cast<long long>(options.config.gradient_accumulation_steps), options.world_size);
  std::printf("%6s  %10s  %12s  %10s  %12s  %s\n", "step", "loss", "lr", "loss_scale", "grad_norm", "skipped");
  for (const StepRecord& step : run.steps) {
    std::printf("%6lld  %10.6f  %12.6e  %10.0f  %12.6e  %s\n", static_cast<long long>(step.step), step.loss,
                step.learning_rate, step.loss_scale, step.grad_norm, step.skipped ? "yes" : "no");
  }
  std::printf("state digest %s\n", run.digests.state.c_str());
}

// The train command, as one process of a run or as one rank of a launch (`mpi` set for --mpi).
int train(const TrainFlags& given_flags, const MpiLaunch* mpi) {
  // First, so that a signal during the setup stops the run after its first step too.
  const StopOnSignals stop_on_signals;
  TrainFlags flags = given_flags;
  std::optional<LaunchedRank> launched;
  if (const std::optional<int> refused = settle_launch_and_flags(mpi, flags, launched)) return *refused;
  TrainingOptions options;
  if (const std::optional<int> refused = training_options_from(flags, options)) return *refused;
  // An export needs the state at the last step (tools/export_run.h).
  if (!flags.export_directory.empty()) options.capture_state_at_step = flags.steps;
  const CheckpointPlan checkpoints = checkpoint_plan_from(flags, stop_on_signals.installed());
  DefectSet defects;
  if (const std::optional<int> refused = defects_from(flags, defects)) return *refused;
  RealEnv real_env;
  Result<TrainingRun> run = run_ranks(flags, options, checkpoints, defects, launched, mpi, real_env);
  if (!run.ok()) {
    std::fprintf(stderr, "zerosim: training failed: %s\n", run.status().to_string().c_str());
    return exit_code_for(run.status());
  }
  // Stopped by a signal: the conventional exit status 128 + the signal's number.
  const int exit_code = run->stopped_early ? 128 + stop_signal.load() : 0;
  if (launched && launched->rank != 0) return exit_code;  // rank 0 reports the run
  if (run->stopped_early) print_stopped_run(flags, *run);
  if (!flags.export_directory.empty()) {
    if (run->stopped_early) {
      std::fprintf(stderr, "zerosim: --export-run: not written, the run stopped before step %lld\n",
                   static_cast<long long>(flags.steps));
    } else if (const Status exported = export_run(options, flags.steps, *run, real_env.env(), flags.export_directory);
               !exported.ok()) {
      std::fprintf(stderr, "zerosim: %s\n", exported.to_string().c_str());
      return exit_code_for(exported);
    }
  }
  print_run(flags, options, *run);
  return exit_code;
}

}  // namespace

int run_train_command(const TrainFlags& flags) {
  if (!flags.mpi) return train(flags, nullptr);
  Result<std::unique_ptr<MpiLaunch>> mpi = MpiLaunch::initialize();
  if (!mpi.ok()) {
    std::fprintf(stderr, "zerosim: --mpi: %s\n", mpi.status().to_string().c_str());
    return exit_code_for(mpi.status());
  }
  const int exit_code = train(flags, mpi->get());
  // A rank that failed alone may leave its peers waiting in NCCL or MPI: the job stops. When
  // the ranks learned of a failure together, or a signal stopped them all after the same step
  // (exit status 128 + the signal), each has said why and all end normally.
  if (exit_code != 0 && exit_code < 128 && !(*mpi)->failed_together()) (*mpi)->abort_job(exit_code);
  return exit_code;
}

void add_train_commands(CLI::App& app, TrainCommands& commands) {
  TrainFlags& train_flags = commands.train_flags;
  CLI::App* train = app.add_subcommand("train", "Run the ZeRO-3 core for K steps and print the per-step table");
  commands.train = train;
  add_config_flags(*train, train_flags.config, /*config_is_positional=*/false);
  train->add_option("--steps", train_flags.steps, "Optimizer steps to run")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  train_flags.seed_option = train->add_option("--seed", train_flags.seed, "Seed of parameters, data and shuffling");
  train_flags.model_option =
      train->add_option("--model", train_flags.model_text,
                        "MLP layer widths (input,hidden...,classes) or a GPT-2-style transformer "
                        "gpt:layers=L,embd=E,heads=H,vocab=V,block=B");
  train->add_option("--save-dir", train_flags.save_directory,
                    "Save checkpoints here (<dir>/global_step<N>, and <dir>/latest): at the end, and with --save-every");
  train->add_flag("--save-on-signal", train_flags.save_on_signal,
                  "On SIGTERM or SIGINT, save the step that finishes into --save-dir before exiting (without it, "
                  "the run stops after that step unsaved); a second signal exits at once")
      ->needs(train->get_option("--save-dir"));
  train->add_option("--freeze", train_flags.frozen_parameters,
                    "Freeze this parameter (repeatable; e.g. layers.0.weight): no gradient, no optimizer state, "
                    "never updated, as requires_grad=False; a checkpoint holds its value alone. With --resume, the "
                    "checkpoint's frozen set unless --freeze is given");
  train->add_flag("--exclude-frozen-parameters", train_flags.exclude_frozen_parameters,
                  "Saves leave the frozen parameters' values out, as DeepSpeed's "
                  "save_checkpoint(exclude_frozen_parameters=True); a resume takes them from the model it builds")
      ->needs(train->get_option("--save-dir"));
  train->add_option("--defect", train_flags.defect_names,
                    "Switch a named defect on in this run (repeatable; zerosim defects lists them): a planted bug for "
                    "zerosim exec to find in a real process");
  train->add_option("--save-every", train_flags.save_every_steps, "Save every S steps (needs --save-dir)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  train->add_option("--resume", train_flags.resume_directory,
                    "Resume from this checkpoint directory's latest tag and continue to --steps (model, seed, "
                    "dataset size and global batch default to the checkpoint's)");
  CLI::Option* resume_option = train->get_option("--resume");
  train->add_option("--load-optimizer-states", train_flags.load_optimizer_states,
                    "With --resume: false loads the parameters, counters and scheduler and starts a fresh optimizer "
                    "(moments, Adam's step count, loss scaler, lr), as DeepSpeed's load_optimizer_states=False")
      ->needs(resume_option);
  train->add_option("--load-lr-scheduler-states", train_flags.load_lr_scheduler_states,
                    "With --resume: false starts the LR schedule fresh (the first update keeps the checkpoint's lr), "
                    "as DeepSpeed's load_lr_scheduler_states=False")
      ->needs(resume_option);
  train->add_flag("--fallback-on-invalid", train_flags.fallback_on_invalid,
                  "With --resume: pass over a committed checkpoint that fails validation (a flipped counter, a "
                  "broken seal) and load the newest complete older one, with a warning naming it; without it, "
                  "such a checkpoint is an error (exit 2)")
      ->needs(resume_option);
  CLI::Option* module_only_flag =
      train->add_flag("--load-module-only", train_flags.load_module_only,
                      "With --resume: load only the parameters; optimizer, loss scaler, scheduler, counters and data "
                      "position start fresh (the run counts --steps from 0), as DeepSpeed's load_module_only=True")
          ->needs(resume_option);
  module_only_flag->excludes(train->get_option("--load-optimizer-states"))
      ->excludes(train->get_option("--load-lr-scheduler-states"));
  train_flags.dataset_size_option = train->add_option("--dataset-size", train_flags.dataset_size, "Samples in the synthetic dataset")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  train_flags.token_file_option =
      train->add_option("--dataset", train_flags.token_file,
                        "Transformer only: a nanoGPT-style file of little-endian uint16 tokens (train.bin); samples "
                        "are its windows of block tokens (default: a synthetic token stream)")
          ->excludes(train_flags.dataset_size_option);
  train->add_option("--run-id", train_flags.run_id,
                    "Name of this run's swap directory under nvme_path (default: a digest of the run's settings)");
  train->add_flag("--json", train_flags.json, "Print one JSON object: steps, state_digest, component_digests");
  add_device_flag(*train, train_flags.device);
  train->add_option("--threads-per-rank", train_flags.threads_per_rank,
                    "On the CPU, threads each rank's compute may use (products, attention, loss, AdamW, the "
                    "gradient norm), its own among them (default 1; the results are the same bits for any count)")
      ->check(CLI::Range(1, 1024));
  train->add_option("--rendezvous", train_flags.rendezvous_path,
                    "Run as one rank of several processes (one GPU each; rank, world size and GPU from the "
                    "launcher's RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, or SLURM_*), NCCL between them, "
                    "the NCCL id passed through FILE on a path every process sees (must not exist at start)");
  CLI::Option* mpi_flag = train->add_flag(
      "--mpi", train_flags.mpi,
      "Run as one rank of an MPI job (mpirun -n N, or srun with MPI): rank, world size and GPU (the rank on "
      "its host) from MPI, which only shares the NCCL id; NCCL between the processes. A rank that fails stops "
      "the job (MPI_Abort)");
  mpi_flag->excludes(train->get_option("--rendezvous"));
  train->add_option("--export-run", train_flags.export_directory,
                    "After the run, write its settings, initial weights, batches, per-step records and final state "
                    "into this new or empty directory, for a reference implementation (scripts/torch_reference/)")
      ->excludes(train->get_option("--resume"))
      ->excludes(train->get_option("--rendezvous"))
      ->excludes(mpi_flag);
  train_flags.world_size_option = train->get_option("--world-size");

  CLI::App* config = app.add_subcommand("config", "Inspect DeepSpeed configs");
  config->require_subcommand(1);
  commands.check = config->add_subcommand("check", "Resolve a DeepSpeed config: exit 0 and print it, or exit 2 with the error");
  add_config_flags(*commands.check, commands.check_flags, /*config_is_positional=*/true);
}

std::optional<int> run_train_commands(const TrainCommands& commands) {
  if (commands.train->parsed()) return run_train_command(commands.train_flags);
  if (commands.check->parsed()) return run_config_check_command(commands.check_flags);
  return std::nullopt;
}

}  // namespace zerosim
