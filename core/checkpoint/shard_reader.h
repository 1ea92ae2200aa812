// Reads parameter fragments back out of a checkpoint's shards, at any world size.
//
// A shard is opened on first use and verified before any of its bytes is trusted: its size
// and XXH3-128 checksum against the manifest, its safetensors header (safetensors.h), and that
// it holds exactly the tensors the manifest's layout says its rank owns, each with the right
// dtype, shape and metadata (global offset and shape). So a rank that resumes reads and checks
// only the shards its own partition overlaps. A rank that reads its own shard reads it once,
// large tensors by several threads at once (begin_sequential below).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint/manifest.h"
#include "core/checkpoint/safetensors.h"
#include "core/env/disk.h"

namespace zerosim {

class CheckpointShardReader {
 public:
  CheckpointShardReader(Disk& disk, std::string tag_directory, const CheckpointManifest& manifest);

  // Reads elements [begin, begin + count) of the parameter's state (the model dtype for
  // kParam, fp32 otherwise) into `destination`, from whichever shards hold them.
  Status read(int64_t parameter, CheckpointState state, int64_t begin, int64_t count, std::span<std::byte> destination);
  // Opens and verifies one shard (see above).
  Status verify_shard(int rank);
  // Whether this reader opened (and so verified) `rank`'s shard.
  bool has_opened(int rank) const { return shards_[static_cast<size_t>(rank)].has_value(); }

  // One pass over one shard, for a rank that reads exactly its own shard (same world size):
  // the tensors are read in the shard's data order straight into their destinations, and the
  // checksum is computed from the same bytes and checked by finish_sequential(), so the file
  // is read once instead of twice. The caller must not use what it read unless
  // finish_sequential() returns OK. The size and the header are checked up front.
  Status begin_sequential(int rank);
  Status read_next(int64_t parameter, CheckpointState state, std::span<std::byte> destination);
  Status read_next_tensor(const std::string& name, std::span<std::byte> destination);
  Status finish_sequential();
  // Reads the whole of persistent buffer `buffer` (an index into the manifest's buffers) from
  // `rank`'s shard (every shard holds each), verifying the shard first.
  Status read_buffer(int rank, size_t buffer, std::span<float> destination);
  // In a sequential read, after every parameter's states: the buffers, in the manifest's order.
  Status read_next_buffer(size_t buffer, std::span<float> destination);
  // The dtype a state is stored in.
  DType state_dtype(CheckpointState state) const;

 private:
  struct OpenShard {
    std::unique_ptr<File> file;
    SafetensorsIndex index;
  };
  Result<OpenShard*> shard(int rank);
  Result<OpenShard*> open_shard(int rank, bool verify_checksum);
  Status check_size_and_checksum(int rank, uint64_t size, const std::string& checksum) const;

  Disk& disk_;
  std::string tag_directory_;
  const CheckpointManifest& manifest_;
  std::vector<std::optional<OpenShard>> shards_;
  int sequential_rank_ = -1;
  uint64_t sequential_offset_ = 0;
  std::unique_ptr<StreamingHash> sequential_hash_;
  // A sequential read's tensors of at least kParallelReadMinimumBytes go through this queue's
  // kReaderThreads threads (made at the first), as DCP's reader threads do.
  static constexpr size_t kParallelReadMinimumBytes = size_t{1} << 20;
  static constexpr int kReaderThreads = 4;
  std::unique_ptr<AsyncIoQueue> read_queue_;
};

}  // namespace zerosim
