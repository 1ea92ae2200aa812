// zerosim exec (scenarios/exec_harness.h, tools/recorder): the state-log contract, the
// recording format, and the example trainer's four checkpoint protocols under the real
// recorder, as a user runs them: the three flawed ones are found, with the operation named,
// the correct one passes, and a failure's replay file reproduces it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "scenarios/exec_harness.h"
#include "sim/fs_recording.h"
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
  // A command that writes no state log: exit 3, saying what the program must do.
  const ShellResult silent = run_shell_command(std::string(ZEROSIM_CLI_PATH) + " exec --watch " + directory.path() +
                                               "/c --work-dir " + directory.path() + "/w -- true 2>&1");
  EXPECT_EQ(silent.exit_code, 3) << silent.output;
  EXPECT_NE(silent.output.find("wrote no line to ZEROSIM_STATE_LOG"), std::string::npos) << silent.output;
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
  const std::string train = zerosim + " train --steps 2 --save-every 1 --model 5,7,3" + extra;
  const std::string resume = "if [ -e " + checkpoints + "/latest ]; then " + train + " --resume " + checkpoints +
                             " --save-dir " + checkpoints + "; else " + train + " --save-dir " + checkpoints + "; fi";
  return run_shell_command(zerosim + " exec --crash-points 16 --states-per-point 2 --seed 1 --watch " + checkpoints +
                           " --work-dir " + directory.path() + "/work-" + name + " --resume-command '" + resume + "' -- " +
                           train + " --save-dir " + checkpoints + " 2>&1");
}

TEST(ExecEngine, ZerosimTrainPassesAndACommitOrderDefectIsFound) {
#ifdef ZEROSIM_SANITIZED
  GTEST_SKIP() << "a sanitized zerosim cannot run with the recorder preloaded (the sanitizer's runtime must load first)";
#endif
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
// program's ZEROSIM_CAPTURE_STEP captures of both runs.
TEST(ExecDiagnosis, ADivergenceNamesItsFirstDifferingElement) {
  TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  const ShellResult run = run_shell_command(
      std::string(ZEROSIM_CLI_PATH) + " exec --states-per-point 1 --watch " + checkpoints + " --work-dir " +
      directory.path() + "/work -- python3 " + ZEROSIM_SOURCE_DIR + "/examples/exec/trainer.py --ckpt " + checkpoints +
      " --protocol correct --steps 4 --bug momentum_not_restored 2>&1");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"resumed at step 2, diverged: step 3: momentum differs"})) << run.output;
  EXPECT_TRUE(has_line_with(run.output, {"first differing element: tensor momentum[0]: expected ", ", found "}))
      << run.output;
  EXPECT_FALSE(has_line_with(run.output, {"first differing element: tensor weights"})) << run.output;
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

// Python's shutil.copyfile copies with sendfile (or copy_file_range): the recorder records the
// bytes that landed in the watched file, read back from the source.
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

// Two processes (a parent and the child it starts, as torchrun's ranks) write into the watched
// directory: both are recorded into the one recording (the child inherits the recorder).
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
