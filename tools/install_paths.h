// Where an installed or built zerosim finds what it ships, from its own location, never from the
// working directory: `zerosim suite` run from any directory finds the scenario library that came
// with this binary.
//
// Installed (cmake --install, the .deb): <prefix>/bin/zerosim, <prefix>/share/zerosim/scenarios/
// library. Build tree (<build>/tools/zerosim, with <build>/CMakeCache.txt): the library of the
// source tree the build was configured from (ZEROSIM_SOURCE_DIR, baked in), wherever the build
// directory is.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace zerosim {

// The directory of the running executable (/proc/self/exe), or of `argv0` made absolute.
std::filesystem::path program_directory(const std::string& argv0);
// The scenario library shipped with this binary: the first of the candidates that exists, or
// kNotFound naming them all.
Result<std::string> shipped_scenario_library(const std::string& argv0);
std::vector<std::filesystem::path> shipped_scenario_library_candidates(const std::string& argv0);
// The Python helpers shipped with this binary (the zerosim_state package, the torch hook and its hooks/
// directory): <prefix>/share/zerosim/python installed, the source tree's python/ from a build tree.
Result<std::string> shipped_python_directory(const std::string& argv0);

}  // namespace zerosim
