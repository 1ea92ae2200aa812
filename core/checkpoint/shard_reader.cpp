#include "core/checkpoint/shard_reader.h"

#include <algorithm>

namespace zerosim {

CheckpointShardReader::CheckpointShardReader(Disk& disk, std::string tag_directory, const CheckpointManifest& manifest,
                                             const CheckpointIoOptions& io_options)
    : disk_(disk), tag_directory_(std::move(tag_directory)), manifest_(manifest), io_options_(io_options) {
  shards_.resize(manifest_.shards.size());
  streams_.resize(manifest_.shards.size());
}

DType CheckpointShardReader::state_dtype(CheckpointState state) const {
  return state == CheckpointState::kParam ? manifest_.precision : DType::kFp32;
}

std::string CheckpointShardReader::shard_path(int rank) const {
  ZEROSIM_CHECK(rank >= 0 && static_cast<size_t>(rank) < manifest_.shards.size(), "shard rank out of range");
  return tag_directory_ + "/" + manifest_.shards[static_cast<size_t>(rank)].file;
}

std::vector<std::string> CheckpointShardReader::notes() const {
  std::vector<std::string> notes = notes_;
  for (const auto& stream : streams_) {
    if (stream != nullptr && !stream->reader->note().empty()) notes.push_back(stream->reader->note());
  }
  return notes;
}

Result<SafetensorsIndex> CheckpointShardReader::checked_index(int rank) {
  const std::string path = shard_path(rank);
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk_.exists(path));
  if (!exists) return data_loss("missing shard " + path + " (rank " + std::to_string(rank) + " of the manifest)");
  ZEROSIM_ASSIGN_OR_RETURN(uint64_t size, [&]() -> Result<uint64_t> {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(path, FileOpenOptions{}));
    return file->size_bytes();
  }());
  // A size that differs is refused before anything is read; the checksum waits for the pass.
  if (size != manifest_.shards[static_cast<size_t>(rank)].size_bytes) {
    ZEROSIM_RETURN_IF_ERROR(check_size_and_checksum(rank, size, ""));
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
  return index;
}

Result<CheckpointShardReader::ShardStream*> CheckpointShardReader::stream(int rank) {
  std::unique_ptr<ShardStream>& slot = streams_[static_cast<size_t>(rank)];
  if (slot != nullptr) return slot.get();
  ZEROSIM_CHECK(!shards_[static_cast<size_t>(rank)].has_value(), "a shard is read in order or at random, not both");
  const std::string path = shard_path(rank);
  ZEROSIM_ASSIGN_OR_RETURN(SafetensorsIndex index, checked_index(rank));
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<ParallelFileReader> reader,
                           ParallelFileReader::open(disk_, path, index.file_size_bytes, io_options_));
  slot = std::make_unique<ShardStream>(ShardStream{std::move(reader), std::move(index)});
  return slot.get();
}

Status CheckpointShardReader::read_stream_at(int rank, const std::string& tensor, uint64_t offset_bytes,
                                             std::span<std::byte> destination) {
  ZEROSIM_ASSIGN_OR_RETURN(ShardStream * open, stream(rank));
  ParallelFileReader& reader = *open->reader;
  // Offsets that go back are a header that puts the tensors in another order than the writer's
  // (damage: its checksum fails too), refused before its bytes reach the state.
  if (offset_bytes < reader.position()) {
    return data_loss("shard " + reader.path() + ": tensor " + tensor + " at byte " + std::to_string(offset_bytes) +
                     " lies before byte " + std::to_string(reader.position()) +
                     ", where the shard's data order has already reached (a damaged header)");
  }
  ZEROSIM_RETURN_IF_ERROR(reader.skip(offset_bytes - reader.position()));
  return reader.read(destination);
}

Status CheckpointShardReader::read_fragments(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                                             std::span<std::byte> destination, const PieceReader& read_piece) {
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
    ZEROSIM_RETURN_IF_ERROR(read_piece(source, name, static_cast<uint64_t>(position - fragment.global_offset) * element_bytes,
                                       destination.subspan(static_cast<size_t>(position - begin) * element_bytes,
                                                           static_cast<size_t>(end - position) * element_bytes)));
    position = end;
  }
  return Status();
}

Status CheckpointShardReader::read_in_order(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                                            std::span<std::byte> destination) {
  return read_fragments(parameter, state, begin, count, destination,
                        [&](int source, const std::string& name, uint64_t offset_in_tensor, std::span<std::byte> piece) {
                          ZEROSIM_ASSIGN_OR_RETURN(ShardStream * open, stream(source));
                          const SafetensorsEntry* entry = open->index.find(name);
                          ZEROSIM_CHECK(entry != nullptr, "checked shard lacks a tensor");
                          return read_stream_at(source, name,
                                                open->index.data_start_bytes + entry->begin_bytes + offset_in_tensor, piece);
                        });
}

Status CheckpointShardReader::read_buffer_in_order(int rank, size_t buffer, std::span<float> destination) {
  ZEROSIM_CHECK(buffer < manifest_.buffers.size(), "a buffer of the manifest");
  const std::string name = manifest_.buffers[buffer].name + "/buffer";
  ZEROSIM_ASSIGN_OR_RETURN(ShardStream * open, stream(rank));
  const SafetensorsEntry* entry = open->index.find(name);
  ZEROSIM_CHECK(entry != nullptr, "checked shard lacks a buffer");
  ZEROSIM_CHECK(destination.size_bytes() == entry->end_bytes - entry->begin_bytes, "buffer destination size");
  return read_stream_at(rank, name, open->index.data_start_bytes + entry->begin_bytes, std::as_writable_bytes(destination));
}

Status CheckpointShardReader::finish_stream(int rank, ShardStream& open) {
  ParallelFileReader& reader = *open.reader;
  ZEROSIM_RETURN_IF_ERROR(reader.skip(reader.size_bytes() - reader.position()));
  return check_size_and_checksum(rank, reader.position(), reader.checksum());
}

Status CheckpointShardReader::finish_in_order() {
  for (int rank = 0; rank < static_cast<int>(streams_.size()); ++rank) {
    if (ShardStream* open = streams_[static_cast<size_t>(rank)].get()) ZEROSIM_RETURN_IF_ERROR(finish_stream(rank, *open));
  }
  return Status();
}

Status CheckpointShardReader::verify_shard(int rank) {
  if (shards_[static_cast<size_t>(rank)].has_value()) return Status();  // verified when opened
  ZEROSIM_ASSIGN_OR_RETURN(ShardStream * open, stream(rank));
  return finish_stream(rank, *open);
}

Result<CheckpointShardReader::OpenShard*> CheckpointShardReader::shard(int rank) {
  std::optional<OpenShard>& slot = shards_[static_cast<size_t>(rank)];
  if (slot) return &*slot;
  ZEROSIM_CHECK(streams_[static_cast<size_t>(rank)] == nullptr, "a shard is read in order or at random, not both");
  // Verified whole (one parallel pass) before any of its bytes is used.
  ZEROSIM_RETURN_IF_ERROR(verify_shard(rank));
  ShardStream verified = std::move(*streams_[static_cast<size_t>(rank)]);
  if (!verified.reader->note().empty()) notes_.push_back(verified.reader->note());
  streams_[static_cast<size_t>(rank)].reset();
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk_.open(shard_path(rank), FileOpenOptions{}));
  slot.emplace(OpenShard{std::move(file), std::move(verified.index)});
  return &*slot;
}

Status CheckpointShardReader::read_buffer(int rank, size_t buffer, std::span<float> destination) {
  ZEROSIM_CHECK(buffer < manifest_.buffers.size(), "a buffer of the manifest");
  ZEROSIM_ASSIGN_OR_RETURN(OpenShard * open, shard(rank));
  const SafetensorsEntry* entry = open->index.find(manifest_.buffers[buffer].name + "/buffer");
  ZEROSIM_CHECK(entry != nullptr, "verified shard lacks a buffer");
  ZEROSIM_CHECK(destination.size_bytes() == entry->end_bytes - entry->begin_bytes, "buffer destination size");
  return open->file->read_exact(open->index.data_start_bytes + entry->begin_bytes, std::as_writable_bytes(destination));
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

Status CheckpointShardReader::read(int64_t parameter, CheckpointState state, int64_t begin, int64_t count,
                                   std::span<std::byte> destination) {
  return read_fragments(parameter, state, begin, count, destination,
                        [&](int source, const std::string& name, uint64_t offset_in_tensor, std::span<std::byte> piece) {
                          ZEROSIM_ASSIGN_OR_RETURN(OpenShard * open, shard(source));
                          const SafetensorsEntry* entry = open->index.find(name);
                          ZEROSIM_CHECK(entry != nullptr, "verified shard lacks a tensor");
                          return open->file->read_exact(
                              open->index.data_start_bytes + entry->begin_bytes + offset_in_tensor, piece);
                        });
}

}  // namespace zerosim
