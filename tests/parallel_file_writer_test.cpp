// ParallelFileWriter (core/checkpoint/parallel_file_writer.h): whatever the pieces appended and
// the buffer sizes, the file holds exactly the stream, on a real disk (several I/O threads asked,
// both groups of buffers reused many times, or one group; buffered and O_DIRECT through libaio,
// whose last block is padded and cut off) and on SimDisk (whose queue completes a group's writes
// in a shuffled order, and which checks direct alignment); a failed write is an error that names
// the file, and after it the writer takes nothing more; bad options are refused by name; a
// buffered file is written by one thread with one group in flight, a direct one's groups overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/checkpoint/parallel_file_writer.h"
#include "faults/faulty_disk.h"
#include "sim/sim_disk.h"
#include "tests/checkpoint_io_test_support.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

// Appends `stream` in pieces of random sizes (0 to 3 buffers) and finishes.
Status write_in_pieces(Disk& disk, File& file, const CheckpointIoOptions& options, const std::vector<std::byte>& stream,
                       std::mt19937_64& random) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<ParallelFileWriter> writer, ParallelFileWriter::create(disk, file, options));
  size_t at = 0;
  while (at < stream.size()) {
    const size_t piece = std::min(stream.size() - at, static_cast<size_t>(random() % (3 * options.buffer_bytes + 1)));
    ZEROSIM_RETURN_IF_ERROR(writer->append(std::span<const std::byte>(stream).subspan(at, piece)));
    at += piece;
  }
  ZEROSIM_RETURN_IF_ERROR(writer->finish());
  if (writer->appended_bytes() != stream.size()) return internal_error("appended_bytes differs from the stream");
  return Status();
}

TEST(ParallelFileWriter, TheFileHoldsExactlyTheStreamOnARealDisk) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  std::mt19937_64 random(7);
  for (const CheckpointIoOptions options :
       {io(4096, 1, 1), io(4096, 2, 3), io(3 * 4096, 3, 8), CheckpointIoOptions{}, io(4096, 1, 1, false, false),
        io(4096, 1, 1, true), io(3 * 4096, 2, 2, true), io(size_t{1} << 20, 1, 1, true, false)}) {
    for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{1000003}, size_t{21} << 20}) {
      SCOPED_TRACE(testing::Message() << size << " bytes, buffers of " << options.buffer_bytes << ", "
                                      << options.buffers_per_group << " per group, " << options.threads
                                      << " threads, direct " << options.direct_io << ", double "
                                      << options.double_buffered << "; replay: ctest -R ParallelFileWriter");
      const std::string path = directory.path() + "/stream";
      const std::vector<std::byte> stream = random_bytes(size, random);
      Result<CheckpointFile> file = open_checkpoint_file(*disk, path, OpenMode::kCreateTruncate, options.direct_io);
      ASSERT_TRUE(file.ok()) << file.status().to_string();
      // This machine's file systems take O_DIRECT; one that does not would not test it here.
      ASSERT_EQ(file->file->direct_io(), options.direct_io) << file->note;
      const Status written = write_in_pieces(*disk, *file->file, options, stream, random);
      ASSERT_TRUE(written.ok()) << written.to_string();
      ASSERT_TRUE(file->file->close().ok());
      Result<std::vector<std::byte>> read = read_whole_file(*disk, path);
      ASSERT_TRUE(read.ok()) << read.status().to_string();
      EXPECT_TRUE(*read == stream);
    }
  }
}

TEST(ParallelFileWriter, TheSimulatorsReorderedWritesMakeTheSameFile) {
  SimDisk disk;
  std::mt19937_64 random(11);
  const std::vector<std::byte> stream = random_bytes(200000, random);
  Result<std::unique_ptr<File>> file = disk.open("/stream", {OpenMode::kCreateTruncate});
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const Status written = write_in_pieces(disk, **file, io(4096, 4, 2), stream, random);
  ASSERT_TRUE(written.ok()) << written.to_string();
  ASSERT_TRUE((*file)->close().ok());
  Result<std::vector<std::byte>> read = read_whole_file(disk, "/stream");
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(*read == stream);
  // Direct: SimDisk refuses any write that is not 4096-aligned; the padded tail is cut off.
  for (const bool double_buffered : {true, false}) {
    Result<CheckpointFile> direct = open_checkpoint_file(disk, "/direct", OpenMode::kCreateTruncate, true);
    ASSERT_TRUE(direct.ok()) << direct.status().to_string();
    ASSERT_TRUE(direct->file->direct_io());
    const Status direct_written =
        write_in_pieces(disk, *direct->file, io(2 * 4096, 2, 1, true, double_buffered), stream, random);
    ASSERT_TRUE(direct_written.ok()) << direct_written.to_string();
    Result<std::vector<std::byte>> direct_read = read_whole_file(disk, "/direct");
    ASSERT_TRUE(direct_read.ok()) << direct_read.status().to_string();
    EXPECT_TRUE(*direct_read == stream) << "double-buffered " << double_buffered;
  }
}

// Through the page cache the file system serializes writes to one file (the inode's lock), so
// the writer keeps one group's writes in flight, on one thread, whatever `threads` says; a
// direct file's groups overlap (libaio queues them on the device).
TEST(ParallelFileWriter, ABufferedFileHasOneWriterAndOneGroupInFlight) {
  TestDirectory directory;
  std::unique_ptr<Disk> posix = make_posix_disk();
  std::mt19937_64 random(13);
  const std::vector<std::byte> stream = random_bytes(size_t{6} << 20, random);
  for (const bool direct : {false, true}) {
    QueueRecordingDisk disk(*posix);
    const std::string path = directory.path() + (direct ? "/direct" : "/buffered");
    Result<CheckpointFile> file = open_checkpoint_file(disk, path, OpenMode::kCreateTruncate, direct);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    ASSERT_EQ(file->file->direct_io(), direct) << file->note;
    // Appended whole, so that the caller always outruns the writes and both groups fill.
    Result<std::unique_ptr<ParallelFileWriter>> writer =
        ParallelFileWriter::create(disk, *file->file, io(64 * 4096, 2, /*threads=*/4, direct));
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE((*writer)->append(stream).ok());
    ASSERT_TRUE((*writer)->finish().ok());
    ASSERT_TRUE(file->file->close().ok());
    Result<std::vector<std::byte>> read = read_whole_file(*posix, path);
    ASSERT_TRUE(read.ok()) << read.status().to_string();
    EXPECT_TRUE(*read == stream) << "direct " << direct;
    if (direct) {
      EXPECT_EQ(disk.most_queues_outstanding(), 2) << "a direct file's two groups are written at once";
    } else {
      EXPECT_EQ(disk.most_threads(), 1) << "a buffered file is written by one thread";
      EXPECT_EQ(disk.most_queues_outstanding(), 1) << "a buffered file has one group's writes in flight";
    }
  }
}

TEST(ParallelFileWriter, RefusedDirectIoFallsBackWithANote) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  FaultyDisk disk(*real, {{"*/shard", FaultOperation::kOpen, 1, FaultKind::kRefuseDirect, 0, 0}});
  Result<CheckpointFile> file = open_checkpoint_file(disk, directory.path() + "/shard", OpenMode::kCreateTruncate, true);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_FALSE(file->file->direct_io());
  EXPECT_NE(file->note.find("O_DIRECT is refused for " + directory.path() + "/shard"), std::string::npos) << file->note;
  std::mt19937_64 random(5);
  const std::vector<std::byte> stream = random_bytes(100001, random);
  CheckpointIoOptions options = io(4096, 2, 2, true);
  ASSERT_TRUE(write_in_pieces(disk, *file->file, options, stream, random).ok());
  Result<std::vector<std::byte>> read = read_whole_file(*real, directory.path() + "/shard");
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_TRUE(*read == stream);
}

TEST(ParallelFileWriter, AFailedWriteNamesTheFileAndEndsTheWriter) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  for (const int64_t occurrence : {1, 3, 9}) {
    SCOPED_TRACE(testing::Message() << "write " << occurrence << " fails");
    FaultyDisk disk(*real, {{"*/shard", FaultOperation::kWrite, occurrence, FaultKind::kIoError, 0, 0}});
    Result<std::unique_ptr<File>> file = disk.open(directory.path() + "/shard", {OpenMode::kCreateTruncate});
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    Result<std::unique_ptr<ParallelFileWriter>> writer =
        ParallelFileWriter::create(disk, **file, io(4096, 2, 2));
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    std::mt19937_64 random(3);
    const std::vector<std::byte> stream = random_bytes(64 * 4096, random);
    Status status;
    for (size_t at = 0; at < stream.size() && status.ok(); at += 5000) {
      status = (*writer)->append(std::span<const std::byte>(stream).subspan(at, std::min<size_t>(5000, stream.size() - at)));
    }
    const Status finished = (*writer)->finish();
    const Status failure = status.ok() ? finished : status;
    EXPECT_EQ(failure.code(), StatusCode::kIoError) << failure.to_string();
    EXPECT_NE(failure.message().find("shard"), std::string::npos) << failure.message();
    EXPECT_FALSE(finished.ok()) << "finish() reports the failure too";
  }
}

TEST(ParallelFileWriter, BadOptionsAreRefusedByName) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  Result<std::unique_ptr<File>> file = disk->open(directory.path() + "/f", {OpenMode::kCreateTruncate});
  ASSERT_TRUE(file.ok());
  CheckpointIoOptions bad_aio = io(4096, 2, 4, true);
  bad_aio.aio.block_size_bytes = 1000;
  for (const CheckpointIoOptions options :
       {io(1000, 2, 4), io(0, 2, 4), io(4096, 0, 4), io(4096, 2, 0), io(4096, 2, 257), bad_aio}) {
    Result<std::unique_ptr<ParallelFileWriter>> writer = ParallelFileWriter::create(*disk, **file, options);
    EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(writer.status().message().find("/f"), std::string::npos) << writer.status().message();
  }
}

}  // namespace
}  // namespace zerosim
