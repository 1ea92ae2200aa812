// SimDisk: the Disk seam in memory, with the durability of a real file system made explicit,
// so that a simulated power loss can keep, drop or tear exactly what a real disk could.
//
// The model (after FoundationDB's AsyncFileNonDurable, LazyFS and ALICE; docs/simulator.md
// says what each contributes):
//   * every file (an inode) has durable content and a list of pending content operations
//     (writes, truncations) since its last fsync; reads see the content with every pending
//     operation applied, as the page cache does;
//   * every directory operation (create, rename, unlink, mkdir) is pending until the directory
//     it changes is fsynced (Disk::sync_directory); the names visible to the running program
//     include the pending operations;
//   * File::sync makes the file's pending content operations durable (not its name: a new
//     file also needs its directory fsynced, as on ext4 and XFS);
//   * crash(): every pending operation gets a fate, in order: kept, dropped, or (a write) torn
//     at sector granularity, keeping only some of its sectors. Then the durable state, with the
//     kept operations applied, is all that remains: open files, locks and pending operations
//     are gone, and a file handle from before the crash fails with an error naming the crash.
//
// The async queue completes the submitted transfers in an order drawn from the disk's seed
// (out of order, as libaio may), so nothing may depend on completion order.
//
// Determinism: the disk keeps a trace hash of every operation and every crash decision. Per
// file, content operations are hashed in order (one thread writes a file); directory
// operations and reads are combined order-independently (ranks race to create a shared parent
// directory, with the same outcome). The same scenario and seed must give the same trace hash;
// the harness checks that.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/env/disk.h"

namespace zerosim {

struct SimDiskOptions {
  uint64_t sector_bytes = 512;
  uint64_t capacity_bytes = uint64_t{1} << 40;
  uint64_t seed = 1;  // completion order of the async queue
};

// What a crash does to one pending operation.
struct CrashFate {
  enum class Kind { kKeep, kDrop, kTear };
  Kind kind = Kind::kKeep;
  // kTear: which sectors of the write survive (bit i = sector i of the write, counted from
  // its first byte; bits past the write's sector count are ignored). A write of one sector
  // cannot tear.
  uint64_t surviving_sectors_mask = 0;
};

struct PendingOperation {
  enum class Kind { kWrite, kTruncate, kCreate, kMakeDirectory, kRename, kUnlink, kExchange };
  Kind kind = Kind::kWrite;
  std::string path;         // the file written, or the name created, renamed to or removed
  std::string source_path;  // kRename: the old name; kExchange: the other name
  uint64_t offset_bytes = 0;
  uint64_t length_bytes = 0;  // kWrite: bytes; kTruncate: the new size
  uint64_t sector_count = 0;  // kWrite: sectors it touches (a tear needs at least 2)
  std::string describe() const;
};

const char* pending_operation_kind_name(PendingOperation::Kind kind);

class SimDisk final : public Disk {
 public:
  explicit SimDisk(SimDiskOptions options = {});
  ~SimDisk() override;

  // The pending operations, in the order they happened (the order fates are given in). Ranks
  // on threads interleave differently from run to run, so callers that must be reproducible
  // choose fates by what an operation is (describe()), not by its position.
  std::vector<PendingOperation> pending_operations() const;
  // Power loss: `fates` has one entry per pending operation (missing entries mean kKeep).
  void crash(const std::vector<CrashFate>& fates);
  // Power loss with fates drawn from `seed`: each operation kept or dropped with equal
  // probability, writes of several sectors torn one time in four.
  void crash_with_seed(uint64_t seed);
  // The instant of a power loss: from now until crash(), every operation fails (ranks still
  // running when the power went out do nothing more), so the pending operations are exactly
  // those issued before it.
  void freeze();
  // A deep copy (files, names, pending operations), to try several crash states of one instant.
  std::unique_ptr<SimDisk> clone() const;
  // How many crashes this disk has seen (file handles from an older generation are dead).
  uint64_t crash_count() const;

  // Hash of every operation and crash decision so far (see above), as 16 hex digits.
  std::string trace_hash() const;
  // The visible content of a file (tests); kNotFound when absent.
  Result<std::vector<std::byte>> visible_content(const std::string& path) const;
  // Durable bytes in use (content of files reachable from the durable namespace).
  uint64_t durable_bytes() const;

  Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) override;
  Status create_directories(const std::string& path) override;
  Status remove_file(const std::string& path) override;
  Status remove_tree(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  // renameat2(RENAME_EXCHANGE): the two names (files or directories) swap atomically; one
  // pending operation, durable when their directory is fsynced. Both in one directory.
  Status exchange(const std::string& first, const std::string& second);
  Status sync_directory(const std::string& path) override;
  Result<bool> exists(const std::string& path) override;
  Result<std::vector<std::string>> list_directory(const std::string& path) override;
  Result<uint64_t> available_bytes(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path) override;
  uint64_t direct_io_alignment_bytes() const override { return 4096; }
  Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) override;

  // Internal, for SimFile and the queue: content operations on an inode.
  struct Inode;
  Status read_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                    uint64_t offset_bytes, std::span<std::byte> buffer);
  Status write_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                     uint64_t offset_bytes, std::span<const std::byte> data);
  Status truncate_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path,
                        uint64_t size_bytes);
  Status sync_inode(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path);
  Result<uint64_t> inode_size(uint64_t generation, const std::shared_ptr<Inode>& inode, const std::string& path);
  void release_lock(const std::string& path, uint64_t generation);
  uint64_t next_queue_seed();

 private:
  struct Entry {
    bool is_directory = false;
    std::shared_ptr<Inode> inode;  // files only
  };
  using Namespace = std::map<std::string, Entry>;
  struct DirectoryOperation {
    PendingOperation operation;
    std::string parent;  // the directory whose fsync makes it durable
    std::shared_ptr<Inode> inode;  // kCreate
  };

  static std::string normalize(const std::string& path);
  static std::string parent_of(const std::string& path);
  Status check_generation(uint64_t generation, const std::string& path) const;
  Status check_frozen(const std::string& what) const;
  Status require_parent_directory(const std::string& path) const;
  void apply_directory_operation(Namespace& names, const DirectoryOperation& operation) const;
  // A pending create, mkdir, rename or unlink, durable once `path`'s directory is fsynced.
  void record_directory_operation(PendingOperation::Kind kind, const std::string& path, const std::string& source_path,
                                  std::shared_ptr<Inode> inode);
  void trace_content(const std::string& path, const std::string& what);
  void trace_unordered(const std::string& path, const std::string& what);
  uint64_t visible_bytes_locked() const;
  std::vector<PendingOperation> pending_operations_locked() const;

  SimDiskOptions options_;
  mutable std::mutex mutex_;
  Namespace visible_;
  Namespace durable_;
  std::vector<DirectoryOperation> pending_directory_operations_;
  // Pending content operations of every inode, in global order (for crash fates), as
  // (inode, index into its pending list).
  std::vector<std::pair<std::shared_ptr<Inode>, size_t>> pending_content_order_;
  std::map<std::string, uint64_t> locks_;  // path -> generation holding it
  uint64_t generation_ = 0;
  bool frozen_ = false;
  std::map<std::string, uint64_t> content_trace_;    // ordered per path
  std::map<std::string, uint64_t> unordered_trace_;  // commutative per path
  uint64_t crash_trace_ = 0;
};

}  // namespace zerosim
