// NCCL behind the Comm seam (core/env/comm.h): W GPUs of one process, one thread per GPU, the
// communicators made together by ncclCommInitAll. Rank r drives device devices[r]; the thread
// that calls comm(r)'s collectives may be any thread (each call selects the device).
//
// Memory: the byte and gradient collectives take DEVICE memory (send, receive, accumulator,
// broadcast buffer), as a GPU engine holds its partitions on the device; all_reduce_max and
// barrier take host values (the engine's scalars: overflow flags, norms, verdicts), staged
// through a small device buffer.
//
// Determinism: reduce_scatter_accumulate keeps the seam's contract, a left fold in rank order
// widened to fp32, so it gives the CPU world's bits at any W: it moves the chunks with grouped
// ncclSend/ncclRecv (an all-to-all, the bytes a ring reduce-scatter moves) and folds them on the
// device in rank order, instead of ncclReduceScatter, whose summation order follows NCCL's
// algorithm and the topology. all_reduce_max is exact.
//
// Every call returns when the collective has completed on this rank's stream. Errors name the
// rank, the device and the NCCL or CUDA call. Not yet: abort() (a failed rank leaves its peers
// waiting in NCCL, as a raw NCCL program would).
//
// Several processes (create_nccl_process_comm): one rank per process and GPU, the NCCL unique
// id passed through a rendezvous file; the gradient collective then takes the NCCL path.
//
// Without the CUDA backend, create() returns kFailedPrecondition.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env/clock.h"
#include "core/env/comm.h"
#include "core/env/disk.h"
#include "core/status.h"

namespace zerosim {

struct NcclCommOptions {
  // The gradient collective moves and folds its slice in pieces of this many bytes (of the
  // send dtype), the fold of one overlapping the transfer of the next.
  int64_t piece_bytes = int64_t{64} << 20;
  // Blocks of a fold launch, at most: memory-bound, it needs a few per SM to reach the HBM
  // bandwidth, and leaves the rest to NCCL's kernels. 0: one per 256 elements.
  int fold_blocks = 0;
  // When every pair of the world's GPUs can read each other's memory (NVLink or PCIe peer
  // access), the gradient collective reads the peers' chunks straight from their send buffers in
  // its fold kernel, instead of moving them with NCCL into a scratch first: the same fold in the
  // same order (the same bits), the bytes read once, over the link, as they are added. The ranks
  // meet at a host barrier to publish their buffers and CUDA events (one process only). Off, or
  // without peer access, the NCCL path above.
  bool peer_fold = true;
};

class NcclCommWorld {
 public:
  // One rank per listed CUDA device (distinct ids).
  static Result<std::unique_ptr<NcclCommWorld>> create(std::span<const int> devices, const NcclCommOptions& options = {});
  ~NcclCommWorld();
  NcclCommWorld(const NcclCommWorld&) = delete;
  NcclCommWorld& operator=(const NcclCommWorld&) = delete;

  Comm& comm(int rank);
  int world_size() const;
  // The CUDA stream rank `rank` enqueues on (a cudaStream_t), for callers that time it.
  void* stream(int rank) const;
  // The raw ncclComm_t of rank `rank`, for benchmarks that compare against raw NCCL.
  void* raw_communicator(int rank) const;
  // Whether the gradient collective folds from the peers' memory (NcclCommOptions::peer_fold
  // asked for it and every pair of GPUs has peer access).
  bool peer_fold() const { return peer_fold_; }

  // What the ranks publish to each other for a peer fold (defined in nccl_comm.cu).
  struct PeerExchange;

 private:
  NcclCommWorld() = default;
  std::shared_ptr<PeerExchange> peer_exchange_;
  bool peer_fold_ = false;
  std::vector<std::unique_ptr<Comm>> comms_;
};

// This process's place in a launch of several processes, one rank and one GPU each.
struct NcclProcess {
  int rank = 0;
  int world_size = 1;
  int device = 0;  // this process's GPU (its rank on the host: LOCAL_RANK)
};

// How the processes of a launch agree before they join NCCL. Every rank calls it once, with
// the verdict of its own preparation (its GPU chosen; on rank 0 also the unique id made) and,
// on rank 0, the NCCL unique id's bytes. It returns rank 0's id on every rank when every rank
// prepared, and otherwise an error that names a failed rank on every rank that can know it,
// so that no rank goes on into ncclCommInitRank to wait for a peer that will never come. An
// MPI launch shares through MPI (tools/mpi_launch.h); the rendezvous file below is another.
using NcclIdShare =
    std::function<Result<std::vector<std::byte>>(const Status& prepared, std::span<const std::byte> id_on_rank0)>;

// One rank of a launch of several processes: chooses the process's GPU, makes the unique id on
// rank 0, shares it through `share`, and joins ncclCommInitRank. Refused, naming the rank:
// ranks or devices out of range, a GPU the host lacks, an id of the wrong size.
Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclProcess& process, const NcclIdShare& share,
                                                       const NcclCommOptions& options = {});

// Where this process's rank finds its peers: the launcher's RANK, WORLD_SIZE and LOCAL_RANK
// (mpirun, srun or a torchrun-style launcher set them), and a file on a path every process
// sees (a shared file system when the ranks span hosts).
struct NcclRendezvous {
  int rank = 0;
  int world_size = 1;
  int device = 0;  // this process's GPU (LOCAL_RANK)
  std::string path;
  uint64_t timeout_ns = uint64_t{300} * 1000 * 1000 * 1000;
  uint64_t poll_interval_ns = uint64_t{10} * 1000 * 1000;
};

// Rank 0 makes the NCCL unique id and publishes it at `path` (written under a temporary name,
// synced, renamed: a reader never sees half an id), the other ranks poll for it through the
// Disk and Clock seams; then every rank joins ncclCommInitRank, and rank 0 removes the file, so
// the path is free for the next launch. Refused, naming the path: a file already there when
// rank 0 starts (left by an earlier run, or another run's), a file written for another world
// size, an id that does not arrive within the timeout; and ranks or devices out of range.
Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclRendezvous& rendezvous, Disk& disk, Clock& clock,
                                                       const NcclCommOptions& options = {});

// A Comm over host memory whose collectives run on `device_comm` (device memory, e.g. NCCL):
// each call copies its host buffers into scratch on `device`, runs the collective there and
// copies the results back. It lets an engine whose partitions live in host memory (the compute
// backends today) exchange over NCCL between processes, with the inner communicator's bits.
Result<std::unique_ptr<Comm>> make_host_staged_comm(std::unique_ptr<Comm> device_comm, int device);

}  // namespace zerosim
