// The NVMe swapper of one rank's 16-bit parameter partitions (offload_param: nvme).
//
// One file per parameter partition, params.param-<p>.swp under
// <nvme_path>/zerosim/<run id>/rank-<r>-of-<W>/params/, in the swap-file format (swap_file.h:
// the header's sub-group field holds the parameter index, its dtype the model dtype, its step
// the optimizer step whose update produced the values). Per-parameter files suit both users:
// a layer's gather reads its parameters, the optimizer writes those of each sub-group.
// Transfers are synchronous through one staging buffer of the largest partition: the
// parameters are read right before their all-gather, which needs them.
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

struct ParamSwapperOptions {
  std::string nvme_path;
  std::string run_id;
  int rank = 0;
  int world_size = 1;
  std::vector<int64_t> partition_element_counts;  // per parameter, padding included
  DType dtype = DType::kFp16;
  AsyncIoOptions aio;
  bool pin_memory = true;
};

class ParamSwapper {
 public:
  static Result<std::unique_ptr<ParamSwapper>> create(Disk& disk, const ParamSwapperOptions& options,
                                                      std::string* engine_note);
  ~ParamSwapper();

  // Writes parameter `parameter`'s partition (raw model-dtype bytes) as the state of `step`.
  Status write(int parameter, int64_t step, std::span<const std::byte> partition);
  // Reads it back into `partition`, checking that the file holds the state of `step`.
  Status read(int parameter, int64_t step, std::span<std::byte> partition);

 private:
  ParamSwapper(Disk& disk, ParamSwapperOptions options) : disk_(disk), options_(std::move(options)) {}
  SwapFileHeader expected_header(int parameter, int64_t step) const;
  std::string path_of(int parameter) const;
  Status transfer(int parameter, IoDirection direction, OpenMode mode);

  Disk& disk_;
  ParamSwapperOptions options_;
  SwapDirectory directory_;
  std::unique_ptr<AsyncIoQueue> queue_;
  AlignedBuffer staging_;
};

}  // namespace zerosim
