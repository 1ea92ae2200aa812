// libzerosim_record.so: the LD_PRELOAD interposer `zerosim exec` runs a program under. It sees
// the C library calls a program (and every library it loads: CPython, libstdc++'s streams,
// libaio) makes to change files, and appends one record per call that touches a watched
// directory to the recording (sim/fs_recording.h gives the format), after the real call
// succeeded, with the bytes written.
//
// Why an interposer: it runs at the speed of the program (no stop per system call as ptrace or
// seccomp notification cost), needs no privilege (FUSE needs /dev/fuse, and changes the file
// system's own durability), and sees exactly the calls whose durability the program decides.
// Its limits (README, "zerosim exec"): statically linked programs and raw system calls are not
// seen; C stdio's buffered writes are not seen (glibc's fwrite calls its internal write, not
// the interposable one: CPython and libstdc++ do not use stdio for files); writes through mmap
// and io_uring are not seen; libaio writes are recorded at submission; sendfile and
// copy_file_range are recorded as writes of the bytes read back from their source.
//
// Environment: ZEROSIM_RECORD (the recording's path), ZEROSIM_WATCH (absolute directories,
// ':'-separated), ZEROSIM_STATE_LOG (the state log: its appended lines are recorded as
// kStateLine, in order with the file operations). Without ZEROSIM_RECORD nothing is recorded.
#include <dlfcn.h>
#include <fcntl.h>
#include <libaio.h>
#include <stdarg.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/fs_recording.h"

namespace {

using zerosim::FsRecord;
using zerosim::FsRecordKind;

template <typename Function>
Function real(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_NEXT, name));
}

struct FdInfo {
  std::string path;
  bool append = false;
  bool state_log = false;
};

struct Recorder {
  std::mutex mutex;
  bool active = false;
  int log_fd = -1;
  std::vector<std::string> watched;
  std::string state_log;
  std::unordered_map<int, FdInfo> fds;
};

Recorder& recorder() {
  static Recorder* instance = new Recorder();  // never destroyed: calls may come during exit
  return *instance;
}

// Lexically normal absolute path: "." and ".." resolved, no doubled or trailing '/'.
std::string normalize(const std::string& path) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= path.size()) {
    size_t next = path.find('/', at);
    if (next == std::string::npos) next = path.size();
    const std::string part = path.substr(at, next - at);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    at = next + 1;
  }
  std::string out;
  for (const std::string& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

std::string absolute(int directory_fd, const char* path) {
  if (path == nullptr) return "";
  if (path[0] == '/') return normalize(path);
  std::string base;
  if (directory_fd == AT_FDCWD) {
    char buffer[4096];
    if (getcwd(buffer, sizeof(buffer)) == nullptr) return "";
    base = buffer;
  } else {
    char link[64], buffer[4096];
    std::snprintf(link, sizeof(link), "/proc/self/fd/%d", directory_fd);
    const ssize_t length = readlink(link, buffer, sizeof(buffer) - 1);
    if (length <= 0) return "";
    base.assign(buffer, static_cast<size_t>(length));
  }
  return normalize(base + "/" + path);
}

bool is_watched(const Recorder& r, const std::string& path) {
  for (const std::string& directory : r.watched) {
    if (path == directory || (path.size() > directory.size() && path.compare(0, directory.size(), directory) == 0 &&
                              path[directory.size()] == '/')) {
      return true;
    }
  }
  return false;
}

bool is_ancestor_of_watched(const Recorder& r, const std::string& path) {
  for (const std::string& directory : r.watched) {
    if (path == "/" || (directory.size() > path.size() && directory.compare(0, path.size(), path) == 0 &&
                        directory[path.size()] == '/')) {
      return true;
    }
  }
  return false;
}

__attribute__((constructor)) void start_recording() {
  Recorder& r = recorder();
  const char* log = std::getenv("ZEROSIM_RECORD");
  const char* watch = std::getenv("ZEROSIM_WATCH");
  if (log == nullptr || watch == nullptr || log[0] == '\0') return;
  std::string list = watch;
  size_t at = 0;
  while (at <= list.size()) {
    size_t next = list.find(':', at);
    if (next == std::string::npos) next = list.size();
    if (next > at) r.watched.push_back(normalize(list.substr(at, next - at)));
    at = next + 1;
  }
  if (const char* state_log = std::getenv("ZEROSIM_STATE_LOG")) r.state_log = absolute(AT_FDCWD, state_log);
  using OpenFunction = int (*)(const char*, int, ...);
  r.log_fd = real<OpenFunction>("open")(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  r.active = r.log_fd >= 0;
}

// Appends one record whole (one write: records of concurrent processes never interleave).
void append(Recorder& r, const FsRecord& record) {
  const std::string bytes = zerosim::encode_fs_record(record);
  using WriteFunction = ssize_t (*)(int, const void*, size_t);
  static WriteFunction real_write = real<WriteFunction>("write");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = real_write(r.log_fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      // A recording with a hole would be replayed wrong: stop the program, loudly.
      static const char message[] = "zerosim record: cannot append to the recording (ZEROSIM_RECORD)\n";
      (void)!::write(2, message, sizeof(message) - 1);
      _exit(86);
    }
    done += static_cast<size_t>(wrote);
  }
}

FsRecord make_record(FsRecordKind kind, int fd, std::string path) {
  FsRecord record;
  record.kind = kind;
  record.pid = static_cast<int32_t>(getpid());
  record.fd = fd;
  record.path = std::move(path);
  return record;
}

void after_open(int fd, int directory_fd, const char* path, int flags, bool existed) {
  Recorder& r = recorder();
  if (!r.active || fd < 0) return;
  const std::string full = absolute(directory_fd, path);
  std::lock_guard lock(r.mutex);
  r.fds.erase(fd);
  if (!r.state_log.empty() && full == r.state_log) {
    r.fds[fd] = FdInfo{full, true, true};
    return;
  }
  struct stat status {};
  const bool directory = fstat(fd, &status) == 0 && S_ISDIR(status.st_mode);
  // A watched path, or a directory above a watched one (its fsync makes a new watched
  // directory's name durable).
  if (!is_watched(r, full) && !(directory && is_ancestor_of_watched(r, full))) return;
  r.fds[fd] = FdInfo{full, (flags & O_APPEND) != 0, false};
  FsRecord record = make_record(FsRecordKind::kOpen, fd, full);
  if (!existed && (flags & O_CREAT) != 0) record.flags |= zerosim::kFlagCreated;
  if (existed && (flags & O_TRUNC) != 0 && (flags & O_ACCMODE) != O_RDONLY) record.flags |= zerosim::kFlagTruncated;
  if (directory) record.flags |= zerosim::kFlagDirectory;
  append(r, record);
}

bool exists_at(int directory_fd, const char* path) {
  struct stat status {};
  return path != nullptr && fstatat(directory_fd, path, &status, 0) == 0;
}

// The offset a write() is about to use (an O_APPEND file: its end).
int64_t offset_before_write(int fd, const FdInfo& info) {
  if (info.append) {
    struct stat status {};
    return fstat(fd, &status) == 0 ? status.st_size : 0;
  }
  return lseek(fd, 0, SEEK_CUR);
}

void record_write(int fd, int64_t offset, const void* data, size_t size) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  auto found = r.fds.find(fd);
  if (found == r.fds.end() || size == 0) return;
  const char* bytes = static_cast<const char*>(data);
  constexpr size_t kMostPerRecord = size_t{1} << 30;  // a record's data length is 32 bits
  for (size_t done = 0; done < size; done += kMostPerRecord) {
    const size_t piece = std::min(kMostPerRecord, size - done);
    FsRecord record = make_record(found->second.state_log ? FsRecordKind::kStateLine : FsRecordKind::kWrite, fd,
                                  found->second.path);
    record.offset_bytes = static_cast<uint64_t>(offset) + done;
    record.data.assign(bytes + done, piece);
    append(r, record);
  }
}

// Whether `fd` is one this recorder follows, and its info (copied under the lock).
bool followed(int fd, FdInfo* info) {
  Recorder& r = recorder();
  if (!r.active) return false;
  std::lock_guard lock(r.mutex);
  auto found = r.fds.find(fd);
  if (found == r.fds.end()) return false;
  *info = found->second;
  return true;
}

void record_path_operation(FsRecordKind kind, const std::string& path, const std::string& second = "",
                           uint64_t length = 0) {
  Recorder& r = recorder();
  if (!r.active) return;
  if (!is_watched(r, path) && !(kind == FsRecordKind::kRename && is_watched(r, second))) return;
  std::lock_guard lock(r.mutex);
  FsRecord record = make_record(kind, -1, path);
  record.second_path = second;
  record.length_bytes = length;
  append(r, record);
}

int open_common(const char* name, int directory_fd, const char* path, int flags, mode_t mode) {
  const bool existed = recorder().active && exists_at(directory_fd, path);
  int fd;
  if (directory_fd == AT_FDCWD && std::strcmp(name, "open") == 0) {
    fd = real<int (*)(const char*, int, ...)>("open")(path, flags, mode);
  } else {
    fd = real<int (*)(int, const char*, int, ...)>("openat")(directory_fd, path, flags, mode);
  }
  if (fd >= 0) after_open(fd, directory_fd, path, flags, existed);
  return fd;
}

mode_t mode_argument(int flags, va_list arguments) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(arguments, int)) : 0;
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_argument(flags, arguments);
  va_end(arguments);
  return open_common("open", AT_FDCWD, path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_argument(flags, arguments);
  va_end(arguments);
  return open_common("open", AT_FDCWD, path, flags, mode);
}
int __open_2(const char* path, int flags) { return open_common("open", AT_FDCWD, path, flags, 0); }
int __open64_2(const char* path, int flags) { return open_common("open", AT_FDCWD, path, flags, 0); }
int openat(int directory_fd, const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_argument(flags, arguments);
  va_end(arguments);
  return open_common("openat", directory_fd, path, flags, mode);
}
int openat64(int directory_fd, const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_argument(flags, arguments);
  va_end(arguments);
  return open_common("openat", directory_fd, path, flags, mode);
}
int __openat_2(int directory_fd, const char* path, int flags) { return open_common("openat", directory_fd, path, flags, 0); }
int __openat64_2(int directory_fd, const char* path, int flags) {
  return open_common("openat", directory_fd, path, flags, 0);
}
int creat(const char* path, mode_t mode) { return open_common("open", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char* path, mode_t mode) { return open_common("open", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

// C stdio opens (libstdc++'s file streams open through fopen: torch.save to a path does): the
// stream's descriptor is followed, and what the stream flushes through write() is recorded.
// (glibc's own fwrite flushes through its internal write, which is not seen: the limit above.)
namespace {
int stdio_flags(const char* mode) {
  if (mode == nullptr) return 0;
  const bool plus = std::strchr(mode, '+') != nullptr;
  switch (mode[0]) {
    case 'w': return O_CREAT | O_TRUNC | (plus ? O_RDWR : O_WRONLY);
    case 'a': return O_CREAT | O_APPEND | (plus ? O_RDWR : O_WRONLY);
    default: return plus ? O_RDWR : O_RDONLY;
  }
}
FILE* after_fopen(FILE* stream, const char* path, const char* mode, bool existed) {
  if (stream != nullptr) after_open(fileno(stream), AT_FDCWD, path, stdio_flags(mode), existed);
  return stream;
}
}  // namespace

FILE* fopen(const char* path, const char* mode) {
  const bool existed = recorder().active && exists_at(AT_FDCWD, path);
  return after_fopen(real<FILE* (*)(const char*, const char*)>("fopen")(path, mode), path, mode, existed);
}
FILE* fopen64(const char* path, const char* mode) {
  const bool existed = recorder().active && exists_at(AT_FDCWD, path);
  return after_fopen(real<FILE* (*)(const char*, const char*)>("fopen64")(path, mode), path, mode, existed);
}

ssize_t write(int fd, const void* data, size_t size) {
  static auto real_write = real<ssize_t (*)(int, const void*, size_t)>("write");
  FdInfo info;
  if (!followed(fd, &info)) return real_write(fd, data, size);
  const int64_t offset = offset_before_write(fd, info);
  const ssize_t wrote = real_write(fd, data, size);
  if (wrote > 0) record_write(fd, offset, data, static_cast<size_t>(wrote));
  return wrote;
}

ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) {
  static auto real_pwrite = real<ssize_t (*)(int, const void*, size_t, off_t)>("pwrite");
  const ssize_t wrote = real_pwrite(fd, data, size, offset);
  FdInfo info;
  if (wrote > 0 && followed(fd, &info)) record_write(fd, offset, data, static_cast<size_t>(wrote));
  return wrote;
}
ssize_t pwrite64(int fd, const void* data, size_t size, off64_t offset) {
  static auto real_pwrite64 = real<ssize_t (*)(int, const void*, size_t, off64_t)>("pwrite64");
  const ssize_t wrote = real_pwrite64(fd, data, size, offset);
  FdInfo info;
  if (wrote > 0 && followed(fd, &info)) record_write(fd, offset, data, static_cast<size_t>(wrote));
  return wrote;
}

namespace {
std::string gather(const struct iovec* vectors, int count, size_t bytes) {
  std::string data;
  data.reserve(bytes);
  for (int i = 0; i < count && data.size() < bytes; ++i) {
    const size_t take = std::min(vectors[i].iov_len, bytes - data.size());
    data.append(static_cast<const char*>(vectors[i].iov_base), take);
  }
  return data;
}
}  // namespace

ssize_t writev(int fd, const struct iovec* vectors, int count) {
  static auto real_writev = real<ssize_t (*)(int, const struct iovec*, int)>("writev");
  FdInfo info;
  if (!followed(fd, &info)) return real_writev(fd, vectors, count);
  const int64_t offset = offset_before_write(fd, info);
  const ssize_t wrote = real_writev(fd, vectors, count);
  if (wrote > 0) {
    const std::string data = gather(vectors, count, static_cast<size_t>(wrote));
    record_write(fd, offset, data.data(), data.size());
  }
  return wrote;
}
ssize_t pwritev(int fd, const struct iovec* vectors, int count, off_t offset) {
  static auto real_pwritev = real<ssize_t (*)(int, const struct iovec*, int, off_t)>("pwritev");
  const ssize_t wrote = real_pwritev(fd, vectors, count, offset);
  FdInfo info;
  if (wrote > 0 && followed(fd, &info)) {
    const std::string data = gather(vectors, count, static_cast<size_t>(wrote));
    record_write(fd, offset, data.data(), data.size());
  }
  return wrote;
}

int ftruncate(int fd, off_t length) {
  static auto real_ftruncate = real<int (*)(int, off_t)>("ftruncate");
  const int result = real_ftruncate(fd, length);
  FdInfo info;
  if (result == 0 && followed(fd, &info)) {
    Recorder& r = recorder();
    std::lock_guard lock(r.mutex);
    FsRecord record = make_record(FsRecordKind::kTruncate, fd, info.path);
    record.length_bytes = static_cast<uint64_t>(length);
    append(r, record);
  }
  return result;
}
int ftruncate64(int fd, off64_t length) { return ftruncate(fd, static_cast<off_t>(length)); }
int truncate(const char* path, off_t length) {
  static auto real_truncate = real<int (*)(const char*, off_t)>("truncate");
  const int result = real_truncate(path, length);
  if (result == 0) record_path_operation(FsRecordKind::kTruncate, absolute(AT_FDCWD, path), "", static_cast<uint64_t>(length));
  return result;
}

namespace {
int sync_common(const char* name, int fd) {
  const int result = real<int (*)(int)>(name)(fd);
  FdInfo info;
  if (result == 0 && followed(fd, &info) && !info.state_log) {
    Recorder& r = recorder();
    std::lock_guard lock(r.mutex);
    append(r, make_record(FsRecordKind::kSync, fd, info.path));
  }
  return result;
}
}  // namespace

int fsync(int fd) { return sync_common("fsync", fd); }
int fdatasync(int fd) { return sync_common("fdatasync", fd); }

int close(int fd) {
  static auto real_close = real<int (*)(int)>("close");
  FdInfo info;
  const bool was_followed = followed(fd, &info);
  const int result = real_close(fd);
  if (was_followed) {
    Recorder& r = recorder();
    std::lock_guard lock(r.mutex);
    r.fds.erase(fd);
    if (!info.state_log) append(r, make_record(FsRecordKind::kClose, fd, info.path));
  }
  return result;
}

namespace {
int after_duplicate(int old_fd, int new_fd) {
  FdInfo info;
  if (new_fd >= 0 && followed(old_fd, &info)) {
    Recorder& r = recorder();
    std::lock_guard lock(r.mutex);
    r.fds[new_fd] = info;
    if (!info.state_log) {
      FsRecord record = make_record(FsRecordKind::kDuplicate, old_fd, info.path);
      record.offset_bytes = static_cast<uint64_t>(new_fd);
      append(r, record);
    }
  } else if (new_fd >= 0) {
    Recorder& r = recorder();
    std::lock_guard lock(r.mutex);
    r.fds.erase(new_fd);
  }
  return new_fd;
}
}  // namespace

int dup(int fd) { return after_duplicate(fd, real<int (*)(int)>("dup")(fd)); }
int dup2(int fd, int target) { return after_duplicate(fd, real<int (*)(int, int)>("dup2")(fd, target)); }
int dup3(int fd, int target, int flags) { return after_duplicate(fd, real<int (*)(int, int, int)>("dup3")(fd, target, flags)); }

int rename(const char* from, const char* to) {
  const int result = real<int (*)(const char*, const char*)>("rename")(from, to);
  if (result == 0) record_path_operation(FsRecordKind::kRename, absolute(AT_FDCWD, from), absolute(AT_FDCWD, to));
  return result;
}
int renameat(int from_directory, const char* from, int to_directory, const char* to) {
  const int result = real<int (*)(int, const char*, int, const char*)>("renameat")(from_directory, from, to_directory, to);
  if (result == 0) {
    record_path_operation(FsRecordKind::kRename, absolute(from_directory, from), absolute(to_directory, to));
  }
  return result;
}
int renameat2(int from_directory, const char* from, int to_directory, const char* to, unsigned int flags) {
  const int result = real<int (*)(int, const char*, int, const char*, unsigned int)>("renameat2")(
      from_directory, from, to_directory, to, flags);
  if (result == 0) {
    record_path_operation(FsRecordKind::kRename, absolute(from_directory, from), absolute(to_directory, to));
  }
  return result;
}

int link(const char* from, const char* to) {
  const int result = real<int (*)(const char*, const char*)>("link")(from, to);
  if (result == 0) record_path_operation(FsRecordKind::kLink, absolute(AT_FDCWD, from), absolute(AT_FDCWD, to));
  return result;
}
int linkat(int from_directory, const char* from, int to_directory, const char* to, int flags) {
  const int result = real<int (*)(int, const char*, int, const char*, int)>("linkat")(from_directory, from, to_directory, to, flags);
  if (result == 0) record_path_operation(FsRecordKind::kLink, absolute(from_directory, from), absolute(to_directory, to));
  return result;
}

int unlink(const char* path) {
  const int result = real<int (*)(const char*)>("unlink")(path);
  if (result == 0) record_path_operation(FsRecordKind::kUnlink, absolute(AT_FDCWD, path));
  return result;
}
int unlinkat(int directory_fd, const char* path, int flags) {
  const int result = real<int (*)(int, const char*, int)>("unlinkat")(directory_fd, path, flags);
  if (result == 0) {
    record_path_operation((flags & AT_REMOVEDIR) != 0 ? FsRecordKind::kRemoveDirectory : FsRecordKind::kUnlink,
                          absolute(directory_fd, path));
  }
  return result;
}
int mkdir(const char* path, mode_t mode) {
  const int result = real<int (*)(const char*, mode_t)>("mkdir")(path, mode);
  if (result == 0) record_path_operation(FsRecordKind::kMakeDirectory, absolute(AT_FDCWD, path));
  return result;
}
int mkdirat(int directory_fd, const char* path, mode_t mode) {
  const int result = real<int (*)(int, const char*, mode_t)>("mkdirat")(directory_fd, path, mode);
  if (result == 0) record_path_operation(FsRecordKind::kMakeDirectory, absolute(directory_fd, path));
  return result;
}
int rmdir(const char* path) {
  const int result = real<int (*)(const char*)>("rmdir")(path);
  if (result == 0) record_path_operation(FsRecordKind::kRemoveDirectory, absolute(AT_FDCWD, path));
  return result;
}

// sendfile and copy_file_range (Python's shutil.copyfile uses them): the bytes that landed in a
// followed file are read back from the source, at the source offset the call used.
namespace {
void record_copy(int in_fd, int64_t source_offset, int out_fd, int64_t target_offset, ssize_t copied) {
  if (copied <= 0) return;
  std::string data(static_cast<size_t>(copied), '\0');
  static auto real_pread = real<ssize_t (*)(int, void*, size_t, off_t)>("pread");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t got = real_pread(in_fd, data.data() + done, data.size() - done, source_offset + static_cast<int64_t>(done));
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  data.resize(done);
  record_write(out_fd, target_offset, data.data(), data.size());
}
}  // namespace

ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  static auto real_sendfile = real<ssize_t (*)(int, int, off_t*, size_t)>("sendfile");
  FdInfo info;
  if (!followed(out_fd, &info)) return real_sendfile(out_fd, in_fd, offset, count);
  const int64_t source = offset != nullptr ? *offset : lseek(in_fd, 0, SEEK_CUR);
  const int64_t target = offset_before_write(out_fd, info);
  const ssize_t copied = real_sendfile(out_fd, in_fd, offset, count);
  record_copy(in_fd, source, out_fd, target, copied);
  return copied;
}
ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  return sendfile(out_fd, in_fd, reinterpret_cast<off_t*>(offset), count);
}

ssize_t copy_file_range(int in_fd, off64_t* in_offset, int out_fd, off64_t* out_offset, size_t count, unsigned int flags) {
  static auto real_copy = real<ssize_t (*)(int, off64_t*, int, off64_t*, size_t, unsigned int)>("copy_file_range");
  FdInfo info;
  if (!followed(out_fd, &info)) return real_copy(in_fd, in_offset, out_fd, out_offset, count, flags);
  const int64_t source = in_offset != nullptr ? *in_offset : lseek(in_fd, 0, SEEK_CUR);
  const int64_t target = out_offset != nullptr ? *out_offset : offset_before_write(out_fd, info);
  const ssize_t copied = real_copy(in_fd, in_offset, out_fd, out_offset, count, flags);
  record_copy(in_fd, source, out_fd, target, copied);
  return copied;
}

// libaio: a submitted pwrite is recorded at submission (its data is in the buffer now).
int io_submit(io_context_t context, long count, struct iocb** requests) {
  static auto real_submit = real<int (*)(io_context_t, long, struct iocb**)>("io_submit");
  if (real_submit == nullptr) {
    errno = ENOSYS;
    return -ENOSYS;
  }
  const int submitted = real_submit(context, count, requests);
  for (int i = 0; i < submitted; ++i) {
    const struct iocb* request = requests[i];
    FdInfo info;
    if (request->aio_lio_opcode == IO_CMD_PWRITE && followed(request->aio_fildes, &info)) {
      record_write(request->aio_fildes, request->u.c.offset, request->u.c.buf, request->u.c.nbytes);
    }
  }
  return submitted;
}

}  // extern "C"
