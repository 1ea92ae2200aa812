// Runs a shell command line for the tests that drive the built `zerosim` binary (the CLI test,
// the bad-input corpus, the random-kill test): its exit code or the signal that ended it, and
// its stdout and stderr together (the command line redirects stderr itself).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace zerosim {

struct ShellResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  int signal = 0;      // the signal that ended it, 0 when none
  std::string output;
};

inline ShellResult run_shell_command(const std::string& command) {
  ShellResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t count;
  while ((count = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), count);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace zerosim
