// A Disk that hands every call to another one: the base of the tests' disks that watch or
// hold back a few calls (override those) and leave the rest to the real or simulated disk.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/env/disk.h"

namespace zerosim {

class ForwardingDisk : public Disk {
 public:
  explicit ForwardingDisk(Disk& base) : base_(base) {}
  Result<std::unique_ptr<File>> open(const std::string& path, const FileOpenOptions& options) override {
    return base_.open(path, options);
  }
  Status create_directories(const std::string& path) override { return base_.create_directories(path); }
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status remove_tree(const std::string& path) override { return base_.remove_tree(path); }
  Status rename(const std::string& from, const std::string& to) override { return base_.rename(from, to); }
  Status sync_directory(const std::string& path) override { return base_.sync_directory(path); }
  Result<bool> exists(const std::string& path) override { return base_.exists(path); }
  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    return base_.list_directory(path);
  }
  Result<uint64_t> available_bytes(const std::string& path) override { return base_.available_bytes(path); }
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path) override { return base_.lock_file(path); }
  uint64_t direct_io_alignment_bytes() const override { return base_.direct_io_alignment_bytes(); }
  Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) override {
    return base_.make_async_queue(options, engine);
  }

 protected:
  Disk& base_;
};

}  // namespace zerosim
