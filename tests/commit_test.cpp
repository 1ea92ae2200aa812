// The commit protocol's pieces: atomic durable writes and the `latest` pointer.
#include <gtest/gtest.h>

#include "core/checkpoint/commit.h"
#include "faults/faulty_disk.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

TEST(Commit, TagsCannotLeaveTheCheckpointDirectory) {
  EXPECT_TRUE(validate_checkpoint_tag("global_step120").ok());
  EXPECT_TRUE(validate_checkpoint_tag("step-1.final_A").ok());
  for (const char* hostile : {"", ".", "..", "../x", "/abs", "a/b", "a b", "tag\n"}) {
    EXPECT_EQ(validate_checkpoint_tag(hostile).code(), StatusCode::kInvalidArgument) << hostile;
  }
  EXPECT_FALSE(validate_checkpoint_tag(std::string(129, 'a')).ok());
}

TEST(Commit, LatestMovesAtomicallyAndReadsBack) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  EXPECT_EQ(read_latest_tag(*disk, directory.path()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(publish_latest_tag(*disk, directory.path(), "step-10").ok());
  ASSERT_TRUE(publish_latest_tag(*disk, directory.path(), "step-20").ok());
  Result<std::string> latest = read_latest_tag(*disk, directory.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "step-20");
  EXPECT_FALSE(*disk->exists(directory.path() + "/latest.tmp"));
  EXPECT_EQ(publish_latest_tag(*disk, directory.path(), "../escape").code(), StatusCode::kInvalidArgument);
}

TEST(Commit, AHostileOrTornLatestIsRefused) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  const std::string hostile = "../../etc\n";
  ASSERT_TRUE(write_whole_file(*disk, directory.path() + "/latest",
                               std::as_bytes(std::span<const char>(hostile.data(), hostile.size())), false)
                  .ok());
  Result<std::string> latest = read_latest_tag(*disk, directory.path());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(latest.status().message().find("/latest"), std::string::npos) << latest.status().message();
}

TEST(Commit, AFailedFsyncLeavesThePreviousLatestInPlace) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  ASSERT_TRUE(publish_latest_tag(*real, directory.path(), "step-10").ok());
  FaultyDisk disk(*real, {{"*/latest.tmp", FaultOperation::kSync, 1, FaultKind::kIoError, 0, 0}});
  Status status = publish_latest_tag(disk, directory.path(), "step-20");
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("latest.tmp"), std::string::npos) << status.message();
  Result<std::string> latest = read_latest_tag(*real, directory.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "step-10");
}

}  // namespace
}  // namespace zerosim
