// An NVMe swapper of one per-parameter tensor of a rank: the 16-bit parameter partitions
// (offload_param: nvme) or the fp32 gradient partitions (swapped with the optimizer state).
//
// One file per parameter partition, <kind>.param-<p>.swp under
// <nvme_path>/zerosim/<run id>/rank-<r>-of-<W>/<kind>/, in the swap-file format (swap_file.h:
// the header's sub-group field holds the parameter index and its step the version the caller
// names: the optimizer step for parameters, the micro-step sequence for gradients).
// Per-parameter files suit every user: a layer's gather or reduce-scatter works on its
// parameters, the optimizer on those of each sub-group. Transfers are synchronous through one
// staging buffer of the largest partition: the data is needed right when it is read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env/disk.h"
#include "core/swap/swap_directory.h"
#include "core/swap/swap_file.h"
#include "core/tensor/aligned_buffer.h"

namespace zerosim {

struct PartitionSwapperOptions {
  std::string nvme_path;
  std::string run_id;
  int rank = 0;
  int world_size = 1;
  std::vector<int64_t> partition_element_counts;  // per parameter, padding included
  DType dtype = DType::kFp16;
  SwapTensorKind kind = SwapTensorKind::kParams;
  AsyncIoOptions aio;
  bool pin_memory = true;
};

class PartitionSwapper {
 public:
  static Result<std::unique_ptr<PartitionSwapper>> create(Disk& disk, const PartitionSwapperOptions& options,
                                                      std::string* engine_note);
  ~PartitionSwapper();

  // Writes parameter `parameter`'s partition (raw model-dtype bytes) as the state of `step`.
  Status write(int parameter, int64_t step, std::span<const std::byte> partition);
  // Reads it back into `partition`, checking that the file holds the state of `step`.
  Status read(int parameter, int64_t step, std::span<std::byte> partition);

 private:
  PartitionSwapper(Disk& disk, PartitionSwapperOptions options) : disk_(disk), options_(std::move(options)) {}
  SwapFileHeader expected_header(int parameter, int64_t step) const;
  std::string path_of(int parameter) const;
  Status transfer(int parameter, IoDirection direction, OpenMode mode);

  Disk& disk_;
  PartitionSwapperOptions options_;
  SwapDirectory directory_;
  std::unique_ptr<AsyncIoQueue> queue_;
  AlignedBuffer staging_;
};

}  // namespace zerosim
