// FaultyDisk: wraps any Disk and injects faults by path pattern, operation and occurrence.
//
// The vocabulary (shared with the simulator's fault plans): a rule names a path pattern
// (fnmatch glob, e.g. "*/exp_avg.subgroup-*.swp"), an operation, the occurrence among the
// operations that match it (1 = the first; 0 = every one), and the fault:
//   io_error      the operation fails with EIO
//   no_space      a write fails with ENOSPC
//   short_write   only `bytes` of a write reach the file and the write reports it
//   torn_write    only `bytes` reach the file but the write reports success (a lie the
//                 reader must catch)
//   latency       the operation is delayed by latency_us, then proceeds
//   refuse_direct opening with O_DIRECT fails with EINVAL (as tmpfs used to)
//   bit_flip      a read returns its data with one bit flipped: bit `bytes` of the transfer
//                 (modulo its size), as a disk with silent corruption would
//   lost_write    the write reports success and nothing reaches the file (TigerBeetle's and
//                 the ZFS literature's "lost write": acknowledged, never persisted; later reads
//                 return what was there before)
//   misdirected_write  the write reports success but lands `bytes` bytes further into the
//                 same file (4096 when 0; rounded up to 4096 for a direct transfer), leaving
//                 the intended range as it was
//   power_loss    the operation takes effect, then the power goes out: the disk's power-loss
//                 handler runs (the simulator freezes its disk, so this operation and every
//                 one before it that was not made durable get a crash fate) and the operation
//                 fails. A crash in the middle of any write, fsync or rename a save makes.
// Occurrences are counted per requester: a FaultyDisk and the views made with for_requester
// share the rules, and each view counts its own operations (the simulator gives each rank a
// view, so "the 2nd write of a matching path" is the same operation of the same rank in every
// run, however the rank threads interleave). A rule with "rank": R applies to requester R
// only. A rule's "after" operation arms it for every requester.
// A rule may wait for another operation: with "after": {"path": P, "op": O} its occurrences
// are counted from the first operation O on a path matching P on (e.g. a swap-file fault
// after the first `latest` was published: after the first checkpoint committed).
// A latency rule may also give bandwidth_mb_per_s: a read or write then takes latency_us plus
// its size at that bandwidth (MB = 10^6 bytes), which is how the simulator models a disk on
// its virtual clock.
// Faults apply to synchronous File calls and to transfers through the async queue alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/env/disk.h"

namespace zerosim {

enum class FaultOperation { kOpen, kRead, kWrite, kSync, kRename, kRemove, kCreateDirectory, kSyncDirectory };
enum class FaultKind {
  kIoError,
  kNoSpace,
  kShortWrite,
  kTornWrite,
  kLatency,
  kRefuseDirect,
  kBitFlip,
  kLostWrite,
  kMisdirectedWrite,
  kPowerLoss
};

const char* fault_operation_name(FaultOperation operation);
const char* fault_kind_name(FaultKind kind);

struct FaultRule {
  std::string path_pattern = "*";
  FaultOperation operation = FaultOperation::kWrite;
  int64_t occurrence = 1;  // 1-based among matching operations; 0 = every one
  FaultKind kind = FaultKind::kIoError;
  uint64_t bytes = 0;       // short_write / torn_write: bytes that reach the file
  uint64_t latency_us = 0;  // latency
  double bandwidth_mb_per_s = 0.0;  // latency of reads and writes: + size / bandwidth (0: none)
  std::string after_path_pattern = {};  // set: the rule counts nothing until this operation happened
  FaultOperation after_operation = FaultOperation::kRename;
  int rank = -1;  // >= 0: only this requester's (the simulator's rank's) operations
  // The delay of this rule for a transfer of `length_bytes`, in microseconds.
  uint64_t delay_for_us(uint64_t length_bytes) const;
};

// Reads rules from JSON: [{"path": "...", "op": "write", "occurrence": 1, "fault": "io_error",
// "bytes": 4096, "latency_us": 100, "bandwidth_mb_per_s": 2000}, ...]. Errors name the index
// and the key.
Result<std::vector<FaultRule>> parse_fault_rules(const nlohmann::json& rules);

class FaultyDisk final : public Disk {
 public:
  // `delay` implements latency (default: sleep); the simulator passes its virtual clock.
  FaultyDisk(Disk& inner, std::vector<FaultRule> rules, std::function<void(uint64_t)> delay = {});
  ~FaultyDisk() override;
  // A view of the same disk under the same rules, whose operations count as `requester`'s
  // (this disk's own are requester 0's). It must not outlive this disk.
  std::unique_ptr<FaultyDisk> for_requester(int requester);

  // How many times each rule fired, in rule order (all requesters together).
  std::vector<int64_t> fired_counts() const;
  // How many operations each rule matched (its path and operation, its requester, once armed),
  // in rule order, all requesters together: what a rule that never fired saw instead.
  std::vector<int64_t> matched_counts() const;
  // What a power_loss rule does once its operation took effect (the simulator freezes its
  // disk). Without one, power_loss fails the operation as io_error does.
  void set_power_loss_handler(std::function<void(const std::string& what)> handler);
  // The operation a power_loss rule fired at ("write /c/global_step4/manifest.json.tmp"), or empty.
  std::string power_loss_at() const;
  // Runs the handler for the operation `what`; the error the operation returns.
  Status lose_power(const std::string& what);

  // The fault to apply to this operation on this path, if a rule fires (counts the match).
  struct Decision {
    bool fires = false;
    FaultRule rule;
  };
  Decision decide(FaultOperation operation, const std::string& path);
  void delay_us(uint64_t latency_us) const;

  Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) override;
  Status create_directories(const std::string& path) override;
  Status remove_file(const std::string& path) override;
  Status remove_tree(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status sync_directory(const std::string& path) override;
  Result<bool> exists(const std::string& path) override;
  Result<std::vector<std::string>> list_directory(const std::string& path) override;
  Result<uint64_t> available_bytes(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path) override { return inner_.lock_file(path); }
  uint64_t direct_io_alignment_bytes() const override { return inner_.direct_io_alignment_bytes(); }
  Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) override;

 private:
  struct Shared;  // the rules and their counts, shared with the views
  FaultyDisk(Disk& inner, std::shared_ptr<Shared> shared, int requester, std::function<void(uint64_t)> delay);
  Disk& inner_;
  std::shared_ptr<Shared> shared_;
  int requester_ = 0;
  std::function<void(uint64_t)> delay_;
};

// The error a fault produces, naming the operation, path, offset and length.
Status fault_status(FaultKind kind, FaultOperation operation, const std::string& path, uint64_t offset_bytes,
                    uint64_t length_bytes);

}  // namespace zerosim
