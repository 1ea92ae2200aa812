// The safetensors reader: any bytes as a shard; the header is validated, then every tensor it
// admits is read.
#include "core/checkpoint/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zerosim;
  const std::string path = "/ckpt/global_step2/rank-00000-of-00001.safetensors";
  SimDisk disk;
  fuzz::put_input(disk, path, data, size);
  Result<SafetensorsIndex> index = read_safetensors_index(disk, path);
  if (!index.ok()) return 0;
  for (const SafetensorsEntry& entry : index->entries) {
    Result<std::vector<std::byte>> tensor = read_safetensors_tensor(disk, path, *index, entry.name);
    if (tensor.ok() && tensor->size() != entry.end_bytes - entry.begin_bytes) __builtin_trap();
  }
  return 0;
}
