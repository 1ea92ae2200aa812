// mpi_launch.h without MPI.
#include "tools/mpi_launch.h"

#include <cstdio>
#include <cstdlib>

namespace zerosim {

bool mpi_compiled_in() { return false; }

Result<std::unique_ptr<MpiLaunch>> MpiLaunch::initialize() {
  return failed_precondition("this zerosim was built without MPI: install OpenMPI (Debian: libopenmpi-dev) and "
                             "rebuild, or launch with RANK/WORLD_SIZE/LOCAL_RANK and --rendezvous FILE");
}

MpiLaunch::~MpiLaunch() = default;

void MpiLaunch::abort_job(int exit_code) const {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

Result<std::vector<std::byte>> MpiLaunch::share_from_rank0(const Status& prepared, std::span<const std::byte>) const {
  ZEROSIM_RETURN_IF_ERROR(prepared);
  return failed_precondition("this zerosim was built without MPI");
}

}  // namespace zerosim
