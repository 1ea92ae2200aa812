// The optimizer swapper: state survives the round trip through swap files, and every I/O
// failure, through FaultyDisk, ends in an error naming the file (never in silent zeros).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/swap/optimizer_swapper.h"
#include "faults/faulty_disk.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

OptimizerSwapperOptions swapper_options(const std::string& nvme_path) {
  OptimizerSwapperOptions options;
  options.nvme_path = nvme_path;
  options.run_id = "run-test";
  options.rank = 1;
  options.world_size = 2;
  options.sub_group_element_counts = {1500, 7};
  options.aio.block_size_bytes = 4096;
  options.aio.queue_depth = 4;
  options.buffer_count = 9;
  options.pipeline_read = true;
  options.pipeline_write = true;
  return options;
}

std::vector<float> ramp(size_t count, float start) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = start + static_cast<float>(i) * 0.25f;
  return values;
}

// Writes the initial state, then one "step" that adds 1 to master and sets the moments.
Status initialize_and_step(OptimizerSwapper& swapper) {
  ZEROSIM_RETURN_IF_ERROR(swapper.write_initial(0, ramp(1500, 1.0f)));
  ZEROSIM_RETURN_IF_ERROR(swapper.write_initial(1, ramp(7, -3.0f)));
  ZEROSIM_RETURN_IF_ERROR(swapper.prefetch(0, 0));
  for (int group = 0; group < 2; ++group) {
    ZEROSIM_ASSIGN_OR_RETURN(OptimizerSwapper::SubGroupState state, swapper.acquire(group, 0));
    if (group == 0) ZEROSIM_RETURN_IF_ERROR(swapper.prefetch(1, 0));
    for (size_t i = 0; i < state.master.size(); ++i) {
      state.master[i] += 1.0f;
      state.exp_avg[i] = 0.5f;
      state.exp_avg_sq[i] = static_cast<float>(i);
    }
    ZEROSIM_RETURN_IF_ERROR(swapper.release(group, 1));
  }
  return swapper.flush();
}

TEST(OptimizerSwapper, StateRoundTripsThroughTheFiles) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  std::string note;
  Result<std::unique_ptr<OptimizerSwapper>> swapper = OptimizerSwapper::create(*disk, swapper_options(directory.path()), &note);
  ASSERT_TRUE(swapper.ok()) << swapper.status().to_string();
  EXPECT_STREQ((*swapper)->engine_name(), "libaio");
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(0, 1);
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->master[10], 1.0f + 2.5f + 1.0f);
  EXPECT_EQ(state->exp_avg[1499], 0.5f);
  EXPECT_EQ(state->exp_avg_sq[1499], 1499.0f);
  ASSERT_TRUE((*swapper)->release(0, std::nullopt).ok());
  // Files are owner-only and live where the layout says.
  const std::string master_path = directory.path() + "/zerosim/run-test/rank-1-of-2/master.subgroup-0.swp";
  ASSERT_TRUE(std::filesystem::exists(master_path));
  EXPECT_EQ(std::filesystem::status(master_path).permissions() &
                (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
}

TEST(OptimizerSwapper, AStaleFileFromAnotherStepIsRefused) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  auto swapper = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok());
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  // Expecting step 2 (as after a lost write) while the files hold step 1: the seed report's
  // "swap files of another step copied back".
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(0, 2);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(state.status().message().find("optimizer step is 1, expected 2"), std::string::npos)
      << state.status().message();
  EXPECT_NE(state.status().message().find("master.subgroup-0.swp"), std::string::npos);
}

TEST(OptimizerSwapper, AFileOfAnotherRunIsRefused) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  OptimizerSwapperOptions other = swapper_options(directory.path());
  other.run_id = "run-other";
  auto other_swapper = OptimizerSwapper::create(*disk, other, nullptr);
  ASSERT_TRUE(other_swapper.ok());
  ASSERT_TRUE(initialize_and_step(**other_swapper).ok());
  auto swapper = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok());
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  // Copy the other run's exp_avg over ours, by hand, as the user in the seed report did.
  const std::string ours = directory.path() + "/zerosim/run-test/rank-1-of-2/exp_avg.subgroup-1.swp";
  std::filesystem::copy_file(directory.path() + "/zerosim/run-other/rank-1-of-2/exp_avg.subgroup-1.swp", ours,
                             std::filesystem::copy_options::overwrite_existing);
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(1, 1);
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find("run id is run-other, expected run-test"), std::string::npos)
      << state.status().message();
  EXPECT_NE(state.status().message().find(ours), std::string::npos);
}

TEST(OptimizerSwapper, AFileCutShortIsAShortRead) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  auto swapper = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok());
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  const std::string path = directory.path() + "/zerosim/run-test/rank-1-of-2/exp_avg_sq.subgroup-0.swp";
  std::filesystem::resize_file(path, 4096);
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(0, 1);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(state.status().message().find(path), std::string::npos) << state.status().message();
}

TEST(OptimizerSwapper, AVanishedSwapDirectoryIsNamed) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  auto swapper = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok());
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  std::filesystem::remove_all(directory.path() + "/zerosim");
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(0, 1);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), StatusCode::kNotFound);
  EXPECT_NE(state.status().message().find("master.subgroup-0.swp"), std::string::npos) << state.status().message();
}

TEST(OptimizerSwapper, ASecondSwapperOnTheSameDirectoryIsRefused) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  auto first = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(first.ok());
  auto second = OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("--run-id"), std::string::npos) << second.status().message();
  first->reset();
  EXPECT_TRUE(OptimizerSwapper::create(*disk, swapper_options(directory.path()), nullptr).ok());
}

TEST(OptimizerSwapper, TooFewBuffersNameTheKeyAndTheMinimum) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  OptimizerSwapperOptions options = swapper_options(directory.path());
  options.buffer_count = 4;
  auto swapper = OptimizerSwapper::create(*disk, options, nullptr);
  ASSERT_FALSE(swapper.ok());
  EXPECT_NE(swapper.status().message().find("offload_optimizer.buffer_count is 4"), std::string::npos);
  EXPECT_NE(swapper.status().message().find("at least 9"), std::string::npos) << swapper.status().message();
  options.pipeline_read = options.pipeline_write = false;
  options.buffer_count = 2;
  swapper = OptimizerSwapper::create(*disk, options, nullptr);
  ASSERT_FALSE(swapper.ok());
  EXPECT_NE(swapper.status().message().find("at least 3"), std::string::npos) << swapper.status().message();
}

struct FaultCase {
  const char* name;
  FaultRule rule;
  StatusCode code;
  const char* message_part;
};

void PrintTo(const FaultCase& fault, std::ostream* stream) { *stream << fault.name; }

class OptimizerSwapperFault : public ::testing::TestWithParam<FaultCase> {};

TEST_P(OptimizerSwapperFault, EndsInANamedError) {
  const FaultCase& fault = GetParam();
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  FaultyDisk disk(*real, {fault.rule});
  auto swapper = OptimizerSwapper::create(disk, swapper_options(directory.path()), nullptr);
  ASSERT_TRUE(swapper.ok()) << swapper.status().to_string();
  Status status = initialize_and_step(**swapper);
  if (status.ok()) {
    // A torn write reports success; the next read must catch it.
    Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(0, 1);
    status = state.ok() ? Status() : state.status();
  }
  EXPECT_EQ(disk.fired_counts()[0], 1) << fault.name;
  ASSERT_FALSE(status.ok()) << fault.name;
  EXPECT_EQ(status.code(), fault.code) << status.to_string();
  EXPECT_NE(status.message().find(fault.message_part), std::string::npos) << fault.name << ": " << status.message();
  EXPECT_NE(status.message().find("exp_avg.subgroup-0.swp"), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    EveryIoErrorPath, OptimizerSwapperFault,
    ::testing::Values(
        FaultCase{"eio_on_write", {"*/exp_avg.subgroup-0.swp", FaultOperation::kWrite, 2, FaultKind::kIoError, 0, 0},
                  StatusCode::kIoError, "at offset 0 length 12288"},
        FaultCase{"enospc_on_write", {"*/exp_avg.subgroup-0.swp", FaultOperation::kWrite, 1, FaultKind::kNoSpace, 0, 0},
                  StatusCode::kResourceExhausted, "No space left on device"},
        FaultCase{"short_write", {"*/exp_avg.subgroup-0.swp", FaultOperation::kWrite, 2, FaultKind::kShortWrite, 4096, 0},
                  StatusCode::kDataLoss, "4096 of 12288 bytes"},
        FaultCase{"torn_write", {"*/exp_avg.subgroup-0.swp", FaultOperation::kWrite, 2, FaultKind::kTornWrite, 8192, 0},
                  StatusCode::kDataLoss, "payload checksum mismatch"},
        FaultCase{"eio_on_read", {"*/exp_avg.subgroup-0.swp", FaultOperation::kRead, 1, FaultKind::kIoError, 0, 0},
                  StatusCode::kIoError, "read"},
        FaultCase{"eio_on_open", {"*/exp_avg.subgroup-0.swp", FaultOperation::kOpen, 2, FaultKind::kIoError, 0, 0},
                  StatusCode::kIoError, "open"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return std::string(info.param.name); });

TEST(OptimizerSwapper, RefusedODirectFallsBackToPreadPwriteWithANote) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  FaultyDisk disk(*real, {{"*", FaultOperation::kOpen, 0, FaultKind::kRefuseDirect, 0, 0}});
  std::string note;
  auto swapper = OptimizerSwapper::create(disk, swapper_options(directory.path()), &note);
  ASSERT_TRUE(swapper.ok()) << swapper.status().to_string();
  EXPECT_STREQ((*swapper)->engine_name(), "pread/pwrite");
  EXPECT_NE(note.find("O_DIRECT is refused"), std::string::npos) << note;
  ASSERT_TRUE(initialize_and_step(**swapper).ok());
  Result<OptimizerSwapper::SubGroupState> state = (*swapper)->acquire(1, 1);
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->master[6], -3.0f + 1.5f + 1.0f);
}

TEST(FaultyDisk, RulesCountOccurrencesPerMatchingOperation) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  FaultyDisk disk(*real, {{"*/b*", FaultOperation::kWrite, 2, FaultKind::kIoError, 0, 0}});
  std::vector<std::byte> data(10, std::byte{1});
  EXPECT_TRUE(write_whole_file(disk, directory.path() + "/a", data, false).ok());   // no match
  EXPECT_TRUE(write_whole_file(disk, directory.path() + "/b1", data, false).ok());  // 1st match
  Status second = write_whole_file(disk, directory.path() + "/b2", data, false);    // 2nd: fires
  EXPECT_EQ(second.code(), StatusCode::kIoError);
  EXPECT_NE(second.message().find("/b2"), std::string::npos);
  EXPECT_TRUE(write_whole_file(disk, directory.path() + "/b3", data, false).ok());  // 3rd: no
  EXPECT_EQ(disk.fired_counts(), std::vector<int64_t>{1});
}

TEST(FaultyDisk, RulesParseFromJsonWithNamedErrors) {
  auto rules = parse_fault_rules(nlohmann::json::parse(
      R"([{"path": "*/master.*", "op": "write", "occurrence": 3, "fault": "short_write", "bytes": 4096}])"));
  ASSERT_TRUE(rules.ok());
  EXPECT_EQ((*rules)[0].kind, FaultKind::kShortWrite);
  EXPECT_EQ((*rules)[0].occurrence, 3);
  auto bad = parse_fault_rules(nlohmann::json::parse(R"([{"op": "wrtie"}])"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fault rules[0].op"), std::string::npos);
  bad = parse_fault_rules(nlohmann::json::parse(R"([{"path": "*", "colour": 1}])"));
  EXPECT_NE(bad.status().message().find("colour"), std::string::npos);
}

}  // namespace
}  // namespace zerosim
