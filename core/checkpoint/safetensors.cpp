#include "core/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/config/ds_config.h"

namespace zerosim {

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "F32";
    case DType::kFp16: return "F16";
    case DType::kBf16: return "BF16";
  }
  return "F32";
}

const SafetensorsEntry* SafetensorsIndex::find(const std::string& name) const {
  for (const SafetensorsEntry& entry : entries) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

Result<std::vector<std::byte>> encode_safetensors_header(const std::string& path,
                                                         const std::vector<SafetensorsTensorSpec>& tensors,
                                                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const SafetensorsTensorSpec& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__" || !names.insert(tensor.name).second) {
      return invalid_argument("safetensors " + path + ": tensor name '" + tensor.name + "' is empty, reserved or repeated");
    }
    uint64_t elements = 1;
    for (int64_t dimension : tensor.shape) {
      if (dimension < 0) return invalid_argument("safetensors " + path + ": tensor " + tensor.name + " has a negative dimension");
      elements *= static_cast<uint64_t>(dimension);
    }
    const uint64_t size_bytes = elements * dtype_size_bytes(tensor.dtype);
    header[tensor.name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + size_bytes}}};
    offset += size_bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::vector<std::byte> encoded(8 + header_text.size());
  const uint64_t header_length = header_text.size();
  for (int i = 0; i < 8; ++i) encoded[static_cast<size_t>(i)] = static_cast<std::byte>(header_length >> (8 * i));
  std::memcpy(encoded.data() + 8, header_text.data(), header_text.size());
  return encoded;
}

Status write_safetensors(Disk& disk, const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata, bool sync) {
  std::vector<SafetensorsTensorSpec> specs;
  uint64_t data_bytes = 0;
  for (const SafetensorsTensor& tensor : tensors) {
    uint64_t elements = 1;
    for (int64_t dimension : tensor.shape) elements *= static_cast<uint64_t>(std::max<int64_t>(dimension, 0));
    if (elements * dtype_size_bytes(tensor.dtype) != tensor.data.size()) {
      return invalid_argument("safetensors " + path + ": tensor " + tensor.name + " has " +
                              std::to_string(tensor.data.size()) + " bytes for " + std::to_string(elements) +
                              " elements of " + safetensors_dtype_name(tensor.dtype));
    }
    specs.push_back({tensor.name, tensor.dtype, tensor.shape});
    data_bytes += tensor.data.size();
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::byte> content, encode_safetensors_header(path, specs, metadata));
  // Data in the order of `tensors`, which is the order of the offsets in the header.
  size_t at = content.size();
  content.resize(content.size() + data_bytes);
  for (const SafetensorsTensor& tensor : tensors) {
    if (!tensor.data.empty()) std::memcpy(content.data() + at, tensor.data.data(), tensor.data.size());
    at += tensor.data.size();
  }
  return write_whole_file(disk, path, content, sync);
}

Result<SafetensorsIndex> read_safetensors_index(Disk& disk, const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t file_size, file->size_bytes());
  auto bad = [&](const std::string& what) { return data_loss("safetensors " + path + ": " + what); };
  if (file_size < 8) return bad("file of " + std::to_string(file_size) + " bytes has no header length");
  std::byte length_bytes[8];
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(0, length_bytes));
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  // Bounded before any allocation.
  if (header_length > kMaxSafetensorsHeaderBytes || header_length > file_size - 8) {
    return bad("header length " + std::to_string(header_length) + " exceeds the file (" + std::to_string(file_size) +
               " bytes) or the 100 MB limit");
  }
  std::string header_text(header_length, '\0');
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(8, std::as_writable_bytes(std::span<char>(header_text))));
  ZEROSIM_RETURN_IF_ERROR(file->close());

  // Duplicate names would otherwise be merged silently by the JSON parser.
  std::set<std::string> seen_names;
  std::string duplicate;
  const nlohmann::json::parser_callback_t check_duplicates = [&](int depth, nlohmann::json::parse_event_t event,
                                                                 nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
      if (!seen_names.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  // A safetensors header is two levels deep; anything much deeper is hostile (the parser recurses).
  {
    Status nesting = check_json_nesting(header_text, 8, "safetensors " + path);
    if (!nesting.ok()) return nesting;
  }
  nlohmann::json header = nlohmann::json::parse(header_text, check_duplicates, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  if (!duplicate.empty()) return bad("tensor '" + duplicate + "' appears twice in the header");

  SafetensorsIndex index;
  index.data_start_bytes = 8 + header_length;
  index.file_size_bytes = file_size;
  const uint64_t data_size = file_size - index.data_start_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) return bad("__metadata__." + key + " is not a string");
        index.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + name;
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
      return bad(where + ": needs dtype, shape and data_offsets");
    }
    SafetensorsEntry entry;
    entry.name = name;
    const nlohmann::json& dtype = value["dtype"];
    if (dtype == "F32") entry.dtype = DType::kFp32;
    else if (dtype == "F16") entry.dtype = DType::kFp16;
    else if (dtype == "BF16") entry.dtype = DType::kBf16;
    else return bad(where + ": dtype " + dtype.dump() + " is not F32, F16 or BF16");
    if (!value["shape"].is_array()) return bad(where + ": shape is not a list");
    uint64_t elements = 1;
    for (const nlohmann::json& dimension : value["shape"]) {
      if (!dimension.is_number_unsigned()) return bad(where + ": shape has a non-integer or negative dimension");
      const uint64_t size = dimension.get<uint64_t>();
      if (size != 0 && elements > data_size / size) return bad(where + ": shape describes more bytes than the file holds");
      elements *= size;
      entry.shape.push_back(static_cast<int64_t>(size));
    }
    const nlohmann::json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return bad(where + ": data_offsets is not [begin, end]");
    }
    entry.begin_bytes = offsets[0].get<uint64_t>();
    entry.end_bytes = offsets[1].get<uint64_t>();
    if (entry.end_bytes < entry.begin_bytes || entry.end_bytes > data_size) {
      return bad(where + ": data_offsets [" + std::to_string(entry.begin_bytes) + ", " + std::to_string(entry.end_bytes) +
                 "] outside the data buffer of " + std::to_string(data_size) + " bytes");
    }
    if (entry.end_bytes - entry.begin_bytes != elements * dtype_size_bytes(entry.dtype)) {
      return bad(where + ": " + std::to_string(entry.end_bytes - entry.begin_bytes) + " bytes for " +
                 std::to_string(elements) + " elements of " + safetensors_dtype_name(entry.dtype));
    }
    index.entries.push_back(std::move(entry));
  }
  std::sort(index.entries.begin(), index.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin_bytes < b.begin_bytes; });
  uint64_t expected_begin = 0;
  for (const SafetensorsEntry& entry : index.entries) {
    if (entry.begin_bytes != expected_begin) {
      return bad("tensor " + entry.name + " starts at " + std::to_string(entry.begin_bytes) + ", expected " +
                 std::to_string(expected_begin) + " (tensors overlap or leave a gap)");
    }
    expected_begin = entry.end_bytes;
  }
  if (expected_begin != data_size) {
    return bad("the tensors cover " + std::to_string(expected_begin) + " of the " + std::to_string(data_size) +
               " data bytes (file truncated or padded)");
  }
  return index;
}

Result<std::vector<std::byte>> read_safetensors_tensor(Disk& disk, const std::string& path,
                                                       const SafetensorsIndex& index, const std::string& name) {
  const SafetensorsEntry* entry = index.find(name);
  if (entry == nullptr) return not_found("safetensors " + path + ": no tensor named " + name);
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  std::vector<std::byte> data(entry->end_bytes - entry->begin_bytes);
  ZEROSIM_RETURN_IF_ERROR(file->read_exact(index.data_start_bytes + entry->begin_bytes, data));
  ZEROSIM_RETURN_IF_ERROR(file->close());
  return data;
}

}  // namespace zerosim
