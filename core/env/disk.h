// The Disk seam: every file and directory operation of the core goes through it.
//
// Why a seam: the same engine runs on a real directory (PosixDisk, and later libaio
// through the async queue) and on the simulator's SimDisk, which models the page cache,
// lost unsynced writes and torn sectors. Durability is explicit: nothing written is
// promised to survive a power loss until File::sync (for content) and
// Disk::sync_directory (for a create, rename or unlink in that directory) return OK.
// Every operation reports failure as a Status that names the path, offset and length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env/async_io.h"
#include "core/status.h"

namespace zerosim {

enum class OpenMode {
  kReadOnly,
  kReadWrite,         // the file must exist
  kCreateReadWrite,   // create if missing, keep content
  kCreateTruncate,    // create or truncate to zero
};

struct FileOpenOptions {
  OpenMode mode = OpenMode::kReadOnly;
  // Ask for unbuffered I/O (O_DIRECT); buffers, offsets and lengths must then be aligned to
  // direct_io_alignment_bytes. A Disk that cannot honour it says so in the error.
  bool direct_io = false;
  uint32_t permissions = 0600;  // for created files
};

class File {
 public:
  virtual ~File() = default;
  const std::string& path() const { return path_; }

  // Reads exactly buffer.size() bytes at offset; a short read is a kDataLoss error naming
  // the path, offset and the lengths expected and found.
  virtual Status read_exact(uint64_t offset_bytes, std::span<std::byte> buffer) = 0;
  // Writes all bytes at offset; a short write or ENOSPC is an error naming path and offset.
  virtual Status write_all(uint64_t offset_bytes, std::span<const std::byte> data) = 0;
  virtual Result<uint64_t> size_bytes() = 0;
  virtual Status truncate(uint64_t size_bytes) = 0;
  // Makes the file's content durable (fsync/fdatasync).
  virtual Status sync() = 0;
  // Starts writing [offset, offset + length) back to the device without waiting (Linux's
  // sync_file_range with SYNC_FILE_RANGE_WRITE), so that a later sync() finds less to do: a
  // large file's writeback then overlaps its writing. Promises nothing about durability (only
  // sync() does); a Disk without such a call does nothing.
  virtual Status start_writeback(uint64_t offset_bytes, uint64_t length_bytes) { return Status(); }
  virtual Status close() = 0;
  // The POSIX descriptor for async engines that drive it directly (libaio); -1 when the file
  // is not a POSIX file (SimDisk), in which case only its own Disk's queue can drive it.
  virtual int native_descriptor() const { return -1; }
  // Whether the file was opened for direct (unbuffered, O_DIRECT) I/O.
  virtual bool direct_io() const { return false; }

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// Held while alive: an exclusive advisory lock on a file (created if missing).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Disk {
 public:
  virtual ~Disk() = default;
  virtual Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) = 0;
  virtual Status create_directories(const std::string& path) = 0;
  virtual Status remove_file(const std::string& path) = 0;
  // Removes a directory and everything under it; a missing directory is OK.
  virtual Status remove_tree(const std::string& path) = 0;
  // Atomic replace of `to` by `from` (POSIX rename semantics).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Makes the directory's entries (creates, renames, unlinks) durable.
  virtual Status sync_directory(const std::string& path) = 0;
  virtual Result<bool> exists(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted so callers see a canonical order.
  virtual Result<std::vector<std::string>> list_directory(const std::string& path) = 0;
  virtual Result<uint64_t> available_bytes(const std::string& path) = 0;
  // Takes an exclusive lock on `path` without waiting; if another process (or another
  // FileLock in this one) holds it, fails with kFailedPrecondition naming the path.
  virtual Result<std::unique_ptr<FileLock>> lock_file(const std::string& path) = 0;
  // Alignment that direct I/O needs for buffers, offsets and lengths on this disk.
  virtual uint64_t direct_io_alignment_bytes() const { return 4096; }
  // An async queue for files of this disk. `engine` picks libaio (needs direct files for real
  // asynchrony) or the pread/pwrite engine, the fallback where O_DIRECT is refused.
  enum class AsyncEngine { kLibaio, kPreadPwrite };
  virtual Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options,
                                                                 AsyncEngine engine) = 0;
};

// Convenience helpers built on the seam (no I/O of their own).
Status write_whole_file(Disk& disk, const std::string& path, std::span<const std::byte> data, bool sync);
Result<std::vector<std::byte>> read_whole_file(Disk& disk, const std::string& path);
// The directory holding `path` (what a rename into it makes durable with sync_directory):
// "." for a bare name, "/" for a file at the root.
inline std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The real implementation: POSIX calls on the host file system. Every system call is
// checked; EINTR is retried; errors carry strerror and the path.
std::unique_ptr<Disk> make_posix_disk();

}  // namespace zerosim
