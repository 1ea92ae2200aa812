// mpi_launch.h over MPI (OpenMPI from Debian).
#include "tools/mpi_launch.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zerosim {

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace

bool mpi_compiled_in() { return true; }

Result<std::unique_ptr<MpiLaunch>> MpiLaunch::initialize() {
  int already = 0;
  MPI_Initialized(&already);
  if (already) return failed_precondition("MPI is already initialized in this process (MpiLaunch is once per process)");
  // Errors come back as codes, not as an abort of the whole job, so that they can be named.
  if (const int code = MPI_Init(nullptr, nullptr); code != MPI_SUCCESS) {
    return failed_precondition("MPI_Init: " + mpi_error_text(code));
  }
  std::unique_ptr<MpiLaunch> launch(new MpiLaunch());
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (const int code = MPI_Comm_rank(MPI_COMM_WORLD, &launch->rank_); code != MPI_SUCCESS) {
    return failed_precondition("MPI_Comm_rank: " + mpi_error_text(code));
  }
  if (const int code = MPI_Comm_size(MPI_COMM_WORLD, &launch->world_size_); code != MPI_SUCCESS) {
    return failed_precondition("MPI_Comm_size: " + mpi_error_text(code));
  }
  MPI_Comm host = MPI_COMM_NULL;
  if (const int code = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, launch->rank_, MPI_INFO_NULL, &host);
      code != MPI_SUCCESS) {
    return failed_precondition("rank " + std::to_string(launch->rank_) +
                               ": MPI_Comm_split_type (the ranks of this host): " + mpi_error_text(code));
  }
  const int ranked = MPI_Comm_rank(host, &launch->local_rank_);
  const int sized = ranked == MPI_SUCCESS ? MPI_Comm_size(host, &launch->local_world_size_) : ranked;
  MPI_Comm_free(&host);
  if (ranked != MPI_SUCCESS) return failed_precondition("MPI_Comm_rank on the host's communicator: " + mpi_error_text(ranked));
  if (sized != MPI_SUCCESS) return failed_precondition("MPI_Comm_size on the host's communicator: " + mpi_error_text(sized));
  return launch;
}

MpiLaunch::~MpiLaunch() { MPI_Finalize(); }

void MpiLaunch::abort_job(int exit_code) const {
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort returns only when MPI could not stop the job
}

Result<std::vector<std::byte>> MpiLaunch::share_from_rank0(const Status& prepared,
                                                            std::span<const std::byte> bytes_on_rank0) const {
  const int ready = prepared.ok() ? 1 : 0;
  std::vector<int> readiness(static_cast<size_t>(world_size_), 0);
  if (const int code = MPI_Allgather(&ready, 1, MPI_INT, readiness.data(), 1, MPI_INT, MPI_COMM_WORLD);
      code != MPI_SUCCESS) {
    return failed_precondition("rank " + std::to_string(rank_) + ": MPI_Allgather of the ranks' readiness: " +
                               mpi_error_text(code));
  }
  for (const int peer_ready : readiness) {
    if (peer_ready == 0) failed_together_ = true;
  }
  ZEROSIM_RETURN_IF_ERROR(prepared);
  for (int peer = 0; peer < world_size_; ++peer) {
    if (readiness[static_cast<size_t>(peer)] == 0) {
      return failed_precondition("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                 " could not prepare to join NCCL (its own output says why), so no rank joins");
    }
  }
  // The size first, so that a receiver never guesses it.
  long long size_bytes = rank_ == 0 ? static_cast<long long>(bytes_on_rank0.size()) : 0;
  if (const int code = MPI_Bcast(&size_bytes, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD); code != MPI_SUCCESS) {
    return failed_precondition("rank " + std::to_string(rank_) + ": MPI_Bcast of the id's size: " + mpi_error_text(code));
  }
  if (size_bytes < 0 || size_bytes > (1 << 20)) {
    return data_loss("rank " + std::to_string(rank_) + ": rank 0 announced " + std::to_string(size_bytes) +
                     " bytes to share (at most 1 MiB)");
  }
  std::vector<std::byte> bytes(bytes_on_rank0.begin(), bytes_on_rank0.end());
  bytes.resize(static_cast<size_t>(size_bytes));
  if (const int code = MPI_Bcast(bytes.data(), static_cast<int>(size_bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
      code != MPI_SUCCESS) {
    return failed_precondition("rank " + std::to_string(rank_) + ": MPI_Bcast of the NCCL id: " + mpi_error_text(code));
  }
  return bytes;
}

}  // namespace zerosim
