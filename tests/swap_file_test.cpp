// Swap file headers: a round trip, and every field that can belong to another run, rank,
// sub-group, tensor or step is refused with the file and the field named.
#include <gtest/gtest.h>

#include <vector>

#include "core/swap/swap_file.h"

namespace zerosim {
namespace {

SwapFileHeader sample_header() {
  SwapFileHeader header;
  header.run_id = "run-abc";
  header.rank = 2;
  header.world_size = 4;
  header.sub_group = 7;
  header.kind = SwapTensorKind::kExpAvg;
  header.element_count = 1000;
  header.dtype = DType::kFp32;
  header.optimizer_step = 42;
  header.payload_checksum = 0x1234;
  return header;
}

TEST(SwapFile, HeaderRoundTrips) {
  std::vector<std::byte> bytes(4096);
  encode_swap_header(sample_header(), bytes);
  SwapFileHeader found;
  ASSERT_TRUE(check_swap_header(bytes, sample_header(), "/x/f.swp", found).ok());
  EXPECT_EQ(found.run_id, "run-abc");
  EXPECT_EQ(found.payload_checksum, 0x1234u);
  EXPECT_EQ(found.optimizer_step, 42);
}

TEST(SwapFile, EveryMismatchNamesTheFileAndTheField) {
  std::vector<std::byte> bytes(4096);
  encode_swap_header(sample_header(), bytes);
  struct Case {
    const char* field;
    void (*change)(SwapFileHeader&);
  };
  const Case cases[] = {
      {"run id", [](SwapFileHeader& h) { h.run_id = "run-other"; }},
      {"rank", [](SwapFileHeader& h) { h.rank = 3; }},
      {"world size", [](SwapFileHeader& h) { h.world_size = 8; }},
      {"sub-group", [](SwapFileHeader& h) { h.sub_group = 6; }},
      {"tensor", [](SwapFileHeader& h) { h.kind = SwapTensorKind::kExpAvgSq; }},
      {"element count", [](SwapFileHeader& h) { h.element_count = 999; }},
      {"dtype", [](SwapFileHeader& h) { h.dtype = DType::kBf16; }},
      {"optimizer step", [](SwapFileHeader& h) { h.optimizer_step = 43; }},
  };
  for (const Case& test_case : cases) {
    SwapFileHeader expected = sample_header();
    test_case.change(expected);
    SwapFileHeader found;
    Status status = check_swap_header(bytes, expected, "/x/f.swp", found);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << test_case.field;
    EXPECT_NE(status.message().find("/x/f.swp"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(test_case.field), std::string::npos) << status.message();
  }
}

TEST(SwapFile, CorruptionIsDataLoss) {
  std::vector<std::byte> bytes(4096);
  encode_swap_header(sample_header(), bytes);
  SwapFileHeader found;
  std::vector<std::byte> flipped = bytes;
  flipped[100] ^= std::byte{1};
  Status status = check_swap_header(flipped, sample_header(), "/x/f.swp", found);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("header checksum"), std::string::npos);
  std::vector<std::byte> zeros(4096);  // a file of zeros (DeepSpeed's raw swap file, say)
  status = check_swap_header(zeros, sample_header(), "/x/f.swp", found);
  EXPECT_NE(status.message().find("not a zerosim swap file"), std::string::npos);
}

TEST(SwapFile, NamesAndSizesArePure) {
  EXPECT_EQ(swap_file_name(SwapTensorKind::kMaster, 3), "master.subgroup-3.swp");
  EXPECT_EQ(swap_rank_directory("/nvme", "run-1", 2, 4), "/nvme/zerosim/run-1/rank-2-of-4");
  EXPECT_EQ(swap_file_size_bytes(1, DType::kFp32), 8192u);
  EXPECT_EQ(swap_file_size_bytes(1024, DType::kFp32), 8192u);
  EXPECT_EQ(swap_file_size_bytes(1025, DType::kFp32), 12288u);
}

}  // namespace
}  // namespace zerosim
