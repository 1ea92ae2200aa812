#include "faults/faulty_disk.h"

#include <fnmatch.h>

#include <chrono>
#include <map>
#include <utility>
#include <thread>

namespace zerosim {

const char* fault_operation_name(FaultOperation operation) {
  switch (operation) {
    case FaultOperation::kOpen: return "open";
    case FaultOperation::kRead: return "read";
    case FaultOperation::kWrite: return "write";
    case FaultOperation::kSync: return "sync";
    case FaultOperation::kRename: return "rename";
    case FaultOperation::kRemove: return "remove";
    case FaultOperation::kCreateDirectory: return "create_directory";
    case FaultOperation::kSyncDirectory: return "sync_directory";
  }
  return "unknown";
}

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIoError: return "io_error";
    case FaultKind::kNoSpace: return "no_space";
    case FaultKind::kShortWrite: return "short_write";
    case FaultKind::kTornWrite: return "torn_write";
    case FaultKind::kLatency: return "latency";
    case FaultKind::kRefuseDirect: return "refuse_direct";
    case FaultKind::kBitFlip: return "bit_flip";
    case FaultKind::kLostWrite: return "lost_write";
    case FaultKind::kMisdirectedWrite: return "misdirected_write";
    case FaultKind::kPowerLoss: return "power_loss";
  }
  return "unknown";
}

uint64_t FaultRule::delay_for_us(uint64_t length_bytes) const {
  if (bandwidth_mb_per_s <= 0.0) return latency_us;
  return latency_us + static_cast<uint64_t>(static_cast<double>(length_bytes) / bandwidth_mb_per_s);
}

Result<std::vector<FaultRule>> parse_fault_rules(const nlohmann::json& rules) {
  if (!rules.is_array()) return invalid_argument("fault rules: expected a list of rules");
  std::vector<FaultRule> parsed;
  for (size_t i = 0; i < rules.size(); ++i) {
    const nlohmann::json& rule = rules[i];
    const std::string where = "fault rules[" + std::to_string(i) + "]";
    if (!rule.is_object()) return invalid_argument(where + ": expected an object");
    FaultRule out;
    for (const auto& [key, value] : rule.items()) {
      if (key == "path") {
        if (!value.is_string()) return invalid_argument(where + ".path: expected a string");
        out.path_pattern = value.get<std::string>();
      } else if (key == "op" || key == "fault") {
        if (!value.is_string()) return invalid_argument(where + "." + key + ": expected a string");
        const std::string name = value.get<std::string>();
        bool found = false;
        if (key == "op") {
          for (int op = 0; op <= static_cast<int>(FaultOperation::kSyncDirectory); ++op) {
            if (name == fault_operation_name(static_cast<FaultOperation>(op))) {
              out.operation = static_cast<FaultOperation>(op);
              found = true;
            }
          }
        } else {
          for (int kind = 0; kind <= static_cast<int>(FaultKind::kPowerLoss); ++kind) {
            if (name == fault_kind_name(static_cast<FaultKind>(kind))) {
              out.kind = static_cast<FaultKind>(kind);
              found = true;
            }
          }
        }
        if (!found) return invalid_argument(where + "." + key + ": unknown value '" + name + "'");
      } else if (key == "occurrence" || key == "bytes" || key == "latency_us") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0) {
          return invalid_argument(where + "." + key + ": expected a non-negative integer");
        }
        if (key == "occurrence") out.occurrence = value.get<int64_t>();
        else if (key == "bytes") out.bytes = value.get<uint64_t>();
        else out.latency_us = value.get<uint64_t>();
      } else if (key == "after") {
        const std::string at = where + ".after";
        if (!value.is_object() || value.size() != 2 || !value.contains("path") || !value.contains("op") ||
            !value["path"].is_string() || !value["op"].is_string() || value["path"].get<std::string>().empty()) {
          return invalid_argument(at + ": expected {\"path\": PATTERN, \"op\": OPERATION}, found " + value.dump());
        }
        out.after_path_pattern = value["path"].get<std::string>();
        const std::string op = value["op"].get<std::string>();
        bool found = false;
        for (int index = 0; index <= static_cast<int>(FaultOperation::kSyncDirectory); ++index) {
          if (op == fault_operation_name(static_cast<FaultOperation>(index))) {
            out.after_operation = static_cast<FaultOperation>(index);
            found = true;
          }
        }
        if (!found) return invalid_argument(at + ".op: unknown value '" + op + "'");
      } else if (key == "rank") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (1 << 20)) {
          return invalid_argument(where + ".rank: expected a rank (an integer >= 0)");
        }
        out.rank = value.get<int>();
      } else if (key == "bandwidth_mb_per_s") {
        if (!value.is_number() || !(value.get<double>() > 0.0)) {
          return invalid_argument(where + ".bandwidth_mb_per_s: expected a number > 0");
        }
        out.bandwidth_mb_per_s = value.get<double>();
      } else {
        return invalid_argument(where + "." + key +
                                ": unknown key (path, op, occurrence, fault, bytes, latency_us, bandwidth_mb_per_s, after, rank)");
      }
    }
    if (out.kind == FaultKind::kBitFlip && out.operation != FaultOperation::kRead) {
      return invalid_argument(where + ".fault: bit_flip applies to reads; found op '" +
                              fault_operation_name(out.operation) + "'");
    }
    if ((out.kind == FaultKind::kLostWrite || out.kind == FaultKind::kMisdirectedWrite) &&
        out.operation != FaultOperation::kWrite) {
      return invalid_argument(where + ".fault: " + fault_kind_name(out.kind) + " applies to writes; found op '" +
                              fault_operation_name(out.operation) + "'");
    }
    if (out.kind == FaultKind::kPowerLoss &&
        (out.operation == FaultOperation::kOpen || out.operation == FaultOperation::kRead)) {
      return invalid_argument(where + ".fault: power_loss applies to operations that change the disk (write, sync, "
                              "rename, remove, create_directory, sync_directory); found op '" +
                              fault_operation_name(out.operation) + "'");
    }
    parsed.push_back(out);
  }
  return parsed;
}

Status fault_status(FaultKind kind, FaultOperation operation, const std::string& path, uint64_t offset_bytes,
                    uint64_t length_bytes) {
  const std::string what = std::string(fault_operation_name(operation)) + " " + path + " at offset " +
                           std::to_string(offset_bytes) + " length " + std::to_string(length_bytes);
  switch (kind) {
    case FaultKind::kNoSpace: return resource_exhausted(what + ": No space left on device");
    case FaultKind::kRefuseDirect: return invalid_argument("open " + path + " with O_DIRECT: Invalid argument");
    default: return io_error(what + ": Input/output error");
  }
}

namespace {

// How far a misdirected write lands from where it was meant to.
uint64_t misdirection_bytes(const FaultRule& rule, bool direct_io) {
  const uint64_t bytes = rule.bytes == 0 ? 4096 : rule.bytes;
  return direct_io ? (bytes + 4095) / 4096 * 4096 : bytes;
}

void flip_bit(std::span<std::byte> buffer, uint64_t bit) {
  if (buffer.empty()) return;
  bit %= buffer.size() * 8;
  buffer[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
}

class FaultyFile final : public File {
 public:
  FaultyFile(FaultyDisk& disk, std::unique_ptr<File> inner) : File(inner->path()), disk_(disk), inner_(std::move(inner)) {}

  Status read_exact(uint64_t offset_bytes, std::span<std::byte> buffer) override {
    const FaultyDisk::Decision decision = disk_.decide(FaultOperation::kRead, path());
    if (decision.fires) {
      if (decision.rule.kind == FaultKind::kLatency) {
        disk_.delay_us(decision.rule.delay_for_us(buffer.size()));
      } else if (decision.rule.kind == FaultKind::kBitFlip) {
        ZEROSIM_RETURN_IF_ERROR(inner_->read_exact(offset_bytes, buffer));
        flip_bit(buffer, decision.rule.bytes);
        return Status();
      } else {
        return fault_status(decision.rule.kind, FaultOperation::kRead, path(), offset_bytes, buffer.size());
      }
    }
    return inner_->read_exact(offset_bytes, buffer);
  }

  Status write_all(uint64_t offset_bytes, std::span<const std::byte> data) override {
    const FaultyDisk::Decision decision = disk_.decide(FaultOperation::kWrite, path());
    if (decision.fires) {
      switch (decision.rule.kind) {
        case FaultKind::kLatency: disk_.delay_us(decision.rule.delay_for_us(data.size())); break;
        case FaultKind::kBitFlip: break;  // a read fault
        case FaultKind::kShortWrite:
        case FaultKind::kTornWrite: {
          const uint64_t kept = std::min<uint64_t>(decision.rule.bytes, data.size());
          ZEROSIM_RETURN_IF_ERROR(inner_->write_all(offset_bytes, data.first(kept)));
          if (decision.rule.kind == FaultKind::kTornWrite) return Status();
          return data_loss("short write of " + path() + " at offset " + std::to_string(offset_bytes) + ": " +
                           std::to_string(kept) + " of " + std::to_string(data.size()) + " bytes");
        }
        case FaultKind::kLostWrite: return Status();
        case FaultKind::kMisdirectedWrite:
          return inner_->write_all(offset_bytes + misdirection_bytes(decision.rule, inner_->direct_io()), data);
        case FaultKind::kPowerLoss:
          ZEROSIM_RETURN_IF_ERROR(inner_->write_all(offset_bytes, data));
          return disk_.lose_power("write " + path() + " at offset " + std::to_string(offset_bytes) + " length " +
                                  std::to_string(data.size()));
        default: return fault_status(decision.rule.kind, FaultOperation::kWrite, path(), offset_bytes, data.size());
      }
    }
    return inner_->write_all(offset_bytes, data);
  }

  Result<uint64_t> size_bytes() override { return inner_->size_bytes(); }
  Status truncate(uint64_t size_bytes) override { return inner_->truncate(size_bytes); }
  Status sync() override {
    const FaultyDisk::Decision decision = disk_.decide(FaultOperation::kSync, path());
    if (decision.fires && decision.rule.kind == FaultKind::kPowerLoss) {
      ZEROSIM_RETURN_IF_ERROR(inner_->sync());
      return disk_.lose_power("sync " + path());
    }
    if (decision.fires && decision.rule.kind != FaultKind::kLatency) {
      return fault_status(decision.rule.kind, FaultOperation::kSync, path(), 0, 0);
    }
    if (decision.fires) disk_.delay_us(decision.rule.latency_us);
    return inner_->sync();
  }
  Status start_writeback(uint64_t offset_bytes, uint64_t length_bytes) override {
    return inner_->start_writeback(offset_bytes, length_bytes);
  }
  Status close() override { return inner_->close(); }
  int native_descriptor() const override { return inner_->native_descriptor(); }
  bool direct_io() const override { return inner_->direct_io(); }
  File& inner() { return *inner_; }

 private:
  FaultyDisk& disk_;
  std::unique_ptr<File> inner_;
};

// Applies the rules to each transfer, then hands it to the inner disk's queue. Faults that
// fail a transfer are reported by wait_all(), as the kernel would report them at completion.
class FaultyAsyncQueue final : public AsyncIoQueue {
 public:
  FaultyAsyncQueue(FaultyDisk& disk, std::unique_ptr<AsyncIoQueue> inner) : disk_(disk), inner_(std::move(inner)) {}

  Status submit(const IoRequest& outer_request) override {
    // The inner queue drives the inner file: the rules apply here, once (a queue that calls
    // File methods, as the simulator's does, must not meet this disk's rules again).
    IoRequest request = outer_request;
    if (auto* faulty = dynamic_cast<FaultyFile*>(request.file)) request.file = &faulty->inner();
    const FaultOperation operation =
        request.direction == IoDirection::kRead ? FaultOperation::kRead : FaultOperation::kWrite;
    const FaultyDisk::Decision decision = disk_.decide(operation, request.file->path());
    if (!decision.fires) return inner_->submit(request);
    const FaultRule& rule = decision.rule;
    switch (rule.kind) {
      case FaultKind::kLatency:
        disk_.delay_us(rule.delay_for_us(request.length_bytes));
        return inner_->submit(request);
      case FaultKind::kBitFlip:
        if (operation == FaultOperation::kRead) {
          flips_.push_back({std::span<std::byte>(request.buffer, request.length_bytes), rule.bytes});
        }
        return inner_->submit(request);
      case FaultKind::kLostWrite:
        if (operation != FaultOperation::kWrite) return inner_->submit(request);
        return Status();
      case FaultKind::kMisdirectedWrite: {
        if (operation != FaultOperation::kWrite) return inner_->submit(request);
        IoRequest misdirected = request;
        misdirected.offset_bytes += misdirection_bytes(rule, request.file->direct_io());
        return inner_->submit(misdirected);
      }
      case FaultKind::kPowerLoss: {
        ZEROSIM_RETURN_IF_ERROR(inner_->submit(request));
        // The transfer is in flight when the power goes out: whether it reaches the disk is the
        // simulated queue's (and then the crash's) to decide; the loss is reported at completion.
        const Status lost = disk_.lose_power(std::string(operation == FaultOperation::kRead ? "read " : "write ") +
                                             request.file->path() + " at offset " + std::to_string(request.offset_bytes) +
                                             " length " + std::to_string(request.length_bytes));
        if (pending_error_.ok()) pending_error_ = lost;
        return Status();
      }
      case FaultKind::kShortWrite:
      case FaultKind::kTornWrite: {
        if (operation != FaultOperation::kWrite) return inner_->submit(request);
        // Direct transfers move whole 4096-byte blocks: keep the fault's byte count aligned.
        uint64_t kept = std::min<uint64_t>(rule.bytes, request.length_bytes);
        if (request.file->direct_io()) kept = kept / 4096 * 4096;
        if (kept > 0) {
          IoRequest partial = request;
          partial.length_bytes = kept;
          ZEROSIM_RETURN_IF_ERROR(inner_->submit(partial));
        }
        if (rule.kind == FaultKind::kShortWrite && pending_error_.ok()) {
          pending_error_ = data_loss("short write of " + request.file->path() + " at offset " +
                                     std::to_string(request.offset_bytes) + ": " + std::to_string(kept) + " of " +
                                     std::to_string(request.length_bytes) + " bytes");
        }
        return Status();
      }
      default:
        if (pending_error_.ok()) {
          pending_error_ = fault_status(rule.kind, operation, request.file->path(), request.offset_bytes,
                                        request.length_bytes);
        }
        return Status();
    }
  }

  Status wait_all() override {
    Status inner_status = inner_->wait_all();
    // The data is in the buffers now: corrupt it as the disk would have.
    for (const auto& [buffer, bit] : flips_) flip_bit(buffer, bit);
    flips_.clear();
    Status injected = pending_error_;
    pending_error_ = Status();
    if (!injected.ok()) return injected;
    return inner_status;
  }

  const char* engine_name() const override { return inner_->engine_name(); }

 private:
  FaultyDisk& disk_;
  std::unique_ptr<AsyncIoQueue> inner_;
  Status pending_error_;
  std::vector<std::pair<std::span<std::byte>, uint64_t>> flips_;
};

}  // namespace

struct FaultyDisk::Shared {
  explicit Shared(std::vector<FaultRule> rule_list) : rules(std::move(rule_list)), fired_counts(rules.size(), 0) {
    for (const FaultRule& rule : rules) armed.push_back(rule.after_path_pattern.empty());
  }
  const std::vector<FaultRule> rules;
  std::mutex mutex;
  std::map<std::pair<size_t, int>, int64_t> match_counts;  // (rule, requester) -> matches so far
  std::vector<bool> armed;  // per rule: its "after" operation happened (or it has none)
  std::vector<int64_t> fired_counts;
  std::function<void(const std::string&)> power_loss_handler;
  std::string power_loss_at;
};

FaultyDisk::FaultyDisk(Disk& inner, std::vector<FaultRule> rules, std::function<void(uint64_t)> delay)
    : FaultyDisk(inner, std::make_shared<Shared>(std::move(rules)), 0, std::move(delay)) {}

FaultyDisk::FaultyDisk(Disk& inner, std::shared_ptr<Shared> shared, int requester, std::function<void(uint64_t)> delay)
    : inner_(inner), shared_(std::move(shared)), requester_(requester), delay_(std::move(delay)) {
  if (!delay_) delay_ = [](uint64_t latency_us) { std::this_thread::sleep_for(std::chrono::microseconds(latency_us)); };
}

FaultyDisk::~FaultyDisk() = default;

std::unique_ptr<FaultyDisk> FaultyDisk::for_requester(int requester) {
  ZEROSIM_CHECK(requester >= 0, "FaultyDisk::for_requester: a requester is >= 0");
  return std::unique_ptr<FaultyDisk>(new FaultyDisk(inner_, shared_, requester, delay_));
}

std::vector<int64_t> FaultyDisk::fired_counts() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->fired_counts;
}

std::vector<int64_t> FaultyDisk::matched_counts() const {
  std::lock_guard lock(shared_->mutex);
  std::vector<int64_t> matched(shared_->rules.size(), 0);
  for (const auto& [rule_and_requester, count] : shared_->match_counts) matched[rule_and_requester.first] += count;
  return matched;
}

void FaultyDisk::set_power_loss_handler(std::function<void(const std::string& what)> handler) {
  std::lock_guard lock(shared_->mutex);
  shared_->power_loss_handler = std::move(handler);
}

std::string FaultyDisk::power_loss_at() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->power_loss_at;
}

Status FaultyDisk::lose_power(const std::string& what) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->power_loss_at.empty()) shared_->power_loss_at = what;
    handler = shared_->power_loss_handler;
  }
  if (handler) handler(what);
  return io_error(what + ": the power went out during this operation (fault power_loss)");
}

FaultyDisk::Decision FaultyDisk::decide(FaultOperation operation, const std::string& path) {
  Shared& shared = *shared_;
  std::lock_guard lock(shared.mutex);
  Decision decision;
  for (size_t i = 0; i < shared.rules.size(); ++i) {
    const FaultRule& rule = shared.rules[i];
    if (!shared.armed[i]) {
      shared.armed[i] =
          rule.after_operation == operation && ::fnmatch(rule.after_path_pattern.c_str(), path.c_str(), 0) == 0;
      continue;
    }
    if (rule.rank >= 0 && rule.rank != requester_) continue;
    if (rule.operation != operation || ::fnmatch(rule.path_pattern.c_str(), path.c_str(), 0) != 0) continue;
    const int64_t occurrence = ++shared.match_counts[{i, requester_}];
    if (!decision.fires && (rule.occurrence == 0 || rule.occurrence == occurrence)) {
      ++shared.fired_counts[i];
      decision.fires = true;
      decision.rule = rule;
    }
  }
  return decision;
}

void FaultyDisk::delay_us(uint64_t latency_us) const { delay_(latency_us); }

Result<std::unique_ptr<File>> FaultyDisk::open(const std::string& path, const FileOpenOptions& options) {
  const Decision decision = decide(FaultOperation::kOpen, path);
  if (decision.fires) {
    if (decision.rule.kind == FaultKind::kLatency) {
      delay_us(decision.rule.latency_us);
    } else if (decision.rule.kind == FaultKind::kRefuseDirect) {
      if (options.direct_io) return fault_status(FaultKind::kRefuseDirect, FaultOperation::kOpen, path, 0, 0);
    } else {
      return fault_status(decision.rule.kind, FaultOperation::kOpen, path, 0, 0);
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> inner, inner_.open(path, options));
  return std::unique_ptr<File>(new FaultyFile(*this, std::move(inner)));
}

// A path operation under the rules: delayed, failed, or (power_loss) done and then the power
// goes out.
#define ZEROSIM_FAULTY_PATH_OPERATION(operation, path, name, call)                         \
  do {                                                                                     \
    const Decision decision = decide(operation, path);                                     \
    if (decision.fires) {                                                                  \
      if (decision.rule.kind == FaultKind::kPowerLoss) {                                   \
        ZEROSIM_RETURN_IF_ERROR(call);                                                     \
        return lose_power(std::string(name) + " " + path);                                 \
      }                                                                                    \
      if (decision.rule.kind == FaultKind::kLatency) delay_us(decision.rule.latency_us);   \
      else return fault_status(decision.rule.kind, operation, path, 0, 0);                 \
    }                                                                                      \
    return call;                                                                           \
  } while (false)

Status FaultyDisk::create_directories(const std::string& path) {
  ZEROSIM_FAULTY_PATH_OPERATION(FaultOperation::kCreateDirectory, path, "create_directory",
                                inner_.create_directories(path));
}
Status FaultyDisk::remove_file(const std::string& path) {
  ZEROSIM_FAULTY_PATH_OPERATION(FaultOperation::kRemove, path, "remove", inner_.remove_file(path));
}
Status FaultyDisk::remove_tree(const std::string& path) {
  ZEROSIM_FAULTY_PATH_OPERATION(FaultOperation::kRemove, path, "remove", inner_.remove_tree(path));
}
Status FaultyDisk::rename(const std::string& from, const std::string& to) {
  ZEROSIM_FAULTY_PATH_OPERATION(FaultOperation::kRename, from, "rename", inner_.rename(from, to));
}
Status FaultyDisk::sync_directory(const std::string& path) {
  ZEROSIM_FAULTY_PATH_OPERATION(FaultOperation::kSyncDirectory, path, "sync_directory", inner_.sync_directory(path));
}
#undef ZEROSIM_FAULTY_PATH_OPERATION

Result<bool> FaultyDisk::exists(const std::string& path) { return inner_.exists(path); }
Result<std::vector<std::string>> FaultyDisk::list_directory(const std::string& path) {
  return inner_.list_directory(path);
}
Result<uint64_t> FaultyDisk::available_bytes(const std::string& path) { return inner_.available_bytes(path); }

Result<std::unique_ptr<AsyncIoQueue>> FaultyDisk::make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<AsyncIoQueue> inner, inner_.make_async_queue(options, engine));
  return std::unique_ptr<AsyncIoQueue>(new FaultyAsyncQueue(*this, std::move(inner)));
}

}  // namespace zerosim
