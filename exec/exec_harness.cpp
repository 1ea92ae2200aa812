#include "exec/exec_harness.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "exec/crash_state_model.h"
#include "exec/fs_recording.h"
#include "exec/process.h"
#include "exec/syscall_tracer.h"
#include "scenarios/scenario_file.h"
#include "sim/crash_explorer.h"

namespace zerosim {

namespace fs = std::filesystem;

int ExecResult::failed() const {
  return static_cast<int>(std::count_if(verdicts.begin(), verdicts.end(),
                                        [](const ExecCrashVerdict& v) { return !v.verdict.passed; }));
}

int64_t available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

namespace {

using WallClock = std::chrono::steady_clock;

double seconds_since(WallClock::time_point start) { return std::chrono::duration<double>(WallClock::now() - start).count(); }

std::vector<std::string> shell_command(const std::string& line) { return {"/bin/sh", "-c", line}; }

// The watched directories as absolute real paths (the tracer sees the kernel's paths).
Result<std::vector<std::string>> real_roots(const std::vector<std::string>& watch) {
  std::vector<std::string> roots;
  std::error_code error;
  for (const std::string& directory : watch) {
    if (directory.empty()) return invalid_argument("exec: --watch: an empty directory name");
    fs::path absolute = fs::absolute(directory, error);
    // The real path of the deepest existing ancestor.
    fs::path existing = absolute, rest;
    while (!fs::exists(existing, error) && existing.has_parent_path() && existing != existing.parent_path()) {
      rest = existing.filename() / rest;
      existing = existing.parent_path();
    }
    const fs::path real = fs::canonical(existing, error);
    if (error) return invalid_argument("exec: --watch " + directory + ": " + error.message());
    fs::path joined = rest.empty() ? real : real / rest;
    std::string text = joined.lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    if (text == "/") return invalid_argument("exec: --watch /: the whole file system cannot be the scratch directory");
    if (fs::exists(text, error) && !fs::is_directory(text, error)) {
      return invalid_argument("exec: --watch " + directory + ": not a directory");
    }
    for (const std::string& other : roots) {
      if (other == text || text.rfind(other + "/", 0) == 0 || other.rfind(text + "/", 0) == 0) {
        return invalid_argument("exec: --watch " + directory + ": overlaps the watched " + other);
      }
    }
    roots.push_back(text);
  }
  return roots;
}

// One crash state, built from the recording, waiting for its resume.
struct PlannedState {
  size_t index = 0;  // its place in the verdicts
  int64_t point = 0;
  int64_t state = 0;
  std::string operation;
  std::string fates;
  int64_t durable_step = -1;
  Tree tree;
};

// Builds the crash states in (point, state) order from the recording, one at a time.
class CrashStatePlanner {
 public:
  CrashStatePlanner(const ExecOptions& options, const std::vector<std::string>& roots,
                    const std::vector<const FsRecord*>& operations, const std::vector<int64_t>& durable_before,
                    std::vector<int64_t> points)
      : options_(options),
        operations_(operations),
        durable_before_(durable_before),
        points_(std::move(points)),
        replayer_(roots, options.seed) {}

  Status load(const Tree& initial) { return replayer_.load(initial); }

  // The next state, or nullopt at the end.
  Result<std::optional<PlannedState>> next() {
    while (true) {
      if (state_in_point_ < states_.size()) {
        const size_t s = state_in_point_++;
        if (options_.only_state && static_cast<int64_t>(s) != *options_.only_state) continue;
        const auto build_start = WallClock::now();
        std::unique_ptr<SimDisk> crashed = replayer_.disk().clone();
        crashed->crash(states_[s]);
        PlannedState planned;
        ZEROSIM_ASSIGN_OR_RETURN(planned.tree, snapshot_sim(*crashed, replayer_.roots()));
        build_seconds_ += seconds_since(build_start);
        ++built_;
        planned.index = next_index_++;
        planned.point = current_point_;
        planned.state = static_cast<int64_t>(s);
        planned.operation = current_point_ == 0 ? "(before the first operation)"
                                                : operations_[static_cast<size_t>(current_point_ - 1)]->describe();
        planned.fates = describe_state(pending_, states_[s]);
        planned.durable_step = durable_before_[static_cast<size_t>(current_point_)];
        return std::optional<PlannedState>(std::move(planned));
      }
      if (next_point_ >= points_.size()) return std::optional<PlannedState>();
      current_point_ = points_[next_point_++];
      while (replayed_ < current_point_) {
        ZEROSIM_RETURN_IF_ERROR(replayer_.apply(*operations_[static_cast<size_t>(replayed_)]));
        ++replayed_;
      }
      pending_ = replayer_.disk().pending_operations();
      states_ = crash_states(pending_, options_.states_per_point, options_.seed, "");
      state_in_point_ = 0;
      ++points_tried_;
    }
  }

  int64_t points_tried() const { return points_tried_; }
  double mean_build_seconds() const { return built_ > 0 ? build_seconds_ / static_cast<double>(built_) : 0; }

 private:
  const ExecOptions& options_;
  const std::vector<const FsRecord*>& operations_;
  const std::vector<int64_t>& durable_before_;
  std::vector<int64_t> points_;
  RecordingReplayer replayer_;
  size_t next_point_ = 0;
  int64_t current_point_ = 0;
  int64_t replayed_ = 0;
  std::vector<PendingOperation> pending_;
  std::vector<std::vector<CrashFate>> states_;
  size_t state_in_point_ = 0;
  size_t next_index_ = 0;
  int64_t points_tried_ = 0;
  double build_seconds_ = 0;
  int64_t built_ = 0;
};

struct ResumeRun {
  ProcessOutcome outcome;
  Result<std::vector<StateLine>> log = std::vector<StateLine>{};
};

// The environment every run of the command gets: its state log, and with --hooks the hook's
// start-up module first on PYTHONPATH.
std::map<std::string, std::string> run_environment(const ExecOptions& options, const std::string& log_path) {
  std::map<std::string, std::string> environment = {{"ZEROSIM_STATE_LOG", log_path}};
  if (!options.hooks.empty()) {
    const char* inherited = std::getenv("PYTHONPATH");
    environment["ZEROSIM_HOOKS"] = options.hooks;
    environment["PYTHONPATH"] =
        options.hooks_directory + (inherited != nullptr && inherited[0] != '\0' ? ":" + std::string(inherited) : "");
  }
  return environment;
}

// The resume of one crash state, its directories already laid out (in place, or at `slot`).
Result<ResumeRun> run_resume(const ExecOptions& options, const std::string& work, const PlannedState& planned,
                             const std::vector<BindMount>& binds) {
  const std::string prefix = work + "/resume-" + std::to_string(planned.point) + "-" + std::to_string(planned.state);
  const std::string log_path = prefix + ".state.jsonl";
  std::error_code error;
  fs::remove(log_path, error);
  ProcessSpec spec;
  spec.argv = options.resume_command.empty() ? options.command : shell_command(options.resume_command);
  spec.environment = run_environment(options, log_path);
  spec.unset = {"ZEROSIM_CAPTURE_STEP", "ZEROSIM_CAPTURE_FILE"};
  spec.log_prefix = prefix;
  spec.timeout_seconds = options.timeout_seconds;
  spec.binds = binds;
  ResumeRun run;
  ZEROSIM_ASSIGN_OR_RETURN(run.outcome, run_process(spec));
  Result<std::string> text = read_text_file(log_path, "the resume's state log");
  if (text.ok()) run.log = parse_state_log(*text, log_path);
  return run;
}

ExecCrashVerdict verdict_of(const ExecOptions& options, const std::vector<StateLine>& reference, const PlannedState& planned,
                            const ResumeRun& run, int64_t* diverged_step) {
  ExecCrashVerdict crash;
  crash.point = planned.point;
  crash.state = planned.state;
  crash.operation = planned.operation;
  crash.fates = planned.fates;
  crash.verdict = judge_resume(reference, planned.durable_step, run.outcome, run.log, options.components, diverged_step);
  crash.verdict.name = "crash after operation " + std::to_string(planned.point) + " (" + planned.operation + "), state " +
                       std::to_string(planned.state);
  crash.verdict.crash = "power loss after " + planned.operation + "; " + planned.fates;
  crash.verdict.seed = options.seed;
  return crash;
}

// Job slot `slot`'s copies of the watched directories (under work/slots/), and the binds that
// show each copy at its watched path to a process of that slot.
struct Slot {
  std::vector<std::string> destinations;
  std::vector<BindMount> binds;
};

Slot job_slot(const std::string& work, const std::vector<std::string>& roots, int64_t slot) {
  Slot result{roots, {}};
  for (size_t i = 0; i < roots.size(); ++i) {
    result.destinations[i] = work + "/slots/" + std::to_string(slot) + "/" + std::to_string(i);
    result.binds.push_back({result.destinations[i], roots[i]});
  }
  return result;
}

// A bind needs its target: a tree without one of the watched directories runs in place.
bool has_every_root(const Tree& tree, const std::vector<std::string>& roots) {
  return std::all_of(roots.begin(), roots.end(), [&](const std::string& root) { return tree.has_directory(root); });
}

// One more run of the command that writes its state at `step` to `file` (the program does so
// when it supports ZEROSIM_CAPTURE_STEP; silence is not an error), from the directories `tree`.
struct CaptureRun {
  const Tree* tree;
  std::vector<std::string> argv;
  std::string prefix;
  std::string file;
  int64_t step;
};

Status run_capture(const ExecOptions& options, const CaptureRun& capture, const std::vector<BindMount>& binds) {
  ProcessSpec spec;
  spec.argv = capture.argv;
  spec.environment = run_environment(options, capture.prefix + ".state.jsonl");
  spec.environment["ZEROSIM_CAPTURE_STEP"] = std::to_string(capture.step);
  spec.environment["ZEROSIM_CAPTURE_FILE"] = capture.file;
  spec.log_prefix = capture.prefix;
  spec.timeout_seconds = options.timeout_seconds;
  spec.binds = binds;
  return run_process(spec).status();
}

// Runs the captures `jobs` at a time, each in its own slot bound over the watched directories as
// the resumes are (a run is as long as a resume: one after the other, a few diverged states of a
// program that takes a minute to start would cost more than every resume together). A capture
// whose tree lacks a watched directory cannot be bound and runs in place afterwards.
Status run_captures(const ExecOptions& options, const std::string& work, const std::vector<std::string>& roots, bool parallel,
                    const std::vector<CaptureRun>& captures) {
  std::vector<const CaptureRun*> in_place;
  if (parallel) {
    std::error_code error;
    for (const std::string& root : roots) {
      fs::create_directories(root, error);
      if (error) return io_error("exec: cannot create " + root + ": " + error.message());
    }
    std::mutex mutex;
    size_t next = 0;
    Status failure;
    auto worker = [&](int64_t slot_index) {
      const Slot slot = job_slot(work, roots, slot_index);
      while (true) {
        const CaptureRun* capture = nullptr;
        {
          std::lock_guard lock(mutex);
          if (!failure.ok() || next == captures.size()) return;
          capture = &captures[next++];
          if (!has_every_root(*capture->tree, roots)) {
            in_place.push_back(capture);
            continue;
          }
        }
        Status ran = lay_out(*capture->tree, roots, slot.destinations);
        if (ran.ok()) ran = run_capture(options, *capture, slot.binds);
        if (!ran.ok()) {
          std::lock_guard lock(mutex);
          if (failure.ok()) failure = ran;
          return;
        }
      }
    };
    std::vector<std::thread> workers;
    const int64_t slots = std::min<int64_t>(options.jobs, static_cast<int64_t>(captures.size()));
    for (int64_t slot = 0; slot < slots; ++slot) workers.emplace_back(worker, slot);
    for (std::thread& thread : workers) thread.join();
    fs::remove_all(work + "/slots", error);
    ZEROSIM_RETURN_IF_ERROR(failure);
  } else {
    for (const CaptureRun& capture : captures) in_place.push_back(&capture);
  }
  for (const CaptureRun* capture : in_place) {
    ZEROSIM_RETURN_IF_ERROR(lay_out(*capture->tree, roots, roots));
    ZEROSIM_RETURN_IF_ERROR(run_capture(options, *capture, {}));
  }
  return Status();
}

// Names the first differing element of each diverged step: the uninterrupted run and the resume
// once more, both capturing that step, then the two captures compared.
Status add_first_differing_elements(const ExecOptions& options, const std::string& work, const std::vector<std::string>& roots,
                                    bool parallel, const Tree& initial,
                                    const std::vector<std::pair<PlannedState, int64_t>>& diverged,
                                    std::vector<std::optional<ExecCrashVerdict>>* verdicts) {
  auto reference_capture = [&](int64_t step) { return work + "/reference-capture-" + std::to_string(step) + ".safetensors"; };
  auto resume_prefix = [&](const PlannedState& planned) {
    return work + "/resume-" + std::to_string(planned.point) + "-" + std::to_string(planned.state);
  };
  std::vector<CaptureRun> captures;
  std::vector<int64_t> reference_steps;
  for (const auto& [planned, step] : diverged) {
    if (std::find(reference_steps.begin(), reference_steps.end(), step) == reference_steps.end()) {
      reference_steps.push_back(step);
      captures.push_back({&initial, options.command, work + "/reference-capture-" + std::to_string(step), reference_capture(step), step});
    }
    captures.push_back({&planned.tree,
                        options.resume_command.empty() ? options.command : shell_command(options.resume_command),
                        resume_prefix(planned) + "-capture", resume_prefix(planned) + ".capture.safetensors", step});
  }
  std::error_code error;
  for (const CaptureRun& capture : captures) fs::remove(capture.file, error);
  ZEROSIM_RETURN_IF_ERROR(run_captures(options, work, roots, parallel, captures));
  for (const auto& [planned, step] : diverged) {
    const std::string resume_capture = resume_prefix(planned) + ".capture.safetensors";
    if (!fs::exists(reference_capture(step), error) || !fs::exists(resume_capture, error)) continue;
    Result<std::string> element = first_differing_element(reference_capture(step), resume_capture);
    std::string& diagnosis = (*verdicts)[planned.index]->verdict.diagnosis;
    diagnosis += element.ok() ? (element->empty() ? "" : "; first differing element: " + *element)
                              : "; the captures could not be compared: " + element.status().message();
  }
  return Status();
}

}  // namespace

Result<ExecResult> run_exec(const ExecOptions& options) {
  if (options.command.empty()) return invalid_argument("exec: no command (give it after --)");
  if (options.watch.empty()) return invalid_argument("exec: no --watch directory");
  if (options.states_per_point < 1) return invalid_argument("exec: --states-per-point must be >= 1");
  if (options.crash_points < 0) return invalid_argument("exec: --crash-points must be >= 0");
  if (options.jobs < 1) return invalid_argument("exec: --jobs must be >= 1");
  if (!(options.timeout_seconds > 0)) return invalid_argument("exec: --timeout must be > 0 seconds");
  if (!options.hooks.empty()) {
    if (options.hooks != "torch") return invalid_argument("exec: --hooks " + options.hooks + ": the hooks are: torch");
    std::error_code missing;
    if (!fs::is_regular_file(options.hooks_directory + "/sitecustomize.py", missing)) {
      return failed_precondition("exec: --hooks torch: no sitecustomize.py in " + options.hooks_directory +
                                 " (this zerosim's Python helpers are missing)");
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> roots, real_roots(options.watch));
  std::error_code error;
  fs::create_directories(options.work_directory, error);
  if (error) return io_error("exec: cannot create " + options.work_directory + ": " + error.message());
  const std::string work = fs::canonical(options.work_directory).string();
  for (const std::string& root : roots) {
    if (work == root || work.rfind(root + "/", 0) == 0 || root.rfind(work + "/", 0) == 0) {
      return invalid_argument("exec: the work directory " + work + " and the watched " + root + " overlap");
    }
  }
  const bool parallel = options.jobs > 1 && !options.only_point;
  if (parallel) {
    if (Status namespaces = check_private_namespaces(); !namespaces.ok()) {
      return invalid_argument("exec: --jobs " + std::to_string(options.jobs) + ": " + namespaces.message());
    }
  }

  // What the watched directories hold now: the starting state of every run, restored at the end.
  ZEROSIM_ASSIGN_OR_RETURN(Tree initial, snapshot_real(roots));
  struct RestoreAtEnd {
    const std::vector<std::string>& roots;
    const Tree& initial;
    ~RestoreAtEnd() { (void)lay_out(initial, roots, roots); }
  } restore_at_end{roots, initial};

  // 1. Record.
  ExecResult result;
  result.jobs = parallel ? options.jobs : 1;
  result.recording_path = work + "/recording.zsr";
  const std::string reference_log = work + "/reference.state.jsonl";
  fs::remove(reference_log, error);
  TraceOptions trace;
  trace.process.argv = options.command;
  trace.process.environment = run_environment(options, reference_log);
  trace.process.unset = {"ZEROSIM_CAPTURE_STEP", "ZEROSIM_CAPTURE_FILE"};
  trace.process.log_prefix = work + "/reference";
  trace.process.timeout_seconds = options.timeout_seconds;
  trace.watched = roots;
  trace.state_log = reference_log;
  trace.recording_path = result.recording_path;
  const auto reference_start = WallClock::now();
  ZEROSIM_ASSIGN_OR_RETURN(TraceResult traced, trace_command(trace));
  result.reference_seconds = seconds_since(reference_start);
  result.processes = traced.processes;
  if (!traced.outcome.completed()) {
    return failed_precondition("exec: the uninterrupted run failed (" + traced.outcome.describe() +
                               (traced.outcome.stderr_tail.empty() ? "" : ": " + traced.outcome.stderr_tail) +
                               "); its output is in " + work + "/reference.stderr");
  }
  if (!traced.unmodelled.empty()) {
    std::string list;
    for (const std::string& what : traced.unmodelled) list += "\n  " + what;
    return failed_precondition("exec: cannot judge this command: it did what the recording cannot stand for, so any "
                               "crash state built from it would be a guess:" + list);
  }
  Result<std::string> reference_text = read_text_file(reference_log, "the state log");
  if (reference_text.ok()) {
    ZEROSIM_ASSIGN_OR_RETURN(result.reference, parse_state_log(*reference_text, reference_log));
  }
  result.state_log = !result.reference.empty();
  if (!options.components.only.empty() || !options.components.ignored.empty()) {
    if (!result.state_log) {
      return invalid_argument("exec: --components and --ignore-component choose among the state log's components, "
                              "but the uninterrupted run wrote no state log (ZEROSIM_STATE_LOG)");
    }
    ZEROSIM_RETURN_IF_ERROR(options.components.check_against(result.reference.front()));
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<FsRecord> records, read_fs_recording(result.recording_path));
  result.records = static_cast<int64_t>(records.size());

  // 2. The recording proves itself.
  ZEROSIM_ASSIGN_OR_RETURN(Tree left, snapshot_real(roots));
  ZEROSIM_RETURN_IF_ERROR(verify_recording(records, roots, initial, left));

  // 3. The crash points (after each operation that changes the model) and, for each, the newest
  // step whose "checkpoint": true line came before it.
  std::vector<const FsRecord*> operations;
  std::vector<int64_t> durable_before;  // durable_before[k]: after the first k operations
  std::vector<int64_t> save_points;     // where each save had returned
  int64_t durable = -1;
  durable_before.push_back(durable);
  for (const FsRecord& record : records) {
    if (record.kind == FsRecordKind::kStateLine) {
      Result<std::vector<StateLine>> lines = parse_state_log(record.data, "the recorded state log");
      if (lines.ok()) {
        for (const StateLine& line : *lines) {
          if (line.checkpoint) {
            durable = std::max(durable, line.step);
            save_points.push_back(static_cast<int64_t>(operations.size()));
          }
        }
      }
      durable_before.back() = durable;
      continue;
    }
    if (!changes_model(record.kind)) continue;
    operations.push_back(&record);
    durable_before.push_back(durable);
  }
  result.operations = static_cast<int64_t>(operations.size());
  if (operations.empty()) {
    return failed_precondition("exec: nothing to judge: the command changed nothing under the watched directories (" +
                               std::to_string(result.records) + " record(s)); is --watch the directory it saves to?");
  }
  std::vector<int64_t> points;
  for (int64_t k = 0; k <= result.operations; ++k) points.push_back(k);
  if (options.only_point) {
    if (*options.only_point < 0 || *options.only_point > result.operations) {
      return invalid_argument("exec: crash point " + std::to_string(*options.only_point) + " is outside 0.." +
                              std::to_string(result.operations));
    }
    points = {*options.only_point};
  } else if (options.crash_points > 0 && options.crash_points < static_cast<int64_t>(points.size())) {
    std::mt19937_64 random(options.seed);
    std::shuffle(points.begin(), points.end(), random);
    points.resize(static_cast<size_t>(options.crash_points));
  }
  if (options.at_saves && !options.only_point) points.insert(points.end(), save_points.begin(), save_points.end());
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  CrashStatePlanner planner(options, roots, operations, durable_before, points);
  ZEROSIM_RETURN_IF_ERROR(planner.load(initial));

  // 4. Resume each state: `jobs` workers, each with its own copy of the directories bound over
  // the watched ones (or, with one job, the watched directories themselves).
  const auto resume_start = WallClock::now();
  std::vector<std::optional<ExecCrashVerdict>> verdicts;
  std::vector<std::pair<PlannedState, int64_t>> diverged;  // for the captures, in order
  std::vector<PlannedState> in_place;                      // states without a watched root
  std::vector<PlannedState> to_confirm;                    // failed beside others: resumed alone again
  std::mutex mutex;
  Status failure;
  auto record_verdict = [&](PlannedState&& planned, const ResumeRun& run, bool confirm_failure) {
    int64_t diverged_step = -1;
    ExecCrashVerdict crash = verdict_of(options, result.reference, planned, run, &diverged_step);
    std::lock_guard lock(mutex);
    if (confirm_failure && !crash.verdict.passed && !run.outcome.completed()) {
      // Resumes side by side share whatever lies outside the watched directories (a lock, a
      // swap directory, a port): that shows as a resume that refuses or crashes, so such a
      // failure counts only once it fails alone. Lost work and divergence are read from the
      // resume's own state log against the recording.
      to_confirm.push_back(std::move(planned));
      return;
    }
    if (verdicts.size() <= planned.index) verdicts.resize(planned.index + 1);
    verdicts[planned.index] = std::move(crash);
    if (!verdicts[planned.index]->verdict.passed && diverged_step > 0) diverged.emplace_back(std::move(planned), diverged_step);
  };
  auto worker = [&](int64_t slot_index) {
    // With one job the watched directories themselves, unbound.
    const Slot slot = parallel ? job_slot(work, roots, slot_index) : Slot{roots, {}};
    while (true) {
      std::optional<PlannedState> planned;
      {
        std::lock_guard lock(mutex);
        if (!failure.ok()) return;
        Result<std::optional<PlannedState>> next = planner.next();
        if (!next.ok()) {
          failure = next.status();
          return;
        }
        if (!next->has_value()) return;
        planned = std::move(**next);
        if (parallel && !has_every_root(planned->tree, roots)) {
          in_place.push_back(std::move(*planned));  // a bind needs the root to exist
          continue;
        }
      }
      Status laid = lay_out(planned->tree, roots, slot.destinations);
      Result<ResumeRun> run = laid.ok() ? run_resume(options, work, *planned, slot.binds) : Result<ResumeRun>(laid);
      if (!run.ok()) {
        std::lock_guard lock(mutex);
        if (failure.ok()) failure = run.status();
        return;
      }
      record_verdict(std::move(*planned), *run, parallel);
    }
  };
  if (parallel) {
    // The bind targets must exist while the workers run (restored at the end).
    for (const std::string& root : roots) {
      fs::create_directories(root, error);
      if (error) return io_error("exec: cannot create " + root + ": " + error.message());
    }
    std::vector<std::thread> workers;
    for (int64_t slot = 0; slot < options.jobs; ++slot) workers.emplace_back(worker, slot);
    for (std::thread& thread : workers) thread.join();
    fs::remove_all(work + "/slots", error);
  } else {
    worker(0);
  }
  ZEROSIM_RETURN_IF_ERROR(failure);
  std::sort(to_confirm.begin(), to_confirm.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  for (std::vector<PlannedState>* alone : {&in_place, &to_confirm}) {
    for (PlannedState& planned : *alone) {
      ZEROSIM_RETURN_IF_ERROR(lay_out(planned.tree, roots, roots));
      ZEROSIM_ASSIGN_OR_RETURN(ResumeRun run, run_resume(options, work, planned, {}));
      record_verdict(std::move(planned), run, false);
    }
  }
  for (const PlannedState& planned : to_confirm) {
    if (verdicts[planned.index]->verdict.passed) ++result.passed_alone;
  }
  std::sort(diverged.begin(), diverged.end(), [](const auto& a, const auto& b) { return a.first.index < b.first.index; });
  ZEROSIM_RETURN_IF_ERROR(add_first_differing_elements(options, work, roots, parallel, initial, diverged, &verdicts));
  result.resume_seconds = seconds_since(resume_start);
  for (std::optional<ExecCrashVerdict>& verdict : verdicts) {
    if (verdict) result.verdicts.push_back(std::move(*verdict));
  }
  result.crash_points = planner.points_tried();
  result.crash_states = static_cast<int64_t>(result.verdicts.size());
  result.mean_build_state_seconds = planner.mean_build_seconds();
  return result;
}

}  // namespace zerosim
