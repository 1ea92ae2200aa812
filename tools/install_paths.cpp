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
  return {directory / ".." / "share" / "zerosim" / "scenarios" / "library",  // installed
          directory / ".." / ".." / "scenarios" / "library"};                // <source>/build/tools/zerosim
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

}  // namespace zerosim
