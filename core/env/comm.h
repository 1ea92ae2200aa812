// The Comm seam: collectives among the W ranks of one ZeRO partition group.
//
// Every collective is called by all ranks in the same order (as with NCCL). A collective
// that cannot complete because the world was aborted (a rank failed, or the simulator
// crashed the world) returns kAborted on every rank instead of blocking forever. Once every
// rank has entered a collective it completes (abort takes effect at the next one), so no
// rank frees a buffer that another is still reading.
//
// Determinism: the only reduction that reaches training state is
// reduce_scatter_accumulate, and it folds contributions in rank order (see below), never in
// arrival order. Everything else either moves bytes or reduces exactly (max).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor/dtype.h"

namespace zerosim {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // receive = concatenation over ranks 0..W-1 of every rank's `send` (all the same size).
  virtual Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) = 0;

  // all_gather for a caller that consumes each rank's bytes once: `visit(source, bytes)` is
  // called for source = 0..W-1 in order with every rank's `send`, the spans valid only during
  // the call. `visit` must neither throw nor fail: it may run between a collective's barriers,
  // where a rank that leaves early would strand the others. This default gathers into
  // `scratch` (resized to W x send) and visits its slices; a communicator whose ranks share
  // memory visits the senders' own buffers, so the caller's cast or copy out of them is the
  // only pass over the bytes.
  virtual Status all_gather_visit(std::span<const std::byte> send, std::vector<std::byte>& scratch,
                                  const std::function<void(int source, std::span<const std::byte> bytes)>& visit) {
    scratch.resize(send.size() * static_cast<size_t>(world_size()));
    ZEROSIM_RETURN_IF_ERROR(all_gather(send, scratch));
    for (int source = 0; source < world_size(); ++source) {
      visit(source, std::span<const std::byte>(scratch).subspan(static_cast<size_t>(source) * send.size(), send.size()));
    }
    return Status();
  }

  // On root_rank: receive = concatenation over ranks of every rank's `send`. Other ranks
  // pass an empty `receive`. Memory is W x send on the root only.
  virtual Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) = 0;

  // The gradient collective. `send` holds W consecutive chunks of chunk_element_count
  // elements of `dtype`; chunk j is this rank's contribution to rank j's slice. On return,
  // for every element i of this rank's slice:
  //     accumulator[i] = (...((accumulator[i] + c_0[i]) + c_1[i]) + ...) + c_{W-1}[i]
  // where c_r is rank r's chunk for this rank, widened to fp32, added in rank order 0..W-1.
  // Because micro-batch k*W + r is the one rank r computes at micro-step k, this continues
  // one left fold over global micro-batch order across micro-steps: the result does not
  // depend on W. The cost over a ring reduce-scatter: the same bytes move (each rank sends
  // (W-1)/W of its buffer), but as an all-to-all, and the owner keeps W chunks at once.
  virtual Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype,
                                           size_t chunk_element_count, std::span<float> accumulator) = 0;

  // One piece of a rank's gradient contribution, described instead of copied: `count` fp32
  // values from `values`, or `count` zeros where `values` is null.
  struct GradientPiece {
    const float* values = nullptr;
    size_t count = 0;
  };
  // reduce_scatter_accumulate with the send buffer described: chunk j (this rank's contribution
  // to rank j's slice) is the concatenation of pieces[chunk_first_piece[j] ..
  // chunk_first_piece[j + 1]) (W + 1 entries), each value narrowed to `dtype` as a send buffer
  // written by cast_from_fp32 holds it; every chunk holds chunk_element_count values, and every
  // rank's pieces have the same counts. The bits are those of building that buffer and calling
  // reduce_scatter_accumulate, which this default does (in `scratch`, narrowing on up to
  // `threads` threads); a communicator whose ranks share memory reads each rank's pieces in
  // place, so the pass that narrows the whole model's gradients into a buffer is not made.
  virtual Status reduce_scatter_pieces(std::span<const GradientPiece> pieces, std::span<const size_t> chunk_first_piece,
                                       DType dtype, size_t chunk_element_count, std::vector<std::byte>& scratch,
                                       std::span<float> accumulator, int threads);

  // Elementwise maximum over ranks (exact, order-free).
  virtual Status all_reduce_max(std::span<double> values) = 0;
  // Copies root's buffer into every rank's buffer.
  virtual Status broadcast(std::span<std::byte> buffer, int root_rank) = 0;
  virtual Status barrier() = 0;
};

// W ranks on threads in one process. Create the world once; hand comm(r) to the thread
// that runs rank r. abort() makes every pending and later collective return kAborted.
// `threads_per_rank`: the threads each rank's collectives may split their copies and sums
// over (the rank's share of the cores: the training loop's compute waits for its collectives);
// the bytes and sums are the same for any count.
class ThreadCommWorld {
 public:
  explicit ThreadCommWorld(int world_size, int threads_per_rank = 1);
  ~ThreadCommWorld();
  ThreadCommWorld(const ThreadCommWorld&) = delete;
  ThreadCommWorld& operator=(const ThreadCommWorld&) = delete;

  Comm& comm(int rank);
  int world_size() const;
  void abort();
  bool aborted() const;

  struct Shared;  // rendezvous state shared by the ranks (defined in the .cpp)

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Comm>> comms_;
};

}  // namespace zerosim
