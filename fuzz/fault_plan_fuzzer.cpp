// The fault-plan readers: a scenario's fault_plan object and a FaultyDisk rule list.
#include "faults/faulty_disk.h"
#include "fuzz/fuzz_input.h"
#include "sim/sim_world.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  Result<nlohmann::json> document = parse_json_text(fuzz::text_of(data, size), "fault_plan.json");
  if (!document.ok()) return 0;
  (void)parse_fault_plan(*document, "fault_plan.json").ok();
  (void)parse_fault_rules(*document).ok();
  return 0;
}
