// What this build of zerosim is: the release version (the project's, from CMakeLists.txt) and
// the git commit it was built from. The one source for every place that records a build: `zerosim
// --version`, the manifest of every checkpoint (zerosim_version), the suite reports.
#pragma once

#include <string>

namespace zerosim {

// 12 hex digits of the commit CMake configured from, or "unknown" for a build outside a git
// checkout (a source tarball: give -DZEROSIM_GIT_COMMIT=... to record one).
const char* zerosim_git_commit();
// "0.1.0+abcdef123456" (semantic versioning's build metadata), "0.1.0" when the commit is unknown.
std::string zerosim_build_version();

}  // namespace zerosim
