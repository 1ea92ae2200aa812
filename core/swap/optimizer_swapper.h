// The NVMe swapper of one rank's optimizer state (ZeRO-Infinity's offload_optimizer: nvme).
//
// Every sub-group's fp32 master, exp_avg and exp_avg_sq live in three files under
// <nvme_path>/zerosim/<run id>/rank-<r>-of-<W>/ (names: swap_file.h). During the optimizer
// step a sub-group is read into a slot of three pool buffers, updated there, and written
// back; only `buffer_count` buffers of one sub-group's size ever exist, so host memory does
// not grow with the optimizer state.
//
// Pipelining (DeepSpeed's meanings): pipeline_read reads sub-group i+1 while i is updated;
// pipeline_write lets the write of i run while i+1 is read and updated (write-behind). Reads
// and writes use separate async queues. Each needs a slot of 3 buffers of its own, so the
// minimum buffer_count is 3, 6 with one of the two and 9 with both; fewer is an error that
// names offload_optimizer.buffer_count and the minimum.
//
// The rank directory is removed when the swapper is destroyed (the files are scratch state).
// The rank directory is locked (flock on <dir>/.lock) for the swapper's lifetime: a second
// run with the same nvme_path and run id is refused instead of overwriting the first's state.
//
// Every file carries a header (run id, rank, world size, sub-group, tensor, count, dtype,
// optimizer step, payload checksum) that is checked on every read: a stale, foreign, torn
// or truncated file is an error naming it, never state the optimizer trains on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/env/disk.h"
#include "core/swap/swap_directory.h"
#include "core/swap/swap_file.h"
#include "core/tensor/aligned_buffer.h"

namespace zerosim {

struct OptimizerSwapperOptions {
  std::string nvme_path;
  std::string run_id;
  int rank = 0;
  int world_size = 1;
  std::vector<int64_t> sub_group_element_counts;
  AsyncIoOptions aio;
  int64_t buffer_count = 4;
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
};

class OptimizerSwapper {
 public:
  // Creates the rank directory, chooses the engine (libaio with O_DIRECT, or pread/pwrite
  // where O_DIRECT is refused; `engine_note` then says so, once) and allocates the pool.
  static Result<std::unique_ptr<OptimizerSwapper>> create(Disk& disk, const OptimizerSwapperOptions& options,
                                                          std::string* engine_note);
  ~OptimizerSwapper();

  struct SubGroupState {
    std::span<float> master, exp_avg, exp_avg_sq;
  };

  // Writes a sub-group's initial state (the given master, zero moments) as optimizer step 0.
  Status write_initial(int sub_group, std::span<const float> master);
  // Writes a sub-group's whole state as optimizer step `step` (files created or truncated):
  // how a resume writes the swap files afresh from a checkpoint. Empty moments mean zeros.
  Status write_state(int sub_group, int64_t step, std::span<const float> master, std::span<const float> exp_avg,
                     std::span<const float> exp_avg_sq);
  // Starts reading a sub-group that holds the state of `expected_step` (pipeline_read).
  Status prefetch(int sub_group, int64_t expected_step);
  // The sub-group's state in pool buffers: waits for its prefetch, or reads it now.
  Result<SubGroupState> acquire(int sub_group, int64_t expected_step);
  // Gives the sub-group's buffers back. With `step` it writes them first as the state of
  // that optimizer step (behind, with pipeline_write); without, the state was only read.
  Status release(int sub_group, std::optional<int64_t> step);
  // Waits for every write in flight.
  Status flush();

  const char* engine_name() const;
  const std::string& directory() const { return directory_.path; }

 private:
  struct Slot;
  OptimizerSwapper(Disk& disk, OptimizerSwapperOptions options);
  Result<Slot*> free_slot();
  Status open_slot_files(Slot& slot, int sub_group, OpenMode mode);
  Status finish_read(Slot& slot);
  Status finish_write(Slot& slot);
  SwapFileHeader expected_header(int sub_group, SwapTensorKind kind, int64_t step) const;
  std::string path_of(int sub_group, SwapTensorKind kind) const;

  Disk& disk_;
  OptimizerSwapperOptions options_;
  SwapDirectory directory_;  // path, O_DIRECT or not, and the lock (one run per directory)
  std::unique_ptr<AsyncIoQueue> read_queue_, write_queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// Minimum buffer_count for these pipelining flags (3 buffers per sub-group in flight).
int64_t minimum_swap_buffer_count(bool pipeline_read, bool pipeline_write);

}  // namespace zerosim
