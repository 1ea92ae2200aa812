// create_nccl_process_comm (nccl_comm.h): the rendezvous file and ncclCommInitRank. Host code,
// compiled by the C++ compiler.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/nccl_comm.h"
#include "core/cuda/nccl_comm_internal.h"
#include "core/env/disk.h"

namespace zerosim {

namespace {

constexpr const char* kRendezvousMagic = "zerosim-nccl-rendezvous 1";

std::string rendezvous_text(const ncclUniqueId& id, int world_size) {
  static const char* const kHex = "0123456789abcdef";
  std::string text = std::string(kRendezvousMagic) + "\nworld_size " + std::to_string(world_size) + "\nid ";
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    const auto byte = static_cast<unsigned char>(id.internal[i]);
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text + "\n";
}

// Parses rendezvous_text; errors name the path and what is wrong.
Result<ncclUniqueId> parse_rendezvous(const std::string& text, int world_size, const std::string& path) {
  const std::string expected_head = std::string(kRendezvousMagic) + "\nworld_size " + std::to_string(world_size) + "\nid ";
  if (text.rfind(std::string(kRendezvousMagic) + "\n", 0) != 0) {
    return invalid_argument("rendezvous file " + path + " is not a zerosim NCCL rendezvous file");
  }
  if (text.rfind(expected_head, 0) != 0) {
    const size_t line_end = text.find('\n', std::string(kRendezvousMagic).size() + 1);
    return invalid_argument("rendezvous file " + path + " was written for another world (" +
                            text.substr(std::string(kRendezvousMagic).size() + 1,
                                        line_end == std::string::npos ? std::string::npos
                                                                      : line_end - std::string(kRendezvousMagic).size() - 1) +
                            "), but this rank was started with WORLD_SIZE " + std::to_string(world_size));
  }
  ncclUniqueId id{};
  const std::string hex = text.substr(expected_head.size());
  if (hex.size() != 2 * sizeof id.internal + 1 || hex.back() != '\n') {
    return data_loss("rendezvous file " + path + ": the id is " + std::to_string(hex.size()) + " characters, expected " +
                     std::to_string(2 * sizeof id.internal) + " hex digits and a newline");
  }
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    const int high = nibble(hex[2 * i]), low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return data_loss("rendezvous file " + path + ": the id has a character that is not hex");
    id.internal[i] = static_cast<char>(high * 16 + low);
  }
  return id;
}

}  // namespace

Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclProcess& process, const NcclIdShare& share,
                                                       const NcclCommOptions& options) {
  const int rank = process.rank, world_size = process.world_size;
  if (world_size < 1 || world_size > kMaxNcclRanks || rank < 0 || rank >= world_size) {
    return invalid_argument("NCCL launch: rank " + std::to_string(rank) + " is not a rank of a world of " +
                            std::to_string(world_size) + " (1 to " + std::to_string(kMaxNcclRanks) + " ranks)");
  }
  if (options.piece_bytes <= 0 || options.fold_blocks < 0) {
    return invalid_argument("NCCL launch: piece_bytes must be positive and fold_blocks non-negative");
  }
  // This rank's preparation; its verdict goes to `share` whatever it is, so that the peers
  // hear of a failure instead of waiting for this rank in ncclCommInitRank.
  ncclUniqueId id{};
  const Status prepared = [&]() -> Status {
    if (process.device < 0) {
      return invalid_argument("rank " + std::to_string(rank) + ": LOCAL_RANK " + std::to_string(process.device) +
                              " is negative");
    }
    int device_count = 0;
    const cudaError_t counted = cudaGetDeviceCount(&device_count);
    if (counted != cudaSuccess) {
      return failed_precondition("rank " + std::to_string(rank) + ": cudaGetDeviceCount: " + cudaGetErrorString(counted));
    }
    if (process.device >= device_count) {
      return invalid_argument("rank " + std::to_string(rank) + ": LOCAL_RANK " + std::to_string(process.device) +
                              " names a GPU this host does not have (it has " + std::to_string(device_count) + ")");
    }
    if (cudaSetDevice(process.device) != cudaSuccess) {
      return failed_precondition("rank " + std::to_string(rank) + ": cudaSetDevice(" + std::to_string(process.device) +
                                 ") failed");
    }
    if (rank == 0) {
      const ncclResult_t made = ncclGetUniqueId(&id);
      if (made != ncclSuccess) return internal_error(std::string("rank 0: ncclGetUniqueId: ") + ncclGetErrorString(made));
    }
    return Status();
  }();
  const std::span<const std::byte> own_id = std::as_bytes(std::span<const char>(id.internal, sizeof id.internal));
  ZEROSIM_ASSIGN_OR_RETURN(const std::vector<std::byte> shared,
                           share(prepared, prepared.ok() && rank == 0 ? own_id : std::span<const std::byte>()));
  ZEROSIM_RETURN_IF_ERROR(prepared);
  if (shared.size() != sizeof id.internal) {
    return data_loss("rank " + std::to_string(rank) + ": the NCCL id shared by rank 0 is " + std::to_string(shared.size()) +
                     " bytes, expected " + std::to_string(sizeof id.internal));
  }
  std::memcpy(id.internal, shared.data(), shared.size());
  ncclComm_t communicator = nullptr;
  const ncclResult_t joined = ncclCommInitRank(&communicator, world_size, id, rank);
  if (joined != ncclSuccess) {
    return internal_error("rank " + std::to_string(rank) + " (GPU " + std::to_string(process.device) +
                          "): ncclCommInitRank: " + ncclGetErrorString(joined));
  }
  cudaStream_t stream = nullptr, fold_stream = nullptr;
  cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&fold_stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) {
    ncclCommDestroy(communicator);
    return internal_error("rank " + std::to_string(rank) + ": cudaStreamCreate: " + cudaGetErrorString(error));
  }
  return Result<std::unique_ptr<Comm>>(
      make_nccl_rank_comm(rank, world_size, process.device, communicator, stream, fold_stream, options));
}

Result<std::unique_ptr<Comm>> create_nccl_process_comm(const NcclRendezvous& rendezvous, Disk& disk, Clock& clock,
                                                       const NcclCommOptions& options) {
  const int rank = rendezvous.rank, world_size = rendezvous.world_size;
  const std::string& path = rendezvous.path;
  if (world_size < 1 || world_size > kMaxNcclRanks || rank < 0 || rank >= world_size) {
    return invalid_argument("NCCL rendezvous: RANK " + std::to_string(rank) + " is not a rank of WORLD_SIZE " +
                            std::to_string(world_size) + " (1 to " + std::to_string(kMaxNcclRanks) + " ranks)");
  }
  if (path.empty()) return invalid_argument("NCCL rendezvous: no rendezvous file path given");
  // Every argument is checked before the file is looked at: a bad one is named as itself, not
  // as a file left by another run.
  if (rendezvous.device < 0) {
    return invalid_argument("NCCL rendezvous: rank " + std::to_string(rank) + ": LOCAL_RANK " +
                            std::to_string(rendezvous.device) + " is not a GPU index");
  }
  if (rank == 0) {
    ZEROSIM_ASSIGN_OR_RETURN(const bool taken, disk.exists(path));
    if (taken) {
      return failed_precondition("rendezvous file " + path + " already exists: an earlier run left it, or another run "
                                 "is using it; remove it or give each launch its own path");
    }
  }
  // A file carries rank 0's id one way only: a failure of another rank cannot reach rank 0
  // (it waits in ncclCommInitRank; stop the launch with the launcher), and a failure of rank 0
  // before it writes reaches the others as the timeout. The other ranks read the id before
  // they touch CUDA, so a wrong path or file is named first.
  ncclUniqueId id{};
  if (rank != 0) {
    // Wait for rank 0's file. It appears whole (rank 0 renames it into place).
    const uint64_t started_ns = clock.now_ns();
    while (true) {
      ZEROSIM_ASSIGN_OR_RETURN(const bool arrived, disk.exists(path));
      if (arrived) break;
      if (clock.now_ns() - started_ns >= rendezvous.timeout_ns) {
        return failed_precondition("rank " + std::to_string(rank) + ": no NCCL id from rank 0 at " + path + " within " +
                                   std::to_string(rendezvous.timeout_ns / 1000000000) +
                                   " s: is rank 0 running, and does it see the same path?");
      }
      clock.sleep_ns(rendezvous.poll_interval_ns);
    }
    ZEROSIM_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_whole_file(disk, path));
    ZEROSIM_ASSIGN_OR_RETURN(id, parse_rendezvous(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                                  world_size, path));
  }
  bool published = false;
  const NcclIdShare share = [&](const Status& prepared,
                                std::span<const std::byte> id_on_rank0) -> Result<std::vector<std::byte>> {
    ZEROSIM_RETURN_IF_ERROR(prepared);
    if (rank == 0) {
      std::memcpy(id.internal, id_on_rank0.data(), std::min(id_on_rank0.size(), sizeof id.internal));
      const std::string text = rendezvous_text(id, world_size);
      const std::string temporary = path + ".tmp";
      ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, temporary, std::as_bytes(std::span<const char>(text.data(), text.size())),
                                               /*sync=*/true));
      ZEROSIM_RETURN_IF_ERROR(disk.rename(temporary, path));
      ZEROSIM_RETURN_IF_ERROR(disk.sync_directory(parent_directory(path)));
      published = true;
    }
    const auto* first = reinterpret_cast<const std::byte*>(id.internal);
    return std::vector<std::byte>(first, first + sizeof id.internal);
  };
  Result<std::unique_ptr<Comm>> joined =
      create_nccl_process_comm(NcclProcess{rank, world_size, rendezvous.device}, share, options);
  if (published) {
    // Every rank read the id before it could join, so the file has served (or the join failed).
    const Status removed = disk.remove_file(path);
    if (joined.ok() && !removed.ok()) return removed;
  }
  return joined;
}

}  // namespace zerosim
