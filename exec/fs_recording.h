// The recording `zerosim exec` makes of a program's file-system operations, and the model of
// the watched directories it is replayed into.
//
// Format (written by exec/syscall_tracer.cpp, read here): a file of records in the order the
// tracer saw the system calls complete, across every process of the command. A record is a fixed
// little-endian header, then `path_bytes` of path, `second_path_bytes` of a second path (a
// rename's target) and `data_bytes` of data (what a write wrote, a state-log line):
//   u32 magic "ZSR1", u32 kind, i32 pid, i32 fd, u64 offset_bytes, u64 length_bytes,
//   u32 flags, u32 path_bytes, u32 second_path_bytes, u32 data_bytes.
// Paths are absolute and lexically normal (no ".", "..", or doubled "/"); an operation through a
// descriptor carries the path the kernel gave that descriptor at the time of the call, so the
// model needs no descriptor table (dup, fork and renames of open files are all covered). Only
// operations on paths inside a watched directory (or on the directory itself, or the fsync of a
// directory above one) are recorded, and the lines the program appends to its state log
// (ZEROSIM_STATE_LOG), which order the program's own claims ("checkpoint": true) among its
// file operations.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"

namespace zerosim {

inline constexpr uint32_t kFsRecordMagic = 0x3152535au;  // "ZSR1" little-endian

enum class FsRecordKind : uint32_t {
  kOpen = 1,       // path opened with O_CREAT or O_TRUNC; flags: kFlagCreated, kFlagTruncated
  kWrite = 2,      // path, offset_bytes, data; kFlagSynchronous: durable when it returned (O_DSYNC)
  kTruncate = 3,   // path, length_bytes: the new size
  kSync = 4,       // path (a file's data and size; with kFlagDirectory a directory's entries)
  kRename = 5,     // path -> second_path
  kUnlink = 6,     // path
  kMakeDirectory = 7,
  kRemoveDirectory = 8,
  kClose = 9,      // path (changes nothing in the model; kept for the reader of a recording)
  kStateLine = 10, // data: one line the program appended to its state log
  kExchange = 11,  // path <-> second_path (renameat2 RENAME_EXCHANGE)
  kSyncAll = 12,   // sync, or syncfs of the watched file system: everything durable
  kSyncRange = 13, // sync_file_range: recorded, makes nothing durable
};

inline constexpr uint32_t kFlagCreated = 1;      // kOpen: O_CREAT
inline constexpr uint32_t kFlagTruncated = 2;    // kOpen: O_TRUNC
inline constexpr uint32_t kFlagDirectory = 4;    // kSync: the path is a directory
inline constexpr uint32_t kFlagSynchronous = 8;  // kWrite: O_SYNC, O_DSYNC, RWF_DSYNC or RWF_SYNC

// Whether a crash right after this record can differ from a crash right before it.
inline bool changes_model(FsRecordKind kind) {
  return kind != FsRecordKind::kClose && kind != FsRecordKind::kStateLine && kind != FsRecordKind::kSyncRange;
}

struct FsRecord {
  FsRecordKind kind = FsRecordKind::kOpen;
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t offset_bytes = 0;
  uint64_t length_bytes = 0;
  uint32_t flags = 0;
  std::string path;
  std::string second_path;
  std::string data;
  // "write /ckpt/model.pt [0, 4096)", "rename /ckpt/tmp -> /ckpt/latest", ...
  std::string describe() const;
};

const char* fs_record_kind_name(FsRecordKind kind);

// Reads a recording; a truncated or foreign file is kDataLoss naming the file and the offset.
Result<std::vector<FsRecord>> read_fs_recording(const std::string& path);

// Encodes one record as the recorder writes it (inline: the interposer links nothing else).
inline std::string encode_fs_record(const FsRecord& record) {
  std::string out;
  auto append_bytes = [&out](const auto& value) {
    char bytes[sizeof(value)];
    std::memcpy(bytes, &value, sizeof(value));  // x86: little-endian, the format's byte order
    out.append(bytes, sizeof(value));
  };
  out.reserve(48 + record.path.size() + record.second_path.size() + record.data.size());
  append_bytes(kFsRecordMagic);
  append_bytes(static_cast<uint32_t>(record.kind));
  append_bytes(record.pid);
  append_bytes(record.fd);
  append_bytes(record.offset_bytes);
  append_bytes(record.length_bytes);
  append_bytes(record.flags);
  append_bytes(static_cast<uint32_t>(record.path.size()));
  append_bytes(static_cast<uint32_t>(record.second_path.size()));
  append_bytes(static_cast<uint32_t>(record.data.size()));
  out += record.path;
  out += record.second_path;
  out += record.data;
  return out;
}

}  // namespace zerosim
