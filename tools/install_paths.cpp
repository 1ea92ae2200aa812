#include "tools/install_paths.h"

namespace zerosim {

namespace fs = std::filesystem;

fs::path program_directory(const std::string& argv0) {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) self = fs::absolute(argv0, error);
  return self.parent_path();
}

namespace {

// Where something shipped with zerosim lies: installed, <prefix>/share/zerosim/<installed>; from a
// build tree (<build>/tools/zerosim beside <build>/CMakeCache.txt), the source tree's <in_source>,
// the tree the build was configured from, wherever the build directory is.
std::vector<fs::path> shipped_candidates(const std::string& argv0, const fs::path& installed, const fs::path& in_source) {
  const fs::path directory = program_directory(argv0);
  std::vector<fs::path> candidates = {directory / ".." / "share" / "zerosim" / installed};
  std::error_code error;
  if (fs::exists(directory / ".." / "CMakeCache.txt", error)) candidates.push_back(fs::path(ZEROSIM_SOURCE_DIR) / in_source);
  return candidates;
}

// The first candidate for which `usable` holds, canonical; else kNotFound: "no WHAT beside this
// zerosim (looked in ...)" and `hint`.
Result<std::string> first_usable(const std::vector<fs::path>& candidates, bool (*usable)(const fs::path&),
                                 const std::string& what, const std::string& hint) {
  std::string looked;
  for (const fs::path& candidate : candidates) {
    std::error_code error;
    if (usable(candidate)) return fs::weakly_canonical(candidate, error).string();
    looked += (looked.empty() ? "" : ", ") + candidate.lexically_normal().string();
  }
  return not_found("no " + what + " beside this zerosim (looked in " + looked + ")" + hint);
}

}  // namespace

std::vector<fs::path> shipped_scenario_library_candidates(const std::string& argv0) {
  return shipped_candidates(argv0, fs::path("scenarios") / "library", fs::path("scenarios") / "library");
}

Result<std::string> shipped_scenario_library(const std::string& argv0) {
  return first_usable(
      shipped_scenario_library_candidates(argv0),
      [](const fs::path& candidate) {
        std::error_code error;
        return fs::is_directory(candidate, error);
      },
      "scenario library", "; give the directory: zerosim suite DIR");
}

Result<std::string> shipped_python_directory(const std::string& argv0) {
  return first_usable(
      shipped_candidates(argv0, "python", "python"),
      [](const fs::path& candidate) {
        std::error_code error;
        return fs::is_regular_file(candidate / "zerosim_state" / "__init__.py", error);
      },
      "Python helpers", "");
}

}  // namespace zerosim
