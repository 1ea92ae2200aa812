// The real Disk (POSIX): every operation works on a real directory and every failure names
// the path (and offset where there is one).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/env/disk.h"

namespace zerosim {
namespace {

class PosixDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/zerosim-disk-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    directory_ = pattern;
    disk_ = make_posix_disk();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string directory_;
  std::unique_ptr<Disk> disk_;
};

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

TEST_F(PosixDiskTest, WriteSyncRenameListRead) {
  const std::string temporary = directory_ + "/file.tmp";
  const std::string final_path = directory_ + "/file";
  ASSERT_TRUE(write_whole_file(*disk_, temporary, bytes_of("hello"), /*sync=*/true).ok());
  ASSERT_TRUE(disk_->rename(temporary, final_path).ok());
  ASSERT_TRUE(disk_->sync_directory(directory_).ok());
  Result<std::vector<std::string>> names = disk_->list_directory(directory_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"file"}));
  Result<std::vector<std::byte>> content = read_whole_file(*disk_, final_path);
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, bytes_of("hello"));
  EXPECT_TRUE(*disk_->exists(final_path));
  EXPECT_FALSE(*disk_->exists(temporary));
  EXPECT_GT(*disk_->available_bytes(directory_), 0u);
}

TEST_F(PosixDiskTest, ShortReadNamesPathOffsetAndLengths) {
  const std::string path = directory_ + "/short";
  ASSERT_TRUE(write_whole_file(*disk_, path, bytes_of("abc"), false).ok());
  Result<std::unique_ptr<File>> file = disk_->open(path, FileOpenOptions{});
  ASSERT_TRUE(file.ok());
  std::vector<std::byte> buffer(10);
  Status status = (*file)->read_exact(1, buffer);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("offset 1"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("wanted 10"), std::string::npos) << status.message();
}

TEST_F(PosixDiskTest, MissingFileIsNotFoundAndNamesThePath) {
  Result<std::unique_ptr<File>> file = disk_->open(directory_ + "/absent", FileOpenOptions{});
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("absent"), std::string::npos);
  EXPECT_EQ(disk_->rename(directory_ + "/absent", directory_ + "/b").code(), StatusCode::kNotFound);
}

TEST_F(PosixDiskTest, CreatedFilesAreOwnerOnly) {
  const std::string path = directory_ + "/private";
  ASSERT_TRUE(write_whole_file(*disk_, path, bytes_of("x"), false).ok());
  const auto permissions = std::filesystem::status(path).permissions();
  EXPECT_EQ(permissions & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
}

TEST_F(PosixDiskTest, RemoveTreeAndTruncate) {
  ASSERT_TRUE(disk_->create_directories(directory_ + "/a/b").ok());
  ASSERT_TRUE(write_whole_file(*disk_, directory_ + "/a/b/f", bytes_of("12345"), false).ok());
  FileOpenOptions options;
  options.mode = OpenMode::kReadWrite;
  Result<std::unique_ptr<File>> file = disk_->open(directory_ + "/a/b/f", options);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->truncate(2).ok());
  EXPECT_EQ(*(*file)->size_bytes(), 2u);
  ASSERT_TRUE((*file)->close().ok());
  ASSERT_TRUE(disk_->remove_tree(directory_ + "/a").ok());
  EXPECT_FALSE(*disk_->exists(directory_ + "/a"));
  EXPECT_TRUE(disk_->remove_tree(directory_ + "/a").ok());  // missing is fine
}

}  // namespace
}  // namespace zerosim
