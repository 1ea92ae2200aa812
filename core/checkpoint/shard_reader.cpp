#include "core/checkpoint/shard_reader.h"

#include <algorithm>

namespace zerosim {

CheckpointShardReader::CheckpointShardReader(Disk& disk, std::string tag_directory, const CheckpointManifest& manifest)
    : disk_(disk), tag_directory_(std::move(tag_directory)), manifest_(manifest) {
  shards_.resize(manifest_.shards.size());
}

DType CheckpointShardReader::state_dtype(CheckpointState state) const {
  return state == CheckpointState::kParam ? manifest_.precision : DType::kFp32;
}

Status CheckpointShardReader::verify_shard(int rank) { return shard(rank).status(); }

Result<CheckpointShardReader::OpenShard*> CheckpointShardReader::shard(int rank) {
  return open_shard(rank, /*verify_checksum=*/true);
}

Result<CheckpointShardReader::OpenShard*> CheckpointShardReader::open_shard(int rank, bool verify_checksum) {
  ZEROSIM_CHECK(rank >= 0 && static_cast<size_t>(rank) < shards_.size(), "shard rank out of range");
  std::optional<OpenShard>& slot = shards_[static_cast<size_t>(rank)];
  if (slot) return &*slot;
  const ShardRecord& record = manifest_.shards[static_cast<size_t>(rank)];
  const std::string path = tag_directory_ + "/" + record.file;
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk_.exists(path));
  if (!exists) return data_loss("missing shard " + path + " (rank " + std::to_string(rank) + " of the manifest)");
  if (verify_checksum) {
    uint64_t size = 0;
    ZEROSIM_ASSIGN_OR_RETURN(std::string checksum, file_checksum(disk_, path, &size));
    ZEROSIM_RETURN_IF_ERROR(check_size_and_checksum(rank, size, checksum));
  }
  ZEROSIM_ASSIGN_OR_RETURN(SafetensorsIndex index, read_safetensors_index(disk_, path));
  // Exactly the tensors this rank owns, as the layout says.
  size_t expected_count = 0;
  for (size_t p = 0; p < manifest_.parameters.size(); ++p) {
    const ParameterInfo& parameter = manifest_.parameters[p];
    const Fragment fragment = owned_fragment(parameter.element_count, rank, manifest_.world_size);
    if (fragment.count == 0) continue;
    for (CheckpointState state : manifest_.stored_states(p)) {
      const std::string name = checkpoint_tensor_name(parameter.name, state);
      ++expected_count;
      const SafetensorsEntry* entry = index.find(name);
      if (entry == nullptr) return data_loss("shard " + path + ": tensor " + name + " is missing");
      if (entry->dtype != state_dtype(state) || entry->shape != std::vector<int64_t>{fragment.count}) {
        return data_loss("shard " + path + ": tensor " + name + ": expected " +
                         safetensors_dtype_name(state_dtype(state)) + " [" + std::to_string(fragment.count) +
                         "], found " + safetensors_dtype_name(entry->dtype) + " of " +
                         std::to_string(entry->shape.empty() ? 0 : entry->shape[0]) + " elements");
      }
      const auto metadata = index.metadata.find(name);
      nlohmann::json fragment_metadata =
          metadata == index.metadata.end() ? nlohmann::json()
                                           : nlohmann::json::parse(metadata->second, nullptr, /*allow_exceptions=*/false);
      const bool offset_matches = fragment_metadata.is_object() && fragment_metadata.contains("global_offset") &&
                                  fragment_metadata["global_offset"].is_number_integer() &&
                                  fragment_metadata["global_offset"].get<int64_t>() == fragment.global_offset;
      const bool shape_matches = fragment_metadata.is_object() && fragment_metadata.contains("global_shape") &&
                                 fragment_metadata["global_shape"] == nlohmann::json(parameter.shape);
      if (!offset_matches || !shape_matches) {
        return data_loss("shard " + path + ": __metadata__." + name + ": expected global_offset " +
                         std::to_string(fragment.global_offset) + " and global_shape " +
                         nlohmann::json(parameter.shape).dump() + ", found " +
                         (metadata == index.metadata.end() ? std::string("nothing") : metadata->second));
      }
    }
  }
  // And every persistent buffer, whole.
  for (const BufferInfo& buffer : manifest_.buffers) {
    const std::string name = buffer.name + "/buffer";
    ++expected_count;
    const SafetensorsEntry* entry = index.find(name);
    if (entry == nullptr) return data_loss("shard " + path + ": buffer " + name + " is missing");
    if (entry->dtype != DType::kFp32 || entry->shape != std::vector<int64_t>{buffer.element_count}) {
      return data_loss("shard " + path + ": buffer " + name + ": expected F32 [" + std::to_string(buffer.element_count) +
                       "], found " + safetensors_dtype_name(entry->dtype) + " of " +
                       std::to_string(entry->shape.empty() ? 0 : entry->shape[0]) + " elements");
    }
  }
  if (index.entries.size() != expected_count) {
    return data_loss("shard " + path + ": expected " + std::to_string(expected_count) + " tensors, found " +
                     std::to_string(index.entries.size()));
  }
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path, FileOpenOptions{}));
  slot.emplace(OpenShard{std::move(file), std::move(index)});
  return &*slot;
}

Status CheckpointShardReader::check_size_and_checksum(int rank, uint64_t size, const std::string& checksum) const {
  const ShardRecord& record = manifest_.shards[static_cast<size_t>(rank)];
  const std::string path = tag_directory_ + "/" + record.file;
  ZEROSIM_RETURN_IF_ERROR(check_shard_size(path, record, size));
  if (checksum != record.xxh3_128) {
    return data_loss("shard " + path + ": checksum mismatch: expected xxh3_128 " + record.xxh3_128 +
                     " (manifest), found " + checksum);
  }
  return Status();
}

Status CheckpointShardReader::begin_sequential(int rank) {
  ZEROSIM_CHECK(sequential_rank_ < 0, "one sequential read at a time");
  const ShardRecord& record = manifest_.shards[static_cast<size_t>(rank)];
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, [&]() -> Result<uint64_t> {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(tag_directory_ + "/" + record.file, FileOpenOptions{}));
    return file->size_bytes();
  }());
  // A size that differs is refused before anything is read; the checksum waits for the end.
  if (size != record.size_bytes) return check_size_and_checksum(rank, size, "");
  ZEROSIM_ASSIGN_OR_RETURN(OpenShard * open, open_shard(rank, /*verify_checksum=*/false));
  sequential_rank_ = rank;
  sequential_hash_ = std::make_unique<StreamingHash>();
  std::vector<std::byte> header(open->index.data_start_bytes);
  ZEROSIM_RETURN_IF_ERROR(open->file->read_exact(0, header));
  sequential_hash_->update(header);
  sequential_offset_ = open->index.data_start_bytes;
  return Status();
}

Status CheckpointShardReader::read_next(int64_t parameter, CheckpointState state, std::span<std::byte> destination) {
  return read_next_tensor(checkpoint_tensor_name(manifest_.parameters[static_cast<size_t>(parameter)].name, state),
                          destination);
}

Status CheckpointShardReader::read_next_buffer(size_t buffer, std::span<float> destination) {
  ZEROSIM_CHECK(buffer < manifest_.buffers.size(), "a buffer of the manifest");
  return read_next_tensor(manifest_.buffers[buffer].name + "/buffer", std::as_writable_bytes(destination));
}

Status CheckpointShardReader::read_buffer(int rank, size_t buffer, std::span<float> destination) {
  ZEROSIM_CHECK(buffer < manifest_.buffers.size(), "a buffer of the manifest");
  ZEROSIM_ASSIGN_OR_RETURN(OpenShard * open, shard(rank));
  const SafetensorsEntry* entry = open->index.find(manifest_.buffers[buffer].name + "/buffer");
  ZEROSIM_CHECK(entry != nullptr, "verified shard lacks a buffer");
  ZEROSIM_CHECK(destination.size_bytes() == entry->end_bytes - entry->begin_bytes, "buffer destination size");
  return open->file->read_exact(open->index.data_start_bytes + entry->begin_bytes, std::as_writable_bytes(destination));
}

Status CheckpointShardReader::read_next_tensor(const std::string& name, std::span<std::byte> destination) {
  ZEROSIM_CHECK(sequential_rank_ >= 0, "read_next outside a sequential read");
  OpenShard& open = *shards_[static_cast<size_t>(sequential_rank_)];
  const SafetensorsEntry* entry = open.index.find(name);
  ZEROSIM_CHECK(entry != nullptr, "verified shard lacks a tensor");
  // A header whose offsets put the tensors in another order than the writer's is damage (its
  // checksum, checked at the end, fails too): refused before anything is read into the state.
  if (open.index.data_start_bytes + entry->begin_bytes != sequential_offset_) {
    return data_loss("shard " + tag_directory_ + "/" + manifest_.shards[static_cast<size_t>(sequential_rank_)].file +
                     ": tensor " + name + " starts at byte " +
                     std::to_string(open.index.data_start_bytes + entry->begin_bytes) + ", where the shard's data order puts byte " +
                     std::to_string(sequential_offset_) + " (a damaged header)");
  }
  ZEROSIM_CHECK(destination.size() == entry->end_bytes - entry->begin_bytes, "read_next destination size");
  if (destination.size() >= kParallelReadMinimumBytes) {
    // Several reader threads, each a slice of the tensor straight into its destination (whose
    // pages they fault in side by side); every completion checked, a short read named.
    if (!read_queue_) {
      AsyncIoOptions options;
      options.block_size_bytes = int64_t{1} << 20;
      options.queue_depth = 8;
      options.intra_op_parallelism = kReaderThreads;
      ZEROSIM_ASSIGN_OR_RETURN(read_queue_, disk_.make_async_queue(options, Disk::AsyncEngine::kPreadPwrite));
    }
    IoRequest request;
    request.file = open.file.get();
    request.direction = IoDirection::kRead;
    request.offset_bytes = sequential_offset_;
    request.buffer = destination.data();
    request.length_bytes = destination.size();
    ZEROSIM_RETURN_IF_ERROR(read_queue_->submit(request));
    ZEROSIM_RETURN_IF_ERROR(read_queue_->wait_all());
  } else {
    ZEROSIM_RETURN_IF_ERROR(open.file->read_exact(sequential_offset_, destination));
  }
  sequential_hash_->update(destination);
  sequential_offset_ += destination.size();
  return Status();
}

Status CheckpointShardReader::finish_sequential() {
  ZEROSIM_CHECK(sequential_rank_ >= 0, "finish_sequential outside a sequential read");
  const int rank = sequential_rank_;
  sequential_rank_ = -1;
  OpenShard& open = *shards_[static_cast<size_t>(rank)];
  ZEROSIM_CHECK(sequential_offset_ == open.index.file_size_bytes, "the sequential read left data unread");
  return check_size_and_checksum(rank, sequential_offset_, sequential_hash_->hex());
}

Status CheckpointShardReader::read(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                                   std::span<std::byte> destination) {
  ZEROSIM_CHECK(parameter >= 0 && static_cast<size_t>(parameter) < manifest_.parameters.size(), "parameter index");
  const ParameterInfo& info = manifest_.parameters[static_cast<size_t>(parameter)];
  ZEROSIM_CHECK(begin >= 0 && count >= 0 && begin + count <= info.element_count, "range outside the parameter");
  const size_t element_bytes = dtype_size_bytes(state_dtype(state));
  ZEROSIM_CHECK(destination.size() == static_cast<size_t>(count) * element_bytes, "destination size");
  const std::span<const CheckpointState> stored = manifest_.stored_states(static_cast<size_t>(parameter));
  ZEROSIM_CHECK(std::find(stored.begin(), stored.end(), state) != stored.end(),
                "read of a state the checkpoint does not hold for the parameter");
  const std::string name = checkpoint_tensor_name(info.name, state);
  const int64_t partition_size = (info.element_count + manifest_.world_size - 1) / manifest_.world_size;
  int64_t position = begin;
  while (position < begin + count) {
    const int source = static_cast<int>(position / partition_size);
    const Fragment fragment = owned_fragment(info.element_count, source, manifest_.world_size);
    const int64_t end = std::min(begin + count, fragment.global_offset + fragment.count);
    ZEROSIM_ASSIGN_OR_RETURN(OpenShard * open, shard(source));
    const SafetensorsEntry* entry = open->index.find(name);
    ZEROSIM_CHECK(entry != nullptr, "verified shard lacks a tensor");
    const uint64_t offset = open->index.data_start_bytes + entry->begin_bytes +
                            static_cast<uint64_t>(position - fragment.global_offset) * element_bytes;
    ZEROSIM_RETURN_IF_ERROR(open->file->read_exact(
        offset, destination.subspan(static_cast<size_t>(position - begin) * element_bytes,
                                    static_cast<size_t>(end - position) * element_bytes)));
    position = end;
  }
  return Status();
}

}  // namespace zerosim
