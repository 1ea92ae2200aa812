// The multi-process NCCL rendezvous (core/cuda/nccl_comm.h, create_nccl_process_comm): what it
// refuses, each naming the path, before any CUDA or NCCL call, so these run without a GPU.
// The two-process collectives themselves run on the GPU machine (device_nccl_comm_test).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/cuda/nccl_comm.h"
#include "core/env/env.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

bool compiled_in(const Status& status) { return status.message().find("not compiled in") == std::string::npos; }

Status attempt(const NcclRendezvous& rendezvous) {
  RealEnv real_env;
  const Env env = real_env.env();
  return create_nccl_process_comm(rendezvous, *env.disk, *env.clock).status();
}

Status write_text(const std::string& path, const std::string& text) {
  RealEnv real_env;
  return write_whole_file(*real_env.env().disk, path, std::as_bytes(std::span<const char>(text.data(), text.size())), true);
}

TEST(NcclRendezvous, RankZeroRefusesAFileAlreadyThere) {
  TestDirectory directory;
  const std::string path = directory.path() + "/rendezvous";
  ASSERT_TRUE(write_text(path, "left by an earlier run").ok());
  const Status status = attempt(NcclRendezvous{0, 2, 0, path});
  if (!compiled_in(status)) GTEST_SKIP() << status.to_string();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find(path + " already exists"), std::string::npos) << status.to_string();
}

TEST(NcclRendezvous, AWaitingRankGivesUpAfterTheTimeoutNamingThePath) {
  TestDirectory directory;
  NcclRendezvous rendezvous{1, 2, 0, directory.path() + "/never-written"};
  rendezvous.timeout_ns = 50'000'000;
  rendezvous.poll_interval_ns = 5'000'000;
  const Status status = attempt(rendezvous);
  if (!compiled_in(status)) GTEST_SKIP() << status.to_string();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("rank 1: no NCCL id from rank 0 at " + rendezvous.path), std::string::npos)
      << status.to_string();
}

TEST(NcclRendezvous, AFileOfAnotherWorldOrNotARendezvousFileIsRefused) {
  TestDirectory directory;
  const std::string path = directory.path() + "/rendezvous";
  ASSERT_TRUE(write_text(path, "zerosim-nccl-rendezvous 1\nworld_size 4\nid " + std::string(256, '0') + "\n").ok());
  Status status = attempt(NcclRendezvous{1, 2, 0, path});
  if (!compiled_in(status)) GTEST_SKIP() << status.to_string();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("written for another world (world_size 4)"), std::string::npos) << status.to_string();
  EXPECT_NE(status.message().find("WORLD_SIZE 2"), std::string::npos) << status.to_string();

  ASSERT_TRUE(write_text(path, "{\"not\": \"an id\"}").ok());
  status = attempt(NcclRendezvous{1, 2, 0, path});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(path + " is not a zerosim NCCL rendezvous file"), std::string::npos) << status.to_string();

  ASSERT_TRUE(write_text(path, "zerosim-nccl-rendezvous 1\nworld_size 2\nid 00zz\n").ok());
  status = attempt(NcclRendezvous{1, 2, 0, path});
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.to_string();
}

// (Each bad launch names a file that exists, so a check of the file before the arguments would
// answer with the file instead.)
TEST(NcclRendezvous, RanksOutsideTheWorldAndAMissingPathAreRefused) {
  const std::string taken = "/proc/self/status";
  for (const NcclRendezvous& bad : {NcclRendezvous{2, 2, 0, taken}, NcclRendezvous{-1, 2, 0, taken},
                                    NcclRendezvous{0, 0, 0, taken}, NcclRendezvous{0, 2, 0, ""},
                                    NcclRendezvous{0, 2, -1, taken}}) {
    const Status status = attempt(bad);
    if (!compiled_in(status)) GTEST_SKIP() << status.to_string();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  }
}

}  // namespace
}  // namespace zerosim
