#include "sim/sim_disk.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/env/rng.h"

namespace zerosim {

const char* pending_operation_kind_name(PendingOperation::Kind kind) {
  switch (kind) {
    case PendingOperation::Kind::kWrite: return "write";
    case PendingOperation::Kind::kTruncate: return "truncate";
    case PendingOperation::Kind::kCreate: return "create";
    case PendingOperation::Kind::kMakeDirectory: return "mkdir";
    case PendingOperation::Kind::kRename: return "rename";
    case PendingOperation::Kind::kUnlink: return "unlink";
    case PendingOperation::Kind::kExchange: return "exchange";
  }
  return "?";
}

std::string PendingOperation::describe() const {
  std::string text = std::string(pending_operation_kind_name(kind)) + " " + path;
  if (kind == Kind::kRename) text = "rename " + source_path + " -> " + path;
  if (kind == Kind::kExchange) text = "exchange " + source_path + " <-> " + path;
  if (kind == Kind::kWrite) {
    text += " [" + std::to_string(offset_bytes) + ", " + std::to_string(offset_bytes + length_bytes) + ")";
  }
  if (kind == Kind::kTruncate) text += " to " + std::to_string(length_bytes) + " bytes";
  return text;
}

struct SimDisk::Inode {
  struct ContentOperation {
    bool is_write = true;
    uint64_t offset_bytes = 0;
    std::vector<std::byte> data;  // writes
    uint64_t size_bytes = 0;      // truncations
  };
  std::vector<std::byte> durable;
  std::vector<std::byte> visible;
  std::vector<ContentOperation> pending;
};

namespace {

void apply_write(std::vector<std::byte>& content, uint64_t offset, std::span<const std::byte> data) {
  if (content.size() < offset + data.size()) content.resize(offset + data.size(), std::byte{0});
  if (!data.empty()) std::memcpy(content.data() + offset, data.data(), data.size());
}

uint64_t mix(uint64_t hash, const std::string& text) { return XXH64(text.data(), text.size(), hash); }

}  // namespace

// A file handle. It dies with a crash: every call after one fails naming the crash.
class SimFile final : public File {
 public:
  SimFile(SimDisk& disk, std::shared_ptr<SimDisk::Inode> inode, std::string path, uint64_t generation, bool direct,
          bool writable)
      : File(std::move(path)), disk_(disk), inode_(std::move(inode)), generation_(generation), direct_(direct),
        writable_(writable) {}

  Status read_exact(uint64_t offset_bytes, std::span<std::byte> buffer) override {
    ZEROSIM_RETURN_IF_ERROR(check_alignment(offset_bytes, buffer.data(), buffer.size()));
    return disk_.read_inode(generation_, inode_, path(), offset_bytes, buffer);
  }
  Status write_all(uint64_t offset_bytes, std::span<const std::byte> data) override {
    if (!writable_) return invalid_argument("write " + path() + ": opened read-only");
    ZEROSIM_RETURN_IF_ERROR(check_alignment(offset_bytes, data.data(), data.size()));
    return disk_.write_inode(generation_, inode_, path(), offset_bytes, data);
  }
  Result<uint64_t> size_bytes() override { return disk_.inode_size(generation_, inode_, path()); }
  Status truncate(uint64_t size_bytes) override {
    if (!writable_) return invalid_argument("truncate " + path() + ": opened read-only");
    return disk_.truncate_inode(generation_, inode_, path(), size_bytes);
  }
  Status sync() override { return disk_.sync_inode(generation_, inode_, path()); }
  Status close() override { return Status(); }
  bool direct_io() const override { return direct_; }

 private:
  Status check_alignment(uint64_t offset, const void* buffer, size_t length) const {
    if (!direct_) return Status();
    if (offset % 4096 != 0 || length % 4096 != 0 || reinterpret_cast<uintptr_t>(buffer) % 4096 != 0) {
      return invalid_argument("direct I/O on " + path() + " at offset " + std::to_string(offset) + ", length " +
                              std::to_string(length) + ": offset, length and buffer must be 4096-byte aligned");
    }
    return Status();
  }
  SimDisk& disk_;
  std::shared_ptr<SimDisk::Inode> inode_;
  uint64_t generation_;
  bool direct_;
  bool writable_;
};

class SimFileLock final : public FileLock {
 public:
  SimFileLock(SimDisk& disk, std::string path, uint64_t generation)
      : disk_(disk), path_(std::move(path)), generation_(generation) {}
  ~SimFileLock() override { disk_.release_lock(path_, generation_); }

 private:
  SimDisk& disk_;
  std::string path_;
  uint64_t generation_;
};

// Completes the submitted transfers in a seeded order at wait_all().
class SimAsyncQueue final : public AsyncIoQueue {
 public:
  explicit SimAsyncQueue(uint64_t seed) : seed_(seed) {}
  Status submit(const IoRequest& request) override {
    if (request.file == nullptr || request.buffer == nullptr) return invalid_argument("async request without a file or buffer");
    requests_.push_back(request);
    return Status();
  }
  Status wait_all() override {
    // The order depends on the seed and the requests only (not on which thread made the
    // queue first), so a run is reproducible.
    uint64_t order_seed = seed_;
    for (const IoRequest& request : requests_) order_seed = mix(order_seed, request.file->path());
    std::vector<size_t> order(requests_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = order.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(mix_random_bits(order_seed, 7, i) % i);
      std::swap(order[i - 1], order[j]);
    }
    Status first_error;
    for (size_t index : order) {
      const IoRequest& request = requests_[index];
      Status status = request.direction == IoDirection::kRead
                          ? request.file->read_exact(request.offset_bytes,
                                                     std::span<std::byte>(request.buffer, request.length_bytes))
                          : request.file->write_all(request.offset_bytes,
                                                    std::span<const std::byte>(request.buffer, request.length_bytes));
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    requests_.clear();
    return first_error;
  }
  const char* engine_name() const override { return "simulated"; }

 private:
  uint64_t seed_;
  std::vector<IoRequest> requests_;
};

SimDisk::SimDisk(SimDiskOptions options) : options_(options) {
  visible_["/"] = Entry{true, nullptr};
  durable_["/"] = Entry{true, nullptr};
}

SimDisk::~SimDisk() = default;

std::string SimDisk::normalize(const std::string& path) {
  // Absolute, no empty or "." components, no trailing '/'. ".." is refused by the callers.
  std::string out = "/";
  size_t position = 0;
  while (position < path.size()) {
    size_t next = path.find('/', position);
    if (next == std::string::npos) next = path.size();
    const std::string part = path.substr(position, next - position);
    if (!part.empty() && part != ".") {
      if (out.size() > 1) out += "/";
      out += part;
    }
    position = next + 1;
  }
  return out;
}

std::string SimDisk::parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

Status SimDisk::check_frozen(const std::string& what) const {
  if (frozen_) return io_error(what + ": the simulated power is off");
  return Status();
}

Status SimDisk::check_generation(uint64_t generation, const std::string& path) const {
  ZEROSIM_RETURN_IF_ERROR(check_frozen(path));
  if (generation != generation_) {
    return io_error(path + ": the file handle is from before simulated crash " + std::to_string(generation_));
  }
  return Status();
}

Status SimDisk::require_parent_directory(const std::string& path) const {
  const std::string parent = parent_of(path);
  auto found = visible_.find(parent);
  if (found == visible_.end()) return not_found(path + ": directory " + parent + " does not exist");
  if (!found->second.is_directory) return failed_precondition(path + ": " + parent + " is not a directory");
  return Status();
}

void SimDisk::trace_content(const std::string& path, const std::string& what) {
  uint64_t& hash = content_trace_[path];
  hash = mix(hash, what);
}

void SimDisk::trace_unordered(const std::string& path, const std::string& what) {
  unordered_trace_[path] += mix(0, what);
}

uint64_t SimDisk::visible_bytes_locked() const {
  uint64_t total = 0;
  std::set<const Inode*> counted;
  for (const auto& [path, entry] : visible_) {
    if (entry.inode && counted.insert(entry.inode.get()).second) total += entry.inode->visible.size();
  }
  return total;
}

void SimDisk::record_directory_operation(PendingOperation::Kind kind, const std::string& path,
                                         const std::string& source_path, std::shared_ptr<Inode> inode) {
  DirectoryOperation operation;
  operation.operation.kind = kind;
  operation.operation.path = path;
  operation.operation.source_path = source_path;
  operation.parent = parent_of(path);
  operation.inode = std::move(inode);
  pending_directory_operations_.push_back(operation);
  pending_content_order_.push_back({nullptr, pending_directory_operations_.size() - 1});
  trace_unordered(path, operation.operation.describe());
}

Result<std::unique_ptr<File>> SimDisk::open(const std::string& raw_path, const FileOpenOptions& options) {
  if (raw_path.find("..") != std::string::npos) return invalid_argument("open " + raw_path + ": '..' in a path");
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  auto found = visible_.find(path);
  if (found != visible_.end() && found->second.is_directory) return failed_precondition("open " + path + ": is a directory");
  std::shared_ptr<Inode> inode;
  if (found == visible_.end()) {
    if (options.mode == OpenMode::kReadOnly || options.mode == OpenMode::kReadWrite) {
      return not_found("open " + path + ": no such file");
    }
    ZEROSIM_RETURN_IF_ERROR(require_parent_directory(path));
    inode = std::make_shared<Inode>();
    visible_[path] = Entry{false, inode};
    record_directory_operation(PendingOperation::Kind::kCreate, path, "", inode);
  } else {
    inode = found->second.inode;
    if (options.mode == OpenMode::kCreateTruncate && !inode->visible.empty()) {
      inode->visible.clear();
      inode->pending.push_back(Inode::ContentOperation{false, 0, {}, 0});
      pending_content_order_.push_back({inode, inode->pending.size() - 1});
      trace_content(path, "truncate 0");
    }
  }
  const bool writable = options.mode != OpenMode::kReadOnly;
  return std::unique_ptr<File>(new SimFile(*this, inode, path, generation_, options.direct_io, writable));
}

Status SimDisk::read_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                           uint64_t offset_bytes, std::span<std::byte> buffer) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_generation(generation, path));
  const uint64_t size = inode->visible.size();
  if (offset_bytes > size || buffer.size() > size - offset_bytes) {
    return data_loss("read " + path + " at offset " + std::to_string(offset_bytes) + ": expected " +
                     std::to_string(buffer.size()) + " bytes, found " +
                     std::to_string(offset_bytes > size ? 0 : size - offset_bytes) + " (file of " +
                     std::to_string(size) + " bytes)");
  }
  if (!buffer.empty()) std::memcpy(buffer.data(), inode->visible.data() + offset_bytes, buffer.size());
  trace_unordered(path, "read " + std::to_string(offset_bytes) + " " + std::to_string(buffer.size()));
  return Status();
}

Status SimDisk::write_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                            uint64_t offset_bytes, std::span<const std::byte> data) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_generation(generation, path));
  const uint64_t growth = offset_bytes + data.size() > inode->visible.size()
                              ? offset_bytes + data.size() - inode->visible.size()
                              : 0;
  if (growth > 0 && visible_bytes_locked() + growth > options_.capacity_bytes) {
    return resource_exhausted("write " + path + " at offset " + std::to_string(offset_bytes) + ", " +
                              std::to_string(data.size()) + " bytes: no space left on the simulated disk (ENOSPC)");
  }
  apply_write(inode->visible, offset_bytes, data);
  Inode::ContentOperation operation;
  operation.offset_bytes = offset_bytes;
  operation.data.assign(data.begin(), data.end());
  inode->pending.push_back(std::move(operation));
  pending_content_order_.push_back({inode, inode->pending.size() - 1});
  trace_content(path, "write " + std::to_string(offset_bytes) + " " + std::to_string(data.size()) + " " +
                          std::to_string(XXH64(data.data(), data.size(), 0)));
  return Status();
}

Status SimDisk::truncate_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                               uint64_t size_bytes) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_generation(generation, path));
  inode->visible.resize(size_bytes, std::byte{0});
  inode->pending.push_back(Inode::ContentOperation{false, 0, {}, size_bytes});
  pending_content_order_.push_back({inode, inode->pending.size() - 1});
  trace_content(path, "truncate " + std::to_string(size_bytes));
  return Status();
}

Status SimDisk::sync_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_generation(generation, path));
  inode->durable = inode->visible;
  inode->pending.clear();
  // Its entries in the global order are gone (the others keep their relative order).
  std::erase_if(pending_content_order_, [&](const auto& record) { return record.first == inode; });
  trace_content(path, "fsync");
  return Status();
}

Result<uint64_t> SimDisk::inode_size(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_generation(generation, path));
  return static_cast<uint64_t>(inode->visible.size());
}

Status SimDisk::create_directories(const std::string& raw_path) {
  if (raw_path.find("..") != std::string::npos) return invalid_argument("create directory " + raw_path + ": '..'");
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  std::vector<std::string> missing;
  for (std::string at = path; at != "/"; at = parent_of(at)) {
    auto found = visible_.find(at);
    if (found != visible_.end()) {
      if (!found->second.is_directory) return failed_precondition("create directory " + path + ": " + at + " is a file");
      break;
    }
    missing.push_back(at);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    visible_[*it] = Entry{true, nullptr};
    record_directory_operation(PendingOperation::Kind::kMakeDirectory, *it, "", nullptr);
  }
  return Status();
}

Status SimDisk::remove_file(const std::string& raw_path) {
  if (raw_path.find("..") != std::string::npos) return invalid_argument("remove " + raw_path + ": '..' in a path");
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  auto found = visible_.find(path);
  if (found == visible_.end()) return not_found("remove " + path + ": no such file");
  if (found->second.is_directory) return failed_precondition("remove " + path + ": is a directory");
  visible_.erase(found);
  record_directory_operation(PendingOperation::Kind::kUnlink, path, "", nullptr);
  return Status();
}

Status SimDisk::remove_tree(const std::string& raw_path) {
  if (raw_path.find("..") != std::string::npos) return invalid_argument("remove tree " + raw_path + ": '..'");
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  if (path == "/") return invalid_argument("remove tree /: refused");
  std::vector<std::string> doomed;
  for (const auto& [name, entry] : visible_) {
    if (name == path || name.rfind(path + "/", 0) == 0) doomed.push_back(name);
  }
  // Deepest first, as `rm -r` unlinks.
  std::sort(doomed.begin(), doomed.end(), [](const std::string& a, const std::string& b) { return a > b; });
  for (const std::string& name : doomed) {
    visible_.erase(name);
    record_directory_operation(PendingOperation::Kind::kUnlink, name, "", nullptr);
  }
  return Status();
}

namespace {

bool is_under(const std::string& path, const std::string& directory) {
  return path.size() > directory.size() && path.compare(0, directory.size(), directory) == 0 &&
         path[directory.size()] == '/';
}

// `path` with its prefix `from` replaced by `to` (path is `from` or lies under it).
std::string moved(const std::string& path, const std::string& from, const std::string& to) {
  return to + path.substr(from.size());
}

// Moves a name and everything under it (a directory's entries) to another name.
template <typename Names>
void move_subtree(Names& names, const std::string& from, const std::string& to) {
  std::vector<std::pair<std::string, typename Names::mapped_type>> taken;
  for (auto it = names.begin(); it != names.end();) {
    if (it->first == from || is_under(it->first, from)) {
      taken.emplace_back(moved(it->first, from, to), it->second);
      it = names.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, entry] : taken) names[path] = entry;
}

}  // namespace

Status SimDisk::rename(const std::string& raw_from, const std::string& raw_to) {
  if (raw_from.find("..") != std::string::npos || raw_to.find("..") != std::string::npos) {
    return invalid_argument("rename " + raw_from + " -> " + raw_to + ": '..' in a path");
  }
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_from));
  const std::string from = normalize(raw_from);
  const std::string to = normalize(raw_to);
  auto found = visible_.find(from);
  if (found == visible_.end()) return not_found("rename " + from + " -> " + to + ": no such file");
  if (from == to) return Status();
  ZEROSIM_RETURN_IF_ERROR(require_parent_directory(to));
  auto target = visible_.find(to);
  const bool directory = found->second.is_directory;
  if (target != visible_.end() && target->second.is_directory != directory) {
    return failed_precondition("rename " + from + " -> " + to + ": " + (directory ? "the target is a file" : "the target is a directory"));
  }
  if (directory) {
    if (is_under(to, from)) return invalid_argument("rename " + from + " -> " + to + ": into itself");
    if (target != visible_.end()) {
      auto inside = visible_.upper_bound(to + "/");
      if (inside != visible_.end() && is_under(inside->first, to)) {
        return failed_precondition("rename " + from + " -> " + to + ": the target directory is not empty");
      }
      visible_.erase(target);
    }
    move_subtree(visible_, from, to);
    // Pending operations inside the directory follow it: they belong to its (renamed) entries.
    for (DirectoryOperation& operation : pending_directory_operations_) {
      PendingOperation& op = operation.operation;
      if (is_under(op.path, from)) op.path = moved(op.path, from, to);
      if (is_under(op.source_path, from)) op.source_path = moved(op.source_path, from, to);
      if (operation.parent == from || is_under(operation.parent, from)) operation.parent = moved(operation.parent, from, to);
    }
  } else {
    Entry entry = found->second;
    visible_.erase(found);
    visible_[to] = entry;
  }
  record_directory_operation(PendingOperation::Kind::kRename, to, from, nullptr);
  return Status();
}

Status SimDisk::exchange(const std::string& raw_first, const std::string& raw_second) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_first));
  const std::string first = normalize(raw_first);
  const std::string second = normalize(raw_second);
  if (visible_.count(first) == 0 || visible_.count(second) == 0) {
    return not_found("exchange " + first + " <-> " + second + ": both names must exist");
  }
  if (parent_of(first) != parent_of(second)) {
    return unimplemented("exchange " + first + " <-> " + second + ": the simulated disk exchanges names of one directory only");
  }
  const std::string aside = first + "\x01exchange";
  move_subtree(visible_, first, aside);
  move_subtree(visible_, second, first);
  move_subtree(visible_, aside, second);
  record_directory_operation(PendingOperation::Kind::kExchange, second, first, nullptr);
  return Status();
}

void SimDisk::apply_directory_operation(Namespace& names, const DirectoryOperation& operation) const {
  const PendingOperation& op = operation.operation;
  switch (op.kind) {
    case PendingOperation::Kind::kCreate:
      names[op.path] = Entry{false, operation.inode};
      break;
    case PendingOperation::Kind::kMakeDirectory:
      if (!names.count(op.path)) names[op.path] = Entry{true, nullptr};
      break;
    case PendingOperation::Kind::kRename: {
      auto found = names.find(op.source_path);
      if (found == names.end()) break;  // its create was lost: nothing to rename
      if (!found->second.is_directory) {
        Entry entry = found->second;
        names.erase(found);
        names[op.path] = entry;
        break;
      }
      std::erase_if(names, [&](const auto& item) { return item.first == op.path; });
      move_subtree(names, op.source_path, op.path);
      break;
    }
    case PendingOperation::Kind::kExchange: {
      if (names.count(op.source_path) == 0 || names.count(op.path) == 0) break;  // a name's create was lost
      const std::string aside = op.source_path + "\x01exchange";
      move_subtree(names, op.source_path, aside);
      move_subtree(names, op.path, op.source_path);
      move_subtree(names, aside, op.path);
      break;
    }
    case PendingOperation::Kind::kUnlink:
      std::erase_if(names, [&](const auto& item) {
        return item.first == op.path || item.first.rfind(op.path + "/", 0) == 0;
      });
      break;
    default:
      break;
  }
}

Status SimDisk::sync_directory(const std::string& raw_path) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  auto found = visible_.find(path);
  if (found == visible_.end() || !found->second.is_directory) return not_found("fsync directory " + path + ": no such directory");
  // Its pending operations become durable, in order; the others stay pending.
  std::vector<DirectoryOperation> remaining;
  std::vector<size_t> remap(pending_directory_operations_.size(), SIZE_MAX);
  for (size_t i = 0; i < pending_directory_operations_.size(); ++i) {
    const DirectoryOperation& operation = pending_directory_operations_[i];
    if (operation.parent == path) {
      apply_directory_operation(durable_, operation);
    } else {
      remap[i] = remaining.size();
      remaining.push_back(operation);
    }
  }
  pending_directory_operations_ = std::move(remaining);
  std::vector<std::pair<std::shared_ptr<Inode>, size_t>> order;
  for (auto& record : pending_content_order_) {
    if (record.first) order.push_back(record);
    else if (remap[record.second] != SIZE_MAX) order.push_back({nullptr, remap[record.second]});
  }
  pending_content_order_ = std::move(order);
  trace_content(path, "fsync directory");
  return Status();
}

Result<bool> SimDisk::exists(const std::string& path) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(path));
  return visible_.count(normalize(path)) > 0;
}

Result<std::vector<std::string>> SimDisk::list_directory(const std::string& raw_path) {
  std::lock_guard lock(mutex_);
  ZEROSIM_RETURN_IF_ERROR(check_frozen(raw_path));
  const std::string path = normalize(raw_path);
  auto found = visible_.find(path);
  if (found == visible_.end() || !found->second.is_directory) return not_found("list " + path + ": no such directory");
  const std::string prefix = path == "/" ? "/" : path + "/";
  std::vector<std::string> names;
  for (auto it = visible_.upper_bound(prefix); it != visible_.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    const std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) names.push_back(rest);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<uint64_t> SimDisk::available_bytes(const std::string&) {
  std::lock_guard lock(mutex_);
  const uint64_t used = visible_bytes_locked();
  return used >= options_.capacity_bytes ? 0 : options_.capacity_bytes - used;
}

Result<std::unique_ptr<FileLock>> SimDisk::lock_file(const std::string& raw_path) {
  {
    FileOpenOptions create;
    create.mode = OpenMode::kCreateReadWrite;
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, open(raw_path, create));
  }
  std::lock_guard lock(mutex_);
  const std::string path = normalize(raw_path);
  auto held = locks_.find(path);
  if (held != locks_.end() && held->second == generation_) {
    return failed_precondition("lock " + path + ": held by another run (same nvme_path and run id)");
  }
  locks_[path] = generation_;
  return std::unique_ptr<FileLock>(new SimFileLock(*this, path, generation_));
}

void SimDisk::release_lock(const std::string& path, uint64_t generation) {
  std::lock_guard lock(mutex_);
  auto held = locks_.find(path);
  if (held != locks_.end() && held->second == generation) locks_.erase(held);
}

uint64_t SimDisk::next_queue_seed() {
  std::lock_guard lock(mutex_);
  return options_.seed;
}

Result<std::unique_ptr<AsyncIoQueue>> SimDisk::make_async_queue(const AsyncIoOptions& options, AsyncEngine) {
  ZEROSIM_RETURN_IF_ERROR(validate_async_io_options(options));
  return std::unique_ptr<AsyncIoQueue>(new SimAsyncQueue(next_queue_seed()));
}

std::vector<PendingOperation> SimDisk::pending_operations() const {
  std::lock_guard lock(mutex_);
  return pending_operations_locked();
}

std::vector<PendingOperation> SimDisk::pending_operations_locked() const {
  std::vector<PendingOperation> out;
  // Content operations need their path: any visible name of the inode (or "(unlinked)").
  auto name_of = [&](const std::shared_ptr<Inode>& inode) {
    for (const auto& [path, entry] : visible_) {
      if (entry.inode == inode) return path;
    }
    return std::string("(unlinked file)");
  };
  for (const auto& [inode, index] : pending_content_order_) {
    if (!inode) {
      out.push_back(pending_directory_operations_[index].operation);
      continue;
    }
    const Inode::ContentOperation& content = inode->pending[index];
    PendingOperation operation;
    operation.path = name_of(inode);
    if (content.is_write) {
      operation.kind = PendingOperation::Kind::kWrite;
      operation.offset_bytes = content.offset_bytes;
      operation.length_bytes = content.data.size();
      operation.sector_count = (content.data.size() + options_.sector_bytes - 1) / options_.sector_bytes;
    } else {
      operation.kind = PendingOperation::Kind::kTruncate;
      operation.length_bytes = content.size_bytes;
    }
    out.push_back(operation);
  }
  return out;
}

void SimDisk::freeze() {
  std::lock_guard lock(mutex_);
  frozen_ = true;
}

std::unique_ptr<SimDisk> SimDisk::clone() const {
  std::lock_guard lock(mutex_);
  auto copy = std::make_unique<SimDisk>(options_);
  std::map<const Inode*, std::shared_ptr<Inode>> copies;
  auto copy_of = [&](const std::shared_ptr<Inode>& inode) -> std::shared_ptr<Inode> {
    if (!inode) return nullptr;
    auto& slot = copies[inode.get()];
    if (!slot) slot = std::make_shared<Inode>(*inode);
    return slot;
  };
  for (const auto& [path, entry] : visible_) copy->visible_[path] = Entry{entry.is_directory, copy_of(entry.inode)};
  for (const auto& [path, entry] : durable_) copy->durable_[path] = Entry{entry.is_directory, copy_of(entry.inode)};
  for (const DirectoryOperation& operation : pending_directory_operations_) {
    DirectoryOperation copied = operation;
    copied.inode = copy_of(operation.inode);
    copy->pending_directory_operations_.push_back(copied);
  }
  for (const auto& [inode, index] : pending_content_order_) copy->pending_content_order_.push_back({copy_of(inode), index});
  copy->generation_ = generation_;
  copy->frozen_ = frozen_;
  copy->content_trace_ = content_trace_;
  copy->unordered_trace_ = unordered_trace_;
  copy->crash_trace_ = crash_trace_;
  return copy;
}

void SimDisk::crash(const std::vector<CrashFate>& fates) {
  std::lock_guard lock(mutex_);
  frozen_ = false;
  Namespace names = durable_;
  // The trace records each operation's fate by what the operation is, not by its position:
  // ranks interleave their operations differently from run to run.
  const std::vector<PendingOperation> described = pending_operations_locked();
  for (size_t i = 0; i < pending_content_order_.size(); ++i) {
    const CrashFate fate = i < fates.size() ? fates[i] : CrashFate{};
    const std::string decision = described[i].describe() + " " + std::to_string(static_cast<int>(fate.kind)) + " " +
                                 std::to_string(fate.surviving_sectors_mask);
    crash_trace_ += XXH64(decision.data(), decision.size(), 0);
    if (fate.kind == CrashFate::Kind::kDrop) continue;
    const auto& [inode, index] = pending_content_order_[i];
    if (!inode) {
      apply_directory_operation(names, pending_directory_operations_[index]);
      continue;
    }
    const Inode::ContentOperation& content = inode->pending[index];
    if (!content.is_write) {
      inode->durable.resize(content.size_bytes, std::byte{0});
      continue;
    }
    const uint64_t sector = options_.sector_bytes;
    const uint64_t sectors = (content.data.size() + sector - 1) / sector;
    for (uint64_t s = 0; s < sectors; ++s) {
      const bool survives = fate.kind == CrashFate::Kind::kKeep || sectors < 2 ||
                            (s < 64 && ((fate.surviving_sectors_mask >> s) & 1u) != 0);
      if (!survives) continue;
      const uint64_t begin = s * sector;
      const uint64_t length = std::min<uint64_t>(sector, content.data.size() - begin);
      apply_write(inode->durable, content.offset_bytes + begin,
                  std::span<const std::byte>(content.data.data() + begin, length));
    }
  }
  // Entries whose directory did not survive are unreachable.
  std::vector<std::string> orphans;
  for (const auto& [path, entry] : names) {
    for (std::string at = path; at != "/"; at = parent_of(at)) {
      if (!names.count(parent_of(at))) {
        orphans.push_back(path);
        break;
      }
    }
  }
  for (const std::string& path : orphans) names.erase(path);
  for (auto& [path, entry] : names) {
    if (entry.inode) {
      entry.inode->visible = entry.inode->durable;
      entry.inode->pending.clear();
    }
  }
  durable_ = names;
  visible_ = names;
  pending_directory_operations_.clear();
  pending_content_order_.clear();
  locks_.clear();
  ++generation_;
}

void SimDisk::crash_with_seed(uint64_t seed) {
  const std::vector<PendingOperation> operations = pending_operations();
  std::vector<CrashFate> fates;
  // An operation's fate is drawn by what it is (its description, and how many identical ones
  // came before it), not by its position: ranks on threads interleave their operations
  // differently from run to run, and the same seed must tear the same writes in every run.
  std::map<std::string, uint64_t> occurrences;
  for (size_t i = 0; i < operations.size(); ++i) {
    const std::string described = operations[i].describe();
    const uint64_t key = XXH64(described.data(), described.size(), occurrences[described]++);
    const uint64_t bits = mix_random_bits(seed, 11, key);
    CrashFate fate;
    fate.kind = (bits & 1) ? CrashFate::Kind::kKeep : CrashFate::Kind::kDrop;
    if (operations[i].kind == PendingOperation::Kind::kWrite && operations[i].sector_count >= 2 && (bits & 6) == 0) {
      fate.kind = CrashFate::Kind::kTear;
      fate.surviving_sectors_mask = mix_random_bits(seed, 12, key);
    }
    fates.push_back(fate);
  }
  crash(fates);
}

uint64_t SimDisk::crash_count() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

std::string SimDisk::trace_hash() const {
  std::lock_guard lock(mutex_);
  uint64_t hash = crash_trace_;
  for (const auto& [path, value] : content_trace_) hash = XXH64(&value, sizeof value, mix(hash, path));
  for (const auto& [path, value] : unordered_trace_) hash = XXH64(&value, sizeof value, mix(hash, path));
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(hash));
  return buffer;
}

Result<std::vector<std::byte>> SimDisk::visible_content(const std::string& path) const {
  std::lock_guard lock(mutex_);
  auto found = visible_.find(normalize(path));
  if (found == visible_.end() || !found->second.inode) return not_found(path + ": no such file");
  return found->second.inode->visible;
}

uint64_t SimDisk::durable_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [path, entry] : durable_) {
    if (entry.inode) total += entry.inode->durable.size();
  }
  return total;
}

}  // namespace zerosim
