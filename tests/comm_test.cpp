// The in-process communicator: collectives move the right bytes, the gradient collective
// folds in rank order, and abort releases ranks blocked in a collective.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "core/env/comm.h"
#include "core/tensor/parallel_copy.h"

namespace zerosim {
namespace {

template <typename Body>
void run_ranks(ThreadCommWorld& world, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world.world_size(); ++rank) threads.emplace_back([&, rank] { body(world.comm(rank)); });
  for (std::thread& thread : threads) thread.join();
}

TEST(ThreadComm, AllGatherConcatenatesInRankOrder) {
  ThreadCommWorld world(5);
  std::vector<std::vector<int32_t>> received(5);
  run_ranks(world, [&](Comm& comm) {
    std::vector<int32_t> send = {comm.rank() * 10, comm.rank() * 10 + 1};
    std::vector<int32_t> receive(10);
    ASSERT_TRUE(comm.all_gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(receive))).ok());
    received[comm.rank()] = receive;
  });
  for (const auto& receive : received) {
    EXPECT_EQ(receive, (std::vector<int32_t>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41}));
  }
}

TEST(ThreadComm, ReduceScatterAccumulateFoldsInRankOrder) {
  // Values chosen so that the order of the fp32 additions shows in the result:
  // (1 + 2^24) + 1 + ... differs from adding the ones first.
  const int world_size = 3;
  ThreadCommWorld world(world_size);
  std::vector<float> results(world_size);
  run_ranks(world, [&](Comm& comm) {
    // chunk j (one element) is this rank's contribution to rank j.
    std::vector<float> send(world_size);
    for (int owner = 0; owner < world_size; ++owner) send[owner] = comm.rank() == 0 ? 16777216.0f : 1.0f;
    std::vector<float> accumulator = {1.0f};
    ASSERT_TRUE(comm.reduce_scatter_accumulate(std::as_bytes(std::span(send)), DType::kFp32, 1, accumulator).ok());
    results[comm.rank()] = accumulator[0];
  });
  // ((1 + 2^24) + 1) + 1 in fp32: 1 + 2^24 rounds to 2^24, each +1 rounds away again.
  float expected = 1.0f;
  expected = expected + 16777216.0f;
  expected = expected + 1.0f;
  expected = expected + 1.0f;
  for (float result : results) EXPECT_EQ(result, expected);
  EXPECT_NE(expected, 16777219.0f);  // the exact sum: the order mattered
}

TEST(ThreadComm, ReduceScatterWidensSixteenBitChunks) {
  ThreadCommWorld world(2);
  std::vector<std::vector<float>> results(2);
  run_ranks(world, [&](Comm& comm) {
    std::vector<float> values = {0.5f, 1.5f, 2.5f, 3.5f};  // chunk 0 = {0.5, 1.5}, chunk 1 = {2.5, 3.5}
    std::vector<std::byte> send(values.size() * 2);
    cast_from_fp32(DType::kBf16, values.data(), send.data(), values.size());
    std::vector<float> accumulator(2, 0.0f);
    ASSERT_TRUE(comm.reduce_scatter_accumulate(send, DType::kBf16, 2, accumulator).ok());
    results[comm.rank()] = accumulator;
  });
  EXPECT_EQ(results[0], (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(results[1], (std::vector<float>{5.0f, 7.0f}));
}

// Forwards every collective to a ThreadComm but all_gather_visit, which it leaves to Comm's
// default (a gather into scratch, then its slices), as a communicator without shared memory does.
class DefaultVisitComm final : public Comm {
 public:
  explicit DefaultVisitComm(Comm& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) override {
    return inner_.all_gather(send, receive);
  }
  Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root) override {
    return inner_.gather(send, receive, root);
  }
  Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t count,
                                   std::span<float> accumulator) override {
    return inner_.reduce_scatter_accumulate(send, dtype, count, accumulator);
  }
  Status all_reduce_max(std::span<double> values) override { return inner_.all_reduce_max(values); }
  Status broadcast(std::span<std::byte> buffer, int root) override { return inner_.broadcast(buffer, root); }
  Status barrier() override { return inner_.barrier(); }

 private:
  Comm& inner_;
};

// all_gather_visit hands every rank's bytes over in rank order, in place (ThreadComm) or through
// the default's scratch; a rank sees what all_gather would have put at that source's place.
TEST(ThreadComm, AllGatherVisitHandsEveryRanksBytesInRankOrder) {
  const int world_size = 4;
  for (const bool through_default : {false, true}) {
    ThreadCommWorld world(world_size, 2);
    std::vector<std::vector<std::pair<int, std::vector<uint8_t>>>> visits(world_size);
    run_ranks(world, [&](Comm& thread_comm) {
      DefaultVisitComm wrapped(thread_comm);
      Comm& comm = through_default ? static_cast<Comm&>(wrapped) : thread_comm;
      std::vector<uint8_t> send(37);
      for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(comm.rank() * 50 + i);
      std::vector<std::byte> scratch;
      const Status status = comm.all_gather_visit(std::as_bytes(std::span(send)), scratch,
                                                  [&](int source, std::span<const std::byte> bytes) {
                                                    const auto* first = reinterpret_cast<const uint8_t*>(bytes.data());
                                                    visits[comm.rank()].emplace_back(
                                                        source, std::vector<uint8_t>(first, first + bytes.size()));
                                                  });
      ASSERT_TRUE(status.ok()) << status.to_string();
      EXPECT_EQ(scratch.empty(), !through_default) << "only the default gathers into the scratch";
    });
    for (int rank = 0; rank < world_size; ++rank) {
      ASSERT_EQ(visits[rank].size(), static_cast<size_t>(world_size)) << "rank " << rank;
      for (int source = 0; source < world_size; ++source) {
        EXPECT_EQ(visits[rank][source].first, source) << "rank " << rank << (through_default ? ", default" : "");
        std::vector<uint8_t> expected(37);
        for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<uint8_t>(source * 50 + i);
        EXPECT_EQ(visits[rank][source].second, expected) << "rank " << rank << ", source " << source;
      }
    }
  }
}

// A world whose ranks split their copies and sums over several threads gives the bytes and the
// rank-order sums of a world that does not: chunks long enough to be split, values whose sums
// round differently in another order, fp32 and bf16 chunks.
TEST(ThreadComm, RanksThreadsChangeNoByteOfAGatherOrASum) {
  const int world_size = 3;
  const size_t chunk_elements = 3 * kCastElementsPerThread + 65;
  const size_t gather_bytes = kParallelCopyMinBytes + 4099;
  // Rank r's contribution, element i of its W chunks, as stored in `dtype`.
  auto contribution = [&](int rank, DType dtype) {
    std::vector<float> values(chunk_elements * world_size);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint64_t bits = (i + 1) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(rank + 1) * 0xbf58476d1ce4e5b9ull;
      values[i] = std::ldexp(static_cast<float>(bits >> 40) / 16777216.0f - 0.5f, static_cast<int>(bits % 40) - 20);
    }
    std::vector<std::byte> stored(values.size() * dtype_size_bytes(dtype));
    cast_from_fp32(dtype, values.data(), stored.data(), values.size());
    return stored;
  };
  // Each rank's inputs are made once and its gather buffer is reused by every run: fresh buffers
  // of this size cost ThreadSanitizer a shadow page fault per page, most of this test's time.
  std::vector<std::vector<std::byte>> mine(world_size, std::vector<std::byte>(gather_bytes));
  for (int rank = 0; rank < world_size; ++rank) {
    for (size_t i = 0; i < gather_bytes; ++i) mine[rank][i] = static_cast<std::byte>((i * 131 + rank * 7) >> 3);
  }
  std::vector<std::vector<std::byte>> all(world_size, std::vector<std::byte>(gather_bytes * world_size));
  std::vector<std::vector<std::byte>> send(world_size);
  auto run = [&](int threads, DType dtype) {
    ThreadCommWorld world(world_size, threads);
    std::vector<std::vector<float>> sums(world_size);
    run_ranks(world, [&](Comm& comm) {
      const int rank = comm.rank();
      std::vector<float> accumulator(chunk_elements, 0.25f);
      // EXPECT, not ASSERT: a rank that left here would strand the others in the gather below.
      EXPECT_TRUE(comm.reduce_scatter_accumulate(send[rank], dtype, chunk_elements, accumulator).ok());
      sums[rank] = accumulator;
      std::fill(all[rank].begin(), all[rank].end(), std::byte{0xa5});
      EXPECT_TRUE(comm.all_gather(mine[rank], all[rank]).ok());
    });
    return sums;
  };
  for (DType dtype : {DType::kFp32, DType::kBf16}) {
    for (int rank = 0; rank < world_size; ++rank) send[rank] = contribution(rank, dtype);
    const std::vector<std::vector<float>> serial = run(1, dtype);
    const std::vector<std::vector<std::byte>> serial_gathered = all;
    // The serial world against the fold written out: 0.25, then rank 0's value, rank 1's, ...
    std::vector<std::vector<float>> widened(world_size, std::vector<float>(chunk_elements * world_size));
    for (int rank = 0; rank < world_size; ++rank) {
      cast_to_fp32(dtype, send[rank].data(), widened[rank].data(), chunk_elements * world_size);
    }
    for (int owner = 0; owner < world_size; ++owner) {
      size_t differing = 0;
      for (size_t i = 0; i < chunk_elements; ++i) {
        float sum = 0.25f;
        for (int rank = 0; rank < world_size; ++rank) sum = sum + widened[rank][owner * chunk_elements + i];
        differing += std::memcmp(&sum, &serial[owner][i], sizeof(float)) != 0;
      }
      EXPECT_EQ(differing, 0u) << dtype_name(dtype) << " owner " << owner;
    }
    for (int threads : {2, 5}) {
      const std::vector<std::vector<float>> split = run(threads, dtype);
      for (int rank = 0; rank < world_size; ++rank) {
        EXPECT_EQ(std::memcmp(split[rank].data(), serial[rank].data(), chunk_elements * sizeof(float)), 0)
            << dtype_name(dtype) << " sums differ on rank " << rank << " with " << threads
            << " threads; replay: tests/comm_test --gtest_filter=ThreadComm.RanksThreads*";
        EXPECT_TRUE(all[rank] == serial_gathered[rank])
            << "the gather differs on rank " << rank << " with " << threads << " threads";
      }
    }
  }
}

// reduce_scatter_pieces gives the bits of the send buffer its pieces describe, in place
// (ThreadComm, split over 1 or 3 threads) and through Comm's default (a wrapper that leaves it
// to the base class): pieces of zeros between pieces of values, pieces that cross the threads'
// ranges and the 2,048-value blocks, -0.0 (a zero piece's +0.0 turns it to +0.0), and values
// that a 16-bit dtype rounds.
TEST(ThreadComm, ReduceScatterPiecesGiveTheBitsOfTheBufferTheyDescribe) {
  const int world_size = 3;
  const std::vector<size_t> piece_counts = {kCastElementsPerThread + 3, 5, 2047, 2049, 1, kCastElementsPerThread - 9, 11};
  size_t chunk_elements = 0;
  for (size_t count : piece_counts) chunk_elements += count;
  // Rank r's values for chunk j. Piece k of every chunk is zeros (null) when k % 3 == 1, the
  // same on every rank, as a parameter's padding is.
  auto values_of = [&](int rank, int chunk) {
    std::vector<float> values(chunk_elements);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint64_t bits = (i + 1) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(rank * 7 + chunk + 1) * 0xbf58476d1ce4e5b9ull;
      values[i] = i % 97 == 0 ? -0.0f : std::ldexp(static_cast<float>(bits >> 40) / 16777216.0f - 0.5f, static_cast<int>(bits % 40) - 20);
    }
    return values;
  };
  auto is_zeros = [](size_t piece) { return piece % 3 == 1; };
  // Every rank's values and send buffers are made once, outside the runs: fresh buffers of these
  // sizes in each run cost ThreadSanitizer a shadow page fault per page.
  std::vector<std::vector<std::vector<float>>> values_by_rank(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    for (int chunk = 0; chunk < world_size; ++chunk) values_by_rank[rank].push_back(values_of(rank, chunk));
  }
  std::vector<std::vector<std::byte>> send_by_rank(world_size);
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    for (int rank = 0; rank < world_size; ++rank) {
      std::vector<std::byte>& send = send_by_rank[rank];
      send.assign(chunk_elements * world_size * dtype_size_bytes(dtype), std::byte{0});
      for (int chunk = 0; chunk < world_size; ++chunk) {
        size_t offset = 0;
        for (size_t k = 0; k < piece_counts.size(); ++k) {
          std::byte* at = send.data() + (chunk * chunk_elements + offset) * dtype_size_bytes(dtype);
          if (!is_zeros(k)) cast_from_fp32(dtype, values_by_rank[rank][chunk].data() + offset, at, piece_counts[k]);
          offset += piece_counts[k];
        }
      }
    }
    for (const int threads : {1, 3}) {
      for (const bool through_default : {false, true}) {
        ThreadCommWorld world(world_size, threads);
        std::vector<std::vector<float>> from_pieces(world_size), from_buffer(world_size);
        run_ranks(world, [&](Comm& thread_comm) {
          DefaultVisitComm wrapped(thread_comm);
          Comm& comm = through_default ? static_cast<Comm&>(wrapped) : thread_comm;
          const int rank = comm.rank();
          const std::vector<std::vector<float>>& values = values_by_rank[rank];
          const std::vector<std::byte>& send = send_by_rank[rank];
          std::vector<Comm::GradientPiece> pieces;
          std::vector<size_t> first_piece;
          for (int chunk = 0; chunk < world_size; ++chunk) {
            first_piece.push_back(pieces.size());
            size_t offset = 0;
            for (size_t k = 0; k < piece_counts.size(); ++k) {
              pieces.push_back({is_zeros(k) ? nullptr : values[chunk].data() + offset, piece_counts[k]});
              offset += piece_counts[k];
            }
          }
          first_piece.push_back(pieces.size());
          std::vector<float> accumulator(chunk_elements, -0.0f), expected(chunk_elements, -0.0f);
          std::vector<std::byte> scratch;
          // EXPECT, not ASSERT: a rank that left here would strand the others in the next collective.
          const Status status = comm.reduce_scatter_pieces(pieces, first_piece, dtype, chunk_elements, scratch,
                                                           accumulator, threads);
          EXPECT_TRUE(status.ok()) << status.to_string();
          EXPECT_EQ(scratch.empty(), !through_default) << "only the default builds the buffer";
          EXPECT_TRUE(comm.reduce_scatter_accumulate(send, dtype, chunk_elements, expected).ok());
          from_pieces[rank] = accumulator;
          from_buffer[rank] = expected;
        });
        for (int rank = 0; rank < world_size; ++rank) {
          size_t differing = 0;
          for (size_t i = 0; i < chunk_elements; ++i) {
            differing += std::memcmp(&from_pieces[rank][i], &from_buffer[rank][i], sizeof(float)) != 0;
          }
          EXPECT_EQ(differing, 0u) << dtype_name(dtype) << ", rank " << rank << ", " << threads << " threads"
                                   << (through_default ? ", Comm's default" : ", in place")
                                   << "; replay: tests/comm_test --gtest_filter=ThreadComm.ReduceScatterPieces*";
        }
      }
    }
  }
}

TEST(ThreadComm, AllReduceMaxAndBroadcast) {
  ThreadCommWorld world(4);
  run_ranks(world, [&](Comm& comm) {
    std::vector<double> values = {static_cast<double>(comm.rank()), -static_cast<double>(comm.rank())};
    ASSERT_TRUE(comm.all_reduce_max(values).ok());
    EXPECT_EQ(values, (std::vector<double>{3.0, 0.0}));
    std::vector<int32_t> buffer = {comm.rank(), comm.rank()};
    ASSERT_TRUE(comm.broadcast(std::as_writable_bytes(std::span(buffer)), 2).ok());
    EXPECT_EQ(buffer, (std::vector<int32_t>{2, 2}));
    ASSERT_TRUE(comm.barrier().ok());
  });
}

TEST(ThreadComm, AbortReleasesRanksBlockedInACollective) {
  ThreadCommWorld world(3);
  std::vector<Status> statuses(3);
  std::vector<std::thread> threads;
  for (int rank = 1; rank < 3; ++rank) {
    threads.emplace_back([&, rank] { statuses[rank] = world.comm(rank).barrier(); });
  }
  // Rank 0 never arrives; it aborts the world instead.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  world.abort();
  for (std::thread& thread : threads) thread.join();
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_EQ(statuses[rank].code(), StatusCode::kAborted) << statuses[rank].to_string();
    EXPECT_NE(statuses[rank].message().find("rank " + std::to_string(rank)), std::string::npos);
  }
  EXPECT_EQ(world.comm(0).barrier().code(), StatusCode::kAborted);
  EXPECT_TRUE(world.aborted());
}

TEST(ThreadComm, AbortFromOutsideDuringLargeCollectivesNeverFreesABufferInUse) {
  // Ranks loop over 8 MiB all-gathers whose send buffers die when the call returns; the
  // world is aborted from another thread mid-flight. Every rank must end with kAborted, and
  // no rank may return (and free its buffer) while another still copies from it.
  ThreadCommWorld world(4);
  std::vector<Status> statuses(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      for (;;) {
        std::vector<std::byte> send(8 << 20, std::byte{static_cast<unsigned char>(rank)});
        std::vector<std::byte> receive(send.size() * 4);
        Status status = world.comm(rank).all_gather(send, receive);
        if (!status.ok()) {
          statuses[rank] = status;
          return;
        }
        for (int source = 0; source < 4; ++source) {
          ASSERT_EQ(receive[static_cast<size_t>(source) * send.size()], std::byte{static_cast<unsigned char>(source)});
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  world.abort();
  for (std::thread& thread : threads) thread.join();
  for (const Status& status : statuses) EXPECT_EQ(status.code(), StatusCode::kAborted);
}

TEST(ThreadComm, GatherFillsOnlyTheRoot) {
  ThreadCommWorld world(3);
  std::vector<std::vector<int32_t>> received(3);
  run_ranks(world, [&](Comm& comm) {
    std::vector<int32_t> send = {comm.rank() + 1};
    std::vector<int32_t> receive(comm.rank() == 1 ? 3 : 0);
    ASSERT_TRUE(comm.gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(receive)), 1).ok());
    received[comm.rank()] = receive;
  });
  EXPECT_EQ(received[1], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(received[0].empty());
  EXPECT_TRUE(received[2].empty());
}

TEST(ThreadComm, SixtyFourRanksOnTwoCores) {
  ThreadCommWorld world(64);
  std::vector<int64_t> sums(64);
  run_ranks(world, [&](Comm& comm) {
    std::vector<int64_t> send = {comm.rank()};
    std::vector<int64_t> receive(64);
    for (int round = 0; round < 20; ++round) {
      ASSERT_TRUE(comm.all_gather(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(receive))).ok());
    }
    int64_t sum = 0;
    for (int64_t value : receive) sum += value;
    sums[comm.rank()] = sum;
  });
  for (int64_t sum : sums) EXPECT_EQ(sum, 63 * 64 / 2);
}

}  // namespace
}  // namespace zerosim
