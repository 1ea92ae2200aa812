// The Comm seam over NCCL beside raw NCCL at equal sizes, in one run, on every GPU of the
// machine (one thread per GPU): all-gather (seam all_gather against ncclAllGather) and the
// gradient collective (seam reduce_scatter_accumulate, bf16 chunks folded in rank order into
// an fp32 accumulator, against ncclReduceScatter of the same bf16 buffer, summed by NCCL).
// Each operation is timed as the seam runs it: enqueue, then wait for the stream; best of
// --repetitions after a warm-up. Bandwidths as nccl-tests reports them: algbw = bytes / time
// (all-gather: the gathered size; reduce-scatter: the send size), busbw = algbw x (W-1)/W.
// Prints one JSON line per size.
#include <cuda_runtime.h>
#include <nccl.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/cuda/nccl_comm.h"

namespace {

using WallClock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  int repetitions = 20;
  std::vector<size_t> sizes_mib = {16, 64, 256, 1024};
  zerosim::NcclCommOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repetitions") == 0) repetitions = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--piece-mib") == 0) options.piece_bytes = std::atoll(argv[i + 1]) << 20;
    else if (std::strcmp(argv[i], "--fold-blocks") == 0) options.fold_blocks = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--peer-fold") == 0) options.peer_fold = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "usage: nccl_comm_bench [--repetitions R] [--piece-mib M] [--fold-blocks B] [--peer-fold 0|1]\n");
      return 2;
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count < 1) {
    std::fprintf(stderr, "nccl_comm_bench: no CUDA device\n");
    return 3;
  }
  std::vector<int> devices;
  for (int d = 0; d < device_count; ++d) devices.push_back(d);
  zerosim::Result<std::unique_ptr<zerosim::NcclCommWorld>> world = zerosim::NcclCommWorld::create(devices, options);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return 3;
  }
  const int world_size = device_count;
  for (const size_t mib : sizes_mib) {
    // Per rank: the all-gather sends `bytes`; the reduce-scatter sends `bytes` of bf16.
    const size_t bytes = mib << 20;
    const size_t chunk_elements = bytes / 2 / static_cast<size_t>(world_size);
    double best[4] = {1e30, 1e30, 1e30, 1e30};  // seam all-gather, raw all-gather, seam RS, raw RS
    std::barrier sync(world_size);
    std::vector<std::thread> threads;
    bool failed = false;
    for (int rank = 0; rank < world_size; ++rank) {
      threads.emplace_back([&, rank] {
        cudaSetDevice(devices[static_cast<size_t>(rank)]);
        zerosim::Comm& comm = (*world)->comm(rank);
        auto stream = static_cast<cudaStream_t>((*world)->stream(rank));
        auto raw = static_cast<ncclComm_t>((*world)->raw_communicator(rank));
        std::byte *send = nullptr, *receive = nullptr, *reduced = nullptr;
        float* accumulator = nullptr;
        cudaMalloc(&send, bytes);
        cudaMalloc(&receive, bytes * static_cast<size_t>(world_size));
        cudaMalloc(&reduced, chunk_elements * 2);
        cudaMalloc(&accumulator, chunk_elements * sizeof(float));
        cudaMemset(send, 0x3c, bytes);
        cudaMemset(accumulator, 0, chunk_elements * sizeof(float));
        cudaDeviceSynchronize();
        auto timed = [&](int slot, auto&& operation) {
          for (int r = 0; r < repetitions + 1; ++r) {
            sync.arrive_and_wait();
            const auto start = WallClock::now();
            if (!operation()) failed = true;
            sync.arrive_and_wait();
            const double seconds = std::chrono::duration<double>(WallClock::now() - start).count();
            if (rank == 0 && r > 0 && seconds < best[slot]) best[slot] = seconds;
          }
        };
        timed(0, [&] {
          return comm.all_gather(std::span<const std::byte>(send, bytes),
                                 std::span<std::byte>(receive, bytes * static_cast<size_t>(world_size)))
              .ok();
        });
        timed(1, [&] {
          return ncclAllGather(send, receive, bytes, ncclUint8, raw, stream) == ncclSuccess &&
                 cudaStreamSynchronize(stream) == cudaSuccess;
        });
        timed(2, [&] {
          return comm.reduce_scatter_accumulate(std::span<const std::byte>(send, bytes), zerosim::DType::kBf16,
                                                chunk_elements, std::span<float>(accumulator, chunk_elements))
              .ok();
        });
        timed(3, [&] {
          return ncclReduceScatter(send, reduced, chunk_elements, ncclBfloat16, ncclSum, raw, stream) == ncclSuccess &&
                 cudaStreamSynchronize(stream) == cudaSuccess;
        });
        cudaFree(send);
        cudaFree(receive);
        cudaFree(reduced);
        cudaFree(accumulator);
      });
    }
    for (std::thread& thread : threads) thread.join();
    if (failed) {
      std::fprintf(stderr, "nccl_comm_bench: a collective failed at %zu MiB\n", mib);
      return 1;
    }
    const double bus = static_cast<double>(world_size - 1) / world_size;
    const double gathered = static_cast<double>(bytes) * world_size;
    std::printf("{\"gpus\": %d, \"peer_fold\": %s, \"piece_mib\": %lld, \"fold_blocks\": %d, \"size_mib_per_rank\": %zu, "
                "\"all_gather_seam_busbw_gb_s\": %.1f, \"all_gather_raw_busbw_gb_s\": %.1f, \"all_gather_ratio\": %.3f, "
                "\"reduce_scatter_seam_busbw_gb_s\": %.1f, \"reduce_scatter_raw_busbw_gb_s\": %.1f, "
                "\"reduce_scatter_ratio\": %.3f}\n",
                world_size, (*world)->peer_fold() ? "true" : "false", static_cast<long long>(options.piece_bytes >> 20), options.fold_blocks, mib, gathered / best[0] * bus / 1e9, gathered / best[1] * bus / 1e9, best[1] / best[0],
                static_cast<double>(bytes) / best[2] * bus / 1e9, static_cast<double>(bytes) / best[3] * bus / 1e9,
                best[3] / best[2]);
  }
  return 0;
}
