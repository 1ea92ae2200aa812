// Real-kill mode: the crash exploration's points, each run in a child process on real files
// and killed with SIGKILL at the crash point; the parent then resumes from the directory the
// child left and compares with the uninterrupted run, as explore_save_crashes does on SimDisk.
//
// A SIGKILL loses the process, not the page cache: what this mode proves is that the commit
// protocol and the loader are right about a dead writer (partial tags, temporary files, a
// `latest` not yet moved) on a real file system, with libaio and O_DIRECT where the disk
// allows; power loss is SimDisk's business.
#pragma once

#include <string>

#include "sim/crash_explorer.h"

namespace zerosim {

// `directory` is a real directory for the cases (created; each case gets a subdirectory,
// removed when it passed). nvme_path of the scenario is placed under it.
Result<ExplorationResult> explore_with_real_kills(const CrashScenario& scenario, const std::string& directory);

}  // namespace zerosim
