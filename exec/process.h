// Starting the user's command for `zerosim exec`: plainly, under the system-call tracer, or in a
// private mount namespace with crash states bound over the watched directories.
//
// Every child is prepared completely before fork() (argv, environment, the executable's path
// found on PATH, the bind mounts), because the child of a multi-threaded process may only make
// system calls between fork() and execve(): the parallel resumes fork from worker threads. A
// child that cannot start (no such program, a namespace refused, ptrace refused) tells the
// parent why through a close-on-exec pipe, so the error names the step that failed.
//
// Each command runs in its own process group: a timeout kills the whole group.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace zerosim {

struct ProcessOutcome {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  std::string stderr_tail;  // the last non-empty line of its stderr
  bool completed() const { return !timed_out && signal == 0 && exit_code == 0; }
  std::string describe() const;
};

// A directory bound over another inside the child's private mount namespace.
struct BindMount {
  std::string source;  // what the child sees ...
  std::string target;  // ... at this path (an existing directory)
};

struct ProcessSpec {
  std::vector<std::string> argv;
  // Set in the child's environment (over inherited values); `unset` names are removed.
  std::map<std::string, std::string> environment;
  std::vector<std::string> unset;
  std::string log_prefix;  // stdout and stderr go to <log_prefix>.stdout and .stderr
  double timeout_seconds = 600;
  // Non-empty: the child runs in a new mount namespace (in a new user namespace too when it is
  // not root) with these binds, so that several crash states can be resumed side by side.
  std::vector<BindMount> binds;
};

// Runs a command to its end (or its timeout); its own group, output to files.
Result<ProcessOutcome> run_process(const ProcessSpec& spec);

// Whether this process may run children in private mount namespaces (what --jobs N > 1
// needs): forks a child that tries, and returns why not when it cannot.
Status check_private_namespaces();

// Reads the last non-empty line of a file (a command's stderr), "" when there is none.
std::string last_line_of(const std::string& path);

// The parts of starting a child that the tracer shares (exec/syscall_tracer.cpp).
namespace process_internal {

struct PreparedChild {
  std::vector<std::string> argv_storage, environment_storage;
  std::vector<char*> argv, environment;
  std::string executable;  // argv[0] found on PATH
  std::string stdout_path, stderr_path;
  std::string working_directory;
  std::vector<BindMount> binds;
  bool user_namespace = false;
  std::string uid_map, gid_map;
};

Result<PreparedChild> prepare_child(const ProcessSpec& spec);

// In the child, after fork(): only system calls. Writes "<step>: <errno>" to `report_fd` and
// exits 127 when a step fails. `before_exec` runs last (the tracer's PTRACE_TRACEME and
// seccomp filter), and may fail the same way by returning a step name and setting errno.
[[noreturn]] void exec_child(const PreparedChild& child, int report_fd, const char* (*before_exec)(void*),
                             void* before_exec_argument);

// The parent's side of the report pipe: empty when the child reached execve, else "<step>: <error>".
std::string read_child_report(int report_fd);

}  // namespace process_internal

}  // namespace zerosim
