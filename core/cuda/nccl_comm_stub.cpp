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

Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclProcess& process, const NcclIdShare& share,
                                                       const NcclCommOptions&) {
  // The peers still hear this rank's verdict, so that none waits for it.
  const Status absent = failed_precondition("rank " + std::to_string(process.rank) +
                                            ": the CUDA backend is not compiled in (nvcc was not found at configure "
                                            "time), so NCCL is absent");
  ZEROSIM_ASSIGN_OR_RETURN(const std::vector<std::byte> ignored, share(absent, {}));
  (void)ignored;
  return absent;
}

Result<std::unique_ptr<Comm>> make_host_staged_comm(std::unique_ptr<Comm>, int) {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}

}  // namespace zerosim
