// The DeepSpeed config reader: any bytes as a config file, resolved with default run settings
// and with an override; only a clean Status may come back.
#include "core/config/ds_config.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  const std::string text = fuzz::text_of(data, size);
  Result<nlohmann::json> document = parse_json_text(text, "fuzz.json");
  if (!document.ok()) return 0;
  RunSettings settings;
  (void)resolve_config(*document, settings).ok();
  settings.world_size = 3;
  settings.micro_batch_size = 2;
  (void)resolve_config(*document, settings).ok();
  nlohmann::json overridden = *document;
  if (overridden.is_object() && apply_override(overridden, "zero_optimization.sub_group_size=7").ok()) {
    (void)resolve_config(overridden, settings).ok();
  }
  return 0;
}
