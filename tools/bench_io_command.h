// `zerosim bench io`: the swap engine's sequential write and read throughput on a real
// directory with O_DIRECT, in the same shape as fio --rw=write/read --direct=1 (one file of
// the given size, block size, queue depth). bench/io_vs_fio.sh runs it beside fio.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace zerosim {

struct BenchIoFlags {
  std::string directory = "/tmp";
  int64_t size_mib = 1024;
  int64_t block_size_bytes = 1048576;
  int64_t queue_depth = 8;
  int64_t parallelism = 1;
  int repetitions = 3;
  std::string engine = "libaio";
};

int run_bench_io_command(const BenchIoFlags& flags);

// The `bench` group (`bench io`), as TrainCommands: it lives in main() from parse to run.
struct BenchCommands {
  BenchIoFlags io_flags;
  CLI::App* io = nullptr;
};
void add_bench_commands(CLI::App& app, BenchCommands& commands);
std::optional<int> run_bench_commands(const BenchCommands& commands);

}  // namespace zerosim
