// Durable checkpoint save and load throughput (RankEngine::save_checkpoint and
// initialize_from_checkpoint), to be read beside fio on the same total size
// (bench/checkpoint_vs_fio.sh runs both and prints the ratios).
//
// W ranks on threads, as run_training drives them, train one step (so that the moments are
// not zero and the shards hold real bytes), then save R times under different tags. Each save
// is timed on every rank with steady_clock after a barrier; a save's time is the wall time of
// the collective, from the first rank's start to the last rank's return (the commit waits for
// every shard, so the slowest rank decides). Then R times: fresh engines at the same W, a
// barrier, initialize_from_checkpoint of one saved tag, timed the same way. Throughput is the
// shards' total bytes (from the manifest) over those seconds, in MB/s (1e6 bytes) and MiB/s.
//
// The state is sized to about --state-mib: a shard set costs 14 bytes per parameter element
// (fp16 param 2 + fp32 master, exp_avg, exp_avg_sq 12), so the MLP's widths are chosen for
// --state-mib * 2^20 / 14 elements.
//
// --drop-caches: sync and drop the page cache (needs root) before every load, so that loads
// read the disk and not the memory the saves just filled. When dropping fails, the output says
// that loads may come from the page cache (the script then reads fio's file without dropping
// it either, so the two stay comparable). With --settle-seconds S, the cache is also dropped
// S seconds before the first save: on a VM that hands free guest memory back to the host
// (free page reporting), a write into page-cache pages freed moments ago runs several times
// faster than one into pages the host has taken back, so a series of writes is only
// comparable with fio's when both start from the same state (the script settles both).
//
// Diagnostics (not used by the script):
//   --phases     after the run, where a load's time can go on this machine, over the last tag's
//                shards one after the other: first touch of fresh anonymous memory (a load
//                must fault in the state it builds), the verification pass (file_checksum:
//                read + XXH3) cold and warm, and a plain read with one reused 8 MiB buffer
//                (what fio does) cold and warm. Then the loader's reader alone (ParallelFileReader,
//                as the load sets it) reading each rank's shard into fresh state memory (huge
//                pages advised) and checking its checksum, from W threads of one process (as
//                the bench's ranks run) and from W processes (as a job's ranks run, and
//                torch.load's), cold, three times interleaved: does sharing one address space
//                cost the load its rate?
//
//   --peer-load CMD  pair each load with the shell command CMD (a peer's cold load, which drops
//                the page cache itself, e.g. bench/checkpoint_peer.py --measures torch.load),
//                so that the two loads alternate in one series and a drift of the disk's rate
//                over the run falls on both alike (checkpoint_vs_dcp.sh pairs them). The peer
//                runs after the load in the first pair, the third, ..., and before it in the
//                second, the fourth, ..., so that neither side always follows the other;
//                "{repetition}" in CMD becomes the pair's number from 0, so that the peer too
//                can read a file no load has read before (as each of zerosim's loads reads
//                its own tag). A failing command ends the bench (exit 1, naming the command
//                and its status).
//   --peer-save CMD  the same for the saves: CMD is a peer's durable save (e.g.
//                checkpoint_peer.py --measures dcp.save --settle-seconds 0, which drops the
//                page cache before it writes), after the save in the odd pairs, before it in
//                the even; with --drop-caches, each of zerosim's saves after the first is
//                preceded by a drop too, so that both sides of every pair start from the same
//                cache. A failing command ends the bench likewise.
//
// Async saves (checkpoint.async_save), after the loads: R more saves from one engine, each
// waited for before the next; the stall is how long save_checkpoint keeps the step loop (the
// snapshot into host memory), the background rate the snapshot's write + fsync + commit.
//   --parallel-reads  a load reads each shard with several threads, both batches in flight
//                (TrainingOptions::parallel_checkpoint_reads), not as one sequential stream:
//                the earlier policy, to compare the two on a disk (bench/checkpoints.md).
//   --cpus-per-rank  Env::cpus_per_rank, which sizes an async save's snapshot copy threads (up
//                to 8) and those parallel reads' I/O threads (1 to 4, one CPU left to the
//                rank); by default this process's CPUs over W, as `zerosim train` sets it; 0:
//                not known (one copy thread, four read threads).
//   --writer     checkpoint.writer.type: none (the default: the page cache, one writing thread
//                and one read stream a shard),
//                python (one thread) or fast (O_DIRECT through libaio, the aio defaults), with
//                --io-buffer-mib its io_buffer_size (64, DeepSpeed's default; halved, double),
//                --aio-block-kib, --aio-queue-depth, --aio-threads the aio block's block_size,
//                queue_depth and intra_op_parallelism (1024, 8, 1: DeepSpeed's defaults).
// Flags: --dir DIR --state-mib N --world-size W --offload none|nvme --repetitions R
//        [--writer none|python|fast] [--io-buffer-mib N] [--aio-block-kib N] [--aio-queue-depth N] [--aio-threads N]
//        [--cpus-per-rank N] [--parallel-reads]
//        [--drop-caches [--settle-seconds S]] [--keep] [--phases] [--peer-load CMD] [--peer-save CMD]
// Output: a human summary, then one JSON line (the last line).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/page_cache.h"
#include "core/checkpoint/manifest.h"
#include "core/checkpoint/parallel_file_reader.h"
#include "core/engine/engine.h"
#include "core/tensor/huge_page_allocator.h"
#include "bench/flag_value.h"

namespace {

using namespace zerosim;
using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kStateBytesPerElement = 2 + 3 * 4;  // fp16 param + fp32 master, exp_avg, exp_avg_sq
constexpr int64_t kInputWidth = 512;
constexpr int64_t kClassCount = 16;
// Hidden-to-hidden matrices are kept at or below this width so that one layer (and one
// sub-group of swapped state) stays a few hundred MB; the depth grows with the size instead.
constexpr int64_t kMaxHiddenWidth = 4096;

struct BenchFlags {
  std::string directory = "/tmp";
  int64_t state_mib = 1024;
  int world_size = 1;
  bool offload_nvme = false;
  int repetitions = 3;
  bool drop_caches = false;
  int settle_seconds = 0;
  bool keep = false;
  bool phases = false;
  std::string peer_load_command;  // empty: none
  std::string peer_save_command;  // empty: none
  bool parallel_reads = false;    // TrainingOptions::parallel_checkpoint_reads
  CheckpointWriterType writer = CheckpointWriterType::kNone;
  int64_t io_buffer_mib = 64;
  int cpus_per_rank = -1;  // -1: cpus_per_rank_on_host(world_size)
  int64_t aio_block_kib = 1024, aio_queue_depth = 8, aio_threads = 1;  // the aio block's defaults
};

int64_t element_count(const ModelSpec& spec) {
  int64_t count = 0;
  for (const ParameterInfo& parameter : mlp_parameters(spec)) count += parameter.element_count;
  return count;
}

// [input, hidden x (K + 1), classes]: K hidden-to-hidden matrices of the largest width whose
// element count does not pass the target.
ModelSpec model_for_state_bytes(int64_t target_bytes) {
  const int64_t target_elements = std::max<int64_t>(target_bytes / kStateBytesPerElement, 1);
  const int64_t square = kMaxHiddenWidth * kMaxHiddenWidth;
  const int64_t hidden_matrices = std::max<int64_t>(1, (target_elements + square - 1) / square);
  auto spec_for = [&](int64_t hidden) {
    ModelSpec spec;
    spec.layer_widths = {kInputWidth};
    for (int64_t k = 0; k <= hidden_matrices; ++k) spec.layer_widths.push_back(hidden);
    spec.layer_widths.push_back(kClassCount);
    return spec;
  };
  int64_t low = 1, high = kMaxHiddenWidth;  // the element count grows with the width
  while (low < high) {
    const int64_t middle = (low + high + 1) / 2;
    if (element_count(spec_for(middle)) <= target_elements) low = middle;
    else high = middle - 1;
  }
  return spec_for(low);
}

TrainingOptions make_options(const BenchFlags& flags, const std::string& run_id) {
  TrainingOptions options;
  options.model = model_for_state_bytes(flags.state_mib << 20);
  options.world_size = flags.world_size;
  options.run_id = run_id;
  ResolvedConfig& config = options.config;
  config.precision = config.communication_dtype = Precision::kFp16;
  config.micro_batch_size = 1;
  config.gradient_accumulation_steps = 1;
  config.train_batch_size = flags.world_size;
  config.optimizer.learning_rate = 1e-4;
  config.optimizer.weight_decay = 0.01;
  // A static scale of 1: the one step must not be skipped as an fp16 overflow, or the moments
  // would stay zero.
  config.loss_scaler.dynamic = false;
  config.loss_scaler.static_loss_scale = 1.0;
  // About one hidden matrix per sub-group: with the state on NVMe the swapper's buffers are
  // sub-group sized, and the save streams one sub-group at a time.
  config.zero.sub_group_size = 1 << 23;
  config.checkpoint.writer = flags.writer;
  config.checkpoint.io_buffer_size = flags.io_buffer_mib << 20;
  config.aio.block_size = flags.aio_block_kib << 10;
  config.aio.queue_depth = flags.aio_queue_depth;
  config.aio.intra_op_parallelism = flags.aio_threads;
  if (flags.offload_nvme) {
    config.zero.offload_optimizer.device = OffloadDevice::kNvme;
    config.zero.offload_optimizer.nvme_path = flags.directory + "/swap";
  }
  options.data.feature_count = kInputWidth;
  options.data.class_count = kClassCount;
  options.parallel_checkpoint_reads = flags.parallel_reads;
  return options;
}

// Runs `body(rank, comm)` on W threads of one world. The first real error wins (a kAborted is
// only the echo of another rank's failure), and any error aborts the world so that no rank
// waits for a collective forever.
template <typename Body>
Status run_on_ranks(int world_size, Body body) {
  ThreadCommWorld world(world_size);
  std::mutex error_mutex;
  Status first_error;
  auto rank_main = [&](int rank) {
    Status status;
    try {
      status = body(rank, world.comm(rank));
    } catch (const std::exception& error) {
      status = internal_error(std::string("unexpected exception: ") + error.what());
    }
    if (status.ok()) return;
    std::lock_guard lock(error_mutex);
    if (first_error.ok() || (first_error.code() == StatusCode::kAborted && status.code() != StatusCode::kAborted)) {
      first_error = Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message());
    }
    world.abort();
  };
  std::vector<std::thread> threads;
  for (int rank = 1; rank < world_size; ++rank) threads.emplace_back(rank_main, rank);
  rank_main(0);
  for (std::thread& thread : threads) thread.join();
  return first_error;
}

// Per repetition, per rank: when the timed call started and returned.
struct CollectiveTimes {
  CollectiveTimes(int repetitions, int world_size)
      : begin(static_cast<size_t>(repetitions), std::vector<SteadyClock::time_point>(static_cast<size_t>(world_size))),
        end(begin) {}
  // The collective's wall time: first start to last return.
  double seconds(int repetition) const {
    const auto& b = begin[static_cast<size_t>(repetition)];
    const auto& e = end[static_cast<size_t>(repetition)];
    return std::chrono::duration<double>(*std::max_element(e.begin(), e.end()) - *std::min_element(b.begin(), b.end()))
        .count();
  }
  std::vector<std::vector<SteadyClock::time_point>> begin, end;
};

struct Throughput {
  double best_mb_per_s = 0.0;
  double median_mb_per_s = 0.0;
  std::vector<double> seconds;
};

Throughput throughput(const CollectiveTimes& times, int repetitions, uint64_t size_bytes) {
  Throughput result;
  std::vector<double> rates;
  for (int r = 0; r < repetitions; ++r) {
    result.seconds.push_back(times.seconds(r));
    rates.push_back(static_cast<double>(size_bytes) / result.seconds.back() / 1e6);
  }
  std::sort(rates.begin(), rates.end());
  result.best_mb_per_s = rates.back();
  // The lower middle for an even count, so that two runs report the slower one as the median.
  result.median_mb_per_s = rates[(rates.size() - 1) / 2];
  return result;
}

std::string seconds_json(const std::vector<double>& seconds) {
  std::string text = "[";
  for (size_t i = 0; i < seconds.size(); ++i) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%s%.4f", i == 0 ? "" : ",", seconds[i]);
    text += buffer;
  }
  return text + "]";
}

std::string tag_for_repetition(int repetition) { return "bench" + std::to_string(repetition); }

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Fresh anonymous pages, written once: what building `size_bytes` of state costs in page
// faults alone (mmap'd directly, so that no recycled heap memory hides the faults).
double first_touch_seconds(uint64_t size_bytes) {
  const SteadyClock::time_point start = SteadyClock::now();
  void* memory = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return -1.0;
  std::memset(memory, 1, size_bytes);
  const double seconds = seconds_since(start);
  ::munmap(memory, size_bytes);
  return seconds;
}

// The first touch of state memory as a load builds it: `size_bytes` of fresh anonymous memory
// on advised huge pages (ZeroPageArray, as the engine's state arrays), written once, by
// `world_size` threads a share each (as the ranks' loads run). The part of a load's time that is
// the kernel handing out and clearing pages, not I/O; the load pays it inside its copy.
double state_first_touch_seconds(uint64_t size_bytes, int world_size) {
  std::vector<ZeroPageArray<std::byte>> shares(static_cast<size_t>(world_size));
  const uint64_t share_bytes = size_bytes / static_cast<uint64_t>(world_size);
  const SteadyClock::time_point start = SteadyClock::now();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world_size; ++rank) {
    ranks.emplace_back([&, rank] {
      ZeroPageArray<std::byte>& share = shares[static_cast<size_t>(rank)];
      share.assign_zeros(static_cast<size_t>(share_bytes));
      std::memset(share.data(), 1, share.size());
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return seconds_since(start);
}

// Sequential reads of whole files into one reused, already faulted 8 MiB buffer (fio's way).
Result<double> plain_read_seconds(Disk& disk, const std::vector<std::string>& paths) {
  std::vector<std::byte> chunk(8u << 20, std::byte{0});
  const SteadyClock::time_point start = SteadyClock::now();
  for (const std::string& path : paths) {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
    ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, file->size_bytes());
    for (uint64_t offset = 0; offset < size; offset += chunk.size()) {
      const size_t length = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - offset));
      ZEROSIM_RETURN_IF_ERROR(file->read_exact(offset, std::span<std::byte>(chunk.data(), length)));
    }
    ZEROSIM_RETURN_IF_ERROR(file->close());
  }
  return seconds_since(start);
}

// The loader's verification pass over every shard (read + XXH3-128).
Result<double> checksum_seconds(Disk& disk, const std::vector<std::string>& paths) {
  const SteadyClock::time_point start = SteadyClock::now();
  for (const std::string& path : paths) ZEROSIM_RETURN_IF_ERROR(file_checksum(disk, path, nullptr).status());
  return seconds_since(start);
}

Status print_phases(Disk& disk, const std::vector<std::string>& shard_paths, uint64_t size_bytes, bool drop_caches) {
  std::string drop_error;
  auto cold = [&]() {
    if (drop_caches && !drop_page_cache(&drop_error)) drop_caches = false;
  };
  auto rate = [&](double seconds) { return static_cast<double>(size_bytes) / seconds / 1e6; };
  std::printf("  phases over the last tag's %zu shard(s), one thread, MB/s of checkpoint bytes:\n", shard_paths.size());
  const double touch = first_touch_seconds(size_bytes);
  std::printf("    first touch of fresh 4 KiB pages, ckpt-sized   %8.1f MB/s  (%.3f s)\n", rate(touch), touch);
  cold();
  ZEROSIM_ASSIGN_OR_RETURN(double cold_checksum, checksum_seconds(disk, shard_paths));
  ZEROSIM_ASSIGN_OR_RETURN(double warm_checksum, checksum_seconds(disk, shard_paths));
  cold();
  ZEROSIM_ASSIGN_OR_RETURN(double cold_read, plain_read_seconds(disk, shard_paths));
  ZEROSIM_ASSIGN_OR_RETURN(double warm_read, plain_read_seconds(disk, shard_paths));
  const char* cold_label = drop_caches ? "cold" : "cache NOT dropped";
  std::printf("    verification pass (read + XXH3), %-17s %8.1f MB/s  (%.3f s)\n", cold_label, rate(cold_checksum),
              cold_checksum);
  std::printf("    verification pass (read + XXH3), warm              %8.1f MB/s  (%.3f s)\n", rate(warm_checksum),
              warm_checksum);
  std::printf("    plain read, reused 8 MiB buffer, %-17s %8.1f MB/s  (%.3f s)\n", cold_label, rate(cold_read), cold_read);
  std::printf("    plain read, reused 8 MiB buffer, warm              %8.1f MB/s  (%.3f s)\n", rate(warm_read), warm_read);
  if (!drop_error.empty()) std::printf("    (page cache not dropped: %s)\n", drop_error.c_str());
  return Status();
}

// How a child ended, from its wait status.
std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// One rank's part of a load, without the engine: its shard read through the loader's reader into
// fresh state memory (ZeroPageArray, huge pages advised), 16 MiB a read() (fragments that size
// are read in place), and the checksum compared with the manifest's.
Status read_shard_into_fresh_state(Disk& disk, const std::string& path, const ShardRecord& shard,
                                   const CheckpointIoOptions& options) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<ParallelFileReader> reader,
                           ParallelFileReader::open(disk, path, shard.size_bytes, options));
  ZeroPageArray<std::byte> state;
  state.assign_zeros(static_cast<size_t>(shard.size_bytes));
  constexpr uint64_t kReadBytes = uint64_t{16} << 20;
  for (uint64_t at = 0; at < shard.size_bytes; at += kReadBytes) {
    const uint64_t length = std::min(kReadBytes, shard.size_bytes - at);
    ZEROSIM_RETURN_IF_ERROR(reader->read(std::span<std::byte>(state.data() + at, static_cast<size_t>(length))));
  }
  if (reader->checksum() != shard.xxh3_128) {
    return data_loss(path + ": checksum " + reader->checksum() + ", the manifest says " + shard.xxh3_128);
  }
  return Status();
}

// The shards read as above by W threads of this process, or by W forked processes; seconds from
// when every one of them is started and waiting (so no fork or thread start is timed, and the
// page cache is dropped by `before_start` after the forks) to the last one's end.
Result<double> reader_seconds(Disk& disk, const std::vector<std::string>& paths, const std::vector<ShardRecord>& shards,
                              const CheckpointIoOptions& options, bool processes,
                              const std::function<void()>& before_start) {
  if (processes) {
    int ready[2] = {-1, -1}, go[2] = {-1, -1};
    if (::pipe(ready) != 0 || ::pipe(go) != 0) return io_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<pid_t> children;
    std::string failed;
    for (size_t rank = 0; rank < paths.size() && failed.empty(); ++rank) {
      const pid_t child = ::fork();
      if (child < 0) {
        failed = std::string("fork: ") + std::strerror(errno);
      } else if (child == 0) {
        char byte = 'r';
        if (::write(ready[1], &byte, 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(2);
        const Status read = read_shard_into_fresh_state(disk, paths[rank], shards[rank], options);
        if (!read.ok()) std::fprintf(stderr, "checkpoint_bench: rank %zu: %s\n", rank, read.to_string().c_str());
        ::_exit(read.ok() ? 0 : 1);
      } else {
        children.push_back(child);
      }
    }
    // The children hold these ends now: a child that dies before its start byte ends the read below.
    ::close(ready[1]);
    ::close(go[0]);
    for (size_t waiting = 0; waiting < children.size() && failed.empty(); ++waiting) {
      char byte = 0;
      if (::read(ready[0], &byte, 1) != 1) failed = "a reading process ended before it started";
    }
    if (failed.empty()) before_start();
    const SteadyClock::time_point start = SteadyClock::now();
    // On a failure the go pipe is closed unwritten: each child's read returns 0 and it exits.
    for (size_t rank = 0; rank < children.size() && failed.empty(); ++rank) {
      const char byte = 'g';
      if (::write(go[1], &byte, 1) != 1) failed = std::string("write of a child's go: ") + std::strerror(errno);
    }
    ::close(ready[0]);
    ::close(go[1]);
    for (size_t rank = 0; rank < children.size(); ++rank) {
      int status = 0;
      if (::waitpid(children[rank], &status, 0) != children[rank]) {
        failed = std::string("waitpid: ") + std::strerror(errno);
      } else if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && failed.empty()) {
        failed = "the process reading " + paths[rank] + " failed (" + wait_status_text(status) + ")";
      }
    }
    if (!failed.empty()) return io_error(failed);
    return seconds_since(start);
  }
  std::vector<Status> results(paths.size());
  std::latch started(static_cast<std::ptrdiff_t>(paths.size()));
  std::latch go(1);
  std::vector<std::thread> ranks;
  for (size_t rank = 0; rank < paths.size(); ++rank) {
    ranks.emplace_back([&, rank] {
      started.count_down();
      go.wait();
      results[rank] = read_shard_into_fresh_state(disk, paths[rank], shards[rank], options);
    });
  }
  started.wait();
  before_start();
  const SteadyClock::time_point start = SteadyClock::now();
  go.count_down();
  for (std::thread& rank : ranks) rank.join();
  const double seconds = seconds_since(start);
  for (const Status& result : results) ZEROSIM_RETURN_IF_ERROR(result);
  return seconds;
}

Status print_reader_threads_against_processes(Disk& disk, const std::vector<std::string>& paths,
                                              const std::vector<ShardRecord>& shards,
                                              const CheckpointIoOptions& options, uint64_t size_bytes,
                                              bool drop_caches) {
  std::string drop_error;
  std::vector<double> thread_rates, process_rates;
  for (int r = 0; r < 3; ++r) {
    // Alternate which goes first, so that neither always follows the other's freed memory.
    for (const bool processes : {r % 2 == 1, r % 2 == 0}) {
      const auto cold = [&] {
        if (drop_caches && !drop_page_cache(&drop_error)) drop_caches = false;
      };
      ZEROSIM_ASSIGN_OR_RETURN(double seconds, reader_seconds(disk, paths, shards, options, processes, cold));
      (processes ? process_rates : thread_rates).push_back(static_cast<double>(size_bytes) / seconds / 1e6);
    }
  }
  std::printf("  the loader's reader (%s) into fresh state memory, %s, MB/s of 3 runs interleaved:\n",
              options.sequential_reads ? "one stream a shard" : "parallel reads",
              drop_caches ? "cold" : "cache NOT dropped");
  for (const bool processes : {false, true}) {
    const std::vector<double>& rates = processes ? process_rates : thread_rates;
    std::printf("    %zu %-10s %8.1f %8.1f %8.1f\n", paths.size(), processes ? "processes" : "threads", rates[0],
                rates[1], rates[2]);
  }
  std::vector<double> ratios;
  for (size_t r = 0; r < thread_rates.size(); ++r) ratios.push_back(thread_rates[r] / process_rates[r]);
  std::sort(ratios.begin(), ratios.end());
  std::printf("    threads / processes, run by run: median %.2f (%.2f-%.2f)\n", ratios[1], ratios[0], ratios[2]);
  if (!drop_error.empty()) std::printf("    (page cache not dropped: %s)\n", drop_error.c_str());
  return Status();
}

// Whether the peer's half of pair `repetition` (from 0) runs before ours: in every second pair.
bool peer_runs_first(int repetition) { return repetition % 2 == 1; }

// A peer's measurement in pair `repetition` (--peer-load, --peer-save), through sh -c, with
// "{repetition}" in the command replaced by the pair's number.
Status run_peer_command(const std::string& flag, const std::string& command_template, int repetition) {
  static constexpr std::string_view kPlaceholder = "{repetition}";
  std::string command = command_template;
  for (size_t at = command.find(kPlaceholder); at != std::string::npos; at = command.find(kPlaceholder, at)) {
    const std::string number = std::to_string(repetition);
    command.replace(at, kPlaceholder.size(), number);
    at += number.size();
  }
  std::fflush(stdout);  // the command writes to the same stdout
  const int status = std::system(command.c_str());
  if (status == -1) return internal_error(flag + " command could not run (" + std::strerror(errno) + "): " + command);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return internal_error(flag + " command failed (" + wait_status_text(status) + "): " + command);
  }
  return Status();
}

int fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "checkpoint_bench: %s: %s\n", what.c_str(), status.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  BenchFlags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--drop-caches") {
      flags.drop_caches = true;
      continue;
    }
    if (flag == "--keep") {
      flags.keep = true;
      continue;
    }
    if (flag == "--parallel-reads") {
      flags.parallel_reads = true;
      continue;
    }
    if (flag == "--phases") {
      flags.phases = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "checkpoint_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--dir") flags.directory = value;
    else if (flag == "--state-mib") flags.state_mib = whole_number(flag, value);
    else if (flag == "--world-size") flags.world_size = static_cast<int>(whole_number(flag, value));
    else if (flag == "--repetitions") flags.repetitions = static_cast<int>(whole_number(flag, value));
    else if (flag == "--settle-seconds") flags.settle_seconds = static_cast<int>(whole_number(flag, value));
    else if (flag == "--offload" && (value == "none" || value == "nvme")) flags.offload_nvme = value == "nvme";
    else if (flag == "--writer" && value == "none") flags.writer = CheckpointWriterType::kNone;
    else if (flag == "--writer" && value == "python") flags.writer = CheckpointWriterType::kPython;
    else if (flag == "--writer" && value == "fast") flags.writer = CheckpointWriterType::kFast;
    else if (flag == "--io-buffer-mib") flags.io_buffer_mib = whole_number(flag, value);
    else if (flag == "--cpus-per-rank") flags.cpus_per_rank = static_cast<int>(whole_number(flag, value));
    else if (flag == "--aio-block-kib") flags.aio_block_kib = whole_number(flag, value);
    else if (flag == "--aio-queue-depth") flags.aio_queue_depth = whole_number(flag, value);
    else if (flag == "--aio-threads") flags.aio_threads = whole_number(flag, value);
    else if (flag == "--peer-load" && !value.empty()) flags.peer_load_command = value;
    else if (flag == "--peer-save" && !value.empty()) flags.peer_save_command = value;
    else {
      std::fprintf(stderr,
                   "checkpoint_bench: unknown flag or value %s %s\n"
                   "flags: --dir DIR --state-mib N --world-size W --offload none|nvme --repetitions R "
                   "[--writer none|python|fast] [--io-buffer-mib N] [--aio-block-kib N] [--aio-queue-depth N] "
                   "[--aio-threads N] [--cpus-per-rank N] [--parallel-reads] [--drop-caches [--settle-seconds S]] "
                   "[--keep] [--phases] "
                   "[--peer-load CMD] [--peer-save CMD]\n",
                   flag.c_str(), value.c_str());
      return 2;
    }
  }
  if (flags.state_mib < 1 || flags.world_size < 1 || flags.repetitions < 1 || flags.io_buffer_mib < 1 ||
      flags.aio_block_kib < 4 || flags.aio_queue_depth < 1 || flags.aio_threads < 1) {
    std::fprintf(stderr, "checkpoint_bench: --state-mib, --world-size, --repetitions, --io-buffer-mib and the --aio-* "
                         "flags must be positive (--aio-block-kib at least 4)\n");
    return 2;
  }

  RealEnv real_env;
  Env env = real_env.env();
  env.cpus_per_rank = flags.cpus_per_rank >= 0 ? flags.cpus_per_rank : cpus_per_rank_on_host(flags.world_size);
  Disk& disk = *env.disk;
  const std::string checkpoint_directory = flags.directory + "/checkpoint-bench";
  const TrainingOptions save_options = make_options(flags, "checkpoint-bench-save");
  const TrainingOptions load_options = make_options(flags, "checkpoint-bench-load");
  // Tags of an earlier run would make the saves fail ("already exists"); this directory is the
  // bench's own.
  if (Status cleared = disk.remove_tree(checkpoint_directory); !cleared.ok()) return fail("clear", cleared);
  if (Status created = disk.create_directories(checkpoint_directory); !created.ok()) return fail("create", created);

  // Save: one world, one engine per rank for the whole phase (train, digest, R saves).
  const int world_size = flags.world_size;
  const int repetitions = flags.repetitions;
  CollectiveTimes save_times(repetitions, world_size);
  std::string saved_digest;
  bool settled = false;
  std::string settle_error;
  bool paired_saves_dropped = true;  // the drops before saves 2..R with --peer-save
  std::string paired_drop_error;
  Status saved = run_on_ranks(world_size, [&](int rank, Comm& comm) -> Status {
    RankEngine engine(save_options, comm, env);
    ZEROSIM_RETURN_IF_ERROR(engine.initialize());
    ZEROSIM_ASSIGN_OR_RETURN(StepRecord record, engine.train_step());
    if (record.skipped) return internal_error("the step was skipped (fp16 overflow): the moments are still zero");
    ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state());
    if (rank == 0) saved_digest = state.digests.state;
    if (flags.drop_caches && flags.settle_seconds > 0) {
      ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      if (rank == 0 && drop_page_cache(&settle_error)) {
        std::this_thread::sleep_for(std::chrono::seconds(flags.settle_seconds));
        settled = true;
      }
    }
    const bool paired = !flags.peer_save_command.empty();
    for (int r = 0; r < repetitions; ++r) {
      ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      if (paired && peer_runs_first(r)) {
        if (rank == 0) ZEROSIM_RETURN_IF_ERROR(run_peer_command("--peer-save", flags.peer_save_command, r));
        ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      }
      if (r > 0 && paired && flags.drop_caches) {
        // Every save of either side starts from a dropped cache (the peer drops it before it writes).
        if (rank == 0 && !drop_page_cache(&paired_drop_error)) paired_saves_dropped = false;
        ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      }
      save_times.begin[static_cast<size_t>(r)][static_cast<size_t>(rank)] = SteadyClock::now();
      ZEROSIM_RETURN_IF_ERROR(engine.save_checkpoint(checkpoint_directory, tag_for_repetition(r)));
      save_times.end[static_cast<size_t>(r)][static_cast<size_t>(rank)] = SteadyClock::now();
      if (paired && !peer_runs_first(r)) {
        ZEROSIM_RETURN_IF_ERROR(comm.barrier());  // every rank's save has ended
        if (rank == 0) ZEROSIM_RETURN_IF_ERROR(run_peer_command("--peer-save", flags.peer_save_command, r));
      }
    }
    return Status();
  });
  if (!saved.ok()) return fail("save", saved);

  // Every tag has the same shards; the first one's manifest gives their sizes.
  Result<CheckpointManifest> manifest = read_manifest(disk, checkpoint_directory + "/" + tag_for_repetition(0));
  if (!manifest.ok()) return fail("read manifest", manifest.status());
  uint64_t size_bytes = 0;
  for (const ShardRecord& shard : manifest->shards) size_bytes += shard.size_bytes;

  // Load: R times, fresh engines (a fresh world too, as a resumed job has), each from another
  // tag. The page cache is dropped, when asked and allowed, before each load.
  CollectiveTimes load_times(repetitions, world_size);
  bool caches_dropped = flags.drop_caches;
  std::string drop_error;
  std::string loaded_digest;
  std::vector<std::string> load_notes;
  const bool paired_loads = !flags.peer_load_command.empty();
  auto peer_load = [&](int r) { return run_peer_command("--peer-load", flags.peer_load_command, r); };
  for (int r = 0; r < repetitions; ++r) {
    if (paired_loads && peer_runs_first(r)) {
      if (Status peer = peer_load(r); !peer.ok()) return fail("load", peer);
    }
    Status loaded = run_on_ranks(world_size, [&](int rank, Comm& comm) -> Status {
      RankEngine engine(load_options, comm, env);
      ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      if (rank == 0 && caches_dropped) caches_dropped = drop_page_cache(&drop_error);
      ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      std::vector<std::string> notes;
      load_times.begin[static_cast<size_t>(r)][static_cast<size_t>(rank)] = SteadyClock::now();
      ZEROSIM_RETURN_IF_ERROR(engine.initialize_from_checkpoint(checkpoint_directory, tag_for_repetition(r), &notes));
      load_times.end[static_cast<size_t>(r)][static_cast<size_t>(rank)] = SteadyClock::now();
      // The loaded state must be the saved one, or the figure would measure something else.
      if (r == 0) {
        ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state());
        if (rank == 0) {
          loaded_digest = state.digests.state;
          load_notes = notes;
        }
      }
      return Status();
    });
    if (!loaded.ok()) return fail("load " + tag_for_repetition(r), loaded);
    if (paired_loads && !peer_runs_first(r)) {
      if (Status peer = peer_load(r); !peer.ok()) return fail("load", peer);
    }
  }
  if (loaded_digest != saved_digest) {
    std::fprintf(stderr, "checkpoint_bench: the loaded state's digest %s differs from the saved %s\n",
                 loaded_digest.c_str(), saved_digest.c_str());
    return 1;
  }

  // Async saves: the stall (the snapshot) and the background write, each waited for before the
  // next. The training state is the same; the tags go to a directory of their own.
  const std::string async_directory = flags.directory + "/checkpoint-bench-async";
  if (Status cleared = disk.remove_tree(async_directory); !cleared.ok()) return fail("clear", cleared);
  if (Status created = disk.create_directories(async_directory); !created.ok()) return fail("create", created);
  TrainingOptions async_options = save_options;
  async_options.config.checkpoint.async_save = true;
  async_options.run_id = "checkpoint-bench-async";
  CollectiveTimes stall_times(repetitions, world_size), async_times(repetitions, world_size);
  ThreadCommWorld checkpoint_world(world_size);
  Status async_saved = run_on_ranks(world_size, [&](int rank, Comm& comm) -> Status {
    RankEngine engine(async_options, comm, env, &checkpoint_world.comm(rank));
    ZEROSIM_RETURN_IF_ERROR(engine.initialize());
    ZEROSIM_ASSIGN_OR_RETURN(StepRecord record, engine.train_step());
    (void)record;
    for (int r = 0; r < repetitions; ++r) {
      ZEROSIM_RETURN_IF_ERROR(comm.barrier());
      const size_t at_r = static_cast<size_t>(r), at_rank = static_cast<size_t>(rank);
      stall_times.begin[at_r][at_rank] = async_times.begin[at_r][at_rank] = SteadyClock::now();
      ZEROSIM_RETURN_IF_ERROR(engine.save_checkpoint(async_directory, tag_for_repetition(r)));
      stall_times.end[at_r][at_rank] = SteadyClock::now();
      ZEROSIM_RETURN_IF_ERROR(engine.wait_for_save());
      async_times.end[at_r][at_rank] = SteadyClock::now();
    }
    return Status();
  });
  if (!async_saved.ok()) return fail("async save", async_saved);
  std::vector<double> stall_ms, async_rates;
  for (int r = 0; r < repetitions; ++r) {
    stall_ms.push_back(stall_times.seconds(r) * 1e3);
    async_rates.push_back(static_cast<double>(size_bytes) / async_times.seconds(r) / 1e6);
  }
  std::sort(stall_ms.begin(), stall_ms.end());
  std::sort(async_rates.begin(), async_rates.end());
  const double stall_median_ms = stall_ms[(stall_ms.size() - 1) / 2];
  std::vector<double> touch_seconds;
  for (int r = 0; r < repetitions; ++r) touch_seconds.push_back(state_first_touch_seconds(size_bytes, world_size));
  std::sort(touch_seconds.begin(), touch_seconds.end());
  const double touch_median_seconds = touch_seconds[(touch_seconds.size() - 1) / 2];
  const double async_median_mb_per_s = async_rates[(async_rates.size() - 1) / 2];

  const Throughput save = throughput(save_times, repetitions, size_bytes);
  const Throughput load = throughput(load_times, repetitions, size_bytes);
  const int64_t elements = element_count(save_options.model);
  std::printf("checkpoint_bench: %s, %lld parameter elements (widths %s), %d shard(s), %llu bytes (%.1f MiB) per "
              "checkpoint, world size %d, optimizer state %s, %d repetitions%s\n",
              flags.directory.c_str(), static_cast<long long>(elements),
              model_spec_to_string(save_options.model).c_str(), static_cast<int>(manifest->shards.size()),
              static_cast<unsigned long long>(size_bytes), static_cast<double>(size_bytes) / 1048576.0, world_size,
              flags.offload_nvme ? "on NVMe (swap files under DIR/swap)" : "in memory", repetitions, "");
  if (flags.writer == CheckpointWriterType::kNone) {
    if (flags.parallel_reads) {
      std::printf("  %d CPU(s) per rank: reads with %d I/O thread(s) per shard, both batches in flight\n",
                  env.cpus_per_rank, checkpoint_io_options_from(save_options.config, env.cpus_per_rank).threads);
    } else {
      std::printf("  reads as one sequential stream a shard (--parallel-reads: several threads)\n");
    }
  }
  std::printf("  first touch of the state's memory (fresh huge pages, %d thread(s)): median %.3f s, %.1f MB/s: inside "
              "each load's time\n",
              world_size, touch_median_seconds, static_cast<double>(size_bytes) / touch_median_seconds / 1e6);
  for (const std::string& note : load_notes) std::printf("  note: %s\n", note.c_str());
  if (flags.drop_caches && !caches_dropped) {
    std::printf("  page cache NOT dropped (%s): loads may come from the page cache\n", drop_error.c_str());
  } else if (!flags.drop_caches) {
    std::printf("  page cache not dropped (no --drop-caches): loads may come from the page cache\n");
  } else {
    std::printf("  page cache dropped before every load\n");
  }
  if (settled) {
    std::printf("  page cache dropped %d s before the first save\n", flags.settle_seconds);
  } else if (flags.drop_caches && flags.settle_seconds > 0) {
    std::printf("  page cache NOT dropped before the first save (%s)\n", settle_error.c_str());
  }
  if (!flags.peer_save_command.empty() && flags.drop_caches && repetitions > 1) {
    if (paired_saves_dropped) {
      std::printf("  page cache dropped before every save after the first (each follows a peer's save)\n");
    } else {
      std::printf("  page cache NOT dropped before the saves after the first (%s)\n", paired_drop_error.c_str());
    }
  }
  const double mib_per_mb = 1e6 / 1048576.0;
  std::printf("  save (write + fsync + commit): best %8.1f MB/s (%8.1f MiB/s), median %8.1f MB/s, seconds %s\n",
              save.best_mb_per_s, save.best_mb_per_s * mib_per_mb, save.median_mb_per_s,
              seconds_json(save.seconds).c_str());
  std::printf("  load (verify + read):          best %8.1f MB/s (%8.1f MiB/s), median %8.1f MB/s, seconds %s\n",
              load.best_mb_per_s, load.best_mb_per_s * mib_per_mb, load.median_mb_per_s,
              seconds_json(load.seconds).c_str());
  std::printf("  async save: the step loop waits %.1f ms (median; snapshot %.0f MB/s), the background write + "
              "fsync + commit ends at %.1f MB/s (median from the call)\n",
              stall_median_ms, static_cast<double>(size_bytes) / (stall_median_ms / 1e3) / 1e6, async_median_mb_per_s);
  std::printf("  loaded state digest = saved state digest (%s)\n", saved_digest.c_str());
  if (flags.phases) {
    std::vector<std::string> shard_paths;
    for (const ShardRecord& shard : manifest->shards) {
      shard_paths.push_back(checkpoint_directory + "/" + tag_for_repetition(repetitions - 1) + "/" + shard.file);
    }
    if (Status measured = print_phases(disk, shard_paths, size_bytes, flags.drop_caches); !measured.ok()) {
      return fail("phases", measured);
    }
    const CheckpointIoOptions read_io = checkpoint_read_options_from(load_options, env.cpus_per_rank);
    if (Status measured = print_reader_threads_against_processes(disk, shard_paths, manifest->shards, read_io,
                                                                 size_bytes, flags.drop_caches);
        !measured.ok()) {
      return fail("phases: the reader in threads and in processes", measured);
    }
  }
  if (!flags.keep) {
    Status removed = disk.remove_tree(checkpoint_directory);
    if (removed.ok()) removed = disk.remove_tree(async_directory);
    if (removed.ok() && flags.offload_nvme) {
      for (const TrainingOptions* options : {&save_options, &load_options}) {
        if (removed.ok()) removed = disk.remove_tree(flags.directory + "/swap/zerosim/" + options->run_id);
      }
    }
    if (!removed.ok()) return fail("clean up", removed);
  }
  // Last, so that a script takes the last line.
  std::printf(
      "{\"save_mb_per_s\": %.1f, \"save_median_mb_per_s\": %.1f, \"load_mb_per_s\": %.1f, \"load_median_mb_per_s\": "
      "%.1f, \"size_bytes\": %llu, \"world_size\": %d, \"offload\": \"%s\", \"writer\": \"%s\", "
      "\"reads\": \"%s\", \"async_stall_median_ms\": %.1f, \"async_median_mb_per_s\": %.1f, \"repetitions\": %d, "
      "\"page_cache_dropped\": %s, \"save_seconds\": %s, \"load_seconds\": %s, \"first_touch_median_seconds\": %.4f}\n",
      save.best_mb_per_s, save.median_mb_per_s, load.best_mb_per_s, load.median_mb_per_s,
      static_cast<unsigned long long>(size_bytes), world_size, flags.offload_nvme ? "nvme" : "none",
      checkpoint_writer_type_name(flags.writer), flags.parallel_reads ? "parallel" : "sequential", stall_median_ms,
      async_median_mb_per_s, repetitions,
      caches_dropped ? "true" : "false", seconds_json(save.seconds).c_str(), seconds_json(load.seconds).c_str(),
      touch_median_seconds);
  return 0;
}
