// The scenario reader: any bytes as a scenario file (its config, fault plan and expectations
// included), with the line-number decoration of its errors.
#include "fuzz/fuzz_input.h"
#include "scenarios/scenario_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  const std::string text = fuzz::text_of(data, size);
  Result<nlohmann::json> document = parse_json_text(text, "scenario.json");
  if (!document.ok()) return 0;
  Result<CrashScenario> scenario = crash_scenario_from_json(*document, "scenario.json");
  if (!scenario.ok()) (void)with_line_number(text, "scenario.json", scenario.status().message());
  return 0;
}
