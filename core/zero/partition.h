// ZeRO-3 partitioning as DeepSpeed does it (docs/deepspeed-semantics.md §1.2, §1.3).
//
// Each parameter of N elements is split into W partitions of ceil(N/W) elements; rank r
// owns flat elements [r*ps, (r+1)*ps) of it, and the tail past N is padding that zerosim
// keeps at zero (DeepSpeed leaves it uninitialised; we zero it so checksums and digests
// are stable). When N < W, whole ranks hold only padding. A rank's flat buffer is the
// concatenation of its partitions in parameter order, so every parameter's partition sits
// at the same flat offset on every rank.
//
// Sub-groups are greedy runs over the per-rank partition sizes, closed once their sum
// reaches sub_group_size (so a sub-group may exceed it by one partition). The layout is a
// pure function of (parameter list, W, sub_group_size): never of process state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/mlp.h"

namespace zerosim {

struct ParameterPartition {
  int64_t element_count = 0;    // N, unpadded
  int64_t partition_size = 0;   // ceil(N / W)
  int64_t flat_offset = 0;      // offset of this parameter's partition in a rank's flat buffer
  int64_t layer_index = 0;

  // Elements of the parameter that rank `rank` really holds (the rest of its partition is padding).
  int64_t owned_begin(int rank) const;
  int64_t owned_count(int rank) const;
};

struct SubGroup {
  int64_t first_parameter = 0;  // [first_parameter, end_parameter) in parameter order
  int64_t end_parameter = 0;
  int64_t flat_offset = 0;
  int64_t element_count = 0;  // sum of partition sizes, padding included
};

struct LayerRange {
  int64_t first_parameter = 0;
  int64_t end_parameter = 0;
  int64_t flat_offset = 0;
  int64_t element_count = 0;  // per rank, padding included
};

struct PartitionLayout {
  int world_size = 1;
  int64_t sub_group_size = 0;
  std::vector<ParameterPartition> parameters;
  std::vector<SubGroup> sub_groups;
  std::vector<LayerRange> layers;
  int64_t flat_element_count = 0;  // per rank
};

PartitionLayout make_partition_layout(const std::vector<ParameterInfo>& parameters, int world_size,
                                      int64_t sub_group_size);

}  // namespace zerosim
