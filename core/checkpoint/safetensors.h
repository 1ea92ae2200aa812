// Safetensors files: the shard format of zerosim checkpoints, so that Python users can open
// a shard with the `safetensors` package.
//
// Layout (the format's specification): an 8-byte little-endian header length N, N bytes of
// JSON header {"<tensor>": {"dtype": "F32"|"F16"|"BF16", "shape": [...], "data_offsets":
// [begin, end]}, ..., "__metadata__": {"<key>": "<string>"}}, padded with spaces to a multiple
// of 8, then the data buffer; offsets are relative to the start of the data buffer.
//
// The reader trusts nothing: the header length is bounded by the file size (and 100 MB) before
// anything is allocated, the JSON must parse with no duplicate names, every dtype must be known,
// every tensor's byte size must equal its shape's element count times the dtype size, and the
// tensors must tile the data buffer exactly (sorted, contiguous, no overlap, no gap). Every
// error names the file and the tensor or field.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/env/disk.h"
#include "core/tensor/dtype.h"

namespace zerosim {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // little-endian elements
};

struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
};

// The 8-byte header length and the padded JSON header of a file whose data buffer holds these
// tensors back to back in this order: what a streaming writer emits before the data. `path`
// only names the file in errors.
Result<std::vector<std::byte>> encode_safetensors_header(const std::string& path,
                                                         const std::vector<SafetensorsTensorSpec>& tensors,
                                                         const std::map<std::string, std::string>& metadata);

// Writes the file (created or truncated) and, with `sync`, fsyncs it.
Status write_safetensors(Disk& disk, const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata, bool sync);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
  uint64_t begin_bytes = 0;  // relative to the data buffer
  uint64_t end_bytes = 0;
};

struct SafetensorsIndex {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start_bytes = 0;
  uint64_t file_size_bytes = 0;
  const SafetensorsEntry* find(const std::string& name) const;
};

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

// Reads and validates the header.
Result<SafetensorsIndex> read_safetensors_index(Disk& disk, const std::string& path);
// Reads one tensor's bytes.
Result<std::vector<std::byte>> read_safetensors_tensor(Disk& disk, const std::string& path,
                                                       const SafetensorsIndex& index, const std::string& name);

// "F32", "F16", "BF16".
const char* safetensors_dtype_name(DType dtype);

}  // namespace zerosim
