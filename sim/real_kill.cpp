#include "sim/real_kill.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace zerosim {

namespace {

// In the child: SIGKILL itself at the target point.
class KillAtPoint final : public CrashPointHook {
 public:
  explicit KillAtPoint(CrashPoint target) : target_(std::move(target)) {}
  void hit(std::string_view site, int rank) override {
    std::lock_guard lock(mutex_);
    const int64_t occurrence = ++counts_[{std::string(site), rank}];
    if (site == target_.site && rank == target_.rank && occurrence == target_.occurrence) ::kill(::getpid(), SIGKILL);
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
  CrashPoint target_;
};

TrainingOptions with_nvme_under(TrainingOptions options, const std::string& directory) {
  for (OffloadConfig* offload : {&options.config.zero.offload_optimizer, &options.config.zero.offload_param}) {
    if (offload->device == OffloadDevice::kNvme) offload->nvme_path = directory + "/nvme";
  }
  return options;
}

}  // namespace

Result<ExplorationResult> explore_with_real_kills(const CrashScenario& scenario, const std::string& directory) {
  // The points, the reference and the validation come from the simulated exploration's own
  // first phase (bound 2 keeps it short): the same scenario, so the same crash points.
  //
  // On --device cuda only the killed children compute on the GPU: CUDA cannot be used in a child
  // forked after its parent initialized it, so the parent's reference and resumes run on the
  // CPU, whose bits every backend promises (compute_backend.h). A GPU-written checkpoint is
  // then resumed on the CPU and compared with the CPU reference: a stricter check, not a looser.
  CrashScenario discovery = scenario;
  discovery.crash_state_bound = 2;
  discovery.options.compute = ComputeDevice{};
  ZEROSIM_ASSIGN_OR_RETURN(ExplorationResult simulated, explore_save_crashes(discovery));
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(directory));

  TrainingOptions options = scenario.options;
  options.digest_every_step = true;
  options.compute = ComputeDevice{};
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, resume_options_for(scenario, "scenario"));
  resume_options.compute = ComputeDevice{};
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference,
                           run_training(with_nvme_under(options, directory + "/reference"), scenario.total_steps,
                                        real_env.env()));
  ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(directory + "/reference"));

  ExplorationResult result;
  result.reference_trace_hash = simulated.reference_trace_hash;
  CheckpointPlan saving;
  saving.save_every_steps = scenario.save_every_steps;
  saving.save_options = scenario.save_options;
  for (size_t index = 0; index < simulated.points.size(); ++index) {
    const CrashPoint& point = simulated.points[index];
    const std::string described = point.describe();
    const CrashPointTallyScope tally(result, described);
    const std::string case_directory = directory + "/case-" + std::to_string(index);
    ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(case_directory));
    ZEROSIM_RETURN_IF_ERROR(disk.create_directories(case_directory));
    saving.save_directory = case_directory + "/checkpoints";
    TrainingOptions case_options = with_nvme_under(options, case_directory);
    case_options.compute = scenario.options.compute;
    ++result.crash_points;
    ++result.crash_states;
    result.explored_points.push_back(described);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) return io_error("fork for real-kill case " + described + " failed");
    if (child == 0) {
      // The child: the same run on real files, killed at the point (or exit 3 if it never is).
      RealEnv child_env;
      KillAtPoint killer(point);
      Env env = child_env.env();
      env.crash_points = &killer;
      const Result<TrainingRun> run = run_training(case_options, scenario.explored_save_step, env, saving);
      ::_exit(run.ok() ? 3 : 4);
    }
    int wait_status = 0;
    if (::waitpid(child, &wait_status, 0) != child) return io_error("waitpid for real-kill case " + described);
    auto fail = [&](const std::string& reason) {
      ++result.failed;
      if (result.failures.size() < 8) result.failures.push_back(CrashCaseFailure{described, "SIGKILL", reason});
    };
    if (!WIFSIGNALED(wait_status) || WTERMSIG(wait_status) != SIGKILL) {
      fail("the child was not killed at the point (exit status " + std::to_string(wait_status) + ")");
      continue;
    }
    CheckpointPlan resuming;
    resuming.resume_directory = saving.save_directory;
    const Result<TrainingRun> resumed =
        run_training(with_nvme_under(resume_options, case_directory + "/resumed"), scenario.total_steps,
                     real_env.env(), resuming);
    if (!resumed.ok()) {
      if (resumed.status().code() == StatusCode::kNotFound) ++result.refused;
      else fail("resume failed: " + resumed.status().to_string());
      continue;
    }
    const int64_t resumed_at = scenario.total_steps - static_cast<int64_t>(resumed->steps.size());
    const std::string divergence = first_divergence(reference, *resumed, resumed_at);
    if (resumed_at != previous_save_step(scenario) && resumed_at != scenario.explored_save_step) {
      fail("resumed at step " + std::to_string(resumed_at) + ", which is neither the committed save (step " +
           std::to_string(previous_save_step(scenario)) + ") nor the explored one");
    } else if (!divergence.empty()) {
      fail("resumed at step " + std::to_string(resumed_at) + ", diverged at " + divergence);
    } else {
      ++result.passed;
      ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(case_directory));
    }
  }
  return result;
}

}  // namespace zerosim
