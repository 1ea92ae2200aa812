#include "exec/crash_state_model.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "scenarios/scenario_file.h"

namespace zerosim {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

Status write_file(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return io_error("cannot write " + path + " (laying out a crash state)");
  return Status();
}

std::string hex_digest(const std::string& bytes) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return text;
}

std::span<const std::byte> as_bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

}  // namespace

bool Tree::has_directory(const std::string& path) const {
  return std::find(directories.begin(), directories.end(), path) != directories.end();
}

Result<Tree> snapshot_real(const std::vector<std::string>& roots) {
  Tree tree;
  for (const std::string& root : roots) {
    std::error_code error;
    if (!fs::exists(root, error)) continue;
    tree.directories.push_back(root);
    for (auto it = fs::recursive_directory_iterator(root, error); !error && it != fs::recursive_directory_iterator();
         it.increment(error)) {
      const std::string path = it->path().string();
      if (it->is_symlink(error)) {
        return failed_precondition("watched directory " + root + ": " + path +
                                   " is a symbolic link (zerosim exec models files and directories only)");
      }
      if (it->is_directory(error)) {
        tree.directories.push_back(path);
      } else if (it->is_regular_file(error)) {
        ZEROSIM_ASSIGN_OR_RETURN(std::string bytes, read_text_file(path, "watched file"));
        tree.files.emplace_back(path, std::move(bytes));
      } else {
        return failed_precondition("watched directory " + root + ": " + path + " is neither a file nor a directory");
      }
    }
    if (error) return io_error("watched directory " + root + ": " + error.message());
  }
  std::sort(tree.directories.begin(), tree.directories.end());
  std::sort(tree.files.begin(), tree.files.end());
  return tree;
}

Status lay_out(const Tree& tree, const std::vector<std::string>& roots, const std::vector<std::string>& destinations) {
  std::error_code error;
  auto destination_of = [&](const std::string& path) -> std::string {
    for (size_t i = 0; i < roots.size(); ++i) {
      if (is_under(path, roots[i])) return destinations[i] + path.substr(roots[i].size());
    }
    return "";
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    fs::remove_all(destinations[i], error);
    if (error) return io_error("cannot clear " + destinations[i] + ": " + error.message());
    // A private copy is bound over its root: it exists even when the root does not (the
    // caller runs such a state in place instead).
    if (destinations[i] != roots[i]) {
      fs::create_directories(destinations[i], error);
      if (error) return io_error("cannot create " + destinations[i] + ": " + error.message());
    }
  }
  for (const std::string& directory : tree.directories) {
    const std::string destination = destination_of(directory);
    if (destination.empty()) continue;
    fs::create_directories(destination, error);
    if (error) return io_error("cannot create " + destination + ": " + error.message());
  }
  for (const auto& [path, bytes] : tree.files) {
    const std::string destination = destination_of(path);
    if (destination.empty()) continue;
    fs::create_directories(fs::path(destination).parent_path(), error);
    if (error) return io_error("cannot create the directory of " + destination + ": " + error.message());
    ZEROSIM_RETURN_IF_ERROR(write_file(destination, bytes));
  }
  return Status();
}

Result<Tree> snapshot_sim(SimDisk& disk, const std::vector<std::string>& roots) {
  Tree tree;
  std::vector<std::string> pending_directories;
  for (const std::string& root : roots) {
    ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(root));
    if (exists) pending_directories.push_back(root);
  }
  while (!pending_directories.empty()) {
    const std::string directory = pending_directories.back();
    pending_directories.pop_back();
    tree.directories.push_back(directory);
    ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk.list_directory(directory));
    for (const std::string& name : names) {
      const std::string path = directory + "/" + name;
      Result<std::vector<std::byte>> content = disk.visible_content(path);
      if (content.ok()) {
        tree.files.emplace_back(path, std::string(reinterpret_cast<const char*>(content->data()), content->size()));
      } else {
        pending_directories.push_back(path);
      }
    }
  }
  std::sort(tree.directories.begin(), tree.directories.end());
  std::sort(tree.files.begin(), tree.files.end());
  return tree;
}

RecordingReplayer::RecordingReplayer(std::vector<std::string> roots, uint64_t seed)
    : disk_(SimDiskOptions{512, uint64_t{1} << 40, seed}), roots_(std::move(roots)) {}

Status RecordingReplayer::make_durable_directory(const std::string& path) {
  if (path.empty() || path == "/") return Status();
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk_.exists(path));
  if (exists) return Status();
  ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(path)));
  ZEROSIM_RETURN_IF_ERROR(disk_.create_directories(path));
  return disk_.sync_directory(parent_of(path));
}

Status RecordingReplayer::load(const Tree& initial) {
  for (const std::string& directory : initial.directories) ZEROSIM_RETURN_IF_ERROR(make_durable_directory(directory));
  for (const auto& [path, bytes] : initial.files) {
    ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(path)));
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path, FileOpenOptions{OpenMode::kCreateTruncate}));
    ZEROSIM_RETURN_IF_ERROR(file->write_all(0, as_bytes_of(bytes)));
    ZEROSIM_RETURN_IF_ERROR(file->sync());
    ZEROSIM_RETURN_IF_ERROR(file->close());
    ZEROSIM_RETURN_IF_ERROR(disk_.sync_directory(parent_of(path)));
  }
  // A watched directory that does not exist yet: its parent is outside, durable as it is.
  for (const std::string& root : roots_) ZEROSIM_RETURN_IF_ERROR(make_durable_directory(parent_of(root)));
  return Status();
}

Status RecordingReplayer::sync_everything() {
  std::vector<std::string> directories = {"/"};
  while (!directories.empty()) {
    const std::string directory = directories.back();
    directories.pop_back();
    ZEROSIM_RETURN_IF_ERROR(disk_.sync_directory(directory));
    ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk_.list_directory(directory));
    for (const std::string& name : names) {
      const std::string path = directory == "/" ? "/" + name : directory + "/" + name;
      if (disk_.visible_content(path).ok()) {
        ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path, FileOpenOptions{OpenMode::kReadWrite}));
        ZEROSIM_RETURN_IF_ERROR(file->sync());
        ZEROSIM_RETURN_IF_ERROR(file->close());
      } else {
        directories.push_back(path);
      }
    }
  }
  return Status();
}

Status RecordingReplayer::apply(const FsRecord& record) {
  const std::string where = "replaying " + record.describe();
  auto with_context = [&](const Status& status) {
    return status.ok() ? status : Status(status.code(), where + ": " + status.message());
  };
  // Operations through a descriptor name the file it had open at the time: open it by name.
  auto with_file = [&](OpenMode mode, auto&& action) -> Status {
    Result<std::unique_ptr<File>> file = disk_.open(record.path, FileOpenOptions{mode});
    if (!file.ok()) return with_context(file.status());
    Status done = action(**file);
    Status closed = (*file)->close();
    if (!done.ok()) return with_context(done);
    return with_context(closed);
  };
  switch (record.kind) {
    case FsRecordKind::kOpen: {
      const OpenMode mode = (record.flags & kFlagTruncated) != 0 ? OpenMode::kCreateTruncate : OpenMode::kCreateReadWrite;
      return with_file(mode, [](File&) { return Status(); });
    }
    case FsRecordKind::kWrite:
      return with_file(OpenMode::kReadWrite, [&](File& file) {
        ZEROSIM_RETURN_IF_ERROR(file.write_all(record.offset_bytes, as_bytes_of(record.data)));
        return (record.flags & kFlagSynchronous) != 0 ? file.sync() : Status();
      });
    case FsRecordKind::kTruncate:
      return with_file(OpenMode::kReadWrite, [&](File& file) { return file.truncate(record.length_bytes); });
    case FsRecordKind::kSync:
      if ((record.flags & kFlagDirectory) != 0) return with_context(disk_.sync_directory(record.path));
      return with_file(OpenMode::kReadWrite, [](File& file) { return file.sync(); });
    case FsRecordKind::kSyncAll: return with_context(sync_everything());
    case FsRecordKind::kRename: return with_context(disk_.rename(record.path, record.second_path));
    case FsRecordKind::kExchange: return with_context(disk_.exchange(record.path, record.second_path));
    case FsRecordKind::kUnlink: return with_context(disk_.remove_file(record.path));
    case FsRecordKind::kMakeDirectory: return with_context(disk_.create_directories(record.path));
    case FsRecordKind::kRemoveDirectory: return with_context(disk_.remove_tree(record.path));
    case FsRecordKind::kClose:
    case FsRecordKind::kStateLine:
    case FsRecordKind::kSyncRange: return Status();
  }
  return Status();
}

Result<Tree> RecordingReplayer::visible_tree() const {
  std::unique_ptr<SimDisk> copy = disk_.clone();
  return snapshot_sim(*copy, roots_);
}

Status verify_recording(const std::vector<FsRecord>& records, const std::vector<std::string>& roots, const Tree& initial,
                        const Tree& left) {
  RecordingReplayer replayer(roots, 1);
  ZEROSIM_RETURN_IF_ERROR(replayer.load(initial));
  for (const FsRecord& record : records) {
    Status applied = replayer.apply(record);
    if (!applied.ok()) {
      return failed_precondition("the recording does not replay: " + applied.message() +
                                 " (an earlier operation the tracer did not see)");
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(Tree replayed, replayer.visible_tree());
  const std::string cause =
      "the program changed the watched directories in a way the recording does not hold (an operation the tracer "
      "did not see, or a process outside the command)";
  std::set<std::string> replayed_directories(replayed.directories.begin(), replayed.directories.end());
  std::set<std::string> left_directories(left.directories.begin(), left.directories.end());
  std::map<std::string, const std::string*> replayed_files, left_files;
  for (const auto& [path, bytes] : replayed.files) replayed_files[path] = &bytes;
  for (const auto& [path, bytes] : left.files) left_files[path] = &bytes;
  // The first path (in name order) that differs.
  std::set<std::string> paths(replayed_directories.begin(), replayed_directories.end());
  paths.insert(left_directories.begin(), left_directories.end());
  for (const auto& [path, bytes] : replayed_files) paths.insert(path);
  for (const auto& [path, bytes] : left_files) paths.insert(path);
  for (const std::string& path : paths) {
    const bool replayed_directory = replayed_directories.count(path) != 0, left_directory = left_directories.count(path) != 0;
    auto replayed_file = replayed_files.find(path), left_file = left_files.find(path);
    const bool in_replay = replayed_directory || replayed_file != replayed_files.end();
    const bool in_left = left_directory || left_file != left_files.end();
    std::string difference;
    if (in_replay && !in_left) {
      difference = "the recording replayed leaves " + path + ", the program left no such " +
                   (replayed_directory ? "directory" : "file");
    } else if (!in_replay && in_left) {
      difference = "the program left " + path + ", the recording replayed has no such " +
                   (left_directory ? "directory" : "file");
    } else if (replayed_directory != left_directory) {
      difference = path + " is a " + (left_directory ? "directory" : "file") + " after the run, a " +
                   (replayed_directory ? "directory" : "file") + " in the recording replayed";
    } else if (!left_directory && *replayed_file->second != *left_file->second) {
      const std::string& want = *left_file->second;
      const std::string& got = *replayed_file->second;
      if (want.size() != got.size()) {
        difference = path + ": the program left " + std::to_string(want.size()) + " bytes, the recording replayed has " +
                     std::to_string(got.size());
      } else {
        size_t first = 0;
        while (first < want.size() && want[first] == got[first]) ++first;
        difference = path + ": " + std::to_string(want.size()) + " bytes each, first differing at byte " +
                     std::to_string(first) + " (xxh64 " + hex_digest(want) + " left, " + hex_digest(got) + " replayed)";
      }
    }
    if (!difference.empty()) return failed_precondition("the recording fails its self-check: " + difference + ": " + cause);
  }
  return Status();
}

}  // namespace zerosim
