// The swap-file header reader: any bytes as a swap file's first bytes, checked against what a
// rank expects; a header it accepts must be the expected one.
#include "core/swap/swap_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  SwapFileHeader expected;
  expected.run_id = "corpus";
  expected.world_size = 2;
  expected.element_count = 16;
  expected.optimizer_step = 2;
  SwapFileHeader found;
  const Status checked = check_swap_header(std::as_bytes(std::span<const uint8_t>(data, size)), expected, "fuzz.swp", found);
  if (checked.ok() && (found.run_id != expected.run_id || found.element_count != expected.element_count)) __builtin_trap();
  return 0;
}
