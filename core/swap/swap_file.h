// The on-disk format of one swapped tensor: a 4096-byte header, then the payload.
//
// Why a header (DeepSpeed's swap files have none): the seed bug report copied swap files
// back by hand and trained on another step's state under names that mapped to other tensors.
// Here every file says whose it is (run id, rank, world size, sub-group, tensor), how much it
// holds (element count, dtype), which optimizer step's state it is, and a checksum of its
// payload, and the reader refuses anything that does not match what it expects, naming the
// file and the field. The header is 4096 bytes so that the payload stays aligned for O_DIRECT.
//
// Layout (little-endian):
//   0  magic "ZSSWAP\0\1" (8)         8  format version u32        12 header size u32 (4096)
//   16 run id (64, NUL-padded)        80 rank u32   84 world size u32   88 sub-group u32
//   92 tensor kind u32                96 element count u64         104 dtype u32
//   108 reserved u32 (0)              112 optimizer step i64       120 payload checksum u64
//   128 header checksum u64 (XXH3-64 of bytes 0..127); the rest is zero.
// The payload is element_count * dtype size bytes, zero-padded to a multiple of 4096.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor/dtype.h"

namespace zerosim {

enum class SwapTensorKind : uint32_t { kMaster = 1, kExpAvg = 2, kExpAvgSq = 3, kParams = 4, kGradients = 5 };
const char* swap_tensor_kind_name(SwapTensorKind kind);

struct SwapFileHeader {
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr uint64_t kHeaderBytes = 4096;

  std::string run_id;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t sub_group = 0;
  SwapTensorKind kind = SwapTensorKind::kMaster;
  uint64_t element_count = 0;
  DType dtype = DType::kFp32;
  int64_t optimizer_step = 0;
  uint64_t payload_checksum = 0;
};

// Bytes of header + payload, rounded up to 4096.
uint64_t swap_file_size_bytes(uint64_t element_count, DType dtype);

// File name inside the rank directory: "<kind>.subgroup-<i>.swp". A pure function of what the
// file holds; the directory is <nvme_path>/zerosim/<run id>/rank-<r>-of-<W>/.
std::string swap_file_name(SwapTensorKind kind, uint32_t sub_group);
std::string swap_rank_directory(const std::string& nvme_path, const std::string& run_id, int rank, int world_size);

uint64_t swap_payload_checksum(std::span<const std::byte> payload);

// Writes the header into the first 4096 bytes of `destination`.
void encode_swap_header(const SwapFileHeader& header, std::span<std::byte> destination);

// Decodes and checks a header against what the caller expects (everything but the payload
// checksum, which the caller checks against the payload). Errors name the path and the field
// with the expected and found values.
Status check_swap_header(std::span<const std::byte> source, const SwapFileHeader& expected, const std::string& path,
                         SwapFileHeader& found);

}  // namespace zerosim
