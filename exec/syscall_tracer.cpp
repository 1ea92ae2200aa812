#include "exec/syscall_tracer.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "exec/fs_recording.h"

namespace zerosim {

#if !defined(__x86_64__)

Result<TraceResult> trace_command(const TraceOptions&) {
  return unimplemented("zerosim exec's system-call tracer supports x86-64 only");
}

#else

namespace {

// Values the filter returns with SECCOMP_RET_TRACE (PTRACE_GETEVENTMSG reads them back).
constexpr uint16_t kTraced = 1;
constexpr uint16_t kForeignArchitecture = 2;

// The calls that stop the program (a writable shared file mapping is matched on its arguments).
constexpr long kTracedCalls[] = {
    SYS_open,          SYS_openat,          SYS_openat2,     SYS_creat,        SYS_write,        SYS_pwrite64,
    SYS_writev,        SYS_pwritev,         SYS_pwritev2,    SYS_sendfile,     SYS_copy_file_range, SYS_splice,
    SYS_truncate,      SYS_ftruncate,       SYS_fallocate,   SYS_fsync,        SYS_fdatasync,    SYS_sync_file_range,
    SYS_syncfs,        SYS_sync,            SYS_rename,      SYS_renameat,     SYS_renameat2,    SYS_link,
    SYS_linkat,        SYS_symlink,         SYS_symlinkat,   SYS_unlink,       SYS_unlinkat,     SYS_mkdir,
    SYS_mkdirat,       SYS_rmdir,           SYS_close,       SYS_io_submit,    SYS_io_uring_setup,
    SYS_io_uring_enter,
};

// io_uring setup flags and an enter flag newer than some kernel headers (values from the kernel's
// uapi): a ring in the program's own memory, a ring without the index array, a ring entered
// through a registered index instead of its descriptor.
constexpr uint32_t kRingSetupNoMmap = 1u << 14;
constexpr uint32_t kRingSetupNoSqArray = 1u << 16;
constexpr uint32_t kRingEnterRegisteredRing = 1u << 4;

// The submissions that change no file: libuv's epoll batching (PyTorch's rendezvous store) and
// other event-loop rings submit only these. Any other operation is refused by name.
bool is_file_neutral_ring_operation(uint8_t opcode) {
  switch (opcode) {
    case IORING_OP_NOP:
    case IORING_OP_POLL_ADD:
    case IORING_OP_POLL_REMOVE:
    case IORING_OP_TIMEOUT:
    case IORING_OP_TIMEOUT_REMOVE:
    case IORING_OP_ASYNC_CANCEL:
    case IORING_OP_LINK_TIMEOUT:
    case IORING_OP_EPOLL_CTL: return true;
    default: return false;
  }
}

// " (WRITE)" and the like for the operations that touch files, for the refusal; empty for others.
std::string ring_operation_label(uint8_t opcode) {
  switch (opcode) {
    case IORING_OP_READV: return " (READV)";
    case IORING_OP_WRITEV: return " (WRITEV)";
    case IORING_OP_FSYNC: return " (FSYNC)";
    case IORING_OP_READ_FIXED: return " (READ_FIXED)";
    case IORING_OP_WRITE_FIXED: return " (WRITE_FIXED)";
    case IORING_OP_SYNC_FILE_RANGE: return " (SYNC_FILE_RANGE)";
    case IORING_OP_FALLOCATE: return " (FALLOCATE)";
    case IORING_OP_OPENAT: return " (OPENAT)";
    case IORING_OP_CLOSE: return " (CLOSE)";
    case IORING_OP_OPENAT2: return " (OPENAT2)";
    case IORING_OP_READ: return " (READ)";
    case IORING_OP_WRITE: return " (WRITE)";
    case IORING_OP_RENAMEAT: return " (RENAMEAT)";
    case IORING_OP_UNLINKAT: return " (UNLINKAT)";
    case IORING_OP_MKDIRAT: return " (MKDIRAT)";
    case IORING_OP_SYMLINKAT: return " (SYMLINKAT)";
    case IORING_OP_LINKAT: return " (LINKAT)";
    default: return "";
  }
}

// The thread group (process) of a thread, from /proc; -1 when it is gone.
pid_t thread_group_of(pid_t tid) {
  std::FILE* file = std::fopen(("/proc/" + std::to_string(tid) + "/status").c_str(), "re");
  if (file == nullptr) return -1;
  char line[256];
  pid_t group = -1;
  while (std::fgets(line, sizeof line, file) != nullptr) {
    if (std::strncmp(line, "Tgid:", 5) == 0) {
      group = static_cast<pid_t>(std::strtol(line + 5, nullptr, 10));
      break;
    }
  }
  std::fclose(file);
  return group;
}

std::vector<sock_filter> make_filter() {
  std::vector<sock_filter> program;
  auto statement = [&](uint16_t code, uint32_t k) { program.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t if_true, uint8_t if_false) {
    program.push_back(BPF_JUMP(code, k, if_true, if_false));
  };
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  statement(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kForeignArchitecture);
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);  // the x32 ABI
  statement(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kForeignArchitecture);
  for (long call : kTracedCalls) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(call), 0, 1);
    statement(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kTraced);
  }
  // mmap(addr, length, prot, flags, fd, offset): stop only for PROT_WRITE, MAP_SHARED, not anonymous.
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 6);
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2]));
  jump(BPF_JMP | BPF_JSET | BPF_K, PROT_WRITE, 0, 4);
  statement(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[3]));
  jump(BPF_JMP | BPF_JSET | BPF_K, MAP_ANONYMOUS, 2, 0);
  jump(BPF_JMP | BPF_JSET | BPF_K, MAP_SHARED, 0, 1);
  statement(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kTraced);
  statement(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return program;
}

// In the child, after PTRACE_TRACEME and the stop that lets the tracer set its options.
const char* start_traced(void* filter_pointer) {
  auto* filter = static_cast<std::vector<sock_filter>*>(filter_pointer);
  if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) return "ptrace(PTRACE_TRACEME)";
  if (::raise(SIGSTOP) != 0) return "raise(SIGSTOP)";
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl(PR_SET_NO_NEW_PRIVS)";
  sock_fprog program{static_cast<unsigned short>(filter->size()), filter->data()};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) return "prctl(PR_SET_SECCOMP)";
  return nullptr;
}

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

std::string read_link(const std::string& link) {
  char buffer[4096];
  const ssize_t length = ::readlink(link.c_str(), buffer, sizeof(buffer));
  if (length <= 0 || length >= static_cast<ssize_t>(sizeof(buffer))) return "";
  return std::string(buffer, static_cast<size_t>(length));
}

// Bytes [offset, offset + length) of a file, short where it ends or cannot be read.
std::string pread_range(const std::string& path, uint64_t offset, uint64_t length) {
  std::string out(length, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  uint64_t done = 0;
  while (done < length) {
    const ssize_t got = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (got <= 0) break;
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

// The program a stopped tracee runs, as /proc shows its arguments (cut at 400 characters, room
// for a launcher's line such as torchrun's): a refusal names the program, not only its process
// id, which is gone by the time anyone reads it.
// Empty when /proc cannot tell (the process is gone).
std::string process_command_line(pid_t tid) {
  constexpr uint64_t kShownBytes = 400;
  std::string command = pread_range("/proc/" + std::to_string(tid) + "/cmdline", 0, kShownBytes + 1);
  const bool cut = command.size() > kShownBytes;
  command.resize(std::min<uint64_t>(command.size(), kShownBytes));
  while (!command.empty() && command.back() == '\0') command.pop_back();
  for (char& c : command) {
    if (c == '\0') c = ' ';
  }
  if (cut) command += "...";
  return command;
}

// The tracer's view of one stopped task.
class Task {
 public:
  explicit Task(pid_t tid) : tid_(tid) {}

  // Bytes of the task's memory; short when part of the range is not mapped.
  std::string read(uint64_t address, uint64_t length) const {
    std::string out(length, '\0');
    uint64_t done = 0;
    while (done < length) {
      iovec local{out.data() + done, length - done};
      iovec remote{reinterpret_cast<void*>(address + done), length - done};
      const ssize_t got = ::process_vm_readv(tid_, &local, 1, &remote, 1, 0);
      if (got <= 0) break;
      done += static_cast<uint64_t>(got);
    }
    out.resize(done);
    // process_vm_readv refused (or read short): the rest from the mem file.
    if (done < length) out += pread_range(proc("mem"), address + done, length - done);
    return out;
  }

  // One value of the task's memory (a struct of the kernel's ABI, an integer); false, with
  // `value` left as it was, when the whole of it cannot be read.
  template <typename T>
  bool read_value(uint64_t address, T* value) const {
    const std::string bytes = read(address, sizeof(T));
    if (bytes.size() != sizeof(T)) return false;
    std::memcpy(value, bytes.data(), sizeof(T));
    return true;
  }

  std::string read_string(uint64_t address) const {
    std::string out;
    while (out.size() < 4096) {
      const uint64_t at = address + out.size();
      const uint64_t to_page_end = 4096 - (at % 4096);
      const std::string chunk = read(at, to_page_end);
      if (chunk.empty()) break;
      const size_t end = chunk.find('\0');
      if (end != std::string::npos) return out + chunk.substr(0, end);
      out += chunk;
    }
    return out;
  }

  std::string fd_path(long fd) const { return read_link(proc("fd/" + std::to_string(fd))); }
  std::string fd_proc_path(long fd) const { return proc("fd/" + std::to_string(fd)); }

  // "pos" and "flags" of /proc/TID/fdinfo/FD (flags in octal).
  bool fd_info(long fd, uint64_t* position, uint64_t* flags) const {
    std::FILE* file = std::fopen(proc("fdinfo/" + std::to_string(fd)).c_str(), "re");
    if (file == nullptr) return false;
    char line[256];
    bool have_position = false, have_flags = false;
    while (std::fgets(line, sizeof(line), file) != nullptr) {
      unsigned long long value = 0;
      if (std::sscanf(line, "pos: %llu", &value) == 1) {
        *position = value;
        have_position = true;
      } else if (std::sscanf(line, "flags: %llo", &value) == 1) {
        *flags = value;
        have_flags = true;
      }
    }
    std::fclose(file);
    return have_position && have_flags;
  }

  // A path argument made absolute (against the cwd or a directory descriptor), lexically normal,
  // with the real path of its parent directory when that exists (symbolic links resolved).
  std::string resolve(long directory_fd, uint64_t path_address) const {
    const std::string path = read_string(path_address);
    if (path.empty()) return "";
    std::string absolute;
    if (path[0] == '/') {
      absolute = normalize(path);
    } else {
      const std::string base = static_cast<int>(directory_fd) == AT_FDCWD ? read_link(proc("cwd")) : fd_path(directory_fd);
      if (base.empty()) return "";
      absolute = normalize(base + "/" + path);
    }
    const size_t slash = absolute.rfind('/');
    if (slash == 0 || slash == std::string::npos) return absolute;
    char real[PATH_MAX];
    if (::realpath(absolute.substr(0, slash).c_str(), real) == nullptr) return absolute;
    return normalize(std::string(real) + absolute.substr(slash));
  }

  pid_t tid() const { return tid_; }

 private:
  std::string proc(const std::string& rest) const { return "/proc/" + std::to_string(tid_) + "/" + rest; }
  pid_t tid_;
};

// What the entry stop learnt, for the exit stop.
struct InFlight {
  long call = -1;
  user_regs_struct entry{};
  std::string path, second_path;
  bool state_log = false;
  bool directory = false;        // fsync: of a directory
  uint64_t open_flags = 0;
  uint64_t size_before = 0;      // fallocate
  long ring_fd = -1;             // io_uring_setup's result; an mmap or io_uring_enter of this ring
  uint64_t submissions_read = 0; // io_uring_enter: the submissions inspected at entry
};

// An io_uring the program set up, as far as the tracer needs it to read its submissions: the
// kernel's offsets into the submission ring, and where the program mapped the ring and its
// entries.
struct Ring {
  uint32_t setup_flags = 0;
  io_sqring_offsets offsets{};
  uint64_t ring_address = 0;     // the mapping at IORING_OFF_SQ_RING
  uint64_t entries_address = 0;  // the mapping at IORING_OFF_SQES
};

class Tracer {
 public:
  Tracer(const TraceOptions& options, std::FILE* recording) : options_(options), recording_(recording) {
    struct stat info {};
    for (const std::string& root : options_.watched) {
      // The file system of the watched directories (or of their nearest existing ancestor).
      std::string path = root;
      while (::stat(path.c_str(), &info) != 0 && path.size() > 1) path = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
      watched_devices_.insert(info.st_dev);
    }
  }

  Result<TraceResult> run(pid_t root) {
    root_ = root;
    started_.insert(root);
    const long options = PTRACE_O_TRACESECCOMP | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
                         PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL;
    if (::ptrace(PTRACE_SETOPTIONS, root, nullptr, reinterpret_cast<void*>(options)) != 0) {
      return failed_precondition(std::string("ptrace(PTRACE_SETOPTIONS): ") + std::strerror(errno));
    }
    resume(root, PTRACE_CONT, 0);
    while (true) {
      int status = 0;
      const pid_t tid = ::waitpid(-1, &status, __WALL);
      if (tid < 0) {
        if (errno == EINTR) continue;
        if (errno == ECHILD) break;
        return io_error(std::string("waitpid: ") + std::strerror(errno));
      }
      if (WIFEXITED(status) || WIFSIGNALED(status)) {
        in_flight_.erase(tid);
        if (tid == root_) {
          if (WIFEXITED(status)) result_.outcome.exit_code = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) result_.outcome.signal = WTERMSIG(status);
        }
        continue;
      }
      if (!WIFSTOPPED(status)) continue;
      ZEROSIM_RETURN_IF_ERROR(on_stop(tid, status));
    }
    if (std::fflush(recording_) != 0) return io_error("writing the recording " + options_.recording_path + " failed");
    return result_;
  }

 private:
  Status on_stop(pid_t tid, int status) {
    const int signal = WSTOPSIG(status);
    const int event = status >> 16;
    if (event == PTRACE_EVENT_SECCOMP) {
      ++result_.stops;
      return on_entry(tid);
    }
    if (signal == (SIGTRAP | 0x80)) {
      auto found = in_flight_.find(tid);
      if (found != in_flight_.end()) {
        InFlight call = std::move(found->second);
        in_flight_.erase(found);
        ZEROSIM_RETURN_IF_ERROR(on_exit(Task(tid), call));
      }
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_CLONE) {
      unsigned long child = 0;
      ::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child);
      if (event != PTRACE_EVENT_CLONE) ++result_.processes;
      if (started_.count(static_cast<pid_t>(child)) == 0) awaiting_start_.insert(static_cast<pid_t>(child));
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    if (event == PTRACE_EVENT_EXEC) {
      in_flight_.erase(tid);
      if (!rings_.empty()) rings_.erase(thread_group_of(tid));  // the mappings are gone with the old program
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    if (event != 0) {
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    // A new task's first stop (its SIGSTOP may come before its parent's event).
    if (signal == SIGSTOP && (awaiting_start_.count(tid) != 0 || started_.count(tid) == 0)) {
      awaiting_start_.erase(tid);
      started_.insert(tid);
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    siginfo_t info;
    if (::ptrace(PTRACE_GETSIGINFO, tid, nullptr, &info) != 0) {
      resume(tid, PTRACE_CONT, 0);  // a group stop: job control is not emulated
      return Status();
    }
    // A signal for the program: deliver it (and keep the exit stop of a call in flight).
    resume(tid, in_flight_.count(tid) != 0 ? PTRACE_SYSCALL : PTRACE_CONT, signal);
    return Status();
  }

  void resume(pid_t tid, __ptrace_request how, int signal) {
    ::ptrace(how, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal)));
  }

  bool watched(const std::string& path) const {
    for (const std::string& root : options_.watched) {
      if (path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/')) {
        return true;
      }
    }
    return false;
  }

  bool ancestor_of_watched(const std::string& path) const {
    for (const std::string& root : options_.watched) {
      if (path == "/" || (root.size() > path.size() && root.compare(0, path.size(), path) == 0 && root[path.size()] == '/')) {
        return true;
      }
    }
    return false;
  }

  // An open descriptor's current path, or "" when it is not a watched file (a deleted file's
  // writes change nothing a resume can see).
  std::string watched_fd_path(const Task& task, long fd) const {
    const std::string path = task.fd_path(fd);
    if (path.empty() || path[0] != '/') return "";
    if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0) {
      struct stat info {};
      if (::stat(task.fd_proc_path(fd).c_str(), &info) == 0 && info.st_nlink == 0) return "";
    }
    return watched(path) ? path : "";
  }

  void unmodelled(const Task& task, const std::string& what) {
    const std::string command = process_command_line(task.tid());
    const std::string entry =
        "process " + std::to_string(task.tid()) + (command.empty() ? "" : " (" + command + ")") + ": " + what;
    for (const std::string& seen : result_.unmodelled) {
      if (seen == entry) return;
    }
    result_.unmodelled.push_back(entry);
  }

  Status emit(FsRecord record, pid_t tid) {
    record.pid = tid;
    const std::string bytes = encode_fs_record(record);
    if (std::fwrite(bytes.data(), 1, bytes.size(), recording_) != bytes.size()) {
      return io_error("writing the recording " + options_.recording_path + " failed: " + std::strerror(errno));
    }
    ++result_.records;
    return Status();
  }

  Status on_entry(pid_t tid) {
    unsigned long message = 0;
    ::ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &message);
    Task task(tid);
    InFlight call;
    if (::ptrace(PTRACE_GETREGS, tid, nullptr, &call.entry) != 0) {
      resume(tid, PTRACE_CONT, 0);  // the task is gone (killed meanwhile)
      return Status();
    }
    const user_regs_struct& r = call.entry;
    call.call = static_cast<long>(r.orig_rax);
    if (message == kForeignArchitecture) {
      unmodelled(task, "a 32-bit system call (number " + std::to_string(call.call) + "), which the tracer does not decode");
      resume(tid, PTRACE_CONT, 0);
      return Status();
    }
    bool want_exit = false;
    auto watch_fd = [&](long fd) {
      call.path = watched_fd_path(task, fd);
      want_exit = !call.path.empty();
    };
    switch (call.call) {
      case SYS_open:
      case SYS_creat:
      case SYS_openat:
      case SYS_openat2: {
        uint64_t flags = call.call == SYS_open ? r.rsi : call.call == SYS_openat ? r.rdx : O_CREAT | O_WRONLY | O_TRUNC;
        if (call.call == SYS_openat2) task.read_value(r.rdx, &flags);  // open_how's first field
        if ((flags & (O_CREAT | O_TRUNC)) == 0 || (flags & __O_TMPFILE) == __O_TMPFILE) break;
        const bool at = call.call == SYS_openat || call.call == SYS_openat2;
        const std::string path = task.resolve(at ? static_cast<long>(r.rdi) : AT_FDCWD, at ? r.rsi : r.rdi);
        call.open_flags = flags;
        want_exit = watched(path);
        break;
      }
      case SYS_write:
      case SYS_pwrite64:
      case SYS_writev:
      case SYS_pwritev:
      case SYS_pwritev2: {
        const std::string path = task.fd_path(static_cast<long>(r.rdi));
        if (!options_.state_log.empty() && path == options_.state_log) {
          call.state_log = true;
          want_exit = true;
        } else {
          watch_fd(static_cast<long>(r.rdi));
        }
        break;
      }
      case SYS_sendfile: watch_fd(static_cast<long>(r.rdi)); break;
      case SYS_copy_file_range:
      case SYS_splice: watch_fd(static_cast<long>(r.rdx)); break;
      case SYS_ftruncate:
      case SYS_sync_file_range: watch_fd(static_cast<long>(r.rdi)); break;
      case SYS_fallocate: {
        watch_fd(static_cast<long>(r.rdi));
        struct stat info {};
        if (want_exit && ::stat(task.fd_proc_path(static_cast<long>(r.rdi)).c_str(), &info) == 0) {
          call.size_before = static_cast<uint64_t>(info.st_size);
        }
        break;
      }
      case SYS_truncate: want_exit = watched(call.path = task.resolve(AT_FDCWD, r.rdi)); break;
      case SYS_fsync:
      case SYS_fdatasync: {
        const std::string path = task.fd_path(static_cast<long>(r.rdi));
        struct stat info {};
        call.directory = ::stat(task.fd_proc_path(static_cast<long>(r.rdi)).c_str(), &info) == 0 && S_ISDIR(info.st_mode);
        if (!path.empty() && path[0] == '/' && (watched_fd_path(task, static_cast<long>(r.rdi)) == path ||
                                                  (call.directory && ancestor_of_watched(path)))) {
          call.path = path;
          want_exit = true;
        }
        break;
      }
      case SYS_sync: want_exit = true; break;
      case SYS_syncfs: {
        struct stat info {};
        want_exit = ::stat(task.fd_proc_path(static_cast<long>(r.rdi)).c_str(), &info) == 0 &&
                    watched_devices_.count(info.st_dev) != 0;
        break;
      }
      case SYS_rename:
      case SYS_renameat:
      case SYS_renameat2:
      case SYS_link:
      case SYS_linkat: {
        const bool at = call.call != SYS_rename && call.call != SYS_link;
        call.path = task.resolve(at ? static_cast<long>(r.rdi) : AT_FDCWD, at ? r.rsi : r.rdi);
        call.second_path = task.resolve(at ? static_cast<long>(r.rdx) : AT_FDCWD, at ? r.r10 : r.rsi);
        struct stat info {};
        call.directory = ::lstat(call.path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
        want_exit = watched(call.path) || watched(call.second_path);
        break;
      }
      case SYS_symlink: want_exit = watched(call.second_path = task.resolve(AT_FDCWD, r.rsi)); break;
      case SYS_symlinkat: want_exit = watched(call.second_path = task.resolve(static_cast<long>(r.rsi), r.rdx)); break;
      case SYS_unlink:
      case SYS_rmdir:
      case SYS_mkdir: want_exit = watched(call.path = task.resolve(AT_FDCWD, r.rdi)); break;
      case SYS_unlinkat:
      case SYS_mkdirat: want_exit = watched(call.path = task.resolve(static_cast<long>(r.rdi), r.rsi)); break;
      case SYS_close: {
        forget_ring(tid, static_cast<long>(r.rdi));
        // Recorded at entry: after the call the descriptor names nothing.
        const std::string path = watched_fd_path(task, static_cast<long>(r.rdi));
        if (!path.empty()) {
          FsRecord record;
          record.kind = FsRecordKind::kClose;
          record.fd = static_cast<int32_t>(r.rdi);
          record.path = path;
          ZEROSIM_RETURN_IF_ERROR(emit(std::move(record), tid));
        }
        break;
      }
      case SYS_io_submit: want_exit = true; break;
      case SYS_io_uring_setup: want_exit = inspect_ring_setup(task, r); break;
      case SYS_io_uring_enter: want_exit = inspect_ring_submissions(task, r, call); break;
      case SYS_mmap:
        if (find_ring(tid, static_cast<long>(r.r8)) != nullptr) {
          call.ring_fd = static_cast<long>(r.r8);
          want_exit = true;
        } else {
          watch_fd(static_cast<long>(r.r8));
        }
        break;
      default: break;
    }
    if (want_exit) {
      in_flight_[tid] = std::move(call);
      resume(tid, PTRACE_SYSCALL, 0);
    } else {
      resume(tid, PTRACE_CONT, 0);
    }
    return Status();
  }

  // The bytes of a write that returned `written`, from the task's buffers.
  std::string written_bytes(const Task& task, const InFlight& call, uint64_t written) const {
    const user_regs_struct& r = call.entry;
    if (call.call == SYS_write || call.call == SYS_pwrite64) return task.read(r.rsi, written);
    std::string out;
    const std::string vectors = task.read(r.rsi, r.rdx * sizeof(iovec));
    for (size_t i = 0; i + sizeof(iovec) <= vectors.size() && out.size() < written; i += sizeof(iovec)) {
      iovec vector;
      std::memcpy(&vector, vectors.data() + i, sizeof(iovec));
      out += task.read(reinterpret_cast<uint64_t>(vector.iov_base), std::min<uint64_t>(vector.iov_len, written - out.size()));
    }
    return out;
  }

  Status on_exit(const Task& task, const InFlight& call) {
    user_regs_struct r{};
    if (::ptrace(PTRACE_GETREGS, task.tid(), nullptr, &r) != 0) return Status();
    const long result = static_cast<long>(r.rax);
    if (call.call == SYS_mmap ? static_cast<unsigned long>(result) > static_cast<unsigned long>(-4096L) : result < 0) {
      return Status();  // the call failed: it changed nothing
    }
    const user_regs_struct& e = call.entry;
    FsRecord record;
    record.path = call.path;
    switch (call.call) {
      case SYS_open:
      case SYS_creat:
      case SYS_openat:
      case SYS_openat2: {
        record.path = task.fd_path(result);
        if (!watched(record.path)) return Status();
        record.kind = FsRecordKind::kOpen;
        record.fd = static_cast<int32_t>(result);
        if ((call.open_flags & O_TRUNC) != 0) record.flags |= kFlagTruncated;
        if ((call.open_flags & O_CREAT) != 0) record.flags |= kFlagCreated;
        return emit(std::move(record), task.tid());
      }
      case SYS_write:
      case SYS_pwrite64:
      case SYS_writev:
      case SYS_pwritev:
      case SYS_pwritev2: {
        if (result == 0) return Status();
        const long fd = static_cast<long>(e.rdi);
        record.data = written_bytes(task, call, static_cast<uint64_t>(result));
        if (call.state_log) {
          record.kind = FsRecordKind::kStateLine;
          return emit(std::move(record), task.tid());
        }
        uint64_t position = 0, flags = 0;
        if (!task.fd_info(fd, &position, &flags)) {
          unmodelled(task, "a write to " + call.path + " whose descriptor vanished before it could be read");
          return Status();
        }
        const bool positioned = call.call == SYS_pwrite64 || call.call == SYS_pwritev ||
                                (call.call == SYS_pwritev2 && static_cast<long>(e.r10) != -1);
        const uint64_t rwf = call.call == SYS_pwritev2 ? e.r9 : 0;
        if ((rwf & RWF_APPEND) != 0 || (!positioned && (flags & O_APPEND) != 0)) {
          struct stat info {};
          if (::stat(task.fd_proc_path(fd).c_str(), &info) != 0) return io_error("stat of " + call.path + " failed");
          record.offset_bytes = static_cast<uint64_t>(info.st_size) - static_cast<uint64_t>(result);
        } else if (positioned) {
          record.offset_bytes = e.r10;
        } else {
          record.offset_bytes = position - static_cast<uint64_t>(result);
        }
        if (record.data.size() != static_cast<uint64_t>(result)) {
          unmodelled(task, "a write to " + call.path + " whose bytes could not be read from the program's memory");
          return Status();
        }
        record.kind = FsRecordKind::kWrite;
        record.fd = static_cast<int32_t>(fd);
        if ((flags & O_DSYNC) != 0 || (rwf & (RWF_DSYNC | RWF_SYNC)) != 0) record.flags |= kFlagSynchronous;
        return emit(std::move(record), task.tid());
      }
      case SYS_sendfile:
      case SYS_copy_file_range:
      case SYS_splice: {
        if (result == 0) return Status();
        const long fd = static_cast<long>(call.call == SYS_sendfile ? e.rdi : e.rdx);
        const uint64_t offset_pointer = call.call == SYS_sendfile ? 0 : e.r10;
        uint64_t end = 0, flags = 0;
        if (offset_pointer != 0) {
          if (!task.read_value(offset_pointer, &end)) return Status();  // the kernel advanced it past the bytes written
        } else if (!task.fd_info(fd, &end, &flags)) {
          return Status();
        }
        record.kind = FsRecordKind::kWrite;
        record.fd = static_cast<int32_t>(fd);
        record.offset_bytes = end - static_cast<uint64_t>(result);
        record.data = pread_range(task.fd_proc_path(fd), record.offset_bytes, static_cast<uint64_t>(result));
        if (record.data.size() != static_cast<uint64_t>(result)) {
          unmodelled(task, "a copy into " + call.path + " whose bytes could not be read back");
          return Status();
        }
        if ((flags & O_DSYNC) != 0) record.flags |= kFlagSynchronous;
        return emit(std::move(record), task.tid());
      }
      case SYS_truncate:
      case SYS_ftruncate:
        record.kind = FsRecordKind::kTruncate;
        record.fd = call.call == SYS_ftruncate ? static_cast<int32_t>(e.rdi) : -1;
        record.length_bytes = e.rsi;
        return emit(std::move(record), task.tid());
      case SYS_fallocate: return record_fallocate(task, call);
      case SYS_fsync:
      case SYS_fdatasync:
        record.kind = FsRecordKind::kSync;
        record.fd = static_cast<int32_t>(e.rdi);
        if (call.directory) record.flags |= kFlagDirectory;
        return emit(std::move(record), task.tid());
      case SYS_sync_file_range:
        record.kind = FsRecordKind::kSyncRange;
        return emit(std::move(record), task.tid());
      case SYS_sync:
      case SYS_syncfs:
        record.kind = FsRecordKind::kSyncAll;
        return emit(std::move(record), task.tid());
      case SYS_rename:
      case SYS_renameat:
      case SYS_renameat2: return record_rename(task, call);
      case SYS_link:
      case SYS_linkat:
        if (watched(call.second_path)) unmodelled(task, "a hard link " + call.second_path + " (hard links are not modelled)");
        return Status();
      case SYS_symlink:
      case SYS_symlinkat:
        unmodelled(task, "a symbolic link " + call.second_path + " (symbolic links are not modelled)");
        return Status();
      case SYS_unlink:
      case SYS_unlinkat:
        record.kind = call.call == SYS_unlinkat && (e.rdx & AT_REMOVEDIR) != 0 ? FsRecordKind::kRemoveDirectory
                                                                              : FsRecordKind::kUnlink;
        return emit(std::move(record), task.tid());
      case SYS_rmdir: record.kind = FsRecordKind::kRemoveDirectory; return emit(std::move(record), task.tid());
      case SYS_mkdir:
      case SYS_mkdirat: record.kind = FsRecordKind::kMakeDirectory; return emit(std::move(record), task.tid());
      case SYS_io_submit: return record_io_submit(task, call, result);
      case SYS_io_uring_setup: {
        // The kernel filled in the offsets; the ring is known by its descriptor from now on.
        io_uring_params parameters;
        if (!task.read_value(e.rsi, &parameters)) {
          unmodelled(task, "io_uring_setup: the ring's parameters could not be read back");
          return Status();
        }
        Ring ring;
        ring.setup_flags = parameters.flags;
        ring.offsets = parameters.sq_off;
        rings_[thread_group_of(task.tid())][result] = ring;
        return Status();
      }
      case SYS_io_uring_enter:
        if (static_cast<uint64_t>(result) > call.submissions_read) {
          unmodelled(task, "io_uring_enter took " + std::to_string(result) + " submissions where " +
                               std::to_string(call.submissions_read) + " were read before it (another thread added "
                               "to the ring meanwhile): the rest cannot be seen");
        }
        return Status();
      case SYS_mmap:
        if (call.ring_fd >= 0) {
          if (Ring* ring = find_ring(task.tid(), call.ring_fd)) {
            if (e.r9 == IORING_OFF_SQ_RING) ring->ring_address = static_cast<uint64_t>(result);
            if (e.r9 == IORING_OFF_SQES) ring->entries_address = static_cast<uint64_t>(result);
          }
          return Status();
        }
        unmodelled(task, "a writable shared mapping of " + call.path + " (stores to it are not system calls)");
        return Status();
      default: return Status();
    }
  }

  // (Most programs set up no ring: then no lookup reads /proc.)
  Ring* find_ring(pid_t tid, long fd) {
    if (rings_.empty()) return nullptr;
    auto group = rings_.find(thread_group_of(tid));
    if (group == rings_.end()) return nullptr;
    auto found = group->second.find(fd);
    return found == group->second.end() ? nullptr : &found->second;
  }

  void forget_ring(pid_t tid, long fd) {
    if (rings_.empty()) return;
    auto group = rings_.find(thread_group_of(tid));
    if (group != rings_.end()) group->second.erase(fd);
  }

  // io_uring_setup at entry: a ring whose submissions a kernel thread takes without a system call
  // (SQPOLL), or that lives in the program's own memory, is refused; any other is followed to
  // the call's exit, where its descriptor and offsets are kept.
  bool inspect_ring_setup(const Task& task, const user_regs_struct& r) {
    io_uring_params parameters;
    if (!task.read_value(r.rsi, &parameters)) return true;  // the call fails on it too
    if ((parameters.flags & IORING_SETUP_SQPOLL) != 0) {
      unmodelled(task, "io_uring_setup with SQPOLL: a kernel thread takes the ring's submissions without a system "
                       "call, so its writes cannot be seen");
      return false;
    }
    if ((parameters.flags & kRingSetupNoMmap) != 0) {
      unmodelled(task, "io_uring_setup with NO_MMAP: the ring lives in the program's memory where the tracer does not "
                       "follow it, so its submissions cannot be read");
      return false;
    }
    return true;
  }

  // io_uring_enter at entry: the submissions it is about to hand the kernel are read from the
  // ring (the calling thread is stopped; the entries are in the program's memory) and each must
  // be one that changes no file; the exit checks that the kernel took no more than were read.
  bool inspect_ring_submissions(const Task& task, const user_regs_struct& r, InFlight& call) {
    const uint32_t to_submit = static_cast<uint32_t>(r.rsi);
    if (to_submit == 0) return false;  // only waits for completions
    if ((r.r10 & kRingEnterRegisteredRing) != 0) {
      unmodelled(task, "io_uring_enter through a registered ring index: the tracer cannot tell which ring");
      return false;
    }
    const long fd = static_cast<long>(r.rdi);
    const Ring* ring = find_ring(task.tid(), fd);
    if (ring == nullptr || ring->ring_address == 0 || ring->entries_address == 0) {
      unmodelled(task, "io_uring_enter on a ring whose setup and mappings the tracer did not see (descriptor " +
                           std::to_string(fd) + "), so its submissions cannot be read");
      return false;
    }
    uint32_t head = 0, tail = 0, mask = 0;
    if (!task.read_value(ring->ring_address + ring->offsets.head, &head) ||
        !task.read_value(ring->ring_address + ring->offsets.tail, &tail) ||
        !task.read_value(ring->ring_address + ring->offsets.ring_mask, &mask)) {
      unmodelled(task, "io_uring_enter: the ring's head and tail could not be read");
      return false;
    }
    const uint64_t entry_bytes = (ring->setup_flags & IORING_SETUP_SQE128) != 0 ? 128 : 64;
    const uint32_t pending = std::min(to_submit, tail - head);
    for (uint32_t k = 0; k < pending; ++k) {
      const uint32_t slot = (head + k) & mask;
      uint32_t index = slot;
      if ((ring->setup_flags & kRingSetupNoSqArray) == 0 &&
          !task.read_value(ring->ring_address + ring->offsets.array + uint64_t{4} * slot, &index)) {
        unmodelled(task, "io_uring_enter: the ring's index array could not be read");
        return false;
      }
      uint8_t opcode = 0;  // io_uring_sqe's first field
      if (!task.read_value(ring->entries_address + entry_bytes * (index & mask), &opcode)) {
        unmodelled(task, "io_uring_enter: a submission could not be read");
        return false;
      }
      if (!is_file_neutral_ring_operation(opcode)) {
        unmodelled(task, "io_uring_enter submits operation " + std::to_string(opcode) + ring_operation_label(opcode) +
                             " (not one of NOP, POLL_ADD, POLL_REMOVE, TIMEOUT, TIMEOUT_REMOVE, ASYNC_CANCEL, "
                             "LINK_TIMEOUT, EPOLL_CTL): what a ring's submissions write is not a system call, so it "
                             "cannot be seen");
        return false;
      }
    }
    call.submissions_read = pending;
    return true;
  }

  Status record_fallocate(const Task& task, const InFlight& call) {
    const user_regs_struct& e = call.entry;
    const uint64_t mode = e.rsi, offset = e.rdx, length = e.r10;
    if ((mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0) {
      unmodelled(task, "fallocate with COLLAPSE_RANGE or INSERT_RANGE on " + call.path);
      return Status();
    }
    struct stat info {};
    if (::stat(task.fd_proc_path(static_cast<long>(e.rdi)).c_str(), &info) != 0) return Status();
    const uint64_t size_after = static_cast<uint64_t>(info.st_size);
    if (size_after != call.size_before) {
      FsRecord record;
      record.kind = FsRecordKind::kTruncate;
      record.path = call.path;
      record.fd = static_cast<int32_t>(e.rdi);
      record.length_bytes = size_after;
      ZEROSIM_RETURN_IF_ERROR(emit(std::move(record), task.tid()));
    }
    if ((mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) != 0 && offset < size_after) {
      const uint64_t zeroed = std::min(offset + length, size_after) - offset;
      if (zeroed > (uint64_t{64} << 20)) {
        unmodelled(task, "fallocate zeroing more than 64 MiB of " + call.path);
        return Status();
      }
      FsRecord record;
      record.kind = FsRecordKind::kWrite;
      record.path = call.path;
      record.fd = static_cast<int32_t>(e.rdi);
      record.offset_bytes = offset;
      record.data.assign(zeroed, '\0');
      return emit(std::move(record), task.tid());
    }
    return Status();
  }

  Status record_rename(const Task& task, const InFlight& call) {
    const uint64_t flags = call.call == SYS_renameat2 ? call.entry.r8 : 0;
    const bool from_watched = watched(call.path), to_watched = watched(call.second_path);
    if ((flags & RENAME_WHITEOUT) != 0) {
      unmodelled(task, "renameat2 with RENAME_WHITEOUT of " + call.path);
      return Status();
    }
    FsRecord record;
    record.path = call.path;
    record.second_path = call.second_path;
    if ((flags & RENAME_EXCHANGE) != 0) {
      if (!from_watched || !to_watched) {
        unmodelled(task, "RENAME_EXCHANGE of " + call.path + " and " + call.second_path + " across the watched boundary");
        return Status();
      }
      record.kind = FsRecordKind::kExchange;
      return emit(std::move(record), task.tid());
    }
    if (from_watched && to_watched) {
      record.kind = FsRecordKind::kRename;
      return emit(std::move(record), task.tid());
    }
    if (from_watched) {  // moved out: gone from the watched directory
      record.kind = call.directory ? FsRecordKind::kRemoveDirectory : FsRecordKind::kUnlink;
      record.second_path.clear();
      return emit(std::move(record), task.tid());
    }
    // Moved in from outside: a file that appears with its bytes, as unsynced as a new file.
    if (call.directory) {
      unmodelled(task, "a directory moved into a watched directory from outside (" + call.path + " -> " +
                           call.second_path + ")");
      return Status();
    }
    struct stat info {};
    if (::stat(call.second_path.c_str(), &info) != 0) return Status();
    FsRecord open;
    open.kind = FsRecordKind::kOpen;
    open.path = call.second_path;
    open.flags = kFlagCreated | kFlagTruncated;
    ZEROSIM_RETURN_IF_ERROR(emit(std::move(open), task.tid()));
    FsRecord write;
    write.kind = FsRecordKind::kWrite;
    write.path = call.second_path;
    write.data = pread_range(call.second_path, 0, static_cast<uint64_t>(info.st_size));
    if (write.data.empty()) return Status();
    return emit(std::move(write), task.tid());
  }

  // libaio: the writes submitted (recorded at submission: they land in any order until fsync).
  Status record_io_submit(const Task& task, const InFlight& call, long submitted) {
    const std::string pointers = task.read(call.entry.rdx, static_cast<uint64_t>(submitted) * 8);
    for (size_t i = 0; i + 8 <= pointers.size(); i += 8) {
      uint64_t address = 0;
      std::memcpy(&address, pointers.data() + i, 8);
      const std::string control = task.read(address, 64);  // struct iocb (linux/aio_abi.h), 64 bytes
      if (control.size() != 64) continue;
      uint16_t opcode = 0;
      uint32_t fd = 0;
      uint64_t buffer = 0, bytes = 0;
      int64_t offset = 0;
      std::memcpy(&opcode, control.data() + 16, 2);
      std::memcpy(&fd, control.data() + 20, 4);
      std::memcpy(&buffer, control.data() + 24, 8);
      std::memcpy(&bytes, control.data() + 32, 8);
      std::memcpy(&offset, control.data() + 40, 8);
      const std::string path = watched_fd_path(task, fd);
      if (path.empty()) continue;
      constexpr uint16_t kPwrite = 1, kFsync = 2, kFdsync = 3, kPwritev = 8;
      if (opcode == kFsync || opcode == kFdsync) {
        unmodelled(task, "io_submit of an fsync of " + path + " (it completes later than it is submitted)");
        continue;
      }
      if (opcode != kPwrite && opcode != kPwritev) continue;
      FsRecord record;
      record.kind = FsRecordKind::kWrite;
      record.path = path;
      record.fd = static_cast<int32_t>(fd);
      record.offset_bytes = static_cast<uint64_t>(offset);
      if (opcode == kPwrite) {
        record.data = task.read(buffer, bytes);
      } else {
        const std::string vectors = task.read(buffer, bytes * sizeof(iovec));
        for (size_t v = 0; v + sizeof(iovec) <= vectors.size(); v += sizeof(iovec)) {
          iovec vector;
          std::memcpy(&vector, vectors.data() + v, sizeof(iovec));
          record.data += task.read(reinterpret_cast<uint64_t>(vector.iov_base), vector.iov_len);
        }
      }
      ZEROSIM_RETURN_IF_ERROR(emit(std::move(record), task.tid()));
    }
    return Status();
  }

  const TraceOptions& options_;
  std::FILE* recording_;
  pid_t root_ = 0;
  std::set<dev_t> watched_devices_;
  std::set<pid_t> started_, awaiting_start_;
  std::unordered_map<pid_t, InFlight> in_flight_;
  // The io_uring rings each process (thread group) set up, by descriptor.
  std::map<pid_t, std::map<long, Ring>> rings_;
  TraceResult result_;
};

}  // namespace

Result<TraceResult> trace_command(const TraceOptions& options) {
  using namespace process_internal;
  ZEROSIM_ASSIGN_OR_RETURN(PreparedChild child, prepare_child(options.process));
  std::vector<sock_filter> filter = make_filter();
  std::FILE* recording = std::fopen(options.recording_path.c_str(), "we");
  if (recording == nullptr) {
    return io_error("cannot create the recording " + options.recording_path + ": " + std::strerror(errno));
  }
  std::vector<char> buffer(size_t{4} << 20);
  std::setvbuf(recording, buffer.data(), _IOFBF, buffer.size());
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    std::fclose(recording);
    return io_error(std::string("pipe2: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fclose(recording);
    return io_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(report[0]);
    exec_child(child, report[1], start_traced, &filter);
  }
  ::close(report[1]);
  // The child's stop before its seccomp filter: options set there make every later stop ours.
  int status = 0;
  while (::waitpid(pid, &status, __WALL) < 0 && errno == EINTR) {
  }
  if (!WIFSTOPPED(status)) {
    const std::string failure = read_child_report(report[0]);
    ::close(report[0]);
    std::fclose(recording);
    return failed_precondition("the system-call tracer cannot run here (" +
                               (failure.empty() ? std::string("the child ended before its first stop") : failure) +
                               "): zerosim exec needs ptrace and seccomp filters (a container's seccomp profile or "
                               "missing CAP_SYS_PTRACE can forbid them)");
  }

  // The timeout: the command's process group is killed, and so is every process it started.
  std::mutex mutex;
  std::condition_variable finished_signal;
  bool finished = false, timed_out = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.process.timeout_seconds);
    if (!finished_signal.wait_until(lock, deadline, [&] { return finished; })) {
      timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  });
  Tracer tracer(options, recording);
  Result<TraceResult> result = tracer.run(pid);
  {
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
  }
  finished_signal.notify_all();
  watchdog.join();
  ::kill(-pid, SIGKILL);  // nothing of the command may outlive it
  const std::string failure = read_child_report(report[0]);
  ::close(report[0]);
  const bool closed = std::fclose(recording) == 0;
  if (!result.ok()) return result.status();
  if (!failure.empty()) {
    return failed_precondition("the system-call tracer cannot run here (" + failure +
                               "): zerosim exec needs ptrace and seccomp filters (a container's seccomp profile or "
                               "missing CAP_SYS_PTRACE can forbid them)");
  }
  if (!closed) return io_error("writing the recording " + options.recording_path + " failed");
  result->outcome.timed_out = timed_out;
  result->outcome.stderr_tail = last_line_of(child.stderr_path);
  ++result->processes;
  return result;
}

#endif

}  // namespace zerosim
