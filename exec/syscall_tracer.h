// The recorder of `zerosim exec`: runs the user's command under ptrace with a seccomp-BPF filter
// and records, for the command and every process it forks, clones or execs, each file-system
// operation that changes a watched directory, in the order the kernel completed them, with the
// bytes written (exec/fs_recording.h gives the format).
//
// Why system calls, and why ptrace with a seccomp filter:
// - Below the C library, nothing escapes: raw `syscall()`s (Rust's rustix, which safetensors
//   uses), statically linked programs, Go, exec'd helpers. An LD_PRELOAD interposer sees none
//   of those, and called a correct Hugging Face save broken because of it.
// - The filter stops the program only at the calls listed below (and at writable shared
//   mappings of files); every other call runs at full speed.
// - ptrace, not seccomp user notification: a notified call that is let through
//   (SECCOMP_USER_NOTIF_FLAG_CONTINUE) is never seen again, so its result (how many bytes a
//   write wrote, whether a rename succeeded) is unknown; ptrace stops the same thread again at
//   the call's exit, with its result, while the bytes it wrote are still in its memory.
//
// What is recorded (each at the call's exit, only when it succeeded and touched a watched path):
// creating or truncating opens (open, openat, openat2, creat), writes (write, pwrite64, writev,
// pwritev, pwritev2 with RWF_DSYNC/RWF_SYNC/RWF_APPEND, sendfile, copy_file_range and splice into
// a file: their bytes read back from the file itself; io_submit's PWRITE and PWRITEV at
// submission), truncate, ftruncate, fallocate (as the size or the zeroed bytes it changes),
// fsync and fdatasync (of a file, or of a directory's entries), sync and syncfs (everything on
// the watched file system), rename, renameat and renameat2 (RENAME_NOREPLACE; RENAME_EXCHANGE as
// an exchange), unlink, unlinkat, mkdir, mkdirat, rmdir, and close. Writes to a file opened
// O_SYNC or O_DSYNC are durable when they return. Descriptors are resolved by the kernel at
// each call (/proc/PID/fd), so dup, dup2, dup3, fcntl(F_DUPFD) and descriptors inherited
// across fork need no tracking; appends by the state log (ZEROSIM_STATE_LOG) are recorded as
// the program's claims, in order with its file operations.
//
// io_uring: a ring's submissions are not system calls, so each io_uring_enter is inspected: the
// submissions it hands the kernel are read from the ring in the program's memory (its offsets
// kept from io_uring_setup, its addresses from the program's mmaps of the ring), and any that can
// change a file (anything but NOP, POLL_ADD/REMOVE, TIMEOUT(_REMOVE), ASYNC_CANCEL, LINK_TIMEOUT,
// EPOLL_CTL) is refused by name, as is a call that takes more submissions than were read. An
// event loop's ring (libuv's epoll batching, under PyTorch's rendezvous store) is thus let be.
//
// What it cannot model, it names (TraceResult::unmodelled), and exec refuses to judge:
// an io_uring write or other file operation, a SQPOLL ring (a kernel thread takes its
// submissions without any system call), a ring in the program's own memory (NO_MMAP), a ring
// entered through a registered index or not seen set up, a writable shared mapping of a watched
// file (its stores are not system calls), hard links and symbolic links in a watched directory
// (the file-system model has neither), RENAME_WHITEOUT, fallocate's COLLAPSE_RANGE and
// INSERT_RANGE, io_submit's FSYNC and FDSYNC (they complete later than they are submitted),
// a directory moved into a watched directory from outside, and 32-bit system calls.
// sync_file_range is recorded but makes nothing durable (it writes no metadata and flushes no
// device cache). O_DIRECT writes are ordinary writes: durable only after fsync or fdatasync,
// as on Linux (O_DIRECT bypasses the page cache, not the device's cache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/process.h"

namespace zerosim {

struct TraceOptions {
  ProcessSpec process;
  std::vector<std::string> watched;  // absolute real paths of the watched directories
  std::string state_log;             // absolute path of the state log ("": none)
  std::string recording_path;        // the recording, written as the command runs
};

struct TraceResult {
  ProcessOutcome outcome;                 // of the command's first process
  std::vector<std::string> unmodelled;    // what the recording cannot stand for, by process and path
  int64_t processes = 0;                  // processes traced (the command, its forks and clones)
  int64_t stops = 0;                      // system-call stops taken
  int64_t records = 0;                    // records written to the recording
};

// Runs the command to its end under the tracer. An error: the tracer could not run (ptrace or
// seccomp refused, an architecture other than x86-64) or the recording could not be written.
Result<TraceResult> trace_command(const TraceOptions& options);

}  // namespace zerosim
