// The checkpoint manifest reader: any bytes as <tag>/manifest.json, read as a resume reads it.
#include "core/checkpoint/manifest.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  SimDisk disk;
  fuzz::put_input(disk, "/ckpt/global_step2/manifest.json", data, size);
  Result<CheckpointManifest> manifest = read_manifest(disk, "/ckpt/global_step2");
  if (manifest.ok()) (void)manifest_to_json(*manifest).dump();
  return 0;
}
