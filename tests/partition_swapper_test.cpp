// The 16-bit parameter swapper: partitions round-trip, and stale, torn or unreadable files
// are errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/swap/partition_swapper.h"
#include "faults/faulty_disk.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

PartitionSwapperOptions param_options(const std::string& path) {
  PartitionSwapperOptions options;
  options.nvme_path = path;
  options.run_id = "run-params";
  options.rank = 0;
  options.world_size = 3;
  options.partition_element_counts = {5000, 1};
  options.dtype = DType::kBf16;
  options.aio.block_size_bytes = 4096;
  return options;
}

std::vector<std::byte> pattern_bytes(size_t size, unsigned char seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return bytes;
}

TEST(PartitionSwapper, PartitionsRoundTripAndTheDirectoryGoesAwayAfterwards) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  {
    auto swapper = PartitionSwapper::create(*disk, param_options(directory.path()), nullptr);
    ASSERT_TRUE(swapper.ok()) << swapper.status().to_string();
    const std::vector<std::byte> big = pattern_bytes(10000, 3), small = pattern_bytes(2, 9);
    ASSERT_TRUE((*swapper)->write(0, 4, big).ok());
    ASSERT_TRUE((*swapper)->write(1, 4, small).ok());
    std::vector<std::byte> back(10000);
    ASSERT_TRUE((*swapper)->read(0, 4, back).ok());
    EXPECT_EQ(back, big);
    std::vector<std::byte> small_back(2);
    ASSERT_TRUE((*swapper)->read(1, 4, small_back).ok());
    EXPECT_EQ(small_back, small);
    // The state of another step is refused.
    Status stale = (*swapper)->read(0, 5, back);
    EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(stale.message().find("params.param-0.swp"), std::string::npos) << stale.message();
    EXPECT_NE(stale.message().find("optimizer step is 4, expected 5"), std::string::npos) << stale.message();
  }
  EXPECT_FALSE(std::filesystem::exists(directory.path() + "/zerosim/run-params/rank-0-of-3/params"));
}

TEST(PartitionSwapper, TornAndFailedTransfersAreNamedErrors) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  FaultyDisk disk(*real, {{"*/params.param-0.swp", FaultOperation::kWrite, 2, FaultKind::kTornWrite, 4096, 0},
                          {"*/params.param-1.swp", FaultOperation::kRead, 1, FaultKind::kIoError, 0, 0}});
  auto swapper = PartitionSwapper::create(disk, param_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok());
  const std::vector<std::byte> first = pattern_bytes(10000, 1), second = pattern_bytes(10000, 2);
  ASSERT_TRUE((*swapper)->write(0, 1, first).ok());
  ASSERT_TRUE((*swapper)->write(0, 2, second).ok());  // torn: only the first 4096 bytes land
  std::vector<std::byte> back(10000);
  Status torn = (*swapper)->read(0, 2, back);
  ASSERT_FALSE(torn.ok());
  EXPECT_NE(torn.message().find("params.param-0.swp"), std::string::npos) << torn.message();
  ASSERT_TRUE((*swapper)->write(1, 1, pattern_bytes(2, 5)).ok());
  std::vector<std::byte> small(2);
  Status failed = (*swapper)->read(1, 1, small);
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  EXPECT_NE(failed.message().find("params.param-1.swp"), std::string::npos) << failed.message();
}

}  // namespace
}  // namespace zerosim
