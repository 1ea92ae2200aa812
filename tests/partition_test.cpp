// ZeRO-3 partition layout: ceil(N/W) partitions, padding, ranks holding only padding,
// greedy sub-groups over per-rank partition sizes (docs/deepspeed-semantics.md §1.2, §1.3).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/zero/partition.h"

namespace zerosim {
namespace {

std::vector<ParameterInfo> parameters_of_sizes(const std::vector<int64_t>& sizes) {
  std::vector<ParameterInfo> parameters;
  for (size_t i = 0; i < sizes.size(); ++i) {
    parameters.push_back({"p" + std::to_string(i), {sizes[i]}, sizes[i], static_cast<int64_t>(i / 2)});
  }
  return parameters;
}

TEST(Partition, CeilDivisionAndPaddingOnTheLastRanks) {
  const PartitionLayout layout = make_partition_layout(parameters_of_sizes({10, 3}), 4, 1000);
  ASSERT_EQ(layout.parameters.size(), 2u);
  const ParameterPartition& ten = layout.parameters[0];
  EXPECT_EQ(ten.partition_size, 3);  // ceil(10/4)
  EXPECT_EQ(ten.owned_count(0), 3);
  EXPECT_EQ(ten.owned_count(2), 3);
  EXPECT_EQ(ten.owned_count(3), 1);  // elements 9..9, two padding slots
  EXPECT_EQ(ten.owned_begin(3), 9);
  const ParameterPartition& three = layout.parameters[1];
  EXPECT_EQ(three.partition_size, 1);
  EXPECT_EQ(three.owned_count(3), 0);  // a rank that holds only padding of it
  EXPECT_EQ(three.owned_begin(3), 3);
  EXPECT_EQ(three.flat_offset, 3);
  EXPECT_EQ(layout.flat_element_count, 4);
}

TEST(Partition, SubGroupsCloseOnceTheSumReachesTheSize) {
  // Per-rank sizes at W=2: 5, 2, 4, 1. Sub-group size 6: {5,2} reaches 7 >= 6, then {4,1}.
  const PartitionLayout layout = make_partition_layout(parameters_of_sizes({10, 3, 8, 1}), 2, 6);
  ASSERT_EQ(layout.sub_groups.size(), 2u);
  EXPECT_EQ(layout.sub_groups[0].first_parameter, 0);
  EXPECT_EQ(layout.sub_groups[0].end_parameter, 2);
  EXPECT_EQ(layout.sub_groups[0].element_count, 7);
  EXPECT_EQ(layout.sub_groups[1].flat_offset, 7);
  EXPECT_EQ(layout.sub_groups[1].element_count, 5);
  // A huge sub_group_size gives one sub-group.
  EXPECT_EQ(make_partition_layout(parameters_of_sizes({10, 3, 8, 1}), 2, 1000000000).sub_groups.size(), 1u);
  // Size 1: one per parameter.
  EXPECT_EQ(make_partition_layout(parameters_of_sizes({10, 3, 8, 1}), 2, 1).sub_groups.size(), 4u);
}

RC_GTEST_PROP(PartitionProperty, OwnedRangesTileEveryParameterAndSubGroupsTileTheFlatBuffer, ()) {
  const auto sizes = *rc::gen::nonEmpty(rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(1, 300)));
  const int world_size = *rc::gen::inRange(1, 65);
  const int64_t sub_group_size = *rc::gen::inRange<int64_t>(1, 400);
  const PartitionLayout layout = make_partition_layout(parameters_of_sizes(sizes), world_size, sub_group_size);
  int64_t flat = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const ParameterPartition& partition = layout.parameters[p];
    RC_ASSERT(partition.flat_offset == flat);
    RC_ASSERT(partition.partition_size * world_size >= sizes[p]);
    RC_ASSERT(partition.partition_size * world_size < sizes[p] + world_size);
    int64_t next = 0;
    for (int rank = 0; rank < world_size; ++rank) {
      RC_ASSERT(partition.owned_begin(rank) == next);
      RC_ASSERT(partition.owned_count(rank) >= 0 && partition.owned_count(rank) <= partition.partition_size);
      next += partition.owned_count(rank);
    }
    RC_ASSERT(next == sizes[p]);
    flat += partition.partition_size;
  }
  RC_ASSERT(layout.flat_element_count == flat);
  int64_t covered = 0;
  for (const SubGroup& group : layout.sub_groups) {
    RC_ASSERT(group.flat_offset == covered);
    covered += group.element_count;
  }
  RC_ASSERT(covered == flat);
}

}  // namespace
}  // namespace zerosim
