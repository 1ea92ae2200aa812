#include "core/swap/partition_swapper.h"

#include <algorithm>
#include <cstring>

namespace zerosim {

Result<std::unique_ptr<PartitionSwapper>> PartitionSwapper::create(Disk& disk, const PartitionSwapperOptions& options,
                                                           std::string* engine_note) {
  if (options.nvme_path.empty()) {
    return invalid_argument(std::string("nvme_path for the ") + swap_tensor_kind_name(options.kind) +
                            " swap files: required when the device is \"nvme\"");
  }
  ZEROSIM_RETURN_IF_ERROR(validate_async_io_options(options.aio));
  std::unique_ptr<PartitionSwapper> swapper(new PartitionSwapper(disk, options));
  const std::string path =
      swap_rank_directory(options.nvme_path, options.run_id, options.rank, options.world_size) + "/" +
      swap_tensor_kind_name(options.kind);
  ZEROSIM_ASSIGN_OR_RETURN(swapper->directory_, open_swap_directory(disk, path, options.run_id, engine_note));
  ZEROSIM_ASSIGN_OR_RETURN(swapper->queue_, disk.make_async_queue(options.aio, swapper->directory_.engine()));
  int64_t largest = 0;
  for (int64_t count : options.partition_element_counts) largest = std::max(largest, count);
  ZEROSIM_ASSIGN_OR_RETURN(swapper->staging_,
                           AlignedBuffer::allocate(swap_file_size_bytes(static_cast<uint64_t>(largest), options.dtype),
                                                   options.pin_memory));
  return swapper;
}

PartitionSwapper::~PartitionSwapper() {
  if (queue_) queue_->wait_all().ignore_error();
  if (directory_.lock) disk_.remove_tree(directory_.path).ignore_error();
}

std::string PartitionSwapper::path_of(int parameter) const {
  return directory_.path + "/" + swap_tensor_kind_name(options_.kind) + ".param-" + std::to_string(parameter) + ".swp";
}

SwapFileHeader PartitionSwapper::expected_header(int parameter, int64_t step) const {
  SwapFileHeader header;
  header.run_id = options_.run_id;
  header.rank = static_cast<uint32_t>(options_.rank);
  header.world_size = static_cast<uint32_t>(options_.world_size);
  header.sub_group = static_cast<uint32_t>(parameter);
  header.kind = options_.kind;
  header.element_count = static_cast<uint64_t>(options_.partition_element_counts[static_cast<size_t>(parameter)]);
  header.dtype = options_.dtype;
  header.optimizer_step = step;
  return header;
}

Status PartitionSwapper::transfer(int parameter, IoDirection direction, OpenMode mode) {
  FileOpenOptions open_options;
  open_options.mode = mode;
  open_options.direct_io = directory_.direct_io;
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path_of(parameter), open_options));
  const uint64_t file_bytes = swap_file_size_bytes(
      static_cast<uint64_t>(options_.partition_element_counts[static_cast<size_t>(parameter)]), options_.dtype);
  Status status = queue_->submit({file.get(), direction, 0, staging_.data(), file_bytes});
  Status waited = queue_->wait_all();  // always wait: the staging buffer is in use until then
  if (status.ok()) status = waited;
  Status closed = file->close();
  ZEROSIM_RETURN_IF_ERROR(status);
  return closed;
}

Status PartitionSwapper::write(int parameter, int64_t step, std::span<const std::byte> partition) {
  const uint64_t file_bytes = swap_file_size_bytes(
      static_cast<uint64_t>(options_.partition_element_counts[static_cast<size_t>(parameter)]), options_.dtype);
  ZEROSIM_CHECK(partition.size() ==
                    static_cast<size_t>(options_.partition_element_counts[static_cast<size_t>(parameter)]) *
                        dtype_size_bytes(options_.dtype),
                "param partition size");
  std::byte* payload = staging_.data() + SwapFileHeader::kHeaderBytes;
  std::memcpy(payload, partition.data(), partition.size());
  std::memset(payload + partition.size(), 0, file_bytes - SwapFileHeader::kHeaderBytes - partition.size());
  SwapFileHeader header = expected_header(parameter, step);
  header.payload_checksum = swap_payload_checksum(partition);
  encode_swap_header(header, staging_.bytes());
  return transfer(parameter, IoDirection::kWrite, OpenMode::kCreateReadWrite);
}

Status PartitionSwapper::read(int parameter, int64_t step, std::span<std::byte> partition) {
  ZEROSIM_RETURN_IF_ERROR(transfer(parameter, IoDirection::kRead, OpenMode::kReadOnly));
  const std::string path = path_of(parameter);
  SwapFileHeader found;
  ZEROSIM_RETURN_IF_ERROR(check_swap_header(staging_.bytes(), expected_header(parameter, step), path, found));
  const std::span<const std::byte> payload(staging_.data() + SwapFileHeader::kHeaderBytes, partition.size());
  if (swap_payload_checksum(payload) != found.payload_checksum) {
    return data_loss("swap file " + path + ": payload checksum mismatch (torn or corrupted write)");
  }
  std::memcpy(partition.data(), payload.data(), partition.size());
  return Status();
}

}  // namespace zerosim
