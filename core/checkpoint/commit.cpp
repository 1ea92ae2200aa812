#include "core/checkpoint/commit.h"

#include <cstring>
#include <vector>

namespace zerosim {

Status validate_checkpoint_tag(const std::string& tag) {
  if (tag.empty() || tag.size() > 128) {
    return invalid_argument("checkpoint tag '" + tag + "': expected 1 to 128 characters");
  }
  if (tag == "." || tag == "..") return invalid_argument("checkpoint tag '" + tag + "' is not a name");
  for (char c : tag) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '_' || c == '-';
    if (!allowed) {
      return invalid_argument("checkpoint tag '" + tag + "': character '" + std::string(1, c) +
                              "' not allowed (use letters, digits, '.', '_' and '-')");
    }
  }
  return Status();
}

Status create_directories_durably(Disk& disk, const std::string& path) {
  // The missing components, outermost first.
  std::vector<std::string> missing;
  std::string at = path;
  while (!at.empty() && at != "/") {
    ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(at));
    if (exists) break;
    missing.push_back(at);
    const size_t slash = at.find_last_of('/');
    at = slash == std::string::npos ? std::string() : (slash == 0 ? std::string("/") : at.substr(0, slash));
  }
  if (missing.empty()) return Status();
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(path));
  // `at` is the deepest directory that existed: its entry for the first new one, and each new
  // one's entry for the next, must be made durable.
  // A relative path's first new component lives in the working directory.
  ZEROSIM_RETURN_IF_ERROR(disk.sync_directory(at.empty() ? std::string(".") : at));
  for (auto it = missing.rbegin(); it + 1 != missing.rend(); ++it) ZEROSIM_RETURN_IF_ERROR(disk.sync_directory(*it));
  return Status();
}

Status check_directory_writable(Disk& disk, const std::string& directory, const std::string& probe_name) {
  const Status writable = [&]() -> Status {
    ZEROSIM_RETURN_IF_ERROR(create_directories_durably(disk, directory));
    const std::string probe_path = directory + "/" + probe_name;
    const char probe_byte = 'z';
    ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, probe_path, std::as_bytes(std::span<const char>(&probe_byte, 1)),
                                             /*sync=*/true));
    return disk.remove_file(probe_path);
  }();
  if (writable.ok()) return writable;
  return failed_precondition("checkpoint directory " + directory + " cannot be saved into (" + writable.message() +
                             "); found before training, so no step is lost: give a writable --save-dir");
}

Status write_file_atomically(Disk& disk, const std::string& directory, const std::string& name,
                             std::span<const std::byte> content) {
  const std::string final_path = directory + "/" + name;
  const std::string temporary_path = final_path + ".tmp";
  ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, temporary_path, content, /*sync=*/true));
  ZEROSIM_RETURN_IF_ERROR(disk.rename(temporary_path, final_path));
  return disk.sync_directory(directory);
}

Status publish_latest_tag(Disk& disk, const std::string& checkpoint_directory, const std::string& tag) {
  ZEROSIM_RETURN_IF_ERROR(validate_checkpoint_tag(tag));
  const std::string line = tag + "\n";
  return write_file_atomically(disk, checkpoint_directory, "latest",
                               std::as_bytes(std::span<const char>(line.data(), line.size())));
}

Result<std::string> read_latest_tag(Disk& disk, const std::string& checkpoint_directory) {
  const std::string path = checkpoint_directory + "/latest";
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(path));
  if (!exists) return not_found("no checkpoint: " + path + " does not exist");
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
  if (size > 256) return data_loss(path + ": " + std::to_string(size) + " bytes is too long for a tag");
  std::string text(size, '\0');
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(0, std::as_writable_bytes(std::span<char>(text))));
  ZEROSIM_RETURN_IF_ERROR(file->close());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  Status valid = validate_checkpoint_tag(text);
  if (!valid.ok()) return data_loss(path + " does not hold a valid tag: " + valid.message());
  return text;
}

}  // namespace zerosim
