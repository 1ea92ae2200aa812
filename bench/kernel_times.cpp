// A kernel timer for any CUDA program, for machines without Nsight Systems: CUDA loads it as an
// injection library (CUDA_INJECTION64_PATH=.../libkernel_times.so), CUPTI records every kernel's
// start and end on the device, and at exit it prints, per kernel name, the launches, the total
// device time and its share of all kernels' time, largest first, to stderr (or to the file
// ZEROSIM_KERNEL_TIMES_OUT names). Times cover the whole process (warm-up steps included):
// divide by the steps the program ran.
//
// This is a measuring tool beside the benchmarks, loaded into a process it does not own, so it
// keeps its totals in one process-wide table: there is no object to hand them to.
#include <cupti.h>

#include <cxxabi.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct KernelTotal {
  uint64_t launches = 0;
  uint64_t device_ns = 0;
};

struct Totals {
  std::mutex mutex;
  std::map<std::string, KernelTotal> by_name;
  uint64_t dropped_records = 0;
};

Totals& totals() {
  static Totals* table = new Totals();  // never destroyed: CUPTI may deliver records during exit
  return *table;
}

constexpr size_t kBufferBytes = 16u << 20;
constexpr size_t kBufferAlignment = 8;

void report_cupti(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_times: %s failed: %s\n", call, text != nullptr ? text : "unknown CUPTI error");
}

// A readable name: demangled, without the argument list (the overloads of one kernel are one row).
std::string readable(const char* mangled) {
  if (mangled == nullptr) return "(unnamed)";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  // "(anonymous namespace)" is part of the name, not its argument list.
  const std::string anonymous = "(anonymous namespace)";
  for (size_t at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous)) {
    name.replace(at, anonymous.size(), "{anonymous}");
  }
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0) return name.substr(0, i);
  }
  return name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid_bytes) {
  (void)context;
  (void)stream;
  Totals& table = totals();
  CUpti_Activity* record = nullptr;
  {
    std::lock_guard<std::mutex> lock(table.mutex);
    while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelTotal& total = table.by_name[readable(kernel->name)];
      total.launches += 1;
      total.device_ns += kernel->end > kernel->start ? kernel->end - kernel->start : 0;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) table.dropped_records += dropped;
  }
  std::free(buffer);
}

void print_totals() {
  report_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  Totals& table = totals();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<std::pair<std::string, KernelTotal>> rows(table.by_name.begin(), table.by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.device_ns > b.second.device_ns; });
  uint64_t all_ns = 0;
  for (const auto& row : rows) all_ns += row.second.device_ns;
  const char* path = std::getenv("ZEROSIM_KERNEL_TIMES_OUT");
  FILE* out = path != nullptr && *path != '\0' ? std::fopen(path, "w") : stderr;
  if (out == nullptr) {
    std::fprintf(stderr, "kernel_times: cannot open %s: %s\n", path, std::strerror(errno));
    out = stderr;
  }
  std::fprintf(out, "kernel_times: %.3f ms in %zu kernel names (%llu records dropped)\n", all_ns / 1e6, rows.size(),
               static_cast<unsigned long long>(table.dropped_records));
  std::fprintf(out, "%10s %12s %10s %6s  %s\n", "launches", "total_ms", "mean_us", "share", "kernel");
  for (const auto& [name, total] : rows) {
    std::fprintf(out, "%10llu %12.3f %10.2f %5.1f%%  %s\n", static_cast<unsigned long long>(total.launches),
                 total.device_ns / 1e6, total.launches > 0 ? total.device_ns / 1e3 / total.launches : 0.0,
                 all_ns > 0 ? 100.0 * total.device_ns / all_ns : 0.0, name.c_str());
  }
  if (out != stderr) std::fclose(out);
}

}  // namespace

// CUDA calls this once, at initialization, when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  report_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  report_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  std::atexit(print_totals);
  return 1;
}
