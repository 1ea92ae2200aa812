#include "core/zero/partition.h"

#include <algorithm>

namespace zerosim {

int64_t ParameterPartition::owned_begin(int rank) const {
  return std::min(element_count, static_cast<int64_t>(rank) * partition_size);
}

int64_t ParameterPartition::owned_count(int rank) const {
  const int64_t end = std::min(element_count, (static_cast<int64_t>(rank) + 1) * partition_size);
  return end - owned_begin(rank);
}

PartitionLayout make_partition_layout(const std::vector<ParameterInfo>& parameters, int world_size,
                                      int64_t sub_group_size) {
  ZEROSIM_CHECK(world_size >= 1, "world size must be positive");
  ZEROSIM_CHECK(sub_group_size >= 1, "sub_group_size must be positive");
  PartitionLayout layout;
  layout.world_size = world_size;
  layout.sub_group_size = sub_group_size;
  int64_t flat_offset = 0;
  for (const ParameterInfo& info : parameters) {
    ParameterPartition partition;
    partition.element_count = info.element_count;
    partition.partition_size = (info.element_count + world_size - 1) / world_size;
    partition.flat_offset = flat_offset;
    partition.layer_index = info.layer_index;
    flat_offset += partition.partition_size;
    layout.parameters.push_back(partition);
  }
  layout.flat_element_count = flat_offset;

  SubGroup current;
  for (int64_t index = 0; index < static_cast<int64_t>(layout.parameters.size()); ++index) {
    const ParameterPartition& partition = layout.parameters[static_cast<size_t>(index)];
    if (current.end_parameter == current.first_parameter) {
      current.first_parameter = index;
      current.flat_offset = partition.flat_offset;
      current.element_count = 0;
    }
    current.end_parameter = index + 1;
    current.element_count += partition.partition_size;
    if (current.element_count >= sub_group_size || index + 1 == static_cast<int64_t>(layout.parameters.size())) {
      layout.sub_groups.push_back(current);
      current = SubGroup{};
      current.first_parameter = current.end_parameter = index + 1;
    }
  }

  for (int64_t index = 0; index < static_cast<int64_t>(layout.parameters.size()); ++index) {
    const ParameterPartition& partition = layout.parameters[static_cast<size_t>(index)];
    if (layout.layers.empty() || layout.layers.back().end_parameter != index ||
        layout.parameters[static_cast<size_t>(layout.layers.back().first_parameter)].layer_index !=
            partition.layer_index) {
      layout.layers.push_back(LayerRange{index, index, partition.flat_offset, 0});
    }
    layout.layers.back().end_parameter = index + 1;
    layout.layers.back().element_count += partition.partition_size;
  }
  return layout;
}

}  // namespace zerosim
