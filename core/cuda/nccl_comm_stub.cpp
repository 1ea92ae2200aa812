// nccl_comm.h without the CUDA backend.
#include "core/cuda/nccl_comm.h"

namespace zerosim {

Result<std::unique_ptr<NcclCommWorld>> NcclCommWorld::create(std::span<const int>, const NcclCommOptions&) {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time), so NCCL is absent");
}
NcclCommWorld::~NcclCommWorld() = default;
Comm& NcclCommWorld::comm(int rank) { return *comms_.at(static_cast<size_t>(rank)); }
int NcclCommWorld::world_size() const { return static_cast<int>(comms_.size()); }
void* NcclCommWorld::stream(int) const { return nullptr; }
void* NcclCommWorld::raw_communicator(int) const { return nullptr; }
Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclRendezvous&, Disk&, Clock&, const NcclCommOptions&) {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time), so NCCL is absent");
}

Result<std::unique_ptr<Comm>> make_host_staged_comm(std::unique_ptr<Comm>, int) {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}

}  // namespace zerosim
