// One swapper's directory: created, locked for the swapper's lifetime (a second run on it is
// refused), probed for O_DIRECT (the pread/pwrite engine takes over where it is refused), and
// removed when the swapper goes away (swap files are scratch state).
#pragma once

#include <memory>
#include <string>

#include "core/env/disk.h"

namespace zerosim {

struct SwapDirectory {
  std::string path;
  bool direct_io = true;
  std::unique_ptr<FileLock> lock;
  // The engine to ask Disk::make_async_queue for.
  Disk::AsyncEngine engine() const { return direct_io ? Disk::AsyncEngine::kLibaio : Disk::AsyncEngine::kPreadPwrite; }
};

// `engine_note` (if not null) receives one line when O_DIRECT is refused.
Result<SwapDirectory> open_swap_directory(Disk& disk, const std::string& path, const std::string& run_id,
                                          std::string* engine_note);

}  // namespace zerosim
