#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/env/comm.h"
#include "core/tensor/parallel_copy.h"
#include "core/tensor/thread_split.h"

namespace zerosim {

// Rendezvous: every collective is publish (each rank posts a pointer to its send buffer),
// a barrier, each rank reads what it needs straight from the others' buffers, and a second
// barrier so that no rank reuses its buffer while another still reads it.
struct ThreadCommWorld::Shared {
  explicit Shared(int size) : world_size(size), send_slots(size), send_sizes(size) {}

  // Returns false when the world was aborted. An abortable wait (the first barrier of a
  // collective) gives up on abort; the second barrier does not: once every rank has
  // published, every rank is past the point of failure and only copying, so all of them
  // must arrive before any rank may free the buffer that others are reading.
  bool wait_for_all(bool abortable = true) {
    std::unique_lock lock(mutex);
    if (abortable && aborted) return false;
    const uint64_t my_generation = generation;
    if (++arrived == world_size) {
      arrived = 0;
      ++generation;
      wake_all.notify_all();
      return true;
    }
    wake_all.wait(lock, [&] { return generation != my_generation || (abortable && aborted); });
    return generation != my_generation;
  }

  void abort() {
    std::lock_guard lock(mutex);
    aborted = true;
    wake_all.notify_all();
  }

  const int world_size;
  std::mutex mutex;
  std::condition_variable wake_all;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const void*> send_slots;
  std::vector<size_t> send_sizes;
};

namespace {

class ThreadComm final : public Comm {
 public:
  ThreadComm(ThreadCommWorld::Shared& shared, int rank, int threads)
      : shared_(shared), rank_(rank), threads_(threads) {}

  int rank() const override { return rank_; }
  int world_size() const override { return shared_.world_size; }

  Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) override {
    ZEROSIM_CHECK(receive.size() == send.size() * static_cast<size_t>(world_size()), "all_gather receive size");
    ZEROSIM_RETURN_IF_ERROR(publish(send.data(), send.size()));
    for (int source = 0; source < world_size(); ++source) {
      ZEROSIM_CHECK(shared_.send_sizes[source] == send.size(), "all_gather: ranks disagree on the size");
      copy_in_parallel(receive.data() + source * send.size(), static_cast<const std::byte*>(shared_.send_slots[source]),
                       send.size(), threads_);
    }
    return finish();
  }

  Status all_gather_visit(std::span<const std::byte> send, std::vector<std::byte>&,
                          const std::function<void(int, std::span<const std::byte>)>& visit) override {
    ZEROSIM_RETURN_IF_ERROR(publish(send.data(), send.size()));
    for (int source = 0; source < world_size(); ++source) {
      ZEROSIM_CHECK(shared_.send_sizes[source] == send.size(), "all_gather: ranks disagree on the size");
      visit(source, std::span<const std::byte>(static_cast<const std::byte*>(shared_.send_slots[source]), send.size()));
    }
    return finish();
  }

  Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t chunk_element_count,
                                   std::span<float> accumulator) override {
    const size_t element_bytes = dtype_size_bytes(dtype);
    ZEROSIM_CHECK(send.size() == chunk_element_count * element_bytes * world_size(), "reduce_scatter send size");
    ZEROSIM_CHECK(accumulator.size() == chunk_element_count, "reduce_scatter accumulator size");
    chunks_.resize(static_cast<size_t>(world_size()));  // allocate before publishing: nothing may fail after
    // (run_in_ranges below throws nothing: a thread it cannot have leaves the range to this one)
    ZEROSIM_RETURN_IF_ERROR(publish(send.data(), send.size()));
    for (int source = 0; source < world_size(); ++source) {
      ZEROSIM_CHECK(shared_.send_sizes[source] == send.size(), "reduce_scatter: ranks disagree on the size");
      chunks_[static_cast<size_t>(source)] = static_cast<const std::byte*>(shared_.send_slots[source]) +
                                             static_cast<size_t>(rank_) * chunk_element_count * element_bytes;
    }
    // Ranges of the slice on the rank's threads, each a block at a time: the block's values from
    // every source widened and added in rank order, so each element is the left fold over the
    // ranks that comm.h promises, whatever the split.
    run_in_ranges(chunk_element_count, part_count(chunk_element_count, threads_, kCastElementsPerThread), 64,
                  [&](size_t first, size_t end, size_t) {
                    constexpr size_t kBlockElements = 2048;
                    float widened[kBlockElements];
                    for (size_t block = first; block < end; block += kBlockElements) {
                      const size_t count = std::min(kBlockElements, end - block);
                      for (const std::byte* chunk : chunks_) {
                        cast_to_fp32(dtype, chunk + block * element_bytes, widened, count);
                        for (size_t i = 0; i < count; ++i) accumulator[block + i] = accumulator[block + i] + widened[i];
                      }
                    }
                  });
    return finish();
  }

  // The pieces in place: each rank publishes where its pieces are, and the owner of a chunk
  // reads every rank's values for it straight from their gradients, narrowed and widened a
  // block at a time (fp32 values are added as they are: the narrowing and the widening would
  // copy their bits), then added in rank order as reduce_scatter_accumulate adds its chunks.
  Status reduce_scatter_pieces(std::span<const GradientPiece> pieces, std::span<const size_t> chunk_first_piece,
                               DType dtype, size_t chunk_element_count, std::vector<std::byte>&,
                               std::span<float> accumulator, int) override {
    const size_t world = static_cast<size_t>(world_size());
    ZEROSIM_CHECK(chunk_first_piece.size() == world + 1 && chunk_first_piece.back() == pieces.size(),
                  "reduce_scatter_pieces: a first piece per chunk and the end");
    ZEROSIM_CHECK(accumulator.size() == chunk_element_count, "reduce_scatter_pieces accumulator size");
    const size_t mine = chunk_first_piece[static_cast<size_t>(rank_)];
    const size_t my_pieces = chunk_first_piece[static_cast<size_t>(rank_) + 1] - mine;
    // Allocate before publishing: nothing may fail after.
    piece_starts_.resize(my_pieces + 1);
    piece_starts_[0] = 0;
    for (size_t k = 0; k < my_pieces; ++k) piece_starts_[k + 1] = piece_starts_[k] + pieces[mine + k].count;
    ZEROSIM_CHECK(piece_starts_.back() == chunk_element_count, "reduce_scatter_pieces: a chunk's pieces fill it");
    source_pieces_.resize(world);
    const PiecesInPlace published{pieces.data(), chunk_first_piece.data()};
    ZEROSIM_RETURN_IF_ERROR(publish(&published, sizeof published));
    for (size_t source = 0; source < world; ++source) {
      ZEROSIM_CHECK(shared_.send_sizes[source] == sizeof published, "reduce_scatter_pieces: ranks disagree on the call");
      const auto* theirs = static_cast<const PiecesInPlace*>(shared_.send_slots[source]);
      const size_t first = theirs->chunk_first_piece[static_cast<size_t>(rank_)];
      ZEROSIM_CHECK(theirs->chunk_first_piece[static_cast<size_t>(rank_) + 1] - first == my_pieces,
                    "reduce_scatter_pieces: ranks disagree on a chunk's pieces");
      source_pieces_[source] = theirs->pieces + first;
      for (size_t k = 0; k < my_pieces; ++k) {
        ZEROSIM_CHECK(source_pieces_[source][k].count == pieces[mine + k].count,
                      "reduce_scatter_pieces: ranks disagree on a piece's size");
      }
    }
    run_in_ranges(chunk_element_count, part_count(chunk_element_count, threads_, kCastElementsPerThread), 64,
                  [&](size_t first, size_t end, size_t) {
                    constexpr size_t kBlockElements = 2048;
                    std::byte narrowed[kBlockElements * sizeof(float)];
                    float widened[kBlockElements];
                    // The piece holding `first`, then each piece that overlaps [first, end).
                    size_t k = static_cast<size_t>(
                        std::upper_bound(piece_starts_.begin(), piece_starts_.end(), first) - piece_starts_.begin() - 1);
                    for (; k < my_pieces && piece_starts_[k] < end; ++k) {
                      const size_t piece_begin = piece_starts_[k], piece_end = piece_starts_[k + 1];
                      for (size_t block = std::max(first, piece_begin); block < std::min(end, piece_end);
                           block += kBlockElements) {
                        const size_t count = std::min({kBlockElements, end - block, piece_end - block});
                        float* sums = accumulator.data() + block;
                        for (const GradientPiece* source : source_pieces_) {
                          const float* values = source[k].values;
                          if (values == nullptr) {
                            for (size_t i = 0; i < count; ++i) sums[i] = sums[i] + 0.0f;
                            continue;
                          }
                          values += block - piece_begin;
                          if (dtype != DType::kFp32) {
                            cast_from_fp32(dtype, values, narrowed, count);
                            cast_to_fp32(dtype, narrowed, widened, count);
                            values = widened;
                          }
                          for (size_t i = 0; i < count; ++i) sums[i] = sums[i] + values[i];
                        }
                      }
                    }
                  });
    return finish();
  }

  Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) override {
    ZEROSIM_CHECK(root_rank >= 0 && root_rank < world_size(), "gather root rank out of range");
    if (rank_ == root_rank) {
      ZEROSIM_CHECK(receive.size() == send.size() * static_cast<size_t>(world_size()), "gather receive size");
    }
    ZEROSIM_RETURN_IF_ERROR(publish(send.data(), send.size()));
    if (rank_ == root_rank) {
      for (int source = 0; source < world_size(); ++source) {
        ZEROSIM_CHECK(shared_.send_sizes[source] == send.size(), "gather: ranks disagree on the size");
        copy_in_parallel(receive.data() + source * send.size(), static_cast<const std::byte*>(shared_.send_slots[source]),
                         send.size(), threads_);
      }
    }
    return finish();
  }

  Status all_reduce_max(std::span<double> values) override {
    result_.assign(values.begin(), values.end());  // allocate before publishing
    ZEROSIM_RETURN_IF_ERROR(publish(values.data(), values.size_bytes()));
    for (int source = 0; source < world_size(); ++source) {
      ZEROSIM_CHECK(shared_.send_sizes[source] == values.size_bytes(), "all_reduce_max: ranks disagree on the size");
      const auto* other = static_cast<const double*>(shared_.send_slots[source]);
      for (size_t i = 0; i < values.size(); ++i) {
        // NaN wins, as an overflow flag must.
        if (other[i] != other[i] || other[i] > result_[i]) result_[i] = other[i];
      }
    }
    // Write back only after the second barrier: others may still be reading `values`.
    Status status = finish();
    if (status.ok()) std::copy(result_.begin(), result_.end(), values.begin());
    return status;
  }

  Status broadcast(std::span<std::byte> buffer, int root_rank) override {
    ZEROSIM_CHECK(root_rank >= 0 && root_rank < world_size(), "broadcast root rank out of range");
    ZEROSIM_RETURN_IF_ERROR(publish(buffer.data(), buffer.size()));
    ZEROSIM_CHECK(shared_.send_sizes[root_rank] == buffer.size(), "broadcast: ranks disagree on the size");
    if (rank_ != root_rank && !buffer.empty()) std::memcpy(buffer.data(), shared_.send_slots[root_rank], buffer.size());
    return finish();
  }

  Status barrier() override {
    if (!shared_.wait_for_all()) return aborted_status("barrier");
    return Status();
  }

 private:
  Status aborted_status(const char* phase) const {
    return aborted("collective aborted on rank " + std::to_string(rank_) + " (" + phase +
                   "): another rank failed or the world was stopped");
  }

  Status publish(const void* data, size_t size_bytes) {
    {
      std::lock_guard lock(shared_.mutex);
      shared_.send_slots[rank_] = data;
      shared_.send_sizes[rank_] = size_bytes;
    }
    if (!shared_.wait_for_all()) return aborted_status("publish");
    return Status();
  }

  Status finish() {
    const bool completed = shared_.wait_for_all(/*abortable=*/false);
    ZEROSIM_CHECK(completed, "the second barrier of a collective cannot be aborted");
    return Status();
  }

  ThreadCommWorld::Shared& shared_;
  const int rank_;
  const int threads_;  // the rank's threads, which its copies and sums may use
  std::vector<const std::byte*> chunks_;
  // reduce_scatter_pieces: where each of this rank's pieces starts in its chunk, and each
  // rank's pieces of this rank's chunk.
  struct PiecesInPlace {
    const GradientPiece* pieces;
    const size_t* chunk_first_piece;
  };
  std::vector<size_t> piece_starts_;
  std::vector<const GradientPiece*> source_pieces_;
  std::vector<double> result_;
};

}  // namespace

ThreadCommWorld::ThreadCommWorld(int world_size, int threads_per_rank) : shared_(std::make_unique<Shared>(world_size)) {
  ZEROSIM_CHECK(world_size >= 1, "world size must be positive");
  ZEROSIM_CHECK(threads_per_rank >= 1, "threads per rank must be positive");
  for (int rank = 0; rank < world_size; ++rank) {
    comms_.push_back(std::make_unique<ThreadComm>(*shared_, rank, threads_per_rank));
  }
}

ThreadCommWorld::~ThreadCommWorld() = default;

Comm& ThreadCommWorld::comm(int rank) {
  ZEROSIM_CHECK(rank >= 0 && rank < world_size(), "rank out of range");
  return *comms_[rank];
}

int ThreadCommWorld::world_size() const { return shared_->world_size; }

void ThreadCommWorld::abort() { shared_->abort(); }

bool ThreadCommWorld::aborted() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->aborted;
}

}  // namespace zerosim
