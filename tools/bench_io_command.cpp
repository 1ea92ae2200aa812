#include "tools/bench_io_command.h"

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/env/clock.h"
#include "core/env/disk.h"
#include "core/tensor/aligned_buffer.h"

namespace zerosim {
namespace {

struct Measured {
  Status status;
  double seconds = 0;
};

// One transfer of the whole file through the swap engine's queue: the engine cuts it into
// block_size pieces and keeps queue_depth of them in flight, as the swapper does.
Measured transfer(Disk& disk, Clock& clock, const BenchIoFlags& flags, IoDirection direction, AlignedBuffer& buffer) {
  Measured measured;
  AsyncIoOptions options;
  options.block_size_bytes = flags.block_size_bytes;
  options.queue_depth = flags.queue_depth;
  options.intra_op_parallelism = flags.parallelism;
  const bool libaio = flags.engine == "libaio";
  Result<std::unique_ptr<AsyncIoQueue>> queue =
      disk.make_async_queue(options, libaio ? Disk::AsyncEngine::kLibaio : Disk::AsyncEngine::kPreadPwrite);
  if (!queue.ok()) return {queue.status(), 0};
  FileOpenOptions open_options;
  open_options.mode = direction == IoDirection::kWrite ? OpenMode::kCreateReadWrite : OpenMode::kReadOnly;
  open_options.direct_io = true;
  Result<std::unique_ptr<File>> file = disk.open(flags.directory + "/zerosim-bench-io.dat", open_options);
  if (!file.ok()) return {file.status(), 0};
  const uint64_t start_ns = clock.now_ns();
  Status status = (*queue)->submit({file->get(), direction, 0, buffer.data(), buffer.size_bytes()});
  if (status.ok()) status = (*queue)->wait_all();
  measured.seconds = static_cast<double>(clock.now_ns() - start_ns) * 1e-9;
  if (status.ok()) status = (*file)->close();
  measured.status = status;
  return measured;
}

}  // namespace

int run_bench_io_command(const BenchIoFlags& flags) {
  std::unique_ptr<Disk> disk = make_posix_disk();
  std::unique_ptr<Clock> clock = make_steady_clock();
  const uint64_t size_bytes = static_cast<uint64_t>(flags.size_mib) << 20;
  Result<AlignedBuffer> buffer = AlignedBuffer::allocate(size_bytes, /*pin=*/true);
  if (!buffer.ok()) {
    std::fprintf(stderr, "zerosim bench io: %s\n", buffer.status().to_string().c_str());
    return 3;
  }
  for (uint64_t i = 0; i < size_bytes; i += 8) {
    const uint64_t value = i * 0x9e3779b97f4a7c15ULL;
    std::memcpy(buffer->data() + i, &value, 8);
  }
  nlohmann::json result = {{"engine", flags.engine},           {"size_bytes", size_bytes},
                           {"block_size", flags.block_size_bytes}, {"queue_depth", flags.queue_depth},
                           {"parallelism", flags.parallelism},  {"repetitions", flags.repetitions}};
  for (IoDirection direction : {IoDirection::kWrite, IoDirection::kRead}) {
    double best_seconds = 0;
    for (int repetition = 0; repetition < flags.repetitions; ++repetition) {
      Measured measured = transfer(*disk, *clock, flags, direction, *buffer);
      if (!measured.status.ok()) {
        std::fprintf(stderr, "zerosim bench io: %s\n", measured.status.to_string().c_str());
        return 3;
      }
      if (repetition == 0 || measured.seconds < best_seconds) best_seconds = measured.seconds;
    }
    const double megabytes_per_second = static_cast<double>(size_bytes) / best_seconds / 1e6;
    result[direction == IoDirection::kWrite ? "write_MBps" : "read_MBps"] = megabytes_per_second;
  }
  disk->remove_file(flags.directory + "/zerosim-bench-io.dat").ignore_error();
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

void add_bench_commands(CLI::App& app, BenchCommands& commands) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of zerosim's own engines (see bench/ for the scripts)");
  bench->require_subcommand(1);
  BenchIoFlags& io_flags = commands.io_flags;
  CLI::App* bench_io = bench->add_subcommand("io", "Swap-engine write and read throughput (O_DIRECT), as JSON");
  commands.io = bench_io;
  bench_io->add_option("--dir", io_flags.directory, "Directory on the disk to measure");
  bench_io->add_option("--size-mib", io_flags.size_mib, "File size in MiB")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bench_io->add_option("--block-size", io_flags.block_size_bytes, "aio.block_size in bytes");
  bench_io->add_option("--queue-depth", io_flags.queue_depth, "aio.queue_depth");
  bench_io->add_option("--parallelism", io_flags.parallelism, "aio.intra_op_parallelism");
  bench_io->add_option("--repetitions", io_flags.repetitions, "Best of this many runs")->check(CLI::Range(1, 100));
  bench_io->add_option("--engine", io_flags.engine, "libaio or pread")->check(CLI::IsMember({"libaio", "pread"}));
}

std::optional<int> run_bench_commands(const BenchCommands& commands) {
  if (commands.io->parsed()) return run_bench_io_command(commands.io_flags);
  return std::nullopt;
}

}  // namespace zerosim
