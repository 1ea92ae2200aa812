// The async queues of the POSIX disk: libaio (O_DIRECT) and pread/pwrite move the bytes
// for every combination of block size, queue depth, intra-op parallelism, single_submit and
// overlap_events, and every failed completion is an error naming the file.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "core/env/disk.h"
#include "core/tensor/aligned_buffer.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

Status write_then_read(Disk& disk, const std::string& path, const AsyncIoOptions& options, Disk::AsyncEngine engine,
                       size_t size_bytes, bool direct) {
  Result<std::unique_ptr<AsyncIoQueue>> queue = disk.make_async_queue(options, engine);
  if (!queue.ok()) return queue.status();
  Result<AlignedBuffer> source = AlignedBuffer::allocate(size_bytes, false);
  Result<AlignedBuffer> target = AlignedBuffer::allocate(size_bytes, false);
  if (!source.ok() || !target.ok()) return internal_error("allocation");
  for (size_t i = 0; i < size_bytes; ++i) source->data()[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  FileOpenOptions open_options;
  open_options.mode = OpenMode::kCreateTruncate;
  open_options.direct_io = direct;
  Result<std::unique_ptr<File>> file = disk.open(path, open_options);
  if (!file.ok()) return file.status();
  ZEROSIM_RETURN_IF_ERROR((*queue)->submit({file->get(), IoDirection::kWrite, 0, source->data(), size_bytes}));
  ZEROSIM_RETURN_IF_ERROR((*queue)->wait_all());
  ZEROSIM_RETURN_IF_ERROR((*queue)->submit({file->get(), IoDirection::kRead, 0, target->data(), size_bytes}));
  ZEROSIM_RETURN_IF_ERROR((*queue)->wait_all());
  if (std::memcmp(source->data(), target->data(), size_bytes) != 0) return data_loss("content differs");
  return (*file)->close();
}

RC_GTEST_PROP(AsyncIoProperty, EveryOptionCombinationMovesTheBytes, ()) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  AsyncIoOptions options;
  options.block_size_bytes = 4096 * *rc::gen::inRange<int64_t>(1, 40);
  options.queue_depth = *rc::gen::inRange<int64_t>(1, 17);
  options.intra_op_parallelism = *rc::gen::inRange<int64_t>(1, 5);
  options.single_submit = *rc::gen::arbitrary<bool>();
  options.overlap_events = *rc::gen::arbitrary<bool>();
  const bool use_libaio = *rc::gen::arbitrary<bool>();
  const size_t size_bytes = 4096 * *rc::gen::inRange<size_t>(1, 200);
  const Status status = write_then_read(*disk, directory.path() + "/f", options,
                                        use_libaio ? Disk::AsyncEngine::kLibaio : Disk::AsyncEngine::kPreadPwrite,
                                        size_bytes, /*direct=*/use_libaio);
  RC_ASSERT(status.ok());
}

TEST(AsyncIo, ReadPastTheEndOfAFileCutShortIsAShortTransferNamingTheFile) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  for (Disk::AsyncEngine engine : {Disk::AsyncEngine::kLibaio, Disk::AsyncEngine::kPreadPwrite}) {
    const std::string path = directory.path() + "/short";
    std::vector<std::byte> content(8192, std::byte{1});
    ASSERT_TRUE(write_whole_file(*disk, path, content, false).ok());
    Result<std::unique_ptr<AsyncIoQueue>> queue = disk->make_async_queue(AsyncIoOptions{}, engine);
    ASSERT_TRUE(queue.ok());
    FileOpenOptions open_options;
    open_options.direct_io = engine == Disk::AsyncEngine::kLibaio;
    Result<std::unique_ptr<File>> file = disk->open(path, open_options);
    ASSERT_TRUE(file.ok());
    Result<AlignedBuffer> buffer = AlignedBuffer::allocate(16384, false);
    ASSERT_TRUE(buffer.ok());
    ASSERT_TRUE((*queue)->submit({file->get(), IoDirection::kRead, 0, buffer->data(), 16384}).ok());
    Status status = (*queue)->wait_all();
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.to_string();
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("short read"), std::string::npos) << status.message();
  }
}

TEST(AsyncIo, MisalignedDirectTransferIsRefusedBeforeSubmission) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  Result<std::unique_ptr<AsyncIoQueue>> queue = disk->make_async_queue(AsyncIoOptions{}, Disk::AsyncEngine::kLibaio);
  ASSERT_TRUE(queue.ok());
  FileOpenOptions open_options;
  open_options.mode = OpenMode::kCreateTruncate;
  open_options.direct_io = true;
  Result<std::unique_ptr<File>> file = disk->open(directory.path() + "/d", open_options);
  ASSERT_TRUE(file.ok());
  Result<AlignedBuffer> buffer = AlignedBuffer::allocate(8192, false);
  ASSERT_TRUE(buffer.ok());
  Status status = (*queue)->submit({file->get(), IoDirection::kWrite, 100, buffer->data(), 4096});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("4096"), std::string::npos);
}

TEST(AsyncIo, OptionsAreValidatedWithTheirKeys) {
  AsyncIoOptions options;
  options.block_size_bytes = 1000;
  EXPECT_NE(validate_async_io_options(options).message().find("aio.block_size"), std::string::npos);
  options = AsyncIoOptions{};
  options.queue_depth = 0;
  EXPECT_NE(validate_async_io_options(options).message().find("aio.queue_depth"), std::string::npos);
  options = AsyncIoOptions{};
  options.intra_op_parallelism = 0;
  EXPECT_NE(validate_async_io_options(options).message().find("aio.intra_op_parallelism"), std::string::npos);
}

}  // namespace
}  // namespace zerosim
