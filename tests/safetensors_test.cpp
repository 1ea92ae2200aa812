// Safetensors shards: a round trip, and every way a hostile or damaged header can lie is
// refused with the file and the tensor or field named, before anything large is allocated.
#include <gtest/gtest.h>

#include <cstring>

#include "core/checkpoint/safetensors.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

std::vector<std::byte> raw_file(const std::string& header) {
  std::vector<std::byte> bytes(8 + header.size());
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<std::byte>(length >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  // Writes `header` followed by `data_bytes` zero bytes and returns the reader's status.
  Status read_raw(const std::string& header, size_t data_bytes) {
    std::vector<std::byte> bytes = raw_file(header);
    bytes.resize(bytes.size() + data_bytes);
    const std::string path = directory_.path() + "/raw.safetensors";
    EXPECT_TRUE(write_whole_file(*disk_, path, bytes, false).ok());
    return read_safetensors_index(*disk_, path).status();
  }

  TestDirectory directory_;
  std::unique_ptr<Disk> disk_ = make_posix_disk();
};

TEST_F(SafetensorsTest, RoundTripWithMetadata) {
  const std::vector<float> weight = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1.0f};
  const std::vector<uint16_t> bias = {0x3c00, 0xc000};
  const std::string path = directory_.path() + "/shard.safetensors";
  ASSERT_TRUE(write_safetensors(*disk_, path,
                                {{"layers.0.weight", DType::kFp32, {2, 3}, std::as_bytes(std::span(weight))},
                                 {"layers.0.bias", DType::kFp16, {2}, std::as_bytes(std::span(bias))},
                                 {"empty", DType::kBf16, {0}, {}}},
                                {{"format", "zerosim"}, {"rank", "3"}}, true)
                  .ok());
  Result<SafetensorsIndex> index = read_safetensors_index(*disk_, path);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->metadata.at("rank"), "3");
  ASSERT_NE(index->find("layers.0.bias"), nullptr);
  EXPECT_EQ(index->find("layers.0.bias")->dtype, DType::kFp16);
  EXPECT_EQ(index->find("layers.0.weight")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(index->data_start_bytes % 8, 0u);
  Result<std::vector<std::byte>> weight_back = read_safetensors_tensor(*disk_, path, *index, "layers.0.weight");
  ASSERT_TRUE(weight_back.ok());
  EXPECT_EQ(std::memcmp(weight_back->data(), weight.data(), weight_back->size()), 0);
  EXPECT_EQ(read_safetensors_tensor(*disk_, path, *index, "nope").status().code(), StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, HostileHeadersAreRefusedWithTheFieldNamed) {
  struct Case {
    const char* header;
    size_t data_bytes;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
       16, "appears twice"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12, "overlap or leave a gap"},
      {R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8, "dtype \"I64\""},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "8 bytes for 3 elements"},
      {R"({"a": {"dtype": "F32", "shape": [1152921504606846976], "data_offsets": [0, 8]}})", 8, "more bytes than the file"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "outside the data buffer"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12, "cover 4 of the 12"},
      {R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "negative"},
      {R"({"a": {"dtype": "F32", "shape": [1]}})", 4, "needs dtype, shape and data_offsets"},
      {R"(["not", "an", "object"])", 0, "not a JSON object"},
      {R"({"__metadata__": {"k": 1}})", 0, "__metadata__.k"},
  };
  for (const Case& test_case : cases) {
    Status status = read_raw(test_case.header, test_case.data_bytes);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << test_case.header;
    EXPECT_NE(status.message().find(test_case.message_part), std::string::npos)
        << test_case.header << " -> " << status.message();
    EXPECT_NE(status.message().find("raw.safetensors"), std::string::npos) << status.message();
  }
}

TEST_F(SafetensorsTest, AnAbsurdHeaderLengthIsRefusedBeforeAllocating) {
  std::vector<std::byte> bytes(16, std::byte{0});
  bytes[7] = std::byte{0x10};  // 2^60
  const std::string path = directory_.path() + "/huge.safetensors";
  ASSERT_TRUE(write_whole_file(*disk_, path, bytes, false).ok());
  Status status = read_safetensors_index(*disk_, path).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("exceeds the file"), std::string::npos) << status.message();
  std::vector<std::byte> tiny(3);
  ASSERT_TRUE(write_whole_file(*disk_, path, tiny, false).ok());
  EXPECT_NE(read_safetensors_index(*disk_, path).status().message().find("no header length"), std::string::npos);
}

TEST_F(SafetensorsTest, TheWriterRefusesInconsistentTensors) {
  const std::vector<float> three = {1, 2, 3};
  const std::string path = directory_.path() + "/w.safetensors";
  Status status = write_safetensors(*disk_, path, {{"x", DType::kFp32, {2}, std::as_bytes(std::span(three))}}, {}, false);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  status = write_safetensors(*disk_, path,
                             {{"x", DType::kFp32, {3}, std::as_bytes(std::span(three))},
                              {"x", DType::kFp32, {3}, std::as_bytes(std::span(three))}},
                             {}, false);
  EXPECT_NE(status.message().find("repeated"), std::string::npos);
}

}  // namespace
}  // namespace zerosim
