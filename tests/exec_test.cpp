// zerosim exec (exec/): the state-log contract, the recording format and its self-check, the
// system-call tracer on writers that a C library interposer cannot see (raw system calls, a
// static binary, forked and exec'd children) and on what it cannot model (a shared mapping,
// io_uring), parallel resumes in mount namespaces, verdicts without a state log, and the
// example trainer's four checkpoint protocols as a user runs them: the flawed ones are found,
// with the operation named, the correct one passes, and a failure's replay file reproduces it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "exec/crash_state_model.h"
#include "exec/exec_harness.h"
#include "exec/fs_recording.h"
#include "tests/shell_command.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

TEST(ExecStateLog, ParsesTheContractAndNamesWhatIsWrong) {
  Result<std::vector<StateLine>> lines = parse_state_log(
      "{\"step\": 1, \"loss\": 0.5, \"components\": {\"w\": \"ab\"}}\n"
      "{\"step\": 2, \"loss\": 0.25, \"components\": {\"w\": \"cd\", \"m\": \"ef\"}, \"checkpoint\": true}\n",
      "log");
  ASSERT_TRUE(lines.ok()) << lines.status().to_string();
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[1].step, 2);
  EXPECT_EQ((*lines)[1].loss, 0.25);
  EXPECT_TRUE((*lines)[1].checkpoint);
  EXPECT_FALSE((*lines)[0].checkpoint);
  EXPECT_EQ((*lines)[1].components.at("m"), "ef");
  const std::pair<const char*, const char*> bad[] = {
      {"{\"loss\": 1, \"components\": {}}", "log line 1: \"step\": expected an integer"},
      {"{\"step\": 1, \"components\": {}}", "log line 1: \"loss\": expected a number"},
      {"{\"step\": 1, \"loss\": 1}", "log line 1: \"components\": expected an object"},
      {"{\"step\": 1, \"loss\": 1, \"components\": {\"w\": 3}}", "log line 1: components.w: expected a string"},
      {"{\"step\": 1, \"loss\": 1, \"components\": {}, \"checkpoint\": 1}", "\"checkpoint\": expected true or false"},
      {"not json", "log line 1: not a JSON object"},
  };
  for (const auto& [text, expected] : bad) {
    Result<std::vector<StateLine>> refused = parse_state_log(text, "log");
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_NE(refused.status().message().find(expected), std::string::npos) << refused.status().to_string();
  }
}

// The judge of one resume, on its own: a resume one save behind the newest that returned lost
// work; one that skips a step diverges at the skip, whatever the steps it logged; one that
// starts at the newest save and logs every step is identical.
TEST(ExecJudge, OneSaveBehindIsLostWorkAndASkippedStepIsADivergence) {
  std::vector<StateLine> reference;
  for (int64_t step = 1; step <= 6; ++step) {
    StateLine line;
    line.step = step;
    line.loss = 1.0 / static_cast<double>(step);
    line.loss_text = std::to_string(line.loss);
    line.components["w"] = "digest-" + std::to_string(step);
    line.checkpoint = step % 2 == 0;
    reference.push_back(line);
  }
  auto from = [&](std::vector<int64_t> steps) {
    std::vector<StateLine> lines;
    for (int64_t step : steps) lines.push_back(reference[static_cast<size_t>(step - 1)]);
    return Result<std::vector<StateLine>>(lines);
  };
  ProcessOutcome completed;
  completed.exit_code = 0;
  int64_t diverged = 0;
  // The save of step 4 had returned; the resume started from step 2's.
  const ScenarioVerdict behind = judge_resume(reference, 4, completed, from({3, 4, 5, 6}), {}, &diverged);
  EXPECT_FALSE(behind.passed);
  EXPECT_EQ(behind.resumed_at, 2);
  EXPECT_EQ(behind.diagnosis.rfind("lost work: step 4's save had returned", 0), 0u) << behind.diagnosis;
  // From step 2's save (the newest that returned), but step 4 never logged.
  const ScenarioVerdict skipped = judge_resume(reference, 2, completed, from({3, 5, 6}), {}, &diverged);
  EXPECT_FALSE(skipped.passed);
  EXPECT_NE(skipped.diagnosis.find("the resume logged step 5 after step 3"), std::string::npos) << skipped.diagnosis;
  const ScenarioVerdict whole = judge_resume(reference, 4, completed, from({5, 6}), {}, &diverged);
  EXPECT_TRUE(whole.passed) << whole.diagnosis;
  EXPECT_EQ(whole.resumed_at, 4);
}

// A loss that differs before any component does is a divergence of that step, with the step
// set for a capture (which names the element); a component left out is not judged, and the
// selection refuses names the state log does not have.
TEST(ExecJudge, ALossThatDiffersFirstAsksForACaptureAndAnIgnoredComponentIsNotJudged) {
  std::vector<StateLine> reference;
  for (int64_t step = 1; step <= 4; ++step) {
    StateLine line;
    line.step = step;
    line.loss = 2.0 / static_cast<double>(step);
    line.loss_text = std::to_string(line.loss);
    line.components["params"] = "p-" + std::to_string(step);
    line.components["rng_python"] = "r-" + std::to_string(step);
    reference.push_back(line);
  }
  ProcessOutcome completed;
  completed.exit_code = 0;
  std::vector<StateLine> resumed(reference.begin() + 2, reference.end());
  resumed[0].loss = 0.25;
  resumed[0].loss_text = "0.25";
  int64_t diverged = 0;
  const ScenarioVerdict loss_first = judge_resume(reference, 2, completed, resumed, {}, &diverged);
  EXPECT_FALSE(loss_first.passed);
  EXPECT_NE(loss_first.diagnosis.find("step 3: loss: expected"), std::string::npos) << loss_first.diagnosis;
  EXPECT_NE(loss_first.diagnosis.find("; every judged component agrees at that step"), std::string::npos)
      << loss_first.diagnosis;
  EXPECT_EQ(diverged, 3);
  // The loss first, and the state behind it named: every judged component that differs there.
  resumed[0].components["params"] = "other";
  resumed[0].components.erase("rng_python");
  const ScenarioVerdict loss_and_state = judge_resume(reference, 2, completed, resumed, {}, &diverged);
  EXPECT_NE(loss_and_state.diagnosis.find("step 3: loss: expected"), std::string::npos) << loss_and_state.diagnosis;
  EXPECT_NE(loss_and_state.diagnosis.find("; components differing at that step: params, rng_python"), std::string::npos)
      << loss_and_state.diagnosis;
  ComponentSelection params_ignored;
  params_ignored.ignored = {"params"};
  const ScenarioVerdict one_judged = judge_resume(reference, 2, completed, resumed, params_ignored, &diverged);
  EXPECT_NE(one_judged.diagnosis.find("; components differing at that step: rng_python"), std::string::npos)
      << one_judged.diagnosis;

  // A generator the program never seeds differs in every process: judged, it fails the resume;
  // ignored, the resume passes.
  resumed = std::vector<StateLine>(reference.begin() + 2, reference.end());
  for (StateLine& line : resumed) line.components["rng_python"] = "fresh-" + std::to_string(line.step);
  diverged = 0;
  const ScenarioVerdict judged = judge_resume(reference, 2, completed, resumed, {}, &diverged);
  EXPECT_FALSE(judged.passed);
  EXPECT_NE(judged.diagnosis.find("rng_python differs"), std::string::npos) << judged.diagnosis;
  ComponentSelection without_python;
  without_python.ignored = {"rng_python"};
  diverged = 0;
  const ScenarioVerdict ignored = judge_resume(reference, 2, completed, resumed, without_python, &diverged);
  EXPECT_TRUE(ignored.passed) << ignored.diagnosis;
  EXPECT_EQ(diverged, 0);
  ComponentSelection only_params;
  only_params.only = {"params"};
  EXPECT_TRUE(judge_resume(reference, 2, completed, resumed, only_params, &diverged).passed);
  EXPECT_EQ(without_python.describe(), "not judged: rng_python");
  EXPECT_EQ(only_params.describe(), "judged: params");

  EXPECT_TRUE(without_python.check_against(reference.front()).ok());
  ComponentSelection unknown;
  unknown.ignored = {"rng"};
  const Status refused = unknown.check_against(reference.front());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("--ignore-component rng: the state log has no component rng (its components: params, "
                                   "rng_python)"),
            std::string::npos)
      << refused.message();
  ComponentSelection both;
  both.only = {"params"};
  both.ignored = {"params"};
  EXPECT_EQ(both.check_against(reference.front()).code(), StatusCode::kInvalidArgument);
}

TEST(ExecRecording, RoundTripsAndRefusesATruncatedFileNamingTheOffset) {
  TestDirectory directory;
  FsRecord write;
  write.kind = FsRecordKind::kWrite;
  write.pid = 7;
  write.fd = 3;
  write.offset_bytes = 4096;
  write.path = "/ckpt/a";
  write.data = std::string("\0bytes\n", 7);
  FsRecord rename;
  rename.kind = FsRecordKind::kRename;
  rename.path = "/ckpt/a.tmp";
  rename.second_path = "/ckpt/a";
  const std::string bytes = encode_fs_record(write) + encode_fs_record(rename);
  const std::string path = directory.path() + "/recording.zsr";
  std::ofstream(path, std::ios::binary) << bytes;
  Result<std::vector<FsRecord>> read = read_fs_recording(path);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].data, write.data);
  EXPECT_EQ((*read)[0].describe(), "write /ckpt/a [4096, 4103)");
  EXPECT_EQ((*read)[1].describe(), "rename /ckpt/a.tmp -> /ckpt/a");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
  Result<std::vector<FsRecord>> truncated = read_fs_recording(path);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  const std::string at = "at byte " + std::to_string(encode_fs_record(write).size()) + ": a truncated record body";
  EXPECT_NE(truncated.status().message().find(at), std::string::npos) << truncated.status().to_string();
}

struct ExecRun {
  ShellResult shell;
  std::string work;
};

// Few steps and crash states: each resume is a Python process (a third of a second on CI's VM).
ExecRun exec_trainer(const TestDirectory& directory, const std::string& protocol, int steps) {
  const std::string checkpoints = directory.path() + "/ckpt-" + protocol;
  const std::string work = directory.path() + "/work-" + protocol;
  ExecRun run;
  run.work = work;
  run.shell = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --states-per-point 3 --watch " + checkpoints + " --work-dir " + work +
                                " -- python3 " + ZEROSIM_SOURCE_DIR + "/examples/exec/trainer.py --ckpt " + checkpoints +
                                " --protocol " + protocol + " --steps " + std::to_string(steps) + " --save-every 2 2>&1");
  return run;
}

bool has_line_with(const std::string& output, const std::vector<std::string>& parts) {
  size_t at = 0;
  while (at < output.size()) {
    size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(at, end - at);
    bool all = true;
    for (const std::string& part : parts) all = all && line.find(part) != std::string::npos;
    if (all) return true;
    at = end + 1;
  }
  return false;
}

TEST(Exec, TheCorrectProtocolPassesEveryCrashState) {
  TestDirectory directory;
  const ExecRun run = exec_trainer(directory, "correct", 4);
  EXPECT_EQ(run.shell.exit_code, 0) << run.shell.output;
  EXPECT_TRUE(has_line_with(run.shell.output, {"crash state(s):", "passed, 0 failed"})) << run.shell.output;
  EXPECT_FALSE(has_line_with(run.shell.output, {"FAIL"})) << run.shell.output;
  // The watched directory is left as it was before the run (it did not exist).
  EXPECT_FALSE(std::filesystem::exists(directory.path() + "/ckpt-correct")) << "exec did not restore the watched directory";
}

// Python's global generator: a program that never seeds it draws a new stream in every process,
// so it is not reported and cannot fail a resume; one that seeds it and does not restore its
// state on resume is found, unless the user leaves that component out (and the report says so).
TEST(Exec, AnUnseededGeneratorIsNotJudgedAndASeededOneThatIsNotRestoredIsFound) {
  TestDirectory directory;
  auto exec = [&](const std::string& name, const std::string& rng, const std::string& exec_flags) {
    const std::string checkpoints = directory.path() + "/ckpt-" + name;
    return run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --states-per-point 1 --crash-points 4 " + exec_flags +
                             " --watch " + checkpoints + " --work-dir " + directory.path() + "/work-" + name +
                             " -- python3 " + ZEROSIM_SOURCE_DIR + "/examples/exec/trainer.py --ckpt " + checkpoints +
                             " --protocol correct --steps 4 --save-every 2 --rng " + rng + " 2>&1");
  };
  const ShellResult unseeded = exec("unseeded", "unseeded", "");
  EXPECT_EQ(unseeded.exit_code, 0) << unseeded.output;
  EXPECT_FALSE(has_line_with(unseeded.output, {"FAIL"})) << unseeded.output;
  const ShellResult not_restored = exec("seeded", "seeded_not_restored", "");
  EXPECT_EQ(not_restored.exit_code, 1) << not_restored.output;
  EXPECT_TRUE(has_line_with(not_restored.output, {"rng_python differs"})) << not_restored.output;
  const ShellResult ignored = exec("ignored", "seeded_not_restored", "--ignore-component rng_python");
  EXPECT_EQ(ignored.exit_code, 0) << ignored.output;
  EXPECT_TRUE(has_line_with(ignored.output, {"state-log components not judged: rng_python"})) << ignored.output;
  const ShellResult unknown = exec("unknown", "unseeded", "--ignore-component rng");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(has_line_with(unknown.output, {"--ignore-component rng: the state log has no component rng"})) << unknown.output;
}

// --hooks torch loads zerosim's start-up module into every Python process of the command: a
// program that never imports torch runs as it would without it (its own state log judged), and
// the hook's environment reaches the program. An unknown hook is refused.
TEST(Exec, TheTorchHookLeavesAProgramWithoutTorchAsItIs) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  const ShellResult run = run_shell_command(
      std::string(ZEROSIM_CLI_PATH) + " exec --hooks torch --states-per-point 1 --crash-points 3 --watch " + checkpoints +
      " --work-dir " + directory.path() + "/work -- python3 " + ZEROSIM_SOURCE_DIR + "/examples/exec/trainer.py --ckpt " +
      checkpoints + " --protocol correct --steps 4 2>&1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"crash state(s):", "passed, 0 failed"})) << run.output;
  const ShellResult environment = run_shell_command(
      std::string(ZEROSIM_CLI_PATH) + " exec --hooks torch --states-per-point 1 --watch " + checkpoints + " --work-dir " +
      directory.path() + "/work2 -- python3 -c \"import os, sys; os.makedirs('" + checkpoints +
      "', exist_ok=True); open('" + directory.path() + "/marker', 'w').write(os.environ['ZEROSIM_HOOKS'] + ' ' + "
      "str('sitecustomize' in sys.modules)); open('" + checkpoints + "/x', 'w').write('x')\" 2>&1");
  EXPECT_EQ(environment.exit_code, 0) << environment.output;
  std::ifstream marker(directory.path() + "/marker");
  std::string seen((std::istreambuf_iterator<char>(marker)), std::istreambuf_iterator<char>());
  EXPECT_EQ(seen, "torch True");
  const ShellResult unknown = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --hooks jax --watch " + checkpoints +
                                                " -- true 2>&1");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--hooks"), std::string::npos) << unknown.output;
}

// The torch hook's log of a loop of 4 steps saving every 2: one line a step, numbered by the
// optimizer's step count, "checkpoint" on the saved steps, the optimizer's components and torch's
// generator; no rng_python (the loops never seed Python's random: it would differ in every process).
void expect_four_steps_saved_every_two(const std::string& path) {
  Result<std::string> log = read_text_file(path, "the state log");
  ASSERT_TRUE(log.ok()) << log.status().to_string();
  Result<std::vector<StateLine>> lines = parse_state_log(*log, "reference");
  ASSERT_TRUE(lines.ok()) << lines.status().to_string();
  ASSERT_EQ(lines->size(), 4u) << *log;
  for (size_t i = 0; i < lines->size(); ++i) {
    const StateLine& line = (*lines)[i];
    EXPECT_EQ(line.step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(line.checkpoint, line.step % 2 == 0) << "step " << line.step;
    EXPECT_EQ(line.components.count("rng_python"), 0u) << *log;
    for (const char* component : {"params", "optimizer", "scheduler", "rng_torch"}) {
      EXPECT_EQ(line.components.count(component), 1u) << component << " at step " << line.step;
    }
  }
}

// The torch hook's protocol, on the test double of torch (tests/data/fake_torch: CI has no
// PyTorch; the hook runs against PyTorch itself on the GPU machine). A loop that never mentions
// zerosim gets a state log: one line per optimizer step, numbered by the optimizer's own step
// count (so a resume continues the numbering), "checkpoint": true on the steps whose save
// returned. Atomic saves pass every crash state; saves in place are found; a rank other than 0
// writes nothing.
TEST(Exec, TheTorchHookLogsAnUneditedLoopAndItsSaves) {
  TestDirectory directory;
  const std::string fake_torch = std::string(ZEROSIM_SOURCE_DIR) + "/tests/data/fake_torch";
  auto exec = [&](const std::string& protocol, const std::string& environment) {
    const std::string checkpoints = directory.path() + "/ckpt-" + protocol;
    return run_shell_command("PYTHONPATH=" + fake_torch + " " + environment + " " + ZEROSIM_CLI_PATH +
                             " exec --hooks torch --states-per-point 2 --watch " + checkpoints + " --work-dir " +
                             directory.path() + "/work-" + protocol + " -- python3 " + fake_torch + "/train.py " +
                             checkpoints + " " + protocol + " 4 2>&1");
  };
  const ShellResult atomic = exec("atomic", "");
  EXPECT_EQ(atomic.exit_code, 0) << atomic.output;
  EXPECT_TRUE(has_line_with(atomic.output, {"crash state(s):", "passed, 0 failed"})) << atomic.output;
  EXPECT_TRUE(has_line_with(atomic.output, {"resumed at step 2, identical to step 4"})) << atomic.output;
  expect_four_steps_saved_every_two(directory.path() + "/work-atomic/reference.state.jsonl");
  const ShellResult in_place = exec("in_place", "");
  EXPECT_EQ(in_place.exit_code, 1) << in_place.output;
  EXPECT_TRUE(has_line_with(in_place.output, {"FAIL", "the resume refused", "EOFError"})) << in_place.output;
  const ShellResult rank_one = exec("rank1", "RANK=1");
  EXPECT_TRUE(has_line_with(rank_one.output, {"judged without a state log"})) << rank_one.output;
}

// A python3 that imports torch: python3 on the PATH, else Debian's /usr/bin/python3 (where
// python3-torch installs); "" when neither does.
std::string python_with_torch() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (run_shell_command(std::string(python) + " -c 'import torch' > /dev/null 2>&1").exit_code == 0) return python;
  }
  return "";
}

// The torch hook against a real PyTorch (CI: Debian's python3-torch, torch 1.13, which predates
// the optimizer's global step hooks and DCP; the GPU machine: PyTorch 2.x). The unedited loop of
// examples/exec/plain_torch_loop.py: saves written in place are found (a torn file refused, a
// returned save lost), the temporary file, fsync, rename and directory fsync pass every crash
// state, and DCP's saves (where this torch has DCP) lose a returned save when the directory
// entries are dropped. Without PyTorch the test is skipped, unless ZEROSIM_REQUIRE_TORCH=1 (CI
// sets it: there the skip would hide the test).
TEST(Exec, TheTorchHookOnARealPyTorchFindsInPlaceSavesAndPassesAtomicOnes) {
  const std::string python = python_with_torch();
  if (python.empty()) {
    const char* required = std::getenv("ZEROSIM_REQUIRE_TORCH");
    ASSERT_FALSE(required != nullptr && std::string(required) == "1")
        << "ZEROSIM_REQUIRE_TORCH=1 but neither python3 nor /usr/bin/python3 imports torch (apt-get install python3-torch)";
    GTEST_SKIP() << "no python3 with torch (Debian: apt-get install python3-torch)";
  }
  TestDirectory directory;
  const std::string loop = std::string(ZEROSIM_SOURCE_DIR) + "/examples/exec/plain_torch_loop.py";
  auto exec = [&](const std::string& protocol) {
    const std::string checkpoints = directory.path() + "/ckpt-" + protocol;
    return run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --hooks torch --at-saves --crash-points 4 " +
                             "--states-per-point 2 --jobs 2 --watch " + checkpoints + " --work-dir " + directory.path() +
                             "/work-" + protocol + " -- " + python + " " + loop + " --ckpt " + checkpoints +
                             " --protocol " + protocol + " --steps 4 2>&1");
  };
  const ShellResult atomic = exec("atomic");
  EXPECT_EQ(atomic.exit_code, 0) << atomic.output;
  EXPECT_TRUE(has_line_with(atomic.output, {"crash state(s):", "passed, 0 failed"})) << atomic.output;
  EXPECT_TRUE(has_line_with(atomic.output, {"PASS", "resumed at step 2, identical to step 4"})) << atomic.output;
  expect_four_steps_saved_every_two(directory.path() + "/work-atomic/reference.state.jsonl");
  const ShellResult in_place = exec("in_place");
  EXPECT_EQ(in_place.exit_code, 1) << in_place.output;
  EXPECT_TRUE(has_line_with(in_place.output, {"FAIL", "the resume refused"})) << in_place.output;
  EXPECT_TRUE(has_line_with(in_place.output, {"lost work: step"})) << in_place.output;
  if (run_shell_command(python + " -c 'import torch.distributed.checkpoint' > /dev/null 2>&1").exit_code != 0) {
    std::printf("this torch has no torch.distributed.checkpoint: its DCP case is not run\n");
    return;
  }
  const ShellResult dcp = exec("dcp");
  EXPECT_EQ(dcp.exit_code, 1) << dcp.output;
  EXPECT_TRUE(has_line_with(dcp.output, {"FAIL", "state 1", "lost work: step"})) << dcp.output;
}

TEST(Exec, ARenameWithoutItsDirectoryFsyncLosesASaveThatHadReturned) {
  TestDirectory directory;
  const ExecRun run = exec_trainer(directory, "rename_no_dir_fsync", 4);
  EXPECT_EQ(run.shell.exit_code, 1) << run.shell.output;
  // Right after the rename the program logged its checkpoint; the rename is undone.
  EXPECT_TRUE(has_line_with(run.shell.output, {"FAIL  crash after operation", "(rename ", "state.json.tmp -> ", "state.json)"}))
      << run.shell.output;
  EXPECT_TRUE(has_line_with(run.shell.output, {"lost work: step", "'s save had returned"})) << run.shell.output;
}

TEST(Exec, AnInPlaceWriteWithoutFsyncIsFoundTornOrLost) {
  TestDirectory directory;
  const ExecRun run = exec_trainer(directory, "in_place", 4);
  EXPECT_EQ(run.shell.exit_code, 1) << run.shell.output;
  EXPECT_TRUE(has_line_with(run.shell.output, {"lost work: step"})) << run.shell.output;
  // A crash state whose state.json is empty or torn: the resume cannot parse it.
  EXPECT_TRUE(has_line_with(run.shell.output, {"the resume refused: exit status 1", "JSONDecodeError"})) << run.shell.output;
}

TEST(Exec, ADeepSpeedStyleLatestWrittenWithAPlainWriteIsFoundAndTheFailureReplays) {
  TestDirectory directory;
  const ExecRun run = exec_trainer(directory, "deepspeed_latest", 2);
  EXPECT_EQ(run.shell.exit_code, 1) << run.shell.output;
  EXPECT_TRUE(has_line_with(run.shell.output, {"FAIL  crash after operation", "/latest"})) << run.shell.output;
  // The first failure's replay file runs that crash state again, with the same verdict.
  const size_t replay_at = run.shell.output.find("replay: zerosim exec replay ");
  ASSERT_NE(replay_at, std::string::npos) << run.shell.output;
  const size_t path_at = replay_at + std::string("replay: zerosim exec replay ").size();
  const std::string replay_file = run.shell.output.substr(path_at, run.shell.output.find('\n', path_at) - path_at);
  const size_t fail_at = run.shell.output.rfind("FAIL  ", replay_at);
  const std::string failure_line = run.shell.output.substr(fail_at, run.shell.output.find('\n', fail_at) - fail_at);
  const ShellResult replayed = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec replay " + replay_file + " 2>&1");
  EXPECT_EQ(replayed.exit_code, 1) << replayed.output;
  EXPECT_NE(replayed.output.find(failure_line), std::string::npos) << "expected\n" << failure_line << "\nin\n" << replayed.output;
  EXPECT_TRUE(has_line_with(replayed.output, {"1 crash state(s): 0 passed, 1 failed"})) << replayed.output;
}

TEST(Exec, BadInputIsNamed) {
  TestDirectory directory;
  const ShellResult no_watch = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec -- true 2>&1");
  EXPECT_EQ(no_watch.exit_code, 2) << no_watch.output;
  EXPECT_NE(no_watch.output.find("no --watch directory"), std::string::npos) << no_watch.output;
  const ShellResult no_command = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --watch " + directory.path() + "/c 2>&1");
  EXPECT_EQ(no_command.exit_code, 2) << no_command.output;
  EXPECT_NE(no_command.output.find("no command"), std::string::npos) << no_command.output;
  // A command that changes nothing under the watched directory: nothing to judge, exit 3.
  const ShellResult silent = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --watch " + directory.path() +
                                               "/c --work-dir " + directory.path() + "/w -- true 2>&1");
  EXPECT_EQ(silent.exit_code, 3) << silent.output;
  EXPECT_NE(silent.output.find("nothing to judge: the command changed nothing under the watched directories"),
            std::string::npos)
      << silent.output;
  const ShellResult no_jobs = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --jobs 0 --watch " +
                                                directory.path() + "/c -- true 2>&1");
  EXPECT_EQ(no_jobs.exit_code, 2) << no_jobs.output;
  EXPECT_NE(no_jobs.output.find("--jobs"), std::string::npos) << no_jobs.output;
  const ShellResult failing = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --watch " + directory.path() +
                                                "/c --work-dir " + directory.path() + "/w -- false 2>&1");
  EXPECT_EQ(failing.exit_code, 3) << failing.output;
  EXPECT_NE(failing.output.find("the uninterrupted run failed (exit status 1)"), std::string::npos) << failing.output;
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// zerosim's own engine under exec (train --save-dir, resumed with --resume when `latest`
// exists): it passes; with the commit-order defect latest_before_shards_durable (the shard is
// not fsynced before the manifest and `latest`), a crash state with the shard's write dropped
// behind a published `latest` is found. A seeded sample of 16 crash points, 2 states each.
ShellResult exec_engine(const TestDirectory& directory, const std::string& name, const std::string& extra) {
  const std::string checkpoints = directory.path() + "/" + name;
  const std::string zerosim = ZEROSIM_CLI_PATH;
#ifdef ZEROSIM_SANITIZED
  // LeakSanitizer's exit check attaches with ptrace, which a traced process cannot allow; the
  // rest of the sanitizers stay on.
  const std::string train = "env ASAN_OPTIONS=detect_leaks=0 " + zerosim + " train --steps 2 --save-every 1 --model 5,7,3" + extra;
#else
  const std::string train = zerosim + " train --steps 2 --save-every 1 --model 5,7,3" + extra;
#endif
  const std::string resume = "if [ -e " + checkpoints + "/latest ]; then " + train + " --resume " + checkpoints +
                             " --save-dir " + checkpoints + "; else " + train + " --save-dir " + checkpoints + "; fi";
  return run_shell_command(zerosim + " exec --crash-points 16 --states-per-point 2 --seed 1 --watch " + checkpoints +
                           " --work-dir " + directory.path() + "/work-" + name + " --resume-command '" + resume + "' -- " +
                           train + " --save-dir " + checkpoints + " 2>&1");
}

TEST(ExecEngine, ZerosimTrainPassesAndACommitOrderDefectIsFound) {
  TestDirectory directory;
  const ShellResult clean = exec_engine(directory, "clean", "");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_TRUE(has_line_with(clean.output, {"16 crash point(s)", "passed, 0 failed"})) << clean.output;
  const ShellResult defect = exec_engine(directory, "defect", " --defect latest_before_shards_durable");
  EXPECT_EQ(defect.exit_code, 1) << defect.output;
  EXPECT_TRUE(has_line_with(defect.output, {"drop write ", "rank-00000-of-00001.safetensors"})) << defect.output;
  EXPECT_TRUE(has_line_with(defect.output, {"the resume refused", "not a complete checkpoint"}) ||
              has_line_with(defect.output, {"lost work: step"}))
      << defect.output;
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// A resume bug in the program (the trainer's planted --bug momentum_not_restored): the
// divergence is named by step and component, then narrowed to its first element through the
// program's ZEROSIM_CAPTURE_STEP captures of both runs: in place with one job, and in the jobs'
// slots (bound over the watched directory) with several.
TEST(ExecDiagnosis, ADivergenceNamesItsFirstDifferingElement) {
  for (const std::string jobs : {"--jobs 1", "--jobs 3"}) {
    SCOPED_TRACE(jobs);
    TestDirectory directory;
    const std::string checkpoints = directory.path() + "/ckpt";
    const ShellResult run = run_shell_command(
        std::string(ZEROSIM_CLI_PATH) + " exec " + jobs + " --states-per-point 2 --watch " + checkpoints + " --work-dir " +
        directory.path() + "/work -- python3 " + ZEROSIM_SOURCE_DIR + "/examples/exec/trainer.py --ckpt " + checkpoints +
        " --protocol correct --steps 4 --bug momentum_not_restored 2>&1");
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_TRUE(has_line_with(run.output, {"resumed at step 2, diverged: step 3: momentum differs"})) << run.output;
    EXPECT_TRUE(has_line_with(run.output, {"first differing element: tensor momentum[0]: expected ", ", found "}))
        << run.output;
    EXPECT_FALSE(has_line_with(run.output, {"first differing element: tensor weights"})) << run.output;
    // Every diverged state is narrowed, not only the first (each FAIL line is followed by its
    // diagnosis line).
    auto count = [&](const std::string& text) {
      size_t found = 0;
      for (size_t at = run.output.find(text); at != std::string::npos; at = run.output.find(text, at + 1)) ++found;
      return found;
    };
    const size_t diverged = count("diverged: step 3: momentum differs");
    const size_t narrowed = count("; first differing element: tensor momentum[0]: expected ");
    EXPECT_GE(diverged, 2u) << run.output;
    EXPECT_EQ(narrowed, diverged) << run.output;
  }
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// `zerosim exec [flags] --watch DIR/ckpt` on a Python script written into the test directory
// (its body after the imports of os, sys and zerosim_state), run with `arguments`.
ShellResult exec_python_script(const TestDirectory& directory, const std::string& flags, const std::string& body,
                               const std::string& arguments) {
  const std::string script = directory.path() + "/script.py";
  std::ofstream(script) << "import os, sys\n"
                           "sys.path.insert(0, '" << ZEROSIM_SOURCE_DIR << "/python')\n"
                           "import zerosim_state\n"
                        << body;
  return run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec " + flags + " --watch " + directory.path() +
                           "/ckpt --work-dir " + directory.path() + "/work -- python3 " + script + " " + arguments +
                           " 2>&1");
}

// Weights loaded wrong: the first resumed step's loss differs before any component is compared;
// the capture of that step still names the first differing element.
TEST(ExecDiagnosis, ALossThatDiffersFirstStillNamesItsFirstDifferingElement) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  const ShellResult run = run_shell_command(
      std::string(ZEROSIM_CLI_PATH) + " exec --states-per-point 1 --crash-points 3 --watch " + checkpoints +
      " --work-dir " + directory.path() + "/work -- python3 " + ZEROSIM_SOURCE_DIR +
      "/examples/exec/trainer.py --ckpt " + checkpoints + " --protocol correct --steps 4 --bug weights_rounded_on_load 2>&1");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"diverged: step 3: loss: expected"})) << run.output;
  // After that step both tensors differ; the first by name is reported.
  EXPECT_TRUE(has_line_with(run.output, {"; first differing element: tensor momentum[0]: expected ", ", found "}))
      << run.output;
}

// Python's shutil.copyfile copies with sendfile (or copy_file_range): the tracer records the
// bytes that landed in the watched file, read back from the file itself.
TEST(ExecRecorder, SeesACopyMadeWithSendfile) {
  TestDirectory directory;
  const std::string watched = directory.path() + "/ckpt";
  const ShellResult run = exec_python_script(directory, "",
                                             "import shutil\n"
                                             "source, target = sys.argv[1], sys.argv[2]\n"
                                             "os.makedirs(os.path.dirname(target), exist_ok=True)\n"
                                             "open(source, 'wb').write(b'x' * 5000)\n"
                                             "if not os.path.exists(target):\n"
                                             "    shutil.copyfile(source, target)\n"
                                             "zerosim_state.StateLog().step(1, 0.0, {'size': str(os.path.getsize(target))})\n",
                                             directory.path() + "/source.bin " + watched + "/copy.bin");
  EXPECT_TRUE(has_line_with(run.output, {"write " + watched + "/copy.bin [0, 5000)"})) << run.output;
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// Every kind of change the tracer records, from one program: its recording replayed with every
// write kept must equal what the program left (the self-check passes: not exit 3), and the
// operations are named as recorded.
TEST(ExecTracer, EveryRecordedCallReplaysToWhatTheProgramLeft) {
  TestDirectory directory;
  const std::string watched = directory.path() + "/ckpt";
  const ShellResult run = exec_python_script(
      directory, "--jobs 1 --crash-points 2 --states-per-point 1",
      "import ctypes, shutil\n"
      "d = sys.argv[1]\n"
      "if not os.path.exists(os.path.join(d, 'done')):\n"
      "    shutil.rmtree(d, ignore_errors=True)\n"
      "    os.makedirs(os.path.join(d, 'sub'))\n"
      "    fd = os.open(os.path.join(d, 'a'), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)\n"
      "    os.write(fd, b'x' * 3000); os.pwrite(fd, b'yy', 10); os.writev(fd, [b'v1', b'v2'])\n"
      "    os.ftruncate(fd, 2000); os.posix_fallocate(fd, 0, 5000); os.fsync(fd); os.close(fd)\n"
      "    os.truncate(os.path.join(d, 'a'), 4500)\n"
      "    src = os.open(os.path.join(d, 'a'), os.O_RDONLY)\n"
      "    out = os.open(os.path.join(d, 'copy'), os.O_CREAT | os.O_WRONLY)\n"
      "    os.copy_file_range(src, out, 1000); os.sendfile(out, src, 0, 700); os.close(out); os.close(src)\n"
      "    fd = os.open(os.path.join(d, 'sync'), os.O_CREAT | os.O_WRONLY | os.O_DSYNC | os.O_APPEND)\n"
      "    os.write(fd, b'durable'); os.write(fd, b'-appended'); os.close(fd)\n"
      "    open(os.path.join(d, 'sub', 'b'), 'w').write('b')\n"
      "    os.rename(os.path.join(d, 'sub'), os.path.join(d, 'moved'))\n"
      "    libc = ctypes.CDLL(None, use_errno=True)\n"
      "    if libc.syscall(316, -100, os.path.join(d, 'copy').encode(), -100, os.path.join(d, 'sync').encode(), 2) != 0:\n"
      "        sys.exit('renameat2: %s' % os.strerror(ctypes.get_errno()))\n"
      "    os.mkdir(os.path.join(d, 'gone')); os.rmdir(os.path.join(d, 'gone'))\n"
      "    open(os.path.join(d, 'tmp'), 'w').write('t'); os.unlink(os.path.join(d, 'tmp'))\n"
      "    open(os.path.join(d, 'done'), 'w').write('1')\n"
      "    os.sync()\n"
      "zerosim_state.StateLog().step(1, 0.0, {}, checkpoint=True)\n",
      watched);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const ShellResult recording = run_shell_command("cat " + directory.path() + "/work/reference.stderr");
  EXPECT_EQ(recording.output, "");
  // The recording's records, by name, through the library's reader.
  Result<std::vector<FsRecord>> records = read_fs_recording(directory.path() + "/work/recording.zsr");
  ASSERT_TRUE(records.ok()) << records.status().to_string();
  std::string described;
  for (const FsRecord& record : *records) described += record.describe() + "\n";
  for (const std::string& expected :
       {"mkdir " + watched + "/sub", "write " + watched + "/a [10, 12)", "write " + watched + "/a [3000, 3004)",
        "truncate " + watched + "/a to 2000 bytes", "truncate " + watched + "/a to 5000 bytes",
        "truncate " + watched + "/a to 4500 bytes", "write " + watched + "/copy [0, 1000)",
        "write " + watched + "/copy [1000, 1700)", "write " + watched + "/sync [0, 7) (synchronous)",
        "write " + watched + "/sync [7, 16) (synchronous)", "rename " + watched + "/sub -> " + watched + "/moved",
        "exchange " + watched + "/copy <-> " + watched + "/sync", "rmdir " + watched + "/gone",
        "unlink " + watched + "/tmp", std::string("sync (everything)")}) {
    EXPECT_NE(described.find(expected + "\n"), std::string::npos) << expected << " not in\n" << described;
  }
}

// Two processes (a parent and the child it starts, as torchrun's ranks) write into the watched
// directory: both are recorded into the one recording (the tracer follows the child).
TEST(ExecRecorder, RecordsEveryProcessOfTheCommand) {
  TestDirectory directory;
  const std::string watched = directory.path() + "/ckpt";
  const ShellResult run = exec_python_script(directory, "--states-per-point 1",
                                             "import subprocess\n"
                                             "d = sys.argv[1]\n"
                                             "def write(rank):\n"
                                             "    with open(os.path.join(d, 'rank%d.bin' % rank), 'wb') as f:\n"
                                             "        f.write(bytes([rank]) * 700)\n"
                                             "        f.flush(); os.fsync(f.fileno())\n"
                                             "if len(sys.argv) > 2:\n"
                                             "    write(1); sys.exit(0)\n"
                                             "os.makedirs(d, exist_ok=True)\n"
                                             "write(0)\n"
                                             "subprocess.run([sys.executable, sys.argv[0], d, 'child'], check=True)\n"
                                             "zerosim_state.StateLog().step(1, 0.0, {})\n",
                                             watched);
  EXPECT_TRUE(has_line_with(run.output, {"(write " + watched + "/rank0.bin [0, 700))"})) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"(write " + watched + "/rank1.bin [0, 700))"})) << run.output;
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// The C writer (tests/exec_writers/writer.c) under exec: `protocol` through `io`, saving in
// `save_in`; a few steps and crash states (each resume is a process start).
ShellResult exec_writer(const TestDirectory& directory, const std::string& name, const std::string& writer,
                        const std::string& writer_flags, const std::string& exec_flags = "--jobs 1",
                        const std::string& checkpoint_name = "") {
  const std::string checkpoints = directory.path() + "/ckpt-" + (checkpoint_name.empty() ? name : checkpoint_name);
  return run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec " + exec_flags + " --states-per-point 3 --watch " +
                           checkpoints + " --work-dir " + directory.path() + "/work-" + name + " -- " + writer +
                           " --dir " + checkpoints + " --steps 4 --save-every 2 " + writer_flags + " 2>&1");
}

// A correct protocol passes every crash state; a rename without its directory fsync loses a
// save that had returned, found right after the rename. Each through a path the C library
// interposer this tracer replaced could not see.
void expect_correct_passes_and_unsafe_is_found(const std::string& writer, const std::string& how) {
  TestDirectory directory;
  const ShellResult correct = exec_writer(directory, "correct", writer, "--protocol correct " + how);
  EXPECT_EQ(correct.exit_code, 0) << correct.output;
  EXPECT_TRUE(has_line_with(correct.output, {"crash state(s):", "passed, 0 failed"})) << correct.output;
  const ShellResult unsafe = exec_writer(directory, "unsafe", writer, "--protocol no_dir_fsync " + how);
  EXPECT_EQ(unsafe.exit_code, 1) << unsafe.output;
  EXPECT_TRUE(has_line_with(unsafe.output, {"FAIL  crash after operation", "(rename ", "state.tmp -> ", "/state)"}))
      << unsafe.output;
  EXPECT_TRUE(has_line_with(unsafe.output, {"lost work: step", "'s save had returned"})) << unsafe.output;
}

TEST(ExecTracer, SeesARenameMadeAsARawSystemCall) {
  expect_correct_passes_and_unsafe_is_found(ZEROSIM_EXEC_WRITER, "--io raw");
}

TEST(ExecTracer, SeesAStaticallyLinkedWriter) {
  expect_correct_passes_and_unsafe_is_found(ZEROSIM_EXEC_WRITER_STATIC, "--io raw");
}

TEST(ExecTracer, SeesAWriterInAForkedChild) {
  expect_correct_passes_and_unsafe_is_found(ZEROSIM_EXEC_WRITER, "--io libc --save-in fork");
}

TEST(ExecTracer, SeesAWriterInAnExecdChild) {
  expect_correct_passes_and_unsafe_is_found(ZEROSIM_EXEC_WRITER, "--io libc --save-in exec");
}

TEST(ExecTracer, AnInPlaceWriteIsFoundEvenWithoutAStateLog) {
  TestDirectory directory;
  // No state log: refusals (a torn or empty state file) are still judged; lost work is not.
  const ShellResult unsafe = exec_writer(directory, "unsafe", std::string("env -u ZEROSIM_STATE_LOG ") + ZEROSIM_EXEC_WRITER,
                                         "--protocol in_place --io libc");
  EXPECT_EQ(unsafe.exit_code, 1) << unsafe.output;
  EXPECT_TRUE(has_line_with(unsafe.output, {"the resume refused: exit status 1", "corrupt checkpoint"})) << unsafe.output;
  EXPECT_TRUE(has_line_with(unsafe.output, {"judged without a state log", "would add lost work"})) << unsafe.output;
  EXPECT_FALSE(has_line_with(unsafe.output, {"lost work: step"})) << unsafe.output;
  const ShellResult correct = exec_writer(directory, "correct", std::string("env -u ZEROSIM_STATE_LOG ") + ZEROSIM_EXEC_WRITER,
                                          "--protocol correct --io libc");
  EXPECT_EQ(correct.exit_code, 0) << correct.output;
  EXPECT_TRUE(has_line_with(correct.output, {"the resume completed (no state log"})) << correct.output;
}

// What the recording cannot stand for is named, and exec refuses to judge (exit 3), for a
// correct protocol and an unsafe one alike.
TEST(ExecTracer, RefusesToJudgeWritesThroughASharedMapping) {
  TestDirectory directory;
  for (const std::string protocol : {"correct", "in_place"}) {
    const ShellResult run = exec_writer(directory, "mmap-" + protocol, ZEROSIM_EXEC_WRITER, "--protocol " + protocol + " --io mmap");
    EXPECT_EQ(run.exit_code, 3) << run.output;
    EXPECT_TRUE(has_line_with(run.output, {"a writable shared mapping of ", "ckpt-mmap-" + protocol + "/state"})) << run.output;
    EXPECT_FALSE(has_line_with(run.output, {"PASS"})) << run.output;
  }
}

// A write submitted through an io_uring is refused, naming the operation and the program; so is
// a ring whose submissions a kernel thread takes without any system call (SQPOLL).
TEST(ExecTracer, RefusesToJudgeWritesThroughIoUring) {
  TestDirectory directory;
  for (const std::string protocol : {"correct", "in_place"}) {
    const ShellResult run = exec_writer(directory, "uring-" + protocol, ZEROSIM_EXEC_WRITER, "--protocol " + protocol + " --io uring");
    if (run.output.find("exit status 77") != std::string::npos) GTEST_SKIP() << "io_uring is disabled on this kernel";
    EXPECT_EQ(run.exit_code, 3) << run.output;
    EXPECT_TRUE(has_line_with(run.output, {"io_uring_enter submits operation 23 (WRITE)", "cannot be seen"})) << run.output;
    // The refusal names the program that submitted it, with its arguments (the line may be cut
    // after the first ones where the build folder's path is long).
    EXPECT_TRUE(has_line_with(run.output, {"exec_writer --dir ", "ckpt-uring-" + protocol, "): io_uring_enter"})) << run.output;
    EXPECT_FALSE(has_line_with(run.output, {"PASS"})) << run.output;
  }
  // (A bounded run: a ring whose kernel thread never took the submission would otherwise wait.)
  const ShellResult sqpoll = exec_writer(directory, "uring-sqpoll", ZEROSIM_EXEC_WRITER, "--protocol correct --io uring-sqpoll",
                                         "--jobs 1 --timeout 60");
  if (sqpoll.output.find("exit status 77") != std::string::npos) GTEST_SKIP() << "SQPOLL rings are refused on this kernel";
  EXPECT_EQ(sqpoll.exit_code, 3) << sqpoll.output;
  EXPECT_TRUE(has_line_with(sqpoll.output, {"io_uring_setup with SQPOLL"})) << sqpoll.output;
}

// A ring that submits only operations that change no file (an event loop's, such as libuv's
// epoll batching under PyTorch's rendezvous store) is read at each io_uring_enter and let be:
// the program's own writes are judged as without it.
TEST(ExecTracer, AnIoUringThatWritesNoFileIsJudged) {
  TestDirectory directory;
  const ShellResult probe = exec_writer(directory, "uring-idle-correct", ZEROSIM_EXEC_WRITER,
                                        "--protocol correct --io uring-idle");
  if (probe.output.find("exit status 77") != std::string::npos) GTEST_SKIP() << "io_uring is disabled on this kernel";
  EXPECT_EQ(probe.exit_code, 0) << probe.output;
  EXPECT_TRUE(has_line_with(probe.output, {"crash state(s):", "passed, 0 failed"})) << probe.output;
  const ShellResult unsafe = exec_writer(directory, "uring-idle-unsafe", ZEROSIM_EXEC_WRITER,
                                         "--protocol no_dir_fsync --io uring-idle");
  EXPECT_EQ(unsafe.exit_code, 1) << unsafe.output;
  EXPECT_TRUE(has_line_with(unsafe.output, {"lost work: step", "'s save had returned"})) << unsafe.output;
}

// --at-saves crashes exactly where each save returned, whatever the sample: with a sample of one
// point, the rename without its directory fsync is still found there, at each of the two saves.
TEST(ExecTracer, AtSavesCrashesWhereEachSaveReturned) {
  TestDirectory directory;
  const ShellResult run = exec_writer(directory, "at-saves", ZEROSIM_EXEC_WRITER, "--protocol no_dir_fsync --io libc",
                                      "--jobs 1 --crash-points 1 --seed 3 --at-saves");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"lost work: step 2's save had returned"})) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"lost work: step 4's save had returned"})) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"3 crash point(s)"}) || has_line_with(run.output, {"2 crash point(s)"})) << run.output;
}

// The verdict lines (PASS/FAIL with the crash point and state) in order.
std::vector<std::string> verdict_lines(const std::string& output, const std::string& work) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < output.size()) {
    size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(at, end - at);
    if (line.rfind("PASS  ", 0) == 0 || line.rfind("FAIL  ", 0) == 0 || line.find("replay: ") != std::string::npos) {
      for (size_t found; (found = line.find(work)) != std::string::npos;) line.replace(found, work.size(), "WORK");
      lines.push_back(line);
    }
    at = end + 1;
  }
  return lines;
}

TEST(ExecJobs, ParallelResumesInMountNamespacesGiveTheSerialVerdictsInOrder) {
  TestDirectory directory;
  const std::string flags = "--protocol no_dir_fsync --io libc";
  const ShellResult serial = exec_writer(directory, "w1", ZEROSIM_EXEC_WRITER, flags, "--jobs 1", "same");
  const ShellResult parallel = exec_writer(directory, "w3", ZEROSIM_EXEC_WRITER, flags, "--jobs 3", "same");
  EXPECT_EQ(serial.exit_code, 1) << serial.output;
  EXPECT_EQ(parallel.exit_code, 1) << parallel.output;
  EXPECT_TRUE(has_line_with(parallel.output, {"with 3 job(s)"})) << parallel.output;
  const std::vector<std::string> serial_lines = verdict_lines(serial.output, directory.path() + "/work-w1");
  EXPECT_GT(serial_lines.size(), 10u) << serial.output;
  EXPECT_EQ(serial_lines, verdict_lines(parallel.output, directory.path() + "/work-w3"));
  // The watched directory is left as it was before (it did not exist): no bind leaks out.
  EXPECT_FALSE(std::filesystem::exists(directory.path() + "/ckpt-same"));
}

TEST(ExecJobs, WhereNamespacesAreRefusedJobsIsAClearErrorAndOneJobWorks) {
  TestDirectory directory;
  const std::string deny = ZEROSIM_DENY_UNSHARE;
  const std::string flags = "--protocol correct --io libc";
  const ShellResult refused = exec_writer(directory, "deny", ZEROSIM_EXEC_WRITER, flags, "--jobs 4");
  ASSERT_EQ(refused.exit_code, 0) << refused.output;  // namespaces work here
  const std::string checkpoints = directory.path() + "/ckpt-denied";
  const std::string command = std::string(ZEROSIM_EXEC_WRITER) + " --dir " + checkpoints + " --steps 4 --save-every 2 " + flags;
  const ShellResult denied = run_shell_command(deny + " " + ZEROSIM_CLI_PATH + " exec --jobs 4 --watch " + checkpoints +
                                               " --work-dir " + directory.path() + "/w -- " + command + " 2>&1");
  EXPECT_EQ(denied.exit_code, 2) << denied.output;
  EXPECT_TRUE(has_line_with(denied.output, {"--jobs 4: cannot run", "in a private mount namespace", "run with --jobs 1"}))
      << denied.output;
  const ShellResult serial = run_shell_command(deny + " " + ZEROSIM_CLI_PATH + " exec --jobs 1 --watch " + checkpoints +
                                               " --work-dir " + directory.path() + "/w -- " + command + " 2>&1");
  EXPECT_EQ(serial.exit_code, 0) << serial.output;
  // Without --jobs, the default falls back to one job and says why.
  const ShellResult fallback = run_shell_command(deny + " " + ZEROSIM_CLI_PATH + " exec --watch " + checkpoints +
                                                 " --work-dir " + directory.path() + "/w -- " + command + " 2>&1");
  EXPECT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_TRUE(has_line_with(fallback.output, {"resuming one crash state at a time"})) << fallback.output;
}

// The self-check: a recording replayed with every write kept must leave what the program left.
// A recording missing one operation (as a write the tracer could not see) is refused, naming
// the file that differs.
TEST(ExecSelfCheck, ARecordingMissingAnOperationIsRefusedNamingTheFile) {
  const std::vector<std::string> roots = {"/watched"};
  auto record = [](FsRecordKind kind, const std::string& path, const std::string& data = "", uint64_t offset = 0) {
    FsRecord made;
    made.kind = kind;
    made.path = path;
    made.data = data;
    made.offset_bytes = offset;
    if (kind == FsRecordKind::kOpen) made.flags = kFlagCreated | kFlagTruncated;
    return made;
  };
  FsRecord rename = record(FsRecordKind::kRename, "/watched/a.tmp");
  rename.second_path = "/watched/a";
  const std::vector<FsRecord> recording = {
      record(FsRecordKind::kMakeDirectory, "/watched"),     record(FsRecordKind::kOpen, "/watched/a.tmp"),
      record(FsRecordKind::kWrite, "/watched/a.tmp", "hello"), record(FsRecordKind::kWrite, "/watched/a.tmp", " world", 5),
      record(FsRecordKind::kSync, "/watched/a.tmp"),        rename,
      record(FsRecordKind::kOpen, "/watched/b"),
  };
  Tree left;
  left.directories = {"/watched"};
  left.files = {{"/watched/a", "hello world"}, {"/watched/b", ""}};
  const Status whole = verify_recording(recording, roots, Tree{}, left);
  EXPECT_TRUE(whole.ok()) << whole.to_string();
  std::vector<FsRecord> missing_write = recording;
  missing_write.erase(missing_write.begin() + 3);
  const Status refused = verify_recording(missing_write, roots, Tree{}, left);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("/watched/a: the program left 11 bytes, the recording replayed has 5"), std::string::npos)
      << refused.to_string();
  std::vector<FsRecord> missing_rename = recording;
  missing_rename.erase(missing_rename.begin() + 5);
  const Status no_rename = verify_recording(missing_rename, roots, Tree{}, left);
  ASSERT_FALSE(no_rename.ok());
  EXPECT_NE(no_rename.message().find("the program left /watched/a, the recording replayed has no such file"), std::string::npos)
      << no_rename.to_string();
  std::vector<FsRecord> missing_open = recording;
  missing_open.erase(missing_open.begin() + 1);
  const Status no_open = verify_recording(missing_open, roots, Tree{}, left);
  ASSERT_FALSE(no_open.ok());
  EXPECT_NE(no_open.message().find("the recording does not replay"), std::string::npos) << no_open.to_string();
}

}  // namespace
}  // namespace zerosim
