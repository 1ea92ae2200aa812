// Reads parameter fragments back out of a checkpoint's shards, at any world size.
//
// Nothing read from a shard is trusted before the whole shard has been checked: its size and
// XXH3-128 checksum against the manifest, its safetensors header (safetensors.h), and that it
// holds exactly the tensors the manifest's layout says its rank owns, each with the right
// dtype, shape and metadata (global offset and shape). Two ways to read:
//   in order  (a load) each shard the caller touches is read once, start to end, by a
//             ParallelFileReader (parallel_file_reader.h) that hashes every byte as it passes;
//             the caller's fragments are taken out of that pass, so the caller must ask for
//             each shard's fragments in the shard's data order (the order of the parameters and
//             then param, master, exp_avg, exp_avg_sq, then the buffers), which is the order a
//             load walks its partition in, at any world size. finish_in_order() reads the rest
//             of each and compares the checksums: the caller uses nothing it read before that
//             returns OK. So a resharding load verifies each shard it touches in the pass that
//             reads it, and a rank that reads its own shard reads it once.
//   at random (an export) a shard is verified whole when first opened, then read where asked.
// A shard nobody read is verified with verify_shard().
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/manifest.h"
#include "core/checkpoint/parallel_file_reader.h"
#include "core/checkpoint/safetensors.h"
#include "core/env/disk.h"

namespace zerosim {

class CheckpointShardReader {
 public:
  CheckpointShardReader(Disk& disk, std::string tag_directory, const CheckpointManifest& manifest,
                        const CheckpointIoOptions& io_options = CheckpointIoOptions{});

  // In order: elements [begin, begin + count) of the parameter's state (the model dtype for
  // kParam, fp32 otherwise) into `destination`, from whichever shards hold them (see above).
  Status read_in_order(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                       std::span<std::byte> destination);
  // In order, after every parameter's states: persistent buffer `buffer` (an index into the
  // manifest's buffers) from `rank`'s shard (every shard holds each).
  Status read_buffer_in_order(int rank, size_t buffer, std::span<float> destination);
  // Reads the rest of every shard read in order and checks each (size, checksum).
  Status finish_in_order();

  // At random: as read_in_order, from shards verified whole first.
  Status read(int64_t parameter, CheckpointState state, int64_t begin, int64_t count, std::span<std::byte> destination);
  // At random: the whole of persistent buffer `buffer` from `rank`'s shard, verified first.
  Status read_buffer(int rank, size_t buffer, std::span<float> destination);
  // Verifies one shard whole (see above): a shard that read_in_order or read touched is
  // verified by finish_in_order or was before its first read.
  Status verify_shard(int rank);
  // Whether this reader opened `rank`'s shard (in order or at random).
  bool has_opened(int rank) const {
    return streams_[static_cast<size_t>(rank)] != nullptr || shards_[static_cast<size_t>(rank)].has_value();
  }
  // The dtype a state is stored in.
  DType state_dtype(CheckpointState state) const;
  // Notes for the log: where O_DIRECT was asked for and refused.
  std::vector<std::string> notes() const;

 private:
  struct OpenShard {
    std::unique_ptr<File> file;
    SafetensorsIndex index;
  };
  struct ShardStream {
    std::unique_ptr<ParallelFileReader> reader;
    SafetensorsIndex index;
  };
  std::string shard_path(int rank) const;
  // Reads and checks the header of `rank`'s shard: exactly the tensors the layout gives it.
  Result<SafetensorsIndex> checked_index(int rank);
  Result<OpenShard*> shard(int rank);
  Result<ShardStream*> stream(int rank);
  // Brings the stream of `rank` to file offset `offset_bytes` (skipping, and hashing, what
  // lies before) and reads `destination` there; an offset behind the stream is refused.
  Status read_stream_at(int rank, const std::string& tensor, uint64_t offset_bytes, std::span<std::byte> destination);
  Status check_size_and_checksum(int rank, uint64_t size, const std::string& checksum) const;
  // Reads the rest of a stream and checks its shard (size, checksum).
  Status finish_stream(int rank, ShardStream& open);
  // Reads one piece of a fragment: `bytes` from `offset_in_tensor` bytes into tensor `name` of
  // `source`'s shard.
  using PieceReader = std::function<Status(int source, const std::string& name, uint64_t offset_in_tensor,
                                           std::span<std::byte> bytes)>;
  // Elements [begin, begin + count) of the parameter's state, piece by piece from the shards
  // that hold them (the checks and the walk both read and read_in_order share).
  Status read_fragments(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                        std::span<std::byte> destination, const PieceReader& read_piece);

  Disk& disk_;
  std::string tag_directory_;
  const CheckpointManifest& manifest_;
  const CheckpointIoOptions io_options_;
  std::vector<std::optional<OpenShard>> shards_;
  std::vector<std::unique_ptr<ShardStream>> streams_;
  std::vector<std::string> notes_;
};

}  // namespace zerosim
