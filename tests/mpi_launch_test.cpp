// MPI as the launcher (tools/mpi_launch.h), run as two ranks under mpiexec (tests/CMakeLists.txt):
// ranks and the host-local rank come from MPI; rank 0's bytes reach every rank; a rank that
// cannot prepare stops every rank, each told which rank failed, none left waiting.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tools/mpi_launch.h"

namespace zerosim {
namespace {

MpiLaunch& launch() {
  static std::unique_ptr<MpiLaunch> launched = [] {
    Result<std::unique_ptr<MpiLaunch>> made = MpiLaunch::initialize();
    if (!made.ok()) {
      std::fprintf(stderr, "MpiLaunch::initialize: %s\n", made.status().to_string().c_str());
      std::abort();
    }
    return std::move(made).value();
  }();
  return *launched;
}

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(first, first + text.size());
}

TEST(MpiLaunch, RanksComeFromMpiAndTheHostLocalRankFromTheSharedMemorySplit) {
  if (!mpi_compiled_in()) GTEST_SKIP() << "built without MPI";
  EXPECT_EQ(launch().world_size(), 2) << "run as: mpiexec -n 2 --oversubscribe mpi_launch_test";
  EXPECT_GE(launch().rank(), 0);
  EXPECT_LT(launch().rank(), launch().world_size());
  // One host: the local rank is the rank.
  EXPECT_EQ(launch().local_rank(), launch().rank());
}

TEST(MpiLaunch, RankZerosBytesReachEveryRank) {
  if (!mpi_compiled_in()) GTEST_SKIP() << "built without MPI";
  // 128 bytes, as an NCCL unique id, each rank offering different bytes: only rank 0's count.
  std::string offered(128, '\0');
  for (size_t i = 0; i < offered.size(); ++i) offered[i] = static_cast<char>(i * 7 + 3 + 101 * launch().rank());
  const Result<std::vector<std::byte>> shared = launch().share_from_rank0(Status(), bytes_of(offered));
  ASSERT_TRUE(shared.ok()) << "rank " << launch().rank() << ": " << shared.status().to_string();
  std::string expected(128, '\0');
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<char>(i * 7 + 3);
  EXPECT_EQ(*shared, bytes_of(expected)) << "rank " << launch().rank();
  EXPECT_FALSE(launch().failed_together());
}

TEST(MpiLaunch, ARankThatCannotPrepareStopsEveryRankNamingIt) {
  if (!mpi_compiled_in()) GTEST_SKIP() << "built without MPI";
  const Status prepared = launch().rank() == 1 ? failed_precondition("rank 1: cudaSetDevice(1) failed") : Status();
  const Result<std::vector<std::byte>> shared = launch().share_from_rank0(prepared, bytes_of("id"));
  ASSERT_FALSE(shared.ok()) << "rank " << launch().rank();
  EXPECT_TRUE(launch().failed_together());
  if (launch().rank() == 1) {
    EXPECT_EQ(shared.status().message(), "rank 1: cudaSetDevice(1) failed");
  } else {
    EXPECT_NE(shared.status().message().find("rank 1 could not prepare to join NCCL"), std::string::npos)
        << shared.status().to_string();
  }
  // The ranks are still in step: a share after it works.
  const Result<std::vector<std::byte>> again = launch().share_from_rank0(Status(), bytes_of("again"));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, bytes_of("again"));
}

}  // namespace
}  // namespace zerosim
