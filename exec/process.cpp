#include "exec/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace zerosim {

std::string ProcessOutcome::describe() const {
  if (timed_out) return "timed out";
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit status " + std::to_string(exit_code);
}

std::string last_line_of(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return "";
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t last_line = text.rfind('\n');
  return last_line == std::string::npos ? text : text.substr(last_line + 1);
}

namespace process_internal {

namespace {

// argv[0] as execvp would find it, resolved before fork (execvp may allocate).
Result<std::string> find_executable(const std::string& name) {
  if (name.empty()) return invalid_argument("an empty program name");
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string directories = path != nullptr && path[0] != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t at = 0;
  while (at <= directories.size()) {
    size_t end = directories.find(':', at);
    if (end == std::string::npos) end = directories.size();
    const std::string directory = end == at ? "." : directories.substr(at, end - at);
    const std::string candidate = directory + "/" + name;
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    at = end + 1;
  }
  return failed_precondition("cannot start '" + name + "': not found on PATH");
}

// Writes "<step>: <errno>\n" without allocating; the child then exits.
[[noreturn]] void child_fails(int report_fd, const char* step) {
  const int error = errno;
  char text[160];
  size_t length = 0;
  for (const char* c = step; *c != '\0' && length < 100; ++c) text[length++] = *c;
  text[length++] = ':';
  text[length++] = ' ';
  char digits[16];
  int count = 0;
  int value = error < 0 ? -error : error;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && count < 15);
  while (count > 0) text[length++] = digits[--count];
  text[length++] = '\n';
  (void)!::write(report_fd, text, length);
  ::_exit(127);
}

bool write_whole_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return written;
}

}  // namespace

Result<PreparedChild> prepare_child(const ProcessSpec& spec) {
  if (spec.argv.empty()) return invalid_argument("no command to run");
  PreparedChild child;
  ZEROSIM_ASSIGN_OR_RETURN(child.executable, find_executable(spec.argv[0]));
  child.argv_storage = spec.argv;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    bool dropped = spec.environment.count(name) != 0;
    for (const std::string& unset : spec.unset) dropped = dropped || unset == name;
    if (!dropped) child.environment_storage.push_back(text);
  }
  for (const auto& [name, value] : spec.environment) child.environment_storage.push_back(name + "=" + value);
  for (std::string& arg : child.argv_storage) child.argv.push_back(arg.data());
  child.argv.push_back(nullptr);
  for (std::string& entry : child.environment_storage) child.environment.push_back(entry.data());
  child.environment.push_back(nullptr);
  child.stdout_path = spec.log_prefix + ".stdout";
  child.stderr_path = spec.log_prefix + ".stderr";
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return io_error(std::string("getcwd: ") + std::strerror(errno));
  child.working_directory = cwd;
  child.binds = spec.binds;
  if (!spec.binds.empty() && ::geteuid() != 0) {
    // Not root: a user namespace gives the mount namespace's capability; the user maps to
    // itself, so the command runs as the same user, without root's powers.
    child.user_namespace = true;
    child.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
    child.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  }
  return child;
}

void exec_child(const PreparedChild& child, int report_fd, const char* (*before_exec)(void*), void* argument) {
  if (::setpgid(0, 0) != 0) child_fails(report_fd, "setpgid");
  const int out = ::open(child.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || ::dup2(out, 1) < 0) child_fails(report_fd, "open stdout file");
  const int err = ::open(child.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err < 0 || ::dup2(err, 2) < 0) child_fails(report_fd, "open stderr file");
  if (!child.binds.empty()) {
    if (::unshare(CLONE_NEWNS | (child.user_namespace ? CLONE_NEWUSER : 0)) != 0) {
      child_fails(report_fd, child.user_namespace ? "unshare(CLONE_NEWUSER | CLONE_NEWNS)" : "unshare(CLONE_NEWNS)");
    }
    if (child.user_namespace) {
      if (!write_whole_file("/proc/self/setgroups", "deny")) child_fails(report_fd, "write /proc/self/setgroups");
      if (!write_whole_file("/proc/self/uid_map", child.uid_map)) child_fails(report_fd, "write /proc/self/uid_map");
      if (!write_whole_file("/proc/self/gid_map", child.gid_map)) child_fails(report_fd, "write /proc/self/gid_map");
    }
    // Private: the binds below stay in this namespace and never reach the parent's.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fails(report_fd, "mount --make-rprivate /");
    for (const BindMount& bind : child.binds) {
      if (::mount(bind.source.c_str(), bind.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
        child_fails(report_fd, "mount --bind");
      }
    }
    // A working directory inside a bound directory must see the bind.
    if (::chdir(child.working_directory.c_str()) != 0) child_fails(report_fd, "chdir");
  }
  if (before_exec != nullptr) {
    if (const char* failed_step = before_exec(argument); failed_step != nullptr) child_fails(report_fd, failed_step);
  }
  ::execve(child.executable.c_str(), child.argv.data(), child.environment.data());
  child_fails(report_fd, "execve");
}

std::string read_child_report(int report_fd) {
  std::string report;
  char buffer[256];
  while (true) {
    const ssize_t got = ::read(report_fd, buffer, sizeof(buffer));
    if (got > 0) {
      report.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    break;
  }
  while (!report.empty() && report.back() == '\n') report.pop_back();
  const size_t colon = report.rfind(": ");
  if (colon != std::string::npos) {
    const int error = std::atoi(report.c_str() + colon + 2);
    report = report.substr(0, colon) + ": " + std::strerror(error);
  }
  return report;
}

}  // namespace process_internal

namespace {

using WallClock = std::chrono::steady_clock;

}  // namespace

Result<ProcessOutcome> run_process(const ProcessSpec& spec) {
  using namespace process_internal;
  ZEROSIM_ASSIGN_OR_RETURN(PreparedChild child, prepare_child(spec));
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return io_error(std::string("pipe2: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    return io_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(report[0]);
    exec_child(child, report[1], nullptr, nullptr);
  }
  ::close(report[1]);
  const std::string failure = read_child_report(report[0]);  // returns at execve or at the child's end
  ::close(report[0]);
  ProcessOutcome outcome;
  const auto start = WallClock::now();
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return io_error(std::string("waitpid: ") + std::strerror(errno));
    if (std::chrono::duration<double>(WallClock::now() - start).count() > spec.timeout_seconds) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      outcome.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!failure.empty()) {
    if (spec.binds.empty()) return failed_precondition("cannot start '" + spec.argv[0] + "': " + failure);
    return failed_precondition("cannot run '" + spec.argv[0] + "' in a private mount namespace (" + failure +
                               "): this system does not permit it; run with --jobs 1");
  }
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  // The process group may outlive its leader (a daemon it started): nothing of it may run on.
  ::kill(-pid, SIGKILL);
  outcome.stderr_tail = last_line_of(child.stderr_path);
  return outcome;
}

Status check_private_namespaces() {
  char directory_template[] = "/tmp/zerosim-namespace-probe-XXXXXX";
  if (::mkdtemp(directory_template) == nullptr) return io_error(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string directory = directory_template;
  ProcessSpec spec;
  spec.argv = {"/bin/true"};
  spec.log_prefix = directory + "/probe";
  spec.timeout_seconds = 30;
  spec.binds = {{directory, directory}};
  Result<ProcessOutcome> outcome = run_process(spec);
  ::unlink((directory + "/probe.stdout").c_str());
  ::unlink((directory + "/probe.stderr").c_str());
  ::rmdir(directory.c_str());
  if (!outcome.ok()) return outcome.status();
  if (!outcome->completed()) {
    return failed_precondition("a probe in a private mount namespace failed (" + outcome->describe() + "); run with --jobs 1");
  }
  return Status();
}

}  // namespace zerosim
