#include "core/swap/swap_file.h"

#include <xxhash.h>

#include <cstring>

#include "core/tensor/aligned_buffer.h"

namespace zerosim {
namespace {

constexpr unsigned char kMagic[8] = {'Z', 'S', 'S', 'W', 'A', 'P', 0, 1};
constexpr size_t kRunIdBytes = 64;
constexpr size_t kChecksummedBytes = 128;

void put_u32(std::byte* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(value >> (8 * i));
}
void put_u64(std::byte* at, uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(value >> (8 * i));
}
uint32_t get_u32(const std::byte* at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(at[i]) << (8 * i);
  return value;
}
uint64_t get_u64(const std::byte* at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(at[i]) << (8 * i);
  return value;
}

uint32_t dtype_code(DType dtype) { return static_cast<uint32_t>(dtype) + 1; }

}  // namespace

const char* swap_tensor_kind_name(SwapTensorKind kind) {
  switch (kind) {
    case SwapTensorKind::kMaster: return "master";
    case SwapTensorKind::kExpAvg: return "exp_avg";
    case SwapTensorKind::kExpAvgSq: return "exp_avg_sq";
    case SwapTensorKind::kParams: return "params";
    case SwapTensorKind::kGradients: return "gradients";
  }
  return "unknown";
}

uint64_t swap_file_size_bytes(uint64_t element_count, DType dtype) {
  return SwapFileHeader::kHeaderBytes + round_up_bytes(element_count * dtype_size_bytes(dtype), 4096);
}

std::string swap_file_name(SwapTensorKind kind, uint32_t sub_group) {
  return std::string(swap_tensor_kind_name(kind)) + ".subgroup-" + std::to_string(sub_group) + ".swp";
}

std::string swap_rank_directory(const std::string& nvme_path, const std::string& run_id, int rank, int world_size) {
  return nvme_path + "/zerosim/" + run_id + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(world_size);
}

uint64_t swap_payload_checksum(std::span<const std::byte> payload) { return XXH3_64bits(payload.data(), payload.size()); }

void encode_swap_header(const SwapFileHeader& header, std::span<std::byte> destination) {
  ZEROSIM_CHECK(destination.size() >= SwapFileHeader::kHeaderBytes, "swap header needs 4096 bytes");
  ZEROSIM_CHECK(header.run_id.size() < kRunIdBytes, "run id longer than 63 bytes");
  std::byte* at = destination.data();
  std::memset(at, 0, SwapFileHeader::kHeaderBytes);
  std::memcpy(at, kMagic, sizeof kMagic);
  put_u32(at + 8, SwapFileHeader::kFormatVersion);
  put_u32(at + 12, static_cast<uint32_t>(SwapFileHeader::kHeaderBytes));
  std::memcpy(at + 16, header.run_id.data(), header.run_id.size());
  put_u32(at + 80, header.rank);
  put_u32(at + 84, header.world_size);
  put_u32(at + 88, header.sub_group);
  put_u32(at + 92, static_cast<uint32_t>(header.kind));
  put_u64(at + 96, header.element_count);
  put_u32(at + 104, dtype_code(header.dtype));
  put_u64(at + 112, static_cast<uint64_t>(header.optimizer_step));
  put_u64(at + 120, header.payload_checksum);
  put_u64(at + 128, XXH3_64bits(at, kChecksummedBytes));
}

Status check_swap_header(std::span<const std::byte> source, const SwapFileHeader& expected, const std::string& path,
                         SwapFileHeader& found) {
  if (source.size() < SwapFileHeader::kHeaderBytes) return data_loss("swap file " + path + ": header cut short");
  const std::byte* at = source.data();
  if (std::memcmp(at, kMagic, sizeof kMagic) != 0) {
    return data_loss("swap file " + path + ": not a zerosim swap file (bad magic)");
  }
  if (get_u64(at + 128) != XXH3_64bits(at, kChecksummedBytes)) {
    return data_loss("swap file " + path + ": header checksum mismatch (torn or corrupted header)");
  }
  const uint32_t version = get_u32(at + 8);
  if (version != SwapFileHeader::kFormatVersion) {
    return data_loss("swap file " + path + ": format version " + std::to_string(version) + ", expected " +
                     std::to_string(SwapFileHeader::kFormatVersion));
  }
  if (get_u32(at + 12) != SwapFileHeader::kHeaderBytes) {
    return data_loss("swap file " + path + ": header size " + std::to_string(get_u32(at + 12)) + ", expected " +
                     std::to_string(SwapFileHeader::kHeaderBytes));
  }
  const char* run_id_bytes = reinterpret_cast<const char*>(at + 16);
  found.run_id.assign(run_id_bytes, strnlen(run_id_bytes, kRunIdBytes));
  found.rank = get_u32(at + 80);
  found.world_size = get_u32(at + 84);
  found.sub_group = get_u32(at + 88);
  found.kind = static_cast<SwapTensorKind>(get_u32(at + 92));
  found.element_count = get_u64(at + 96);
  const uint32_t dtype = get_u32(at + 104);
  found.optimizer_step = static_cast<int64_t>(get_u64(at + 112));
  found.payload_checksum = get_u64(at + 120);

  auto mismatch = [&](const char* field, const std::string& want, const std::string& got) {
    return failed_precondition("swap file " + path + " belongs elsewhere: " + field + " is " + got + ", expected " +
                               want + " (a stale or foreign swap file; zerosim never trains on it)");
  };
  if (found.run_id != expected.run_id) return mismatch("run id", expected.run_id, found.run_id);
  if (found.rank != expected.rank) return mismatch("rank", std::to_string(expected.rank), std::to_string(found.rank));
  if (found.world_size != expected.world_size) {
    return mismatch("world size", std::to_string(expected.world_size), std::to_string(found.world_size));
  }
  if (found.sub_group != expected.sub_group) {
    return mismatch("sub-group", std::to_string(expected.sub_group), std::to_string(found.sub_group));
  }
  if (found.kind != expected.kind) {
    return mismatch("tensor", swap_tensor_kind_name(expected.kind), std::to_string(static_cast<uint32_t>(found.kind)));
  }
  if (found.element_count != expected.element_count) {
    return mismatch("element count", std::to_string(expected.element_count), std::to_string(found.element_count));
  }
  if (dtype != dtype_code(expected.dtype)) {
    return mismatch("dtype", dtype_name(expected.dtype), std::to_string(dtype));
  }
  if (found.optimizer_step != expected.optimizer_step) {
    return mismatch("optimizer step", std::to_string(expected.optimizer_step), std::to_string(found.optimizer_step));
  }
  return Status();
}

}  // namespace zerosim
