#include "exec/fs_recording.h"

#include <cstring>
#include <fstream>

namespace zerosim {

namespace {

constexpr size_t kHeaderBytes = 4 * 4 + 8 * 2 + 4 * 4;

template <typename T>
T read_little_endian(const char* bytes) {
  T value = 0;
  std::memcpy(&value, bytes, sizeof(T));  // x86: little-endian, the format's byte order
  return value;
}

}  // namespace

const char* fs_record_kind_name(FsRecordKind kind) {
  switch (kind) {
    case FsRecordKind::kOpen: return "open";
    case FsRecordKind::kWrite: return "write";
    case FsRecordKind::kTruncate: return "truncate";
    case FsRecordKind::kSync: return "fsync";
    case FsRecordKind::kRename: return "rename";
    case FsRecordKind::kUnlink: return "unlink";
    case FsRecordKind::kMakeDirectory: return "mkdir";
    case FsRecordKind::kRemoveDirectory: return "rmdir";
    case FsRecordKind::kClose: return "close";
    case FsRecordKind::kStateLine: return "state-line";
    case FsRecordKind::kExchange: return "exchange";
    case FsRecordKind::kSyncAll: return "sync";
    case FsRecordKind::kSyncRange: return "sync_file_range";
  }
  return "unknown";
}

std::string FsRecord::describe() const {
  const std::string name = fs_record_kind_name(kind);
  switch (kind) {
    case FsRecordKind::kTruncate: return name + " " + path + " to " + std::to_string(length_bytes) + " bytes";
    case FsRecordKind::kRename: return name + " " + path + " -> " + second_path;
    case FsRecordKind::kExchange: return name + " " + path + " <-> " + second_path;
    case FsRecordKind::kSyncAll: return "sync (everything)";
    case FsRecordKind::kWrite:
      return name + " " + path + " [" + std::to_string(offset_bytes) + ", " +
             std::to_string(offset_bytes + data.size()) + ")" + ((flags & kFlagSynchronous) != 0 ? " (synchronous)" : "");
    case FsRecordKind::kOpen:
      return name + " " + path + ((flags & kFlagCreated) != 0 ? " (created)" : "") +
             ((flags & kFlagTruncated) != 0 ? " (truncated)" : "");
    case FsRecordKind::kSync: return name + " " + path + ((flags & kFlagDirectory) != 0 ? " (directory)" : "");
    case FsRecordKind::kStateLine: return name + " " + data.substr(0, data.find('\n'));
    default: return name + " " + path;
  }
}

Result<std::vector<FsRecord>> read_fs_recording(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found("recording " + path + ": cannot be opened");
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return io_error("recording " + path + ": read failed");
  std::vector<FsRecord> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = "recording " + path + " at byte " + std::to_string(at);
    if (bytes.size() - at < kHeaderBytes) return data_loss(where + ": a truncated record header");
    const char* header = bytes.data() + at;
    if (read_little_endian<uint32_t>(header) != kFsRecordMagic) return data_loss(where + ": not a record (bad magic)");
    FsRecord record;
    const uint32_t kind = read_little_endian<uint32_t>(header + 4);
    if (kind < 1 || kind > static_cast<uint32_t>(FsRecordKind::kSyncRange)) {
      return data_loss(where + ": unknown record kind " + std::to_string(kind));
    }
    record.kind = static_cast<FsRecordKind>(kind);
    record.pid = read_little_endian<int32_t>(header + 8);
    record.fd = read_little_endian<int32_t>(header + 12);
    record.offset_bytes = read_little_endian<uint64_t>(header + 16);
    record.length_bytes = read_little_endian<uint64_t>(header + 24);
    record.flags = read_little_endian<uint32_t>(header + 32);
    const uint64_t path_bytes = read_little_endian<uint32_t>(header + 36);
    const uint64_t second_bytes = read_little_endian<uint32_t>(header + 40);
    const uint64_t data_bytes = read_little_endian<uint32_t>(header + 44);
    const uint64_t body = path_bytes + second_bytes + data_bytes;
    if (bytes.size() - at - kHeaderBytes < body) return data_loss(where + ": a truncated record body");
    const char* cursor = header + kHeaderBytes;
    record.path.assign(cursor, path_bytes);
    record.second_path.assign(cursor + path_bytes, second_bytes);
    record.data.assign(cursor + path_bytes + second_bytes, data_bytes);
    at += kHeaderBytes + body;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace zerosim
