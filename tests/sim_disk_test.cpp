// SimDisk: what survives a simulated power loss is exactly what fsync made durable, plus the
// pending operations a crash chooses to keep (whole or torn); the real core runs on it with
// the same bits as on a real disk.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "sim/sim_disk.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(first, first + text.size());  // memcpy of an empty vector's null data is UB
}

Status write_file(SimDisk& disk, const std::string& path, const std::string& text, bool sync) {
  return write_whole_file(disk, path, bytes_of(text), sync);
}

std::string content(SimDisk& disk, const std::string& path) {
  Result<std::vector<std::byte>> bytes = disk.visible_content(path);
  if (!bytes.ok()) return "<absent>";
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

CrashFate keep() { return CrashFate{}; }
CrashFate drop() { return CrashFate{CrashFate::Kind::kDrop, 0}; }

TEST(SimDisk, AnUnsyncedNewFileIsLostAndASyncedOneNeedsItsDirectorySynced) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d").ok());
  ASSERT_TRUE(disk.sync_directory("/").ok());
  ASSERT_TRUE(write_file(disk, "/d/unsynced", "a", false).ok());
  ASSERT_TRUE(write_file(disk, "/d/file-synced", "b", true).ok());
  EXPECT_EQ(content(disk, "/d/unsynced"), "a");  // the page cache sees it
  disk.crash(std::vector<CrashFate>(disk.pending_operations().size(), drop()));
  EXPECT_EQ(content(disk, "/d/unsynced"), "<absent>");
  EXPECT_EQ(content(disk, "/d/file-synced"), "<absent>");  // its name was never made durable
  EXPECT_EQ(disk.crash_count(), 1u);

  ASSERT_TRUE(write_file(disk, "/d/both-synced", "c", true).ok());
  ASSERT_TRUE(disk.sync_directory("/d").ok());
  EXPECT_TRUE(disk.pending_operations().empty());
  disk.crash({});
  EXPECT_EQ(content(disk, "/d/both-synced"), "c");
}

TEST(SimDisk, PendingOperationsAreListedInOrderAndFatesApplyOneByOne) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d").ok());
  ASSERT_TRUE(disk.sync_directory("/").ok());
  ASSERT_TRUE(write_file(disk, "/d/a", "first", false).ok());
  ASSERT_TRUE(disk.rename("/d/a", "/d/b").ok());
  const std::vector<PendingOperation> pending = disk.pending_operations();
  ASSERT_EQ(pending.size(), 3u);
  EXPECT_EQ(pending[0].describe(), "create /d/a");
  EXPECT_EQ(pending[1].describe(), "write /d/b [0, 5)");  // named by its current name
  EXPECT_EQ(pending[2].describe(), "rename /d/a -> /d/b");
  // Create and rename kept, the write dropped: an empty file under the new name (the classic
  // "rename without fsync" outcome).
  disk.crash({keep(), drop(), keep()});
  EXPECT_EQ(content(disk, "/d/b"), "");
  EXPECT_EQ(content(disk, "/d/a"), "<absent>");
}

// A directory renamed with its files: the whole tree moves at once, and the rename is durable
// only once its parent is fsynced (a crash dropping it leaves the tree under the old name).
TEST(SimDisk, ARenamedDirectoryMovesItsTreeDurableOnceItsParentIsSynced) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d/tmp-1").ok());
  ASSERT_TRUE(write_file(disk, "/d/tmp-1/model", "weights", true).ok());
  ASSERT_TRUE(disk.sync_directory("/d/tmp-1").ok());
  ASSERT_TRUE(disk.sync_directory("/d").ok());
  ASSERT_TRUE(disk.sync_directory("/").ok());
  ASSERT_TRUE(disk.pending_operations().empty());
  ASSERT_TRUE(disk.rename("/d/tmp-1", "/d/step-1").ok());
  EXPECT_EQ(content(disk, "/d/step-1/model"), "weights");
  EXPECT_EQ(content(disk, "/d/tmp-1/model"), "<absent>");
  const std::vector<PendingOperation> pending = disk.pending_operations();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].describe(), "rename /d/tmp-1 -> /d/step-1");
  std::unique_ptr<SimDisk> dropped = disk.clone();
  dropped->crash({drop()});
  EXPECT_EQ(content(*dropped, "/d/tmp-1/model"), "weights");
  EXPECT_EQ(content(*dropped, "/d/step-1/model"), "<absent>");
  std::unique_ptr<SimDisk> kept = disk.clone();
  kept->crash({keep()});
  EXPECT_EQ(content(*kept, "/d/step-1/model"), "weights");
  EXPECT_EQ(content(*kept, "/d/tmp-1/model"), "<absent>");
  ASSERT_TRUE(disk.sync_directory("/d").ok());
  disk.crash({});
  EXPECT_EQ(content(disk, "/d/step-1/model"), "weights");
  // Onto a non-empty directory, or into itself: refused.
  ASSERT_TRUE(disk.create_directories("/d/other").ok());
  ASSERT_TRUE(write_file(disk, "/d/other/x", "x", false).ok());
  EXPECT_FALSE(disk.rename("/d/step-1", "/d/other").ok());
  EXPECT_FALSE(disk.rename("/d/step-1", "/d/step-1/inner").ok());
}

// renameat2(RENAME_EXCHANGE): the two names swap in one operation; dropped, neither moves.
TEST(SimDisk, AnExchangeSwapsTwoNamesAtomically) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d").ok());
  ASSERT_TRUE(disk.sync_directory("/").ok());
  ASSERT_TRUE(write_file(disk, "/d/current", "old", true).ok());
  ASSERT_TRUE(write_file(disk, "/d/next", "new", true).ok());
  ASSERT_TRUE(disk.sync_directory("/d").ok());
  ASSERT_TRUE(disk.exchange("/d/next", "/d/current").ok());
  EXPECT_EQ(content(disk, "/d/current"), "new");
  EXPECT_EQ(content(disk, "/d/next"), "old");
  ASSERT_EQ(disk.pending_operations().size(), 1u);
  EXPECT_EQ(disk.pending_operations()[0].describe(), "exchange /d/next <-> /d/current");
  std::unique_ptr<SimDisk> dropped = disk.clone();
  dropped->crash({drop()});
  EXPECT_EQ(content(*dropped, "/d/current"), "old");
  EXPECT_EQ(content(*dropped, "/d/next"), "new");
  disk.crash({keep()});
  EXPECT_EQ(content(disk, "/d/current"), "new");
  EXPECT_EQ(content(disk, "/d/next"), "old");
  EXPECT_FALSE(disk.exchange("/d/current", "/d/missing").ok());
}

TEST(SimDisk, ATornWriteKeepsOnlyTheSurvivingSectors) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d").ok());
  ASSERT_TRUE(disk.sync_directory("/").ok());
  ASSERT_TRUE(write_file(disk, "/d/f", std::string(1536, 'o'), true).ok());
  ASSERT_TRUE(disk.sync_directory("/d").ok());
  {
    Result<std::unique_ptr<File>> file = disk.open("/d/f", {OpenMode::kReadWrite});
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->write_all(0, bytes_of(std::string(1536, 'n'))).ok());
  }
  ASSERT_EQ(disk.pending_operations().size(), 1u);
  EXPECT_EQ(disk.pending_operations()[0].sector_count, 3u);
  disk.crash({CrashFate{CrashFate::Kind::kTear, 0b101}});
  EXPECT_EQ(content(disk, "/d/f"), std::string(512, 'n') + std::string(512, 'o') + std::string(512, 'n'));
}

TEST(SimDisk, HandlesFromBeforeACrashAreDeadAndLocksAreReleased) {
  SimDisk disk;
  ASSERT_TRUE(disk.create_directories("/d").ok());
  Result<std::unique_ptr<File>> file = disk.open("/d/f", {OpenMode::kCreateTruncate});
  ASSERT_TRUE(file.ok());
  Result<std::unique_ptr<FileLock>> lock = disk.lock_file("/d/lock");
  ASSERT_TRUE(lock.ok());
  EXPECT_FALSE(disk.lock_file("/d/lock").ok());
  disk.crash({});
  const Status write = (*file)->write_all(0, bytes_of("x"));
  EXPECT_EQ(write.code(), StatusCode::kIoError);
  EXPECT_NE(write.message().find("before simulated crash"), std::string::npos) << write.to_string();
  ASSERT_TRUE(disk.create_directories("/d").ok());
  EXPECT_TRUE(disk.lock_file("/d/lock").ok());
}

TEST(SimDisk, TheSameOperationsGiveTheSameTraceHash) {
  auto run = [](const std::string& text) {
    SimDisk disk;
    EXPECT_TRUE(disk.create_directories("/d").ok());
    EXPECT_TRUE(write_file(disk, "/d/f", text, true).ok());
    disk.crash_with_seed(5);
    return disk.trace_hash();
  };
  EXPECT_EQ(run("same"), run("same"));
  EXPECT_NE(run("same"), run("other"));
}

// Ranks on threads interleave their writes differently from run to run; a seeded crash must
// still keep, drop and tear the same writes (a scenario's verdict named a different shard from
// run to run before fates were drawn by what an operation is rather than its position).
RC_GTEST_PROP(SimDiskProperty, SeededCrashFatesDoNotDependOnHowFilesInterleave, ()) {
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const int file_count = *rc::gen::inRange(2, 5);
  const std::vector<int> order = *rc::gen::container<std::vector<int>>(static_cast<size_t>(file_count * 2),
                                                                        rc::gen::inRange(0, file_count));
  // Runs every file's writes (two of three sectors each) in file order, or interleaved as
  // `order` picks the next file; a file's own writes stay in program order either way.
  auto run = [&](bool interleaved) {
    SimDisk disk;
    RC_ASSERT(disk.create_directories("/d").ok());
    RC_ASSERT(disk.sync_directory("/").ok());
    std::vector<std::unique_ptr<File>> files;
    for (int f = 0; f < file_count; ++f) {
      Result<std::unique_ptr<File>> file = disk.open("/d/f" + std::to_string(f), {OpenMode::kCreateTruncate});
      RC_ASSERT(file.ok());
      files.push_back(std::move(file).value());
    }
    std::vector<int> written(static_cast<size_t>(file_count), 0);
    auto write_next = [&](int f) {
      int& count = written[static_cast<size_t>(f)];
      if (count == 2) return;
      const std::string text(1536, static_cast<char>('a' + f * 2 + count));
      RC_ASSERT(files[static_cast<size_t>(f)]->write_all(static_cast<uint64_t>(count) * 1536, bytes_of(text)).ok());
      ++count;
    };
    if (interleaved) {
      for (int f : order) write_next(f);
    }
    for (int f = 0; f < file_count; ++f) {
      write_next(f);
      write_next(f);
    }
    disk.crash_with_seed(seed);
    std::vector<std::string> contents;
    for (int f = 0; f < file_count; ++f) contents.push_back(content(disk, "/d/f" + std::to_string(f)));
    return contents;
  };
  RC_ASSERT(run(false) == run(true));
}

// Whatever the fates, a file whose content and name were fsynced and that was not written
// again is intact after a crash.
RC_GTEST_PROP(SimDiskProperty, SyncedContentSurvivesAnyCrash, ()) {
  SimDisk disk;
  RC_ASSERT(disk.create_directories("/d").ok());
  RC_ASSERT(disk.sync_directory("/").ok());
  const std::string stable = *rc::gen::container<std::string>(rc::gen::inRange('a', 'z'));
  RC_ASSERT(write_file(disk, "/d/stable", stable, true).ok());
  RC_ASSERT(disk.sync_directory("/d").ok());
  const int noise = *rc::gen::inRange(0, 6);
  for (int i = 0; i < noise; ++i) {
    RC_ASSERT(write_file(disk, "/d/noise" + std::to_string(i), std::string(700, 'x'), *rc::gen::arbitrary<bool>()).ok());
  }
  disk.crash_with_seed(*rc::gen::arbitrary<uint64_t>());
  RC_ASSERT(content(disk, "/d/stable") == stable);
}

TEST(SimDisk, TheCoreOnSimDiskGivesTheSameBitsAsOnARealDisk) {
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp16, 2, 1, 2, 100, 31);
  TestDirectory directory;
  OffloadConfig& offload = options.config.zero.offload_optimizer;
  offload.device = OffloadDevice::kNvme;
  offload.nvme_path = directory.path();
  const TrainingRun real = train_or_fail(options, 4);
  SimDisk disk;
  offload.nvme_path = "/nvme";
  options.config.zero.offload_param = offload;
  RealEnv real_env;
  Env env = real_env.env();
  env.disk = &disk;
  CheckpointPlan plan;
  plan.save_directory = "/ckpt";
  Result<TrainingRun> simulated = run_training(options, 4, env, plan);
  ASSERT_TRUE(simulated.ok()) << simulated.status().to_string();
  EXPECT_EQ(first_difference(real.digests, simulated->digests), "");
  // The committed checkpoint survives a power loss that drops everything still pending.
  disk.crash(std::vector<CrashFate>(disk.pending_operations().size(), drop()));
  plan = CheckpointPlan{};
  plan.resume_directory = "/ckpt";
  Result<TrainingRun> resumed = run_training(options, 4, env, plan);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(first_difference(real.digests, resumed->digests), "");
}

}  // namespace
}  // namespace zerosim
