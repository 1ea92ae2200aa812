#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/env/disk.h"
#include "core/env/posix_async_io.h"

namespace zerosim {
namespace {

std::string errno_text(int error_number) { return std::string(std::strerror(error_number)); }

Status errno_status(int error_number, const std::string& what) {
  std::string message = what + ": " + errno_text(error_number);
  switch (error_number) {
    case ENOENT: return not_found(message);
    case ENOSPC:
    case EDQUOT: return resource_exhausted(message);
    case EEXIST: return Status(StatusCode::kAlreadyExists, message);
    case EACCES:
    case EPERM:
    case EROFS: return failed_precondition(message);
    case EINVAL: return invalid_argument(message);
    default: return io_error(message);
  }
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int descriptor, bool direct) : File(std::move(path)), descriptor_(descriptor), direct_(direct) {}
  int native_descriptor() const override { return descriptor_; }
  bool direct_io() const override { return direct_; }
  ~PosixFile() override {
    if (descriptor_ >= 0) ::close(descriptor_);
  }

  Status read_exact(uint64_t offset_bytes, std::span<std::byte> buffer) override {
    uint64_t done_bytes = 0;
    while (done_bytes < buffer.size()) {
      ssize_t count = ::pread(descriptor_, buffer.data() + done_bytes, buffer.size() - done_bytes,
                              static_cast<off_t>(offset_bytes + done_bytes));
      if (count < 0) {
        if (errno == EINTR) continue;
        return errno_status(errno, "read " + path() + " at offset " + std::to_string(offset_bytes + done_bytes) +
                                       " length " + std::to_string(buffer.size() - done_bytes));
      }
      if (count == 0) {
        return data_loss("short read of " + path() + ": wanted " + std::to_string(buffer.size()) +
                         " bytes at offset " + std::to_string(offset_bytes) + ", file ends after " +
                         std::to_string(done_bytes));
      }
      done_bytes += static_cast<uint64_t>(count);
    }
    return Status();
  }

  Status write_all(uint64_t offset_bytes, std::span<const std::byte> data) override {
    uint64_t done_bytes = 0;
    while (done_bytes < data.size()) {
      ssize_t count = ::pwrite(descriptor_, data.data() + done_bytes, data.size() - done_bytes,
                               static_cast<off_t>(offset_bytes + done_bytes));
      if (count < 0) {
        if (errno == EINTR) continue;
        return errno_status(errno, "write " + path() + " at offset " + std::to_string(offset_bytes + done_bytes) +
                                       " length " + std::to_string(data.size() - done_bytes));
      }
      if (count == 0) {
        return io_error("write of " + path() + " made no progress at offset " +
                        std::to_string(offset_bytes + done_bytes));
      }
      done_bytes += static_cast<uint64_t>(count);
    }
    return Status();
  }

  Result<uint64_t> size_bytes() override {
    struct stat file_status {};
    if (::fstat(descriptor_, &file_status) != 0) return errno_status(errno, "stat " + path());
    return static_cast<uint64_t>(file_status.st_size);
  }

  Status truncate(uint64_t size_bytes) override {
    if (::ftruncate(descriptor_, static_cast<off_t>(size_bytes)) != 0) {
      return errno_status(errno, "truncate " + path() + " to " + std::to_string(size_bytes) + " bytes");
    }
    return Status();
  }

  Status sync() override {
    if (::fsync(descriptor_) != 0) return errno_status(errno, "fsync " + path());
    return Status();
  }

  Status start_writeback(uint64_t offset_bytes, uint64_t length_bytes) override {
    if (::sync_file_range(descriptor_, static_cast<off_t>(offset_bytes), static_cast<off_t>(length_bytes),
                          SYNC_FILE_RANGE_WRITE) != 0) {
      // A file system without the call (or a descriptor it does not apply to) only loses the
      // head start: sync() still makes the content durable. An I/O error is reported.
      if (errno == EINVAL || errno == ESPIPE || errno == ENOSYS || errno == EOPNOTSUPP) return Status();
      return errno_status(errno, "sync_file_range " + path() + " at offset " + std::to_string(offset_bytes) +
                                     " length " + std::to_string(length_bytes));
    }
    return Status();
  }

  Status close() override {
    if (descriptor_ < 0) return Status();
    int descriptor = descriptor_;
    descriptor_ = -1;
    if (::close(descriptor) != 0) return errno_status(errno, "close " + path());
    return Status();
  }

 private:
  int descriptor_;
  bool direct_;
};

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int descriptor) : descriptor_(descriptor) {}
  ~PosixFileLock() override { ::close(descriptor_); }  // closing releases the flock

 private:
  int descriptor_;
};

class PosixDisk final : public Disk {
 public:
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path) override {
    const int descriptor = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (descriptor < 0) return errno_status(errno, "open lock file " + path);
    if (::flock(descriptor, LOCK_EX | LOCK_NB) != 0) {
      const int error_number = errno;
      ::close(descriptor);
      if (error_number == EWOULDBLOCK) {
        return failed_precondition(path + " is locked by another zerosim run using the same directory");
      }
      return errno_status(error_number, "lock " + path);
    }
    return std::unique_ptr<FileLock>(new PosixFileLock(descriptor));
  }

  Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) override {
    int flags = O_CLOEXEC;
    switch (options.mode) {
      case OpenMode::kReadOnly: flags |= O_RDONLY; break;
      case OpenMode::kReadWrite: flags |= O_RDWR; break;
      case OpenMode::kCreateReadWrite: flags |= O_RDWR | O_CREAT; break;
      case OpenMode::kCreateTruncate: flags |= O_RDWR | O_CREAT | O_TRUNC; break;
    }
    if (options.direct_io) flags |= O_DIRECT;
    int descriptor;
    do {
      descriptor = ::open(path.c_str(), flags, options.permissions);
    } while (descriptor < 0 && errno == EINTR);
    if (descriptor < 0) return errno_status(errno, "open " + path);
    return std::unique_ptr<File>(new PosixFile(path, descriptor, options.direct_io));
  }

  Status create_directories(const std::string& path) override {
    std::error_code error;
    std::filesystem::create_directories(path, error);
    if (error) return errno_status(error.value(), "create directory " + path);
    return Status();
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return errno_status(errno, "remove " + path);
    return Status();
  }

  Status remove_tree(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) return errno_status(error.value(), "remove tree " + path);
    return Status();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_status(errno, "rename " + from + " to " + to);
    return Status();
  }

  Status sync_directory(const std::string& path) override {
    int descriptor = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (descriptor < 0) return errno_status(errno, "open directory " + path + " for fsync");
    int result = ::fsync(descriptor);
    int saved_errno = errno;
    ::close(descriptor);
    if (result != 0) return errno_status(saved_errno, "fsync directory " + path);
    return Status();
  }

  Result<bool> exists(const std::string& path) override {
    struct stat path_status {};
    if (::stat(path.c_str(), &path_status) == 0) return true;
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return errno_status(errno, "stat " + path);
  }

  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    DIR* directory = ::opendir(path.c_str());
    if (directory == nullptr) return errno_status(errno, "list directory " + path);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* entry = ::readdir(directory)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    int saved_errno = errno;
    ::closedir(directory);
    if (saved_errno != 0) return errno_status(saved_errno, "read directory " + path);
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<uint64_t> available_bytes(const std::string& path) override {
    struct statvfs file_system {};
    if (::statvfs(path.c_str(), &file_system) != 0) return errno_status(errno, "statvfs " + path);
    return static_cast<uint64_t>(file_system.f_bavail) * file_system.f_frsize;
  }

  Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) override {
    return make_posix_async_queue(options, engine == AsyncEngine::kLibaio);
  }
};

}  // namespace

std::unique_ptr<Disk> make_posix_disk() { return std::make_unique<PosixDisk>(); }

Status write_whole_file(Disk& disk, const std::string& path, std::span<const std::byte> data, bool sync) {
  FileOpenOptions options;
  options.mode = OpenMode::kCreateTruncate;
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, options));
  ZEROSIM_RETURN_IF_ERROR(file->write_all(0, data));
  if (sync) ZEROSIM_RETURN_IF_ERROR(file->sync());
  return file->close();
}

Result<std::vector<std::byte>> read_whole_file(Disk& disk, const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
  std::vector<std::byte> content(size);
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(0, content));
  ZEROSIM_RETURN_IF_ERROR(file->close());
  return content;
}

}  // namespace zerosim
