// Shared by nccl_comm.cu and nccl_rendezvous.cpp only: one rank's communicator over an
// initialized NCCL communicator and its streams (taking ownership of all three).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>

#include "core/cuda/nccl_comm.h"

namespace zerosim {

// The most ranks a gradient collective folds (its kernel's pointer table).
constexpr int kMaxNcclRanks = 64;

std::unique_ptr<Comm> make_nccl_rank_comm(int rank, int world_size, int device, ncclComm_t communicator,
                                          cudaStream_t stream, cudaStream_t fold_stream, const NcclCommOptions& options);

}  // namespace zerosim
