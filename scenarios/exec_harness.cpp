#include "scenarios/exec_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "sim/crash_explorer.h"
#include "sim/sim_disk.h"

extern char** environ;

namespace zerosim {

namespace fs = std::filesystem;
using nlohmann::json;

int ExecResult::failed() const {
  return static_cast<int>(std::count_if(verdicts.begin(), verdicts.end(),
                                        [](const ExecCrashVerdict& v) { return !v.verdict.passed; }));
}

Result<std::vector<StateLine>> parse_state_log(const std::string& text, const std::string& source) {
  std::vector<StateLine> lines;
  std::istringstream stream(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(stream, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = source + " line " + std::to_string(number);
    json document = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (document.is_discarded() || !document.is_object()) return invalid_argument(where + ": not a JSON object");
    if (!document.contains("step") || !document["step"].is_number_integer()) {
      return invalid_argument(where + ": \"step\": expected an integer");
    }
    if (!document.contains("loss") || !document["loss"].is_number()) return invalid_argument(where + ": \"loss\": expected a number");
    if (!document.contains("components") || !document["components"].is_object()) {
      return invalid_argument(where + ": \"components\": expected an object of NAME: HEX_DIGEST");
    }
    StateLine parsed;
    parsed.step = document["step"].get<int64_t>();
    parsed.loss = document["loss"].get<double>();
    parsed.loss_text = document["loss"].dump();
    for (const auto& [name, digest] : document["components"].items()) {
      if (!digest.is_string()) return invalid_argument(where + ": components." + name + ": expected a string");
      parsed.components[name] = digest.get<std::string>();
    }
    if (document.contains("checkpoint")) {
      if (!document["checkpoint"].is_boolean()) return invalid_argument(where + ": \"checkpoint\": expected true or false");
      parsed.checkpoint = document["checkpoint"].get<bool>();
    }
    lines.push_back(std::move(parsed));
  }
  return lines;
}

namespace {

using WallClock = std::chrono::steady_clock;

double seconds_since(WallClock::time_point start) { return std::chrono::duration<double>(WallClock::now() - start).count(); }

Result<std::string> read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found(path + ": cannot be opened");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return io_error(path + ": read failed");
  return text;
}

struct ProcessOutcome {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  std::string stderr_tail;
  std::string describe() const {
    if (timed_out) return "timed out";
    if (signal != 0) return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "exit status " + std::to_string(exit_code);
  }
};

// Runs argv with extra environment variables; stdout and stderr go to files in `log_prefix`.
Result<ProcessOutcome> run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra,
                                   const std::string& log_prefix, double timeout_seconds) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (extra.count(name) == 0 && name != "ZEROSIM_RECORD" && name != "ZEROSIM_WATCH" && name != "LD_PRELOAD" &&
        name != "ZEROSIM_STATE_LOG") {
      environment.push_back(text);
    }
  }
  for (const auto& [name, value] : extra) environment.push_back(name + "=" + value);
  std::vector<char*> env_pointers, arg_pointers;
  for (std::string& entry : environment) env_pointers.push_back(entry.data());
  env_pointers.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  arg_pointers.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string out_path = log_prefix + ".stdout", err_path = log_prefix + ".stderr";
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // its own group: a timeout kills it all
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, arg_pointers[0], &actions, &attributes, arg_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    return failed_precondition("cannot start '" + argv[0] + "': " + std::strerror(spawned));
  }
  ProcessOutcome outcome;
  const auto start = WallClock::now();
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return io_error(std::string("waitpid: ") + std::strerror(errno));
    if (seconds_since(start) > timeout_seconds) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      outcome.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  Result<std::string> errors = read_text(err_path);
  if (errors.ok()) {
    std::string text = *errors;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const size_t last_line = text.rfind('\n');
    outcome.stderr_tail = last_line == std::string::npos ? text : text.substr(last_line + 1);
  }
  return outcome;
}

// A directory tree as exec lays it out: directories, and files with their bytes.
struct Tree {
  std::vector<std::string> directories;  // absolute, parents first
  std::vector<std::pair<std::string, std::string>> files;
};

Result<Tree> snapshot_real(const std::string& root) {
  Tree tree;
  std::error_code error;
  if (!fs::exists(root, error)) return tree;
  tree.directories.push_back(root);
  for (auto it = fs::recursive_directory_iterator(root, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    const std::string path = it->path().string();
    if (it->is_directory(error)) {
      tree.directories.push_back(path);
    } else if (it->is_regular_file(error)) {
      ZEROSIM_ASSIGN_OR_RETURN(std::string bytes, read_text(path));
      tree.files.emplace_back(path, std::move(bytes));
    } else {
      return failed_precondition("watched directory " + root + ": " + path + " is neither a file nor a directory");
    }
  }
  if (error) return io_error("watched directory " + root + ": " + error.message());
  return tree;
}

Status write_real_file(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return io_error("cannot write " + path + " (laying out a crash state)");
  return Status();
}

// Replaces the real content of the watched roots with `tree`.
Status lay_out(const std::vector<std::string>& roots, const Tree& tree) {
  std::error_code error;
  for (const std::string& root : roots) {
    fs::remove_all(root, error);
    if (error) return io_error("cannot clear " + root + ": " + error.message());
  }
  for (const std::string& directory : tree.directories) {
    fs::create_directories(directory, error);
    if (error) return io_error("cannot create " + directory + ": " + error.message());
  }
  for (const auto& [path, bytes] : tree.files) {
    fs::create_directories(fs::path(path).parent_path(), error);
    ZEROSIM_RETURN_IF_ERROR(write_real_file(path, bytes));
  }
  return Status();
}

// What the simulated disk shows under the roots (after a crash: what survived).
Result<Tree> snapshot_sim(SimDisk& disk, const std::vector<std::string>& roots) {
  Tree tree;
  std::vector<std::string> pending_directories;
  for (const std::string& root : roots) {
    ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(root));
    if (exists) pending_directories.push_back(root);
  }
  while (!pending_directories.empty()) {
    const std::string directory = pending_directories.back();
    pending_directories.pop_back();
    tree.directories.push_back(directory);
    ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk.list_directory(directory));
    for (const std::string& name : names) {
      const std::string path = directory + "/" + name;
      Result<std::vector<std::byte>> content = disk.visible_content(path);
      if (content.ok()) {
        tree.files.emplace_back(path, std::string(reinterpret_cast<const char*>(content->data()), content->size()));
      } else {
        pending_directories.push_back(path);
      }
    }
  }
  std::sort(tree.directories.begin(), tree.directories.end());
  return tree;
}

std::string parent_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

// The recording replayed into SimDisk, one operation at a time.
class Replayer {
 public:
  Replayer(const std::vector<std::string>& roots, uint64_t seed) : disk_(SimDiskOptions{512, uint64_t{1} << 40, seed}) {
    roots_ = roots;
  }

  // The watched directories' content before the run, durable.
  Status load(const Tree& initial) {
    for (const std::string& directory : initial.directories) ZEROSIM_RETURN_IF_ERROR(make_durable_directory(directory));
    for (const auto& [path, bytes] : initial.files) {
      ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(path)));
      ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path, FileOpenOptions{OpenMode::kCreateTruncate}));
      ZEROSIM_RETURN_IF_ERROR(file->write_all(0, std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))));
      ZEROSIM_RETURN_IF_ERROR(file->sync());
      ZEROSIM_RETURN_IF_ERROR(file->close());
      ZEROSIM_RETURN_IF_ERROR(disk_.sync_directory(parent_of(path)));
    }
    for (const std::string& root : roots_) {
      // A watched directory that does not exist yet: its parent is outside, durable as it is.
      ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk_.exists(parent_of(root)));
      if (!exists) ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(root)));
    }
    return Status();
  }

  Status apply(const FsRecord& record) {
    const std::string where = "replaying " + record.describe();
    auto with_context = [&](const Status& status) {
      return status.ok() ? status : Status(status.code(), where + ": " + status.message());
    };
    const std::pair<int32_t, int32_t> key{record.pid, record.fd};
    switch (record.kind) {
      case FsRecordKind::kOpen: {
        handles_.erase(key);
        if ((record.flags & kFlagDirectory) != 0) {
          directories_[key] = record.path;
          return Status();
        }
        directories_.erase(key);
        const OpenMode mode = (record.flags & kFlagTruncated) != 0 ? OpenMode::kCreateTruncate : OpenMode::kCreateReadWrite;
        Result<std::unique_ptr<File>> file = disk_.open(record.path, FileOpenOptions{mode});
        if (!file.ok()) return with_context(file.status());
        handles_[key] = std::shared_ptr<File>(std::move(file).value());
        return Status();
      }
      case FsRecordKind::kWrite: {
        auto found = handles_.find(key);
        if (found == handles_.end()) return internal_error(where + ": no open file for fd " + std::to_string(record.fd));
        return with_context(found->second->write_all(
            record.offset_bytes, std::as_bytes(std::span<const char>(record.data.data(), record.data.size()))));
      }
      case FsRecordKind::kTruncate: {
        auto found = record.fd >= 0 ? handles_.find(key) : handles_.end();
        if (found != handles_.end()) return with_context(found->second->truncate(record.length_bytes));
        Result<std::unique_ptr<File>> file = disk_.open(record.path, FileOpenOptions{OpenMode::kReadWrite});
        if (!file.ok()) return with_context(file.status());
        ZEROSIM_RETURN_IF_ERROR(with_context((*file)->truncate(record.length_bytes)));
        return with_context((*file)->close());
      }
      case FsRecordKind::kSync: {
        if (auto directory = directories_.find(key); directory != directories_.end()) {
          return with_context(disk_.sync_directory(directory->second));
        }
        auto found = handles_.find(key);
        if (found == handles_.end()) return internal_error(where + ": no open file for fd " + std::to_string(record.fd));
        return with_context(found->second->sync());
      }
      case FsRecordKind::kRename: return with_context(disk_.rename(record.path, record.second_path));
      case FsRecordKind::kUnlink: return with_context(disk_.remove_file(record.path));
      case FsRecordKind::kMakeDirectory: return with_context(disk_.create_directories(record.path));
      case FsRecordKind::kRemoveDirectory: return with_context(disk_.remove_tree(record.path));
      case FsRecordKind::kClose: {
        directories_.erase(key);
        auto found = handles_.find(key);
        if (found == handles_.end()) return Status();
        // A close does not make anything durable; the handle may be shared by a dup.
        handles_.erase(found);
        return Status();
      }
      case FsRecordKind::kDuplicate: {
        const std::pair<int32_t, int32_t> target{record.pid, static_cast<int32_t>(record.offset_bytes)};
        if (auto found = handles_.find(key); found != handles_.end()) handles_[target] = found->second;
        if (auto found = directories_.find(key); found != directories_.end()) directories_[target] = found->second;
        return Status();
      }
      case FsRecordKind::kLink:
        return failed_precondition(where + ": hard links are not modelled by zerosim's file-system model");
      case FsRecordKind::kStateLine: return Status();
    }
    return Status();
  }

  SimDisk& disk() { return disk_; }

 private:
  Status make_durable_directory(const std::string& path) {
    if (path.empty()) return Status();
    ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk_.exists(path));
    if (exists) return Status();
    ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(path)));
    ZEROSIM_RETURN_IF_ERROR(disk_.create_directories(path));
    const std::string parent = parent_of(path);
    return disk_.sync_directory(parent.empty() ? "/" : parent);
  }

  SimDisk disk_;
  std::vector<std::string> roots_;
  std::map<std::pair<int32_t, int32_t>, std::shared_ptr<File>> handles_;
  std::map<std::pair<int32_t, int32_t>, std::string> directories_;
};

// The verdict of one resume against the reference.
ScenarioVerdict judge(const std::vector<StateLine>& reference, int64_t durable_step, const ProcessOutcome& outcome,
                      const Result<std::vector<StateLine>>& resumed, int64_t* diverged_step) {
  ScenarioVerdict verdict;
  for (const StateLine& line : reference) verdict.reference_losses.push_back(static_cast<float>(line.loss));
  verdict.committed_step = durable_step;
  if (outcome.timed_out || outcome.signal != 0) {
    verdict.outcome = "the resume crashed: " + outcome.describe();
    verdict.diagnosis = verdict.outcome + (outcome.stderr_tail.empty() ? "" : " (stderr: " + outcome.stderr_tail + ")");
    return verdict;
  }
  if (outcome.exit_code != 0) {
    verdict.outcome = "the resume refused: " + outcome.describe() + (outcome.stderr_tail.empty() ? "" : ": " + outcome.stderr_tail);
    verdict.diagnosis = verdict.outcome;
    return verdict;
  }
  if (!resumed.ok()) {
    verdict.outcome = "the resume's state log is unreadable";
    verdict.diagnosis = resumed.status().to_string();
    return verdict;
  }
  const int64_t last_step = reference.empty() ? 0 : reference.back().step;
  verdict.resumed_at = resumed->empty() ? last_step : resumed->front().step - 1;
  for (const StateLine& line : *resumed) verdict.resumed_losses.push_back(static_cast<float>(line.loss));
  std::map<int64_t, const StateLine*> expected;
  for (const StateLine& line : reference) expected[line.step] = &line;
  std::string divergence;
  int64_t previous = verdict.resumed_at;
  for (const StateLine& line : *resumed) {
    if (line.step != previous + 1) {
      divergence = "the resume logged step " + std::to_string(line.step) + " after step " + std::to_string(previous);
      break;
    }
    previous = line.step;
    auto found = expected.find(line.step);
    if (found == expected.end()) {
      divergence = "step " + std::to_string(line.step) + ": the uninterrupted run has no such step";
      break;
    }
    const StateLine& want = *found->second;
    if (std::memcmp(&want.loss, &line.loss, sizeof(double)) != 0) {
      divergence = "step " + std::to_string(line.step) + ": loss: expected " + want.loss_text + ", found " + line.loss_text;
      break;
    }
    for (const auto& [name, digest] : want.components) {
      auto other = line.components.find(name);
      if (other == line.components.end()) {
        divergence = "step " + std::to_string(line.step) + ": component " + name + " missing from the resume's line";
      } else if (other->second != digest) {
        divergence = "step " + std::to_string(line.step) + ": " + name + " differs (expected " + digest + ", found " +
                     other->second + ")";
      }
      if (!divergence.empty()) break;
    }
    if (!divergence.empty()) {
      *diverged_step = line.step;  // the state differs here: a capture of this step can name the element
      break;
    }
  }
  if (divergence.empty() && previous != last_step) {
    divergence = "the resume stopped at step " + std::to_string(previous) + ", the uninterrupted run at step " +
                 std::to_string(last_step);
  }
  verdict.outcome = "resumed at step " + std::to_string(verdict.resumed_at) +
                    (divergence.empty() ? ", identical to step " + std::to_string(last_step) : ", diverged: " + divergence);
  if (verdict.resumed_at < durable_step) {
    verdict.diagnosis = "lost work: step " + std::to_string(durable_step) +
                        "'s save had returned (its line said \"checkpoint\": true) before the crash, but the resume "
                        "started at step " + std::to_string(verdict.resumed_at);
  } else if (!divergence.empty()) {
    verdict.diagnosis = divergence;
  } else {
    verdict.passed = true;
  }
  return verdict;
}

std::vector<std::string> shell_command(const std::string& line) { return {"/bin/sh", "-c", line}; }

// A capture file (safetensors, any dtype): name -> (dtype, element bytes, data).
struct CapturedTensor {
  std::string dtype;
  size_t element_bytes = 1;
  std::string data;
};

Result<std::map<std::string, CapturedTensor>> read_capture(const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string bytes, read_text(path));
  if (bytes.size() < 8) return data_loss(path + ": shorter than a safetensors header");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > bytes.size() - 8) return data_loss(path + ": header length past the end of the file");
  const json header = json::parse(bytes.substr(8, header_bytes), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return data_loss(path + ": the header is not a JSON object");
  const std::map<std::string, size_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                               {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  std::map<std::string, CapturedTensor> tensors;
  const size_t data_start = 8 + header_bytes;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return data_loss(path + ": tensor " + name + ": expected dtype and data_offsets");
    }
    CapturedTensor tensor;
    tensor.dtype = entry["dtype"].get<std::string>();
    auto size = sizes.find(tensor.dtype);
    tensor.element_bytes = size == sizes.end() ? 1 : size->second;
    const uint64_t begin = entry["data_offsets"][0].get<uint64_t>(), end = entry["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > bytes.size() - data_start) return data_loss(path + ": tensor " + name + ": offsets past the end");
    tensor.data = bytes.substr(data_start + begin, end - begin);
    tensors[name] = std::move(tensor);
  }
  return tensors;
}

std::string element_text(const CapturedTensor& tensor, size_t index) {
  const char* at = tensor.data.data() + index * tensor.element_bytes;
  std::string hex;
  char digits[3];
  for (size_t i = tensor.element_bytes; i-- > 0;) {
    std::snprintf(digits, sizeof(digits), "%02x", static_cast<unsigned char>(at[i]));
    hex += digits;
  }
  if (tensor.dtype == "F64") {
    double value;
    std::memcpy(&value, at, 8);
    return std::to_string(value) + " (0x" + hex + ")";
  }
  if (tensor.dtype == "F32") {
    float value;
    std::memcpy(&value, at, 4);
    return std::to_string(value) + " (0x" + hex + ")";
  }
  return "0x" + hex;
}

// The first tensor (by name) and element where two captures differ; "" when they are equal.
Result<std::string> first_differing_element(const std::string& expected_path, const std::string& found_path) {
  ZEROSIM_ASSIGN_OR_RETURN(auto expected, read_capture(expected_path));
  ZEROSIM_ASSIGN_OR_RETURN(auto found, read_capture(found_path));
  for (const auto& [name, want] : expected) {
    auto other = found.find(name);
    if (other == found.end()) return "tensor " + name + " missing from the resume's capture";
    const CapturedTensor& got = other->second;
    if (got.dtype != want.dtype || got.data.size() != want.data.size()) {
      return "tensor " + name + ": " + want.dtype + " of " + std::to_string(want.data.size()) + " bytes expected, " +
             got.dtype + " of " + std::to_string(got.data.size()) + " found";
    }
    for (size_t i = 0; i * want.element_bytes < want.data.size(); ++i) {
      if (std::memcmp(want.data.data() + i * want.element_bytes, got.data.data() + i * want.element_bytes,
                      want.element_bytes) != 0) {
        return "tensor " + name + "[" + std::to_string(i) + "]: expected " + element_text(want, i) + ", found " +
               element_text(got, i);
      }
    }
  }
  for (const auto& [name, tensor] : found) {
    if (expected.count(name) == 0) return "tensor " + name + " is only in the resume's capture";
  }
  return std::string();
}

}  // namespace

Result<ExecResult> run_exec(const ExecOptions& options) {
  if (options.command.empty()) return invalid_argument("exec: no command (give it after --)");
  if (options.watch.empty()) return invalid_argument("exec: no --watch directory");
  if (options.states_per_point < 1) return invalid_argument("exec: --states-per-point must be >= 1");
  if (options.crash_points < 0) return invalid_argument("exec: --crash-points must be >= 0");
  std::error_code error;
  if (!fs::exists(options.recorder_library, error)) {
    return failed_precondition("exec: the recorder library " + options.recorder_library + " does not exist");
  }
  std::vector<std::string> roots;
  for (const std::string& watch : options.watch) {
    if (watch.empty()) return invalid_argument("exec: --watch: an empty directory name");
    fs::path absolute = fs::absolute(watch, error);
    // The real path of the deepest existing ancestor (the recorder sees physical paths).
    fs::path existing = absolute, rest;
    while (!fs::exists(existing, error) && existing.has_parent_path() && existing != existing.parent_path()) {
      rest = existing.filename() / rest;
      existing = existing.parent_path();
    }
    const fs::path real = fs::canonical(existing, error);
    if (error) return invalid_argument("exec: --watch " + watch + ": " + error.message());
    fs::path joined = rest.empty() ? real : real / rest;
    std::string text = joined.lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    if (text == "/") return invalid_argument("exec: --watch /: the whole file system cannot be the scratch directory");
    if (fs::exists(text, error) && !fs::is_directory(text, error)) {
      return invalid_argument("exec: --watch " + watch + ": not a directory");
    }
    roots.push_back(text);
  }
  fs::create_directories(options.work_directory, error);
  if (error) return io_error("exec: cannot create " + options.work_directory + ": " + error.message());
  const std::string work = fs::canonical(options.work_directory).string();
  for (const std::string& root : roots) {
    if (work == root || work.rfind(root + "/", 0) == 0) {
      return invalid_argument("exec: the work directory " + work + " is inside the watched " + root);
    }
  }

  // What the watched directories hold now: the starting state of every run, restored at the end.
  Tree initial;
  for (const std::string& root : roots) {
    ZEROSIM_ASSIGN_OR_RETURN(Tree tree, snapshot_real(root));
    initial.directories.insert(initial.directories.end(), tree.directories.begin(), tree.directories.end());
    initial.files.insert(initial.files.end(), tree.files.begin(), tree.files.end());
  }
  struct RestoreAtEnd {
    const std::vector<std::string>& roots;
    const Tree& initial;
    ~RestoreAtEnd() { (void)lay_out(roots, initial); }
  } restore_at_end{roots, initial};

  ExecResult result;
  result.recording_path = work + "/recording.zsr";
  const std::string reference_log = work + "/reference.state.jsonl";
  fs::remove(result.recording_path, error);
  fs::remove(reference_log, error);
  std::string watch_list;
  for (const std::string& root : roots) watch_list += (watch_list.empty() ? "" : ":") + root;
  const auto reference_start = WallClock::now();
  ZEROSIM_ASSIGN_OR_RETURN(ProcessOutcome reference_outcome,
                           run_process(options.command,
                                       {{"LD_PRELOAD", options.recorder_library},
                                        {"ZEROSIM_RECORD", result.recording_path},
                                        {"ZEROSIM_WATCH", watch_list},
                                        {"ZEROSIM_STATE_LOG", reference_log}},
                                       work + "/reference", options.timeout_seconds));
  result.reference_seconds = seconds_since(reference_start);
  if (reference_outcome.exit_code != 0) {
    return failed_precondition("exec: the uninterrupted run failed (" + reference_outcome.describe() +
                               (reference_outcome.stderr_tail.empty() ? "" : ": " + reference_outcome.stderr_tail) +
                               "); its output is in " + work + "/reference.stderr");
  }
  Result<std::string> reference_text = read_text(reference_log);
  if (reference_text.ok()) {
    ZEROSIM_ASSIGN_OR_RETURN(result.reference, parse_state_log(*reference_text, reference_log));
  }
  if (result.reference.empty()) {
    return failed_precondition("exec: the uninterrupted run wrote no line to ZEROSIM_STATE_LOG (" + reference_log +
                               "): the program must report its state after each step (python/zerosim_state.py)");
  }
  std::vector<FsRecord> records;
  {
    Result<std::vector<FsRecord>> read = read_fs_recording(result.recording_path);
    if (!read.ok() && read.status().code() == StatusCode::kNotFound) {
      return failed_precondition("exec: the recorder wrote nothing (" + result.recording_path +
                                 "): is the command a statically linked program, or did it never touch the watched "
                                 "directories?");
    }
    ZEROSIM_ASSIGN_OR_RETURN(records, std::move(read));
  }

  // The operations (crash points fall between them) and, for each, the newest step whose
  // "checkpoint": true line came before it.
  std::vector<const FsRecord*> operations;
  std::vector<int64_t> durable_before;  // durable_before[k]: after the first k operations
  int64_t durable = -1;
  durable_before.push_back(durable);
  for (const FsRecord& record : records) {
    if (record.kind == FsRecordKind::kStateLine) {
      Result<std::vector<StateLine>> line = parse_state_log(record.data, "the recorded state log");
      if (line.ok()) {
        for (const StateLine& parsed : *line) {
          if (parsed.checkpoint) durable = std::max(durable, parsed.step);
        }
      }
      durable_before.back() = durable;
      continue;
    }
    operations.push_back(&record);
    durable_before.push_back(durable);
  }
  result.operations = static_cast<int64_t>(operations.size());

  // The crash points: after 0..n operations, all of them or a seeded sample.
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
    std::sort(points.begin(), points.end());
  }

  Replayer replayer(roots, options.seed);
  ZEROSIM_RETURN_IF_ERROR(replayer.load(initial));
  int64_t replayed = 0;
  double build_seconds = 0;
  int64_t built = 0;
  for (int64_t point : points) {
    while (replayed < point) {
      ZEROSIM_RETURN_IF_ERROR(replayer.apply(*operations[static_cast<size_t>(replayed)]));
      ++replayed;
    }
    const std::vector<PendingOperation> pending = replayer.disk().pending_operations();
    const std::vector<std::vector<CrashFate>> states = crash_states(pending, options.states_per_point, options.seed, "");
    ++result.crash_points;
    for (size_t s = 0; s < states.size(); ++s) {
      if (options.only_state && static_cast<int64_t>(s) != *options.only_state) continue;
      const auto build_start = WallClock::now();
      std::unique_ptr<SimDisk> crashed = replayer.disk().clone();
      crashed->crash(states[s]);
      ZEROSIM_ASSIGN_OR_RETURN(Tree tree, snapshot_sim(*crashed, roots));
      build_seconds += seconds_since(build_start);
      ++built;
      ZEROSIM_RETURN_IF_ERROR(lay_out(roots, tree));
      ++result.crash_states;
      const std::string prefix = work + "/resume-" + std::to_string(point) + "-" + std::to_string(s);
      const std::string resume_log = prefix + ".state.jsonl";
      fs::remove(resume_log, error);
      ZEROSIM_ASSIGN_OR_RETURN(
          ProcessOutcome outcome,
          run_process(options.resume_command.empty() ? options.command : shell_command(options.resume_command),
                      {{"ZEROSIM_STATE_LOG", resume_log}}, prefix, options.timeout_seconds));
      Result<std::string> resume_text = read_text(resume_log);
      Result<std::vector<StateLine>> resumed =
          resume_text.ok() ? parse_state_log(*resume_text, resume_log) : Result<std::vector<StateLine>>(std::vector<StateLine>{});
      ExecCrashVerdict crash;
      crash.point = point;
      crash.state = static_cast<int64_t>(s);
      crash.operation = point == 0 ? "(before the first operation)" : operations[static_cast<size_t>(point - 1)]->describe();
      crash.fates = describe_state(pending, states[s]);
      int64_t diverged_step = -1;
      crash.verdict = judge(result.reference, durable_before[static_cast<size_t>(point)], outcome, resumed, &diverged_step);
      if (!crash.verdict.passed && diverged_step > 0) {
        // Name the first differing element: both runs again, capturing that step (the
        // program writes it when it supports ZEROSIM_CAPTURE_STEP; silence is not an error).
        const std::string reference_capture = work + "/reference-capture-" + std::to_string(diverged_step) + ".safetensors";
        if (!fs::exists(reference_capture, error)) {
          ZEROSIM_RETURN_IF_ERROR(lay_out(roots, initial));
          ZEROSIM_RETURN_IF_ERROR(run_process(options.command,
                                              {{"ZEROSIM_STATE_LOG", work + "/reference-capture.state.jsonl"},
                                               {"ZEROSIM_CAPTURE_STEP", std::to_string(diverged_step)},
                                               {"ZEROSIM_CAPTURE_FILE", reference_capture}},
                                              work + "/reference-capture", options.timeout_seconds)
                                      .status());
        }
        const std::string resume_capture = prefix + ".capture.safetensors";
        ZEROSIM_RETURN_IF_ERROR(lay_out(roots, tree));
        ZEROSIM_RETURN_IF_ERROR(run_process(options.resume_command.empty() ? options.command
                                                                           : shell_command(options.resume_command),
                                            {{"ZEROSIM_STATE_LOG", prefix + ".capture.state.jsonl"},
                                             {"ZEROSIM_CAPTURE_STEP", std::to_string(diverged_step)},
                                             {"ZEROSIM_CAPTURE_FILE", resume_capture}},
                                            prefix + "-capture", options.timeout_seconds)
                                    .status());
        if (fs::exists(reference_capture, error) && fs::exists(resume_capture, error)) {
          Result<std::string> element = first_differing_element(reference_capture, resume_capture);
          crash.verdict.diagnosis += element.ok() ? (element->empty() ? "" : "; first differing element: " + *element)
                                                  : "; the captures could not be compared: " + element.status().message();
        }
      }
      crash.verdict.name = "crash after operation " + std::to_string(point) + " (" + crash.operation + "), state " +
                           std::to_string(s);
      crash.verdict.crash = "power loss after " + crash.operation + "; " + crash.fates;
      crash.verdict.seed = options.seed;
      result.verdicts.push_back(std::move(crash));
    }
  }
  result.mean_build_state_seconds = built > 0 ? build_seconds / static_cast<double>(built) : 0;
  return result;
}

}  // namespace zerosim
