// The fast mode's (cuda-fast's) row and column reductions of the transformer, beside its
// attention rows (device_fast_attention.h): LayerNorm's statistics forward and backward, the
// softmax cross-entropy of the logits, and the column sums of a bias's and a LayerNorm's
// gradients. The deterministic mode keeps gpt.cpp's folds (one thread walks a row or a column in
// order, the CPU's bits); here the sums are trees, a warp's shuffles and a fixed split of the
// rows, so the result is the same function to rounding and the same bits run to run: every tree
// is fixed by the shapes alone (row width, row count), never by timing or the launch's blocks.
// The row kernels had taken 3 of a GPT-2 small step's 16 ms of device time on an H100, most of it
// one thread folding a row while the rest of its block waited.
// Host code declares the launches; the kernels live in device_fast_rows.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zerosim {

// Per row r of in [rows, width]: mean[r] and inverse_std[r] = 1 / sqrt(variance + epsilon), the
// variance the mean of squared deviations.
cudaError_t launch_fast_layer_norm_statistics(int64_t rows, int64_t width, const float* in, float epsilon, float* mean,
                                              float* inverse_std, cudaStream_t stream);

// Per row r: with d_hat = d_out x gamma, mean_d[r] = mean of d_hat, mean_dx[r] = mean of d_hat x normalized.
cudaError_t launch_fast_layer_norm_gradient_statistics(int64_t rows, int64_t width, const float* d_out,
                                                       const float* normalized, const float* gamma, float* mean_d,
                                                       float* mean_dx, cudaStream_t stream);

// Softmax cross-entropy of each row of `logits` [sequences x length, vocab], its rows
// `logits_stride` elements apart (at least vocab): the row of sequence s at position t predicts
// tokens[s * (length + 1) + t + 1]. Row r of `gradients` [sequences x length, vocab], packed,
// becomes the logits' gradient, (softmax - one_hot) x gradient_scale, and row_losses[r] =
// log(sum exp(z - max)) - (z[target] - max). `gradients` may be `logits` itself (in place, with
// logits_stride == vocab); otherwise they must not overlap. A row that fits the shared memory a
// block may opt in to (GPT-2's, on Hopper) is read from device memory once and kept on chip; a
// longer one is read three times; both give the same bits. A stride below vocab is refused
// (cudaErrorInvalidValue).
cudaError_t launch_fast_softmax_cross_entropy(int64_t sequences, int64_t length, int64_t vocab, const int32_t* tokens,
                                              float gradient_scale, const float* logits, int64_t logits_stride,
                                              float* gradients, float* row_losses, cudaStream_t stream);

// Floats of scratch launch_fast_column_sums needs for `rows` x `width`.
int64_t fast_column_sums_scratch_floats(int64_t rows, int64_t width);

// Per column j of in [rows, width]: sums[j] += the column's sum and, when `factor` is given,
// product_sums[j] += the sum of in x factor over the column. Rows are summed in fixed slices of
// kFastColumnSliceRows (each by a tree across the block's warps), then the slices' totals in
// order, in a second launch.
cudaError_t launch_fast_column_sums(int64_t rows, int64_t width, const float* in, const float* factor, float* sums,
                                    float* product_sums, float* scratch, cudaStream_t stream);

}  // namespace zerosim
