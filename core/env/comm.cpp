#include "core/env/comm.h"

#include <cstring>

namespace zerosim {

Status Comm::reduce_scatter_pieces(std::span<const GradientPiece> pieces, std::span<const size_t> chunk_first_piece,
                                   DType dtype, size_t chunk_element_count, std::vector<std::byte>& scratch,
                                   std::span<float> accumulator, int threads) {
  const size_t element_bytes = dtype_size_bytes(dtype);
  const size_t world = static_cast<size_t>(world_size());
  ZEROSIM_CHECK(chunk_first_piece.size() == world + 1 && chunk_first_piece.back() == pieces.size(),
                "reduce_scatter_pieces: a first piece per chunk and the end");
  scratch.resize(chunk_element_count * element_bytes * world);
  for (size_t chunk = 0; chunk < world; ++chunk) {
    std::byte* destination = scratch.data() + chunk * chunk_element_count * element_bytes;
    size_t written = 0;
    for (size_t k = chunk_first_piece[chunk]; k < chunk_first_piece[chunk + 1]; ++k) {
      const GradientPiece& piece = pieces[k];
      ZEROSIM_CHECK(written + piece.count <= chunk_element_count, "reduce_scatter_pieces: a chunk's pieces overflow it");
      // A narrowed 0.0f is all-zero bytes in every dtype.
      if (piece.values == nullptr) {
        std::memset(destination + written * element_bytes, 0, piece.count * element_bytes);
      } else {
        cast_from_fp32_threads(dtype, piece.values, destination + written * element_bytes, piece.count, threads);
      }
      written += piece.count;
    }
    ZEROSIM_CHECK(written == chunk_element_count, "reduce_scatter_pieces: a chunk's pieces fill it");
  }
  return reduce_scatter_accumulate(scratch, dtype, chunk_element_count, accumulator);
}

}  // namespace zerosim
