// MPI as a launcher, and nothing more: under mpirun (or srun with MPI) each process learns its
// rank, the world size and its rank on its host from MPI, and rank 0's NCCL unique id reaches
// the others by one MPI broadcast. The training's collectives all run on NCCL. OpenMPI is
// optional at build time (Debian's libopenmpi-dev); without it `mpi_compiled_in()` is false
// and MpiLaunch::initialize says how to get it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"

namespace zerosim {

bool mpi_compiled_in();

class MpiLaunch {
 public:
  // MPI_Init; the rank on the host comes from a communicator split by shared memory, which is
  // the host's processes whatever the launcher's environment variables are called.
  // Once per process; MPI_Finalize at destruction.
  static Result<std::unique_ptr<MpiLaunch>> initialize();
  ~MpiLaunch();
  MpiLaunch(const MpiLaunch&) = delete;
  MpiLaunch& operator=(const MpiLaunch&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }  // the processes of this host

  // Every rank's verdict first (an all-gather of one flag each), then, when all prepared, rank
  // 0's bytes to every rank (MPI_Bcast). A failed rank's error on the others names it (the
  // lowest failed rank) and says its own output has the cause; a rank that failed gets its
  // own error back. A collective: every rank calls it, in the same order.
  Result<std::vector<std::byte>> share_from_rank0(const Status& prepared, std::span<const std::byte> bytes_on_rank0) const;

  // Whether a share ended with some rank not prepared: then every rank knows of the failure
  // and returns an error from the same share, so all can end normally without abort_job.
  bool failed_together() const { return failed_together_; }

  // Stops every rank of the job with `exit_code` (MPI_Abort): for a rank that failed on its own
  // while its peers may wait for it in a collective. Does not return.
  [[noreturn]] void abort_job(int exit_code) const;

 private:
  MpiLaunch() = default;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  mutable bool failed_together_ = false;
};

}  // namespace zerosim
