#include "core/swap/swap_directory.h"

namespace zerosim {

Result<SwapDirectory> open_swap_directory(Disk& disk, const std::string& path, const std::string& run_id,
                                          std::string* engine_note) {
  SwapDirectory directory;
  directory.path = path;
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(path));
  Result<std::unique_ptr<FileLock>> lock = disk.lock_file(path + "/.lock");
  if (!lock.ok()) {
    if (lock.status().code() != StatusCode::kFailedPrecondition) return lock.status();
    return failed_precondition(lock.status().message() + " (run id " + run_id +
                               "); give this run another --run-id or nvme_path");
  }
  directory.lock = std::move(lock).value();

  // Probe O_DIRECT once: tmpfs (before Linux 6.6) and some overlay file systems refuse it.
  const std::string probe_path = path + "/.direct-io-probe";
  FileOpenOptions probe_options;
  probe_options.mode = OpenMode::kCreateTruncate;
  probe_options.direct_io = true;
  Result<std::unique_ptr<File>> probe = disk.open(probe_path, probe_options);
  if (probe.ok()) {
    ZEROSIM_RETURN_IF_ERROR((*probe)->close());
  } else if (probe.status().code() == StatusCode::kInvalidArgument) {
    directory.direct_io = false;
    if (engine_note != nullptr) {
      *engine_note = "O_DIRECT is refused on " + path + " (tmpfs or overlay?); swap I/O uses the pread/pwrite engine there";
    }
  } else {
    return probe.status();
  }
  if (Result<bool> exists = disk.exists(probe_path); exists.ok() && *exists) {
    ZEROSIM_RETURN_IF_ERROR(disk.remove_file(probe_path));
  }
  return directory;
}

}  // namespace zerosim
