#include "tools/install_paths.h"

namespace zerosim {

namespace fs = std::filesystem;

fs::path program_directory(const std::string& argv0) {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) self = fs::absolute(argv0, error);
  return self.parent_path();
}

std::vector<fs::path> shipped_scenario_library_candidates(const std::string& argv0) {
  const fs::path directory = program_directory(argv0);
  std::vector<fs::path> candidates = {directory / ".." / "share" / "zerosim" / "scenarios" / "library"};  // installed
  // A build tree (<build>/tools/zerosim beside <build>/CMakeCache.txt): the library of the source
  // tree it was configured from, wherever the build directory is.
  std::error_code error;
  if (fs::exists(directory / ".." / "CMakeCache.txt", error)) {
    candidates.push_back(fs::path(ZEROSIM_SOURCE_DIR) / "scenarios" / "library");
  }
  return candidates;
}

Result<std::string> shipped_scenario_library(const std::string& argv0) {
  std::string looked;
  for (const fs::path& candidate : shipped_scenario_library_candidates(argv0)) {
    std::error_code error;
    if (fs::is_directory(candidate, error)) return fs::weakly_canonical(candidate, error).string();
    looked += (looked.empty() ? "" : ", ") + candidate.lexically_normal().string();
  }
  return not_found("no scenario library beside this zerosim (looked in " + looked +
                   "); give the directory: zerosim suite DIR");
}

Result<std::string> shipped_python_directory(const std::string& argv0) {
  const fs::path directory = program_directory(argv0);
  std::vector<fs::path> candidates = {directory / ".." / "share" / "zerosim" / "python"};
  std::error_code error;
  if (fs::exists(directory / ".." / "CMakeCache.txt", error)) candidates.push_back(fs::path(ZEROSIM_SOURCE_DIR) / "python");
  std::string looked;
  for (const fs::path& candidate : candidates) {
    if (fs::is_regular_file(candidate / "zerosim_state.py", error)) return fs::weakly_canonical(candidate, error).string();
    looked += (looked.empty() ? "" : ", ") + candidate.lexically_normal().string();
  }
  return not_found("no Python helpers beside this zerosim (looked in " + looked + ")");
}

}  // namespace zerosim
