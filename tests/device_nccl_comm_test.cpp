// NCCL behind the Comm seam (labelled "gpu"): on every GPU of the machine, one thread per GPU,
// each collective gives the bytes the CPU world (ThreadCommWorld) gives for the same inputs;
// the gradient collective's rank-order fold included, in fp32, fp16 and bf16.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "core/cuda/cuda_probe.h"
#include "core/cuda/nccl_comm.h"
#include "tests/cuda_devices.h"
#include "core/env/env.h"
#include "tests/test_directory.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

// Runs body(rank) on W threads and returns each rank's status.
std::vector<Status> on_every_rank(int world_size, const std::function<Status(int)>& body) {
  std::vector<Status> statuses(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] { statuses[static_cast<size_t>(rank)] = body(rank); });
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

std::vector<std::byte> random_bytes(size_t count, uint32_t seed, DType dtype) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::byte> bytes(count * dtype_size_bytes(dtype));
  std::vector<float> values(count);
  for (float& value : values) value = normal(random);
  cast_from_fp32(dtype, values.data(), bytes.data(), count);
  return bytes;
}

TEST(DeviceNcclComm, EveryCollectiveGivesTheCpuWorldsBytes) {
  const int world_size = usable_cuda_devices();
  if (world_size == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<int> devices;
  for (int device = 0; device < world_size; ++device) devices.push_back(device);
  ThreadCommWorld cpu_world(world_size);

  // Both gradient paths: NCCL transfers then a fold, and (with peer access between the GPUs)
  // the fold reading the peers' memory; an odd chunk (the scalar tail, unaligned peers) and an
  // aligned one (the 16-byte vector loads).
  for (const bool peer_fold : {false, true}) {
  NcclCommOptions options;
  options.peer_fold = peer_fold;
  Result<std::unique_ptr<NcclCommWorld>> world = NcclCommWorld::create(devices, options);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  if (peer_fold && world_size > 1) {
    int can = 0;
    cudaDeviceCanAccessPeer(&can, 0, 1);
    EXPECT_EQ((*world)->peer_fold(), can != 0) << "peer access between GPU 0 and 1: " << can;
  }
  for (const size_t chunk : {size_t{100003}, size_t{131072}})
  for (const DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk) + (peer_fold ? " peer fold" : " NCCL"));
    std::vector<std::vector<std::byte>> sends;
    std::vector<std::vector<float>> cpu_accumulators, gpu_results;
    for (int rank = 0; rank < world_size; ++rank) {
      sends.push_back(random_bytes(chunk * static_cast<size_t>(world_size), 100u + static_cast<uint32_t>(rank), dtype));
      std::vector<float> start(chunk);
      for (size_t i = 0; i < chunk; ++i) start[i] = static_cast<float>(i % 7) * 0.125f;
      cpu_accumulators.push_back(start);
    }
    gpu_results = cpu_accumulators;
    const std::vector<Status> cpu = on_every_rank(world_size, [&](int rank) {
      return cpu_world.comm(rank).reduce_scatter_accumulate(sends[static_cast<size_t>(rank)], dtype, chunk,
                                                            cpu_accumulators[static_cast<size_t>(rank)]);
    });
    const std::vector<Status> gpu = on_every_rank(world_size, [&](int rank) -> Status {
      const size_t r = static_cast<size_t>(rank);
      if (cudaSetDevice(devices[r]) != cudaSuccess) return internal_error("cudaSetDevice");
      std::byte* send = nullptr;
      float* accumulator = nullptr;
      if (cudaMalloc(&send, sends[r].size()) != cudaSuccess || cudaMalloc(&accumulator, chunk * sizeof(float)) != cudaSuccess) {
        return internal_error("cudaMalloc");
      }
      cudaMemcpy(send, sends[r].data(), sends[r].size(), cudaMemcpyHostToDevice);
      cudaMemcpy(accumulator, gpu_results[r].data(), chunk * sizeof(float), cudaMemcpyHostToDevice);
      Status status = (*world)->comm(rank).reduce_scatter_accumulate(std::span<const std::byte>(send, sends[r].size()),
                                                                     dtype, chunk, std::span<float>(accumulator, chunk));
      cudaMemcpy(gpu_results[r].data(), accumulator, chunk * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(send);
      cudaFree(accumulator);
      return status;
    });
    for (int rank = 0; rank < world_size; ++rank) {
      ASSERT_TRUE(cpu[static_cast<size_t>(rank)].ok()) << cpu[static_cast<size_t>(rank)].to_string();
      ASSERT_TRUE(gpu[static_cast<size_t>(rank)].ok()) << gpu[static_cast<size_t>(rank)].to_string();
      EXPECT_EQ(std::memcmp(cpu_accumulators[static_cast<size_t>(rank)].data(), gpu_results[static_cast<size_t>(rank)].data(),
                            chunk * sizeof(float)),
                0)
          << "rank " << rank << ": the NCCL fold differs from the CPU world's";
    }
  }

  }

  // all_gather, gather, broadcast and all_reduce_max move or reduce exactly.
  Result<std::unique_ptr<NcclCommWorld>> world = NcclCommWorld::create(devices);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  const size_t bytes = 4099;
  std::vector<std::vector<std::byte>> gathered(static_cast<size_t>(world_size));
  std::vector<double> maxima(static_cast<size_t>(world_size));
  const std::vector<Status> moved = on_every_rank(world_size, [&](int rank) -> Status {
    const size_t r = static_cast<size_t>(rank);
    if (cudaSetDevice(devices[r]) != cudaSuccess) return internal_error("cudaSetDevice");
    const std::vector<std::byte> mine = random_bytes(bytes / 4, 7u + static_cast<uint32_t>(rank), DType::kFp32);
    std::byte *send = nullptr, *receive = nullptr;
    cudaMalloc(&send, mine.size());
    cudaMalloc(&receive, mine.size() * static_cast<size_t>(world_size));
    cudaMemcpy(send, mine.data(), mine.size(), cudaMemcpyHostToDevice);
    Comm& comm = (*world)->comm(rank);
    ZEROSIM_RETURN_IF_ERROR(comm.all_gather(std::span<const std::byte>(send, mine.size()),
                                            std::span<std::byte>(receive, mine.size() * static_cast<size_t>(world_size))));
    gathered[r].resize(mine.size() * static_cast<size_t>(world_size));
    cudaMemcpy(gathered[r].data(), receive, gathered[r].size(), cudaMemcpyDeviceToHost);
    ZEROSIM_RETURN_IF_ERROR(comm.gather(std::span<const std::byte>(send, mine.size()),
                                        rank == 0 ? std::span<std::byte>(receive, gathered[r].size()) : std::span<std::byte>(),
                                        0));
    ZEROSIM_RETURN_IF_ERROR(comm.broadcast(std::span<std::byte>(send, mine.size()), world_size - 1));
    std::vector<std::byte> broadcast(mine.size());
    cudaMemcpy(broadcast.data(), send, broadcast.size(), cudaMemcpyDeviceToHost);
    const std::vector<std::byte> last = random_bytes(bytes / 4, 7u + static_cast<uint32_t>(world_size - 1), DType::kFp32);
    if (broadcast != last) return internal_error("broadcast delivered other bytes");
    double value[2] = {static_cast<double>(rank) * 1.5, -static_cast<double>(rank)};
    ZEROSIM_RETURN_IF_ERROR(comm.all_reduce_max(value));
    maxima[r] = value[0] - value[1];
    ZEROSIM_RETURN_IF_ERROR(comm.barrier());
    cudaFree(send);
    cudaFree(receive);
    return Status();
  });
  for (int rank = 0; rank < world_size; ++rank) {
    ASSERT_TRUE(moved[static_cast<size_t>(rank)].ok()) << moved[static_cast<size_t>(rank)].to_string();
    std::vector<std::byte> expected;
    for (int source = 0; source < world_size; ++source) {
      const std::vector<std::byte> part = random_bytes(bytes / 4, 7u + static_cast<uint32_t>(source), DType::kFp32);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    EXPECT_EQ(gathered[static_cast<size_t>(rank)], expected) << "all_gather on rank " << rank;
    EXPECT_EQ(maxima[static_cast<size_t>(rank)], static_cast<double>(world_size - 1) * 1.5 - 0.0);
  }
}

// One rank of the two-process test, in a forked child (CUDA is first touched there): joins
// through the rendezvous file, then checks the gradient collective's fold and the all-gather
// against what the host computes from every rank's (seeded) inputs. Exit 0: agreed; 77: fewer
// than two GPUs; otherwise the failure, printed to stderr.
int nccl_process_rank(int rank, int world_size, const std::string& path) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count < world_size) return 77;
  RealEnv real_env;
  const Env env = real_env.env();
  NcclRendezvous rendezvous{rank, world_size, rank, path};
  rendezvous.timeout_ns = uint64_t{120} * 1000 * 1000 * 1000;
  Result<std::unique_ptr<Comm>> comm = create_nccl_process_comm(rendezvous, *env.disk, *env.clock);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().to_string().c_str());
    return 1;
  }
  const size_t chunk = 100003;
  const DType dtype = DType::kBf16;
  std::vector<std::vector<std::byte>> sends;
  for (int source = 0; source < world_size; ++source) {
    sends.push_back(random_bytes(chunk * static_cast<size_t>(world_size), 300u + static_cast<uint32_t>(source), dtype));
  }
  std::vector<float> expected(chunk), widened(chunk);
  for (size_t i = 0; i < chunk; ++i) expected[i] = static_cast<float>(i % 7) * 0.125f;
  std::vector<float> result = expected;
  for (int source = 0; source < world_size; ++source) {
    cast_to_fp32(dtype, sends[static_cast<size_t>(source)].data() + static_cast<size_t>(rank) * chunk * 2, widened.data(), chunk);
    for (size_t i = 0; i < chunk; ++i) expected[i] = expected[i] + widened[i];
  }
  const std::vector<std::byte>& mine = sends[static_cast<size_t>(rank)];
  std::byte *send = nullptr, *gathered = nullptr;
  float* accumulator = nullptr;
  if (cudaMalloc(&send, mine.size()) != cudaSuccess || cudaMalloc(&accumulator, chunk * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&gathered, mine.size() * static_cast<size_t>(world_size)) != cudaSuccess) {
    std::fprintf(stderr, "rank %d: cudaMalloc failed\n", rank);
    return 1;
  }
  cudaMemcpy(send, mine.data(), mine.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(accumulator, result.data(), chunk * sizeof(float), cudaMemcpyHostToDevice);
  Status status = (*comm)->reduce_scatter_accumulate(std::span<const std::byte>(send, mine.size()), dtype, chunk,
                                                     std::span<float>(accumulator, chunk));
  if (status.ok()) {
    status = (*comm)->all_gather(std::span<const std::byte>(send, mine.size()),
                                 std::span<std::byte>(gathered, mine.size() * static_cast<size_t>(world_size)));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.to_string().c_str());
    return 1;
  }
  cudaMemcpy(result.data(), accumulator, chunk * sizeof(float), cudaMemcpyDeviceToHost);
  if (std::memcmp(result.data(), expected.data(), chunk * sizeof(float)) != 0) {
    std::fprintf(stderr, "rank %d: the two-process fold differs from the host's\n", rank);
    return 2;
  }
  std::vector<std::byte> all(mine.size() * static_cast<size_t>(world_size));
  cudaMemcpy(all.data(), gathered, all.size(), cudaMemcpyDeviceToHost);
  for (int source = 0; source < world_size; ++source) {
    if (std::memcmp(all.data() + static_cast<size_t>(source) * mine.size(), sends[static_cast<size_t>(source)].data(),
                    mine.size()) != 0) {
      std::fprintf(stderr, "rank %d: the all-gather delivered other bytes from rank %d\n", rank, source);
      return 2;
    }
  }
  double value[1] = {static_cast<double>(rank)};
  status = (*comm)->all_reduce_max(value);
  if (!status.ok() || value[0] != static_cast<double>(world_size - 1)) {
    std::fprintf(stderr, "rank %d: all_reduce_max: %s\n", rank, status.to_string().c_str());
    return 2;
  }
  return 0;
}

// Two processes, one GPU each, joined by a rendezvous file: the collectives agree with the host,
// and rank 0 leaves the path free for the next launch. The parent touches no CUDA before the
// fork (CUDA does not survive one).
TEST(DeviceNcclComm, TwoProcessesJoinedByARendezvousFileGiveTheHostsBytes) {
  TestDirectory directory;
  const std::string path = directory.path() + "/rendezvous";
  const int world_size = 2;
  std::vector<pid_t> children;
  for (int rank = 0; rank < world_size; ++rank) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork";
    if (child == 0) ::_exit(nccl_process_rank(rank, world_size, path));
    children.push_back(child);
  }
  std::vector<int> codes;
  for (pid_t child : children) {
    int wait_status = 0;
    ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
    codes.push_back(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status));
  }
  if (codes[0] == 77 || codes[1] == 77) GTEST_SKIP() << "fewer than two GPUs";
  for (int rank = 0; rank < world_size; ++rank) EXPECT_EQ(codes[static_cast<size_t>(rank)], 0) << "rank " << rank;
  EXPECT_FALSE(std::filesystem::exists(path)) << "rank 0 left the rendezvous file behind";
}

TEST(DeviceNcclComm, BadDeviceListsAreRefusedNamingTheDevice) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const int twice[] = {0, 0};
  Result<std::unique_ptr<NcclCommWorld>> duplicate = NcclCommWorld::create(twice);
  ASSERT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.status().message().find("listed twice"), std::string::npos);
  const int missing[] = {64};
  Result<std::unique_ptr<NcclCommWorld>> absent = NcclCommWorld::create(missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("device 64 does not exist"), std::string::npos);
}

#else

TEST(DeviceNcclComm, TheStubSaysTheBackendIsAbsent) {
  const int devices[] = {0};
  EXPECT_EQ(NcclCommWorld::create(devices).status().code(), StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
