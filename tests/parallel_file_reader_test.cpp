// ParallelFileReader (core/checkpoint/parallel_file_reader.h): whatever the reads and skips the
// caller takes and whatever the settings (buffer size, buffers per group, one or two groups,
// threads, buffered or O_DIRECT through libaio with a tail the file ends inside), every byte
// read is the file's byte at that position and the checksum once everything is taken is the
// file's XXH3-128 (file_checksum); on a real disk and on SimDisk (whose queue completes reads in
// a shuffled order and refuses unaligned direct reads). A read past the end, a failed read and
// bad options are errors that name the file; after one the reader takes nothing more. A large
// read of a buffered file reads what is not yet queued straight into its destination. Read as
// one stream (sequential_reads), a buffered file has one batch's reads in flight at a time, by
// one thread in reads of a buffer; not sequential, both batches', `threads` threads each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/checkpoint/parallel_file_reader.h"
#include "faults/faulty_disk.h"
#include "sim/sim_disk.h"
#include "tests/checkpoint_io_test_support.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

// Takes the whole file in random reads and skips (0 to 3 buffers each) and checks each read's
// bytes against `content`, then the checksum against file_checksum's.
void read_in_pieces(Disk& disk, const std::string& path, const std::vector<std::byte>& content,
                    const CheckpointIoOptions& options, std::mt19937_64& random) {
  Result<std::unique_ptr<ParallelFileReader>> reader = ParallelFileReader::open(disk, path, content.size(), options);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ((*reader)->note(), "");
  std::vector<std::byte> piece;
  while ((*reader)->position() < content.size()) {
    const uint64_t at = (*reader)->position();
    const size_t length = std::min<size_t>(content.size() - at, random() % (3 * options.buffer_bytes + 1));
    if (random() % 3 == 0) {
      const Status skipped = (*reader)->skip(length);
      ASSERT_TRUE(skipped.ok()) << skipped.to_string();
    } else {
      piece.assign(length, std::byte{0});
      const Status read = (*reader)->read(piece);
      ASSERT_TRUE(read.ok()) << read.to_string();
      ASSERT_TRUE(length == 0 || std::memcmp(piece.data(), content.data() + at, length) == 0)
          << "bytes " << at << " to " << at + length << " differ from the file's";
    }
    ASSERT_EQ((*reader)->position(), at + length);
  }
  Result<std::string> expected = file_checksum(disk, path, nullptr);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  EXPECT_EQ((*reader)->checksum(), *expected);
}

TEST(ParallelFileReader, EveryByteAndTheChecksumAreTheFilesOnARealDisk) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  std::mt19937_64 random(17);
  for (const CheckpointIoOptions options :
       {io(4096, 1, 1), io(4096, 2, 3), io(3 * 4096, 3, 8), CheckpointIoOptions{}, io(4096, 1, 1, false, false),
        io(4096, 1, 1, true), io(3 * 4096, 2, 2, true), io(size_t{1} << 20, 1, 1, true, false),
        one_stream(io(4096, 2, 3)), one_stream(io(3 * 4096, 3, 8)), one_stream(io(4096, 1, 1, false, false)),
        one_stream(io(4096, 2, 2, true))}) {
    for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{1000003}, size_t{21} << 20}) {
      SCOPED_TRACE(testing::Message() << size << " bytes, buffers of " << options.buffer_bytes << ", "
                                      << options.buffers_per_group << " per group, " << options.threads
                                      << " threads, direct " << options.direct_io << ", double "
                                      << options.double_buffered << ", one stream " << options.sequential_reads
                                      << "; replay: ctest -R ParallelFileReader");
      const std::string path = directory.path() + "/file";
      const std::vector<std::byte> content = random_bytes(size, random);
      ASSERT_TRUE(write_whole_file(*disk, path, content, false).ok());
      read_in_pieces(*disk, path, content, options, random);
    }
  }
}

TEST(ParallelFileReader, TheSimulatorsShuffledReadsGiveTheSameBytes) {
  SimDisk disk;
  std::mt19937_64 random(19);
  const std::vector<std::byte> content = random_bytes(200003, random);
  ASSERT_TRUE(write_whole_file(disk, "/file", content, false).ok());
  for (const CheckpointIoOptions options :
       {io(4096, 4, 2), io(2 * 4096, 2, 1, true), io(4096, 3, 1, true, false), one_stream(io(4096, 4, 2))}) {
    SCOPED_TRACE(testing::Message() << "direct " << options.direct_io << ", double " << options.double_buffered
                                    << ", one stream " << options.sequential_reads);
    read_in_pieces(disk, "/file", content, options, random);
  }
}

TEST(ParallelFileReader, AReadPastTheEndIsRefusedByName) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  const std::string path = directory.path() + "/file";
  std::mt19937_64 random(23);
  ASSERT_TRUE(write_whole_file(*disk, path, random_bytes(10000, random), false).ok());
  Result<std::unique_ptr<ParallelFileReader>> reader = ParallelFileReader::open(*disk, path, 10000, io(4096, 2, 2));
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  ASSERT_TRUE((*reader)->skip(9000).ok());
  std::vector<std::byte> piece(1001);
  const Status past = (*reader)->read(piece);
  EXPECT_EQ(past.code(), StatusCode::kDataLoss) << past.to_string();
  EXPECT_NE(past.message().find(path + " at offset 9000 length 1001: past its end at 10000"), std::string::npos)
      << past.message();
  EXPECT_EQ((*reader)->skip(1).code(), StatusCode::kDataLoss) << "the reader takes nothing after an error";
}

TEST(ParallelFileReader, AFailedReadNamesTheFileAndEndsTheReader) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  const std::string path = directory.path() + "/shard";
  std::mt19937_64 random(29);
  const std::vector<std::byte> content = random_bytes(40 * 4096 + 17, random);
  ASSERT_TRUE(write_whole_file(*real, path, content, false).ok());
  // Reads of 5000 bytes take everything through staging buffers; one read of the whole file
  // takes most of it straight into its destination (buffered), where a failure must also end
  // every read into it before the call returns.
  for (const CheckpointIoOptions options : {io(4096, 2, 2), one_stream(io(4096, 2, 2)), io(4096, 2, 2, true)}) {
    for (const size_t piece_bytes : {size_t{5000}, content.size()}) {
      for (const int64_t occurrence : {1, 3, 9, 14}) {
        SCOPED_TRACE(testing::Message() << "read " << occurrence << " fails, direct " << options.direct_io
                                        << ", one stream " << options.sequential_reads << ", reads of " << piece_bytes
                                        << " bytes");
        FaultyDisk disk(*real, {{"*/shard", FaultOperation::kRead, occurrence, FaultKind::kIoError, 0, 0}});
        Result<std::unique_ptr<ParallelFileReader>> reader =
            ParallelFileReader::open(disk, path, content.size(), options);
        Status status = reader.status();
        std::vector<std::byte> piece;
        while (status.ok() && (*reader)->position() < content.size()) {
          piece.resize(std::min<size_t>(piece_bytes, content.size() - (*reader)->position()));
          status = (*reader)->read(piece);
        }
        EXPECT_EQ(status.code(), StatusCode::kIoError) << status.to_string();
        EXPECT_NE(status.message().find("shard"), std::string::npos) << status.message();
        if (reader.ok()) {
          EXPECT_FALSE((*reader)->skip(0).ok()) << "the reader takes nothing after an error";
        }
      }
    }
  }
}

TEST(ParallelFileReader, ALargeReadOfABufferedFileLandsStraightInItsDestination) {
  TestDirectory directory;
  std::unique_ptr<Disk> posix = make_posix_disk();
  std::mt19937_64 random(31);
  const std::vector<std::byte> content = random_bytes(size_t{1} << 20, random);
  const std::string path = directory.path() + "/shard";
  ASSERT_TRUE(write_whole_file(*posix, path, content, false).ok());
  // 16 KiB buffers, two a batch, two batches: 64 KiB is queued into staging at the open; the
  // rest of a whole-file read, 960 KiB (30 batches of 32 KiB), goes straight into its
  // destination. O_DIRECT keeps its aligned staging buffers; a read shorter than what is
  // queued ahead takes everything from staging.
  for (const CheckpointIoOptions options :
       {io(4 * 4096, 2, 2), one_stream(io(4 * 4096, 2, 2)), io(4 * 4096, 2, 2, true)}) {
    const bool direct = options.direct_io;
    for (const size_t first_read_bytes : {content.size(), size_t{64} << 10}) {
      SCOPED_TRACE(testing::Message() << "direct " << direct << ", one stream " << options.sequential_reads
                                      << ", first read " << first_read_bytes
                                      << " bytes; replay: ctest -R ParallelFileReader");
      QueueRecordingDisk disk(*posix);
      Result<std::unique_ptr<ParallelFileReader>> reader =
          ParallelFileReader::open(disk, path, content.size(), options);
      ASSERT_TRUE(reader.ok()) << reader.status().to_string();
      ASSERT_EQ((*reader)->note(), "");
      std::vector<std::byte> destination(first_read_bytes);
      ASSERT_TRUE((*reader)->read(destination).ok());
      EXPECT_TRUE(std::equal(destination.begin(), destination.end(), content.begin()));
      const uint64_t expected_inside = !direct && first_read_bytes == content.size() ? (size_t{960} << 10) : 0;
      EXPECT_EQ(disk.bytes_transferred_into(destination.data(), destination.data() + destination.size()),
                expected_inside);
      ASSERT_TRUE((*reader)->skip(content.size() - first_read_bytes).ok());
      Result<std::string> expected = file_checksum(*posix, path, nullptr);
      ASSERT_TRUE(expected.ok()) << expected.status().to_string();
      EXPECT_EQ((*reader)->checksum(), *expected) << "bytes read in place are hashed in place, in file order";
    }
  }
}

// One stream: whatever the caller's reads (staged or in place), at most one batch's reads are
// in flight, on one thread, in reads of a buffer; the bytes and the checksum are the file's.
// Not sequential, both batches' reads run at once, `threads` threads each (so the count can
// tell the two apart). O_DIRECT files are libaio's either way (both batches in flight).
TEST(ParallelFileReader, OneStreamHasOneBatchOfReadsInFlight) {
  TestDirectory directory;
  std::unique_ptr<Disk> posix = make_posix_disk();
  std::mt19937_64 random(37);
  const std::vector<std::byte> content = random_bytes((size_t{1} << 20) + 12345, random);
  const std::string path = directory.path() + "/shard";
  ASSERT_TRUE(write_whole_file(*posix, path, content, false).ok());
  for (const CheckpointIoOptions options :
       {one_stream(io(4 * 4096, 2, 3)), io(4 * 4096, 2, 3), one_stream(io(4 * 4096, 2, 3, true))}) {
    for (const size_t piece_bytes : {size_t{5000}, size_t{200000}, content.size()}) {
      SCOPED_TRACE(testing::Message() << "one stream " << options.sequential_reads << ", direct " << options.direct_io
                                      << ", reads of " << piece_bytes << " bytes; replay: ctest -R ParallelFileReader");
      QueueRecordingDisk disk(*posix);
      Result<std::unique_ptr<ParallelFileReader>> reader =
          ParallelFileReader::open(disk, path, content.size(), options);
      ASSERT_TRUE(reader.ok()) << reader.status().to_string();
      std::vector<std::byte> piece;
      while ((*reader)->position() < content.size()) {
        const uint64_t at = (*reader)->position();
        piece.resize(std::min<size_t>(piece_bytes, content.size() - at));
        ASSERT_TRUE((*reader)->read(piece).ok());
        ASSERT_TRUE(std::equal(piece.begin(), piece.end(), content.begin() + static_cast<std::ptrdiff_t>(at)))
            << "bytes from " << at;
      }
      Result<std::string> expected = file_checksum(*posix, path, nullptr);
      ASSERT_TRUE(expected.ok()) << expected.status().to_string();
      EXPECT_EQ((*reader)->checksum(), *expected);
      const bool one_stream = options.sequential_reads && !options.direct_io;
      EXPECT_EQ(disk.most_queues_outstanding(), one_stream ? 1 : 2);
      const std::vector<AsyncIoOptions> queues = disk.queue_options();
      ASSERT_EQ(queues.size(), 2u);
      if (!options.direct_io) {
        for (const AsyncIoOptions& queue : queues) EXPECT_EQ(queue.intra_op_parallelism, one_stream ? 1 : 3);
      }
    }
  }
  // A stream's preads are a buffer long; parallel threads' at most 1 MiB.
  for (const CheckpointIoOptions options : {one_stream(io(size_t{2} << 20, 2, 3)), io(size_t{2} << 20, 2, 3)}) {
    QueueRecordingDisk disk(*posix);
    Result<std::unique_ptr<ParallelFileReader>> reader = ParallelFileReader::open(disk, path, content.size(), options);
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    ASSERT_TRUE((*reader)->skip(content.size()).ok());
    for (const AsyncIoOptions& queue : disk.queue_options()) {
      EXPECT_EQ(queue.block_size_bytes, options.sequential_reads ? int64_t{2} << 20 : int64_t{1} << 20);
    }
  }
}

TEST(ParallelFileReader, RefusedDirectIoFallsBackWithANote) {
  TestDirectory directory;
  std::unique_ptr<Disk> real = make_posix_disk();
  const std::string path = directory.path() + "/shard";
  std::mt19937_64 random(31);
  const std::vector<std::byte> content = random_bytes(50001, random);
  ASSERT_TRUE(write_whole_file(*real, path, content, false).ok());
  FaultyDisk disk(*real, {{"*/shard", FaultOperation::kOpen, 1, FaultKind::kRefuseDirect, 0, 0}});
  Result<std::unique_ptr<ParallelFileReader>> reader = ParallelFileReader::open(disk, path, content.size(), io(4096, 2, 2, true));
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_NE((*reader)->note().find("O_DIRECT is refused for " + path), std::string::npos) << (*reader)->note();
  std::vector<std::byte> everything(content.size());
  ASSERT_TRUE((*reader)->read(everything).ok());
  EXPECT_TRUE(everything == content);
}

TEST(ParallelFileReader, BadOptionsAreRefusedByName) {
  TestDirectory directory;
  std::unique_ptr<Disk> disk = make_posix_disk();
  const std::string path = directory.path() + "/f";
  ASSERT_TRUE(write_whole_file(*disk, path, std::vector<std::byte>(10), false).ok());
  CheckpointIoOptions bad_aio = io(4096, 2, 4, true);
  bad_aio.aio.queue_depth = 0;
  for (const CheckpointIoOptions options :
       {io(1000, 2, 4), io(0, 2, 4), io(4096, 0, 4), io(4096, 2, 0), io(4096, 2, 257), bad_aio}) {
    Result<std::unique_ptr<ParallelFileReader>> reader = ParallelFileReader::open(*disk, path, 10, options);
    EXPECT_EQ(reader.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(reader.status().message().find(path), std::string::npos) << reader.status().message();
  }
}

}  // namespace
}  // namespace zerosim
