// Cold-cache read rates of the access patterns a checkpoint load can take, on one disk, in one
// run: is a gap between zerosim's load and torch.load the disk's answer to the pattern, or the
// loader's own? (bench/checkpoints.md, [ckpt-io]: the W = 4 load against torch.load.)
//
// Writes 1 file and 4 files holding TOTAL_MIB between them (fsynced), then, REPETITIONS times,
// each pattern once in turn (interleaved, so a drift of the disk's rate falls on all alike; odd
// repetitions in reverse order, so that no pattern always follows the same one), the
// page cache dropped before each (needs root; the output says when it could not):
//   torch.load's   four processes, each one sequential read() of 16 MiB at a time of its file
//                  (torch.load reads each storage record whole); the same from four threads
//   zerosim's      per file, 3 threads taking 8 MiB chunks round-robin, each cut in 1 MiB
//                  preads (parallel_file_reader.h's buffered queue at W = 4 on 16 cores), in one
//                  process and in four; 8 MiB preads with 3, 2 and 1 threads a file; 1 with
//                  POSIX_FADV_SEQUENTIAL; and one file with 4 threads (W = 1)
//   with their memory   the reads above reuse one touched buffer (the disk alone); a load reads
//                  into memory it has never touched: torch.load into fresh storages (4 processes,
//                  16 MiB reads, no advice), zerosim's ranks into fresh state on advised huge
//                  pages (4 threads of one process, 8 MiB reads), and each from the other's
//                  processes or threads: do four threads faulting in one address space read
//                  slower than four processes? (The transparent-huge-page mode is printed.)
// Output: one line per pattern, its rate in MB/s (1e6 bytes) in each repetition, then the median
// of its per-repetition ratios to torch.load's pattern over as many files, and in how many
// repetitions it read slower than that pattern.
//
// Usage: read_pattern_bench DIR [TOTAL_MIB] [REPETITIONS]   (1024, 3)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/page_cache.h"
#include "bench/flag_value.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "read_pattern_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Touched memory of `bytes`, so that the reads measure the disk and not page faults.
std::byte* touched_buffer(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) die("mmap of " + std::to_string(bytes) + " bytes");
  std::memset(memory, 1, bytes);
  return static_cast<std::byte*>(memory);
}

struct Pattern {
  const char* name;
  int files;
  bool processes;       // one process per file, else one thread per file
  int threads_per_file;
  size_t chunk_bytes;   // taken round-robin by a file's threads
  size_t read_bytes;    // each chunk in reads of this size
  bool sequential_advice;
  bool fresh_memory = false;    // read into fresh memory of the file's size (one thread a file)
  bool huge_page_advice = false;  // ... advised MADV_HUGEPAGE, as the engine's state
};

// One thread reads the whole file in order into memory it has never touched, as a load builds
// state: the page faults fall inside the reads.
void read_file_into_fresh_memory(const std::string& path, size_t size_bytes, const Pattern& pattern) {
  const int descriptor = open(path.c_str(), O_RDONLY);
  if (descriptor < 0) die("open " + path);
  void* memory = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) die("mmap of " + std::to_string(size_bytes) + " bytes");
  // A kernel without transparent huge pages refuses the advice: 4 KiB pages then, as the engine's
  // state would have there (it ignores the refusal too).
  if (pattern.huge_page_advice) (void)madvise(memory, size_bytes, MADV_HUGEPAGE);
  std::byte* destination = static_cast<std::byte*>(memory);
  for (size_t at = 0; at < size_bytes; at += pattern.read_bytes) {
    const size_t length = std::min(pattern.read_bytes, size_bytes - at);
    if (pread(descriptor, destination + at, length, static_cast<off_t>(at)) != static_cast<ssize_t>(length)) {
      die("pread " + path + " at offset " + std::to_string(at) + " length " + std::to_string(length));
    }
  }
  munmap(memory, size_bytes);
  close(descriptor);
}

// One file, as `pattern` says: the file's threads take chunks round-robin.
void read_file(const std::string& path, size_t size_bytes, const Pattern& pattern) {
  if (pattern.fresh_memory) {
    read_file_into_fresh_memory(path, size_bytes, pattern);
    return;
  }
  const int descriptor = open(path.c_str(), O_RDONLY);
  if (descriptor < 0) die("open " + path);
  if (pattern.sequential_advice && posix_fadvise(descriptor, 0, 0, POSIX_FADV_SEQUENTIAL) != 0) die("fadvise " + path);
  std::vector<std::thread> threads;
  for (int t = 0; t < pattern.threads_per_file; ++t) {
    threads.emplace_back([&, t] {
      std::byte* buffer = touched_buffer(pattern.chunk_bytes);
      for (size_t chunk = static_cast<size_t>(t); chunk * pattern.chunk_bytes < size_bytes;
           chunk += static_cast<size_t>(pattern.threads_per_file)) {
        for (size_t at = 0; at < pattern.chunk_bytes && chunk * pattern.chunk_bytes + at < size_bytes;
             at += pattern.read_bytes) {
          const off_t offset = static_cast<off_t>(chunk * pattern.chunk_bytes + at);
          const size_t length = std::min(pattern.read_bytes, size_bytes - static_cast<size_t>(offset));
          if (pread(descriptor, buffer + at, length, offset) != static_cast<ssize_t>(length)) {
            die("pread " + path + " at offset " + std::to_string(offset) + " length " + std::to_string(length));
          }
        }
      }
      munmap(buffer, pattern.chunk_bytes);
    });
  }
  for (std::thread& thread : threads) thread.join();
  close(descriptor);
}

// The kernel's transparent-huge-page mode (the bracketed word of the sysfs file), or why not known.
std::string transparent_huge_page_mode() {
  FILE* mode_file = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (mode_file == nullptr) return std::string("unknown (") + std::strerror(errno) + ")";
  char line[256] = {};
  const bool read_ok = std::fgets(line, sizeof line, mode_file) != nullptr;
  std::fclose(mode_file);
  if (!read_ok) return "unknown (empty sysfs file)";
  const std::string text(line);
  const size_t open_bracket = text.find('['), close_bracket = text.find(']');
  if (open_bracket == std::string::npos || close_bracket == std::string::npos || close_bracket < open_bracket) {
    return "unknown (" + text + ")";
  }
  return text.substr(open_bracket + 1, close_bracket - open_bracket - 1);
}

std::vector<std::string> file_names(const std::string& directory, int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(directory + "/of" + std::to_string(count) + "-" + std::to_string(i));
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s DIR [TOTAL_MIB] [REPETITIONS]\n", argv[0]);
    return 2;
  }
  const std::string directory = argv[1];
  const long total_mib = argc > 2 ? static_cast<long>(zerosim::whole_number("TOTAL_MIB", argv[2])) : 1024;
  const int repetitions = argc > 3 ? static_cast<int>(zerosim::whole_number("REPETITIONS", argv[3])) : 3;
  if (directory.empty() || total_mib < 64 || total_mib % 64 != 0 || repetitions < 1) {
    std::fprintf(stderr, "read_pattern_bench: DIR must be given, TOTAL_MIB a multiple of 64, REPETITIONS positive\n");
    return 2;
  }
  const size_t total_bytes = static_cast<size_t>(total_mib) * kMiB;
  std::byte* source = touched_buffer(8 * kMiB);
  for (const int count : {1, 4}) {
    for (const std::string& name : file_names(directory, count)) {
      const int descriptor = open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (descriptor < 0) die("create " + name);
      for (size_t at = 0; at < total_bytes / static_cast<size_t>(count); at += 8 * kMiB) {
        if (write(descriptor, source, 8 * kMiB) != static_cast<ssize_t>(8 * kMiB)) die("write " + name);
      }
      if (fsync(descriptor) != 0 || close(descriptor) != 0) die("fsync " + name);
    }
  }
  const std::vector<Pattern> patterns = {
      {"torch.load's: 4 processes, sequential 16 MiB reads", 4, true, 1, 16 * kMiB, 16 * kMiB, false},
      {"the same from 4 threads", 4, false, 1, 16 * kMiB, 16 * kMiB, false},
      {"zerosim's W=4: 4 files x 3 threads, 8 MiB chunks, 1 MiB preads", 4, false, 3, 8 * kMiB, 1 * kMiB, false},
      {"the same in 4 processes", 4, true, 3, 8 * kMiB, 1 * kMiB, false},
      {"4 files x 3 threads, 8 MiB preads", 4, false, 3, 8 * kMiB, 8 * kMiB, false},
      {"4 files x 2 threads, 8 MiB preads", 4, false, 2, 8 * kMiB, 8 * kMiB, false},
      {"4 files x 1 thread, 8 MiB preads", 4, false, 1, 8 * kMiB, 8 * kMiB, false},
      {"4 files x 1 thread, 8 MiB preads, FADV_SEQUENTIAL", 4, false, 1, 8 * kMiB, 8 * kMiB, true},
      {"torch.load's W=1: 1 file, sequential 16 MiB reads", 1, false, 1, 16 * kMiB, 16 * kMiB, false},
      {"zerosim's W=1: 1 file x 4 threads, 8 MiB chunks, 1 MiB preads", 1, false, 4, 8 * kMiB, 1 * kMiB, false},
      {"torch.load's with its memory: 4 processes, 16 MiB reads, fresh", 4, true, 1, 16 * kMiB, 16 * kMiB, false, true},
      {"the same from 4 threads", 4, false, 1, 16 * kMiB, 16 * kMiB, false, true},
      {"zerosim's with its memory: 4 threads, 8 MiB reads, fresh huge", 4, false, 1, 8 * kMiB, 8 * kMiB, false, true,
       true},
      {"the same in 4 processes", 4, true, 1, 8 * kMiB, 8 * kMiB, false, true, true},
  };
  std::vector<std::vector<double>> rates(patterns.size());
  bool dropped = true;
  std::string drop_error;
  for (int r = 0; r < repetitions; ++r) {
    for (size_t turn = 0; turn < patterns.size(); ++turn) {
      // Odd repetitions run the patterns in reverse: on a VM that hands freed memory back to the
      // host, a pattern right after one that freed a gigabyte reads into memory the host still
      // backs, and runs faster for it (5x seen here); reversing puts each pattern after another.
      const size_t p = r % 2 == 0 ? turn : patterns.size() - 1 - turn;
      const Pattern& pattern = patterns[p];
      const std::vector<std::string> files = file_names(directory, pattern.files);
      const size_t file_bytes = total_bytes / static_cast<size_t>(pattern.files);
      dropped = zerosim::drop_page_cache(&drop_error) && dropped;
      const double start = seconds_now();
      if (pattern.processes) {
        std::vector<pid_t> children;
        for (const std::string& file : files) {
          const pid_t child = fork();
          if (child < 0) die("fork");
          if (child == 0) {
            read_file(file, file_bytes, pattern);
            _exit(0);
          }
          children.push_back(child);
        }
        for (const pid_t child : children) {
          int status = 0;
          if (waitpid(child, &status, 0) != child) die("waitpid");
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            std::fprintf(stderr, "read_pattern_bench: a reading process failed (%s)\n", pattern.name);
            return 1;
          }
        }
      } else {
        std::vector<std::thread> readers;
        for (const std::string& file : files) readers.emplace_back([&, file] { read_file(file, file_bytes, pattern); });
        for (std::thread& reader : readers) reader.join();
      }
      rates[p].push_back(static_cast<double>(total_bytes) / (seconds_now() - start) / 1e6);
    }
  }
  const std::string cache = dropped ? "dropped before each" : "NOT dropped (" + drop_error + "): reads may be cached";
  std::printf("read_pattern_bench: %s, %ld MiB, %d repetitions interleaved, page cache %s; MB/s:\n", directory.c_str(),
              total_mib, repetitions, cache.c_str());
  struct utsname system_name {};
  const std::string kernel = uname(&system_name) == 0 ? system_name.release : std::string("unknown");
  std::printf("  kernel %s, transparent huge pages: %s\n", kernel.c_str(), transparent_huge_page_mode().c_str());
  // Each pattern against the torch.load pattern with the same number of files, repetition by
  // repetition (the two ran seconds apart, so a drift of the disk falls on both): the median of
  // those ratios, and in how many repetitions the pattern read slower. A single run's spread on
  // a virtual disk is wider than the gaps between patterns; the ratios are what to compare.
  const auto reference_for = [&](const Pattern& pattern) {
    for (size_t q = 0; q < patterns.size(); ++q) {
      if (patterns[q].files == pattern.files && patterns[q].threads_per_file == 1 &&
          patterns[q].chunk_bytes == 16 * kMiB && patterns[q].fresh_memory == pattern.fresh_memory &&
          (pattern.files == 1 || patterns[q].processes)) {
        return q;
      }
    }
    return patterns.size();
  };
  std::printf("  %-66s %s\n", "", "rates, then: median ratio to torch.load's pattern (same files), slower in");
  for (size_t p = 0; p < patterns.size(); ++p) {
    std::printf("  %-66s", patterns[p].name);
    for (const double rate : rates[p]) std::printf(" %7.0f", rate);
    const size_t reference = reference_for(patterns[p]);
    if (reference != p && reference < patterns.size()) {
      std::vector<double> ratios;
      int slower = 0;
      for (int r = 0; r < repetitions; ++r) {
        ratios.push_back(rates[p][static_cast<size_t>(r)] / rates[reference][static_cast<size_t>(r)]);
        slower += ratios.back() < 1.0 ? 1 : 0;
      }
      std::sort(ratios.begin(), ratios.end());
      const size_t middle = ratios.size() / 2;
      const double median = ratios.size() % 2 == 1 ? ratios[middle] : (ratios[middle - 1] + ratios[middle]) / 2;
      std::printf("   x%.2f, %d of %d", median, slower, repetitions);
    }
    std::printf("\n");
  }
  for (const int count : {1, 4}) {
    for (const std::string& name : file_names(directory, count)) unlink(name.c_str());
  }
  return 0;
}
