#include "core/cuda/cuda_backend_base.h"

#include <algorithm>
#include <limits>

#include "core/cuda/cuda_resident_state.h"
#include "core/cuda/device_adamw.h"

namespace zerosim {

namespace {

// The ordered product: each output is one left fold over the inner index in order, from C's
// value, each step one fused multiply-add (rounded once, __fmaf_rn: the CPU's add_product
// bits); tiling only decides which thread holds which outputs. A block of 256 threads holds a
// kRows x kColumns tile of outputs, each thread a kThreadRows x kThreadColumns patch of
// adjacent ones (so its operands come out of shared
// memory as 16-byte vectors); the inner index is staged kInnerTile at a time, the next tile's
// operands loaded into registers while the current one is folded. Two shapes: 128 x
// 128 (8 x 8 a thread) where the product has enough tiles to fill the GPU twice over, else 64 x
// 64 (4 x 4), since a product of 1,024 x 768 outputs has only 48 tiles of 128 x 128 and the
// inner index cannot be split across blocks without changing the fold.
constexpr int kProductThreads = 256;
constexpr int kInnerTile = 16;

// `kCount` floats from 16-byte aligned shared memory.
template <int kCount>
__device__ inline void load_vector(const float* from, float* to) {
#pragma unroll
  for (int q = 0; q < kCount; q += 4) {
    const float4 v = *reinterpret_cast<const float4*>(from + q);
    to[q] = v.x;
    to[q + 1] = v.y;
    to[q + 2] = v.z;
    to[q + 3] = v.w;
  }
}

// Where element `index` of an operand's staged tile (kInnerTile inner indices x kExtent rows or
// columns) goes: with kInnerContiguous, consecutive elements walk the inner index, else the
// rows or columns.
template <int kExtent, bool kInnerContiguous>
__device__ inline void tile_place(int index, int& kk, int& other) {
  kk = kInnerContiguous ? index % kInnerTile : index / kExtent;
  other = kInnerContiguous ? index / kInnerTile : index % kExtent;
}

template <int kRows, int kColumns, bool kATransposed, bool kBTransposed>
__global__ void __launch_bounds__(kProductThreads)
    ordered_product_kernel(int64_t rows, int64_t columns, int64_t inner, const float* a, const float* b, float* c) {
  constexpr int kThreadColumns = kColumns * kRows / kProductThreads >= 64 ? 8 : 4;
  constexpr int kThreadRows = kRows * kColumns / kProductThreads / kThreadColumns;
  constexpr int kColumnThreads = kColumns / kThreadColumns;
  constexpr int kALoads = kInnerTile * kRows / kProductThreads, kBLoads = kInnerTile * kColumns / kProductThreads;
  static_assert(kThreadRows * kThreadColumns * kProductThreads == kRows * kColumns, "one patch per thread");
  static_assert(kThreadRows % 4 == 0 && kThreadColumns % 4 == 0, "patches are read as 16-byte vectors");
  static_assert(kALoads * kProductThreads == kInnerTile * kRows && kBLoads * kProductThreads == kInnerTile * kColumns,
                "every thread stages the same number of elements");
  __shared__ __align__(16) float a_tile[kInnerTile][kRows];
  __shared__ __align__(16) float b_tile[kInnerTile][kColumns];
  const int thread = static_cast<int>(threadIdx.x);
  const int tx = thread % kColumnThreads, ty = thread / kColumnThreads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows, column0 = static_cast<int64_t>(blockIdx.x) * kColumns;
  const int64_t my_row0 = row0 + ty * kThreadRows, my_column0 = column0 + tx * kThreadColumns;
  // Element q of this thread's share of a tile: its place in the tile (each operand's
  // contiguous index varies fastest across threads, so the loads coalesce). A's inner index is
  // contiguous unless A is stored transposed; B's only when B is.
  auto a_place = [&](int q, int& kk, int& m) {
    tile_place<kRows, !kATransposed>(thread + q * kProductThreads, kk, m);
  };
  auto b_place = [&](int q, int& kk, int& n) {
    tile_place<kColumns, kBTransposed>(thread + q * kProductThreads, kk, n);
  };
  // The next tile's operands travel into registers while the current tile is folded.
  float a_next[kALoads], b_next[kBLoads];
  auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int q = 0; q < kALoads; ++q) {
      int kk, m;
      a_place(q, kk, m);
      const int64_t r = row0 + m, k = k0 + kk;
      a_next[q] = r < rows && k < inner ? (kATransposed ? a[k * rows + r] : a[r * inner + k]) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kBLoads; ++q) {
      int kk, n;
      b_place(q, kk, n);
      const int64_t col = column0 + n, k = k0 + kk;
      b_next[q] = col < columns && k < inner ? (kBTransposed ? b[col * inner + k] : b[k * columns + col]) : 0.0f;
    }
  };
  auto stage_tile = [&]() {
#pragma unroll
    for (int q = 0; q < kALoads; ++q) {
      int kk, m;
      a_place(q, kk, m);
      a_tile[kk][m] = a_next[q];
    }
#pragma unroll
    for (int q = 0; q < kBLoads; ++q) {
      int kk, n;
      b_place(q, kk, n);
      b_tile[kk][n] = b_next[q];
    }
  };
  float sums[kThreadRows][kThreadColumns];
  for (int i = 0; i < kThreadRows; ++i) {
    for (int j = 0; j < kThreadColumns; ++j) {
      const int64_t r = my_row0 + i, col = my_column0 + j;
      sums[i][j] = r < rows && col < columns ? c[r * columns + col] : 0.0f;
    }
  }
  auto fold = [&](int kk) {
    float a_values[kThreadRows], b_values[kThreadColumns];
    load_vector<kThreadRows>(&a_tile[kk][ty * kThreadRows], a_values);
    load_vector<kThreadColumns>(&b_tile[kk][tx * kThreadColumns], b_values);
#pragma unroll
    for (int i = 0; i < kThreadRows; ++i) {
#pragma unroll
      for (int j = 0; j < kThreadColumns; ++j) sums[i][j] = __fmaf_rn(a_values[i], b_values[j], sums[i][j]);
    }
  };
  load_tile(0);
  for (int64_t k0 = 0; k0 < inner; k0 += kInnerTile) {
    stage_tile();
    __syncthreads();
    if (k0 + kInnerTile < inner) load_tile(k0 + kInnerTile);
    const int k_count = inner - k0 < kInnerTile ? static_cast<int>(inner - k0) : kInnerTile;
    if (k_count == kInnerTile) {
#pragma unroll
      for (int kk = 0; kk < kInnerTile; ++kk) fold(kk);
    } else {
      for (int kk = 0; kk < k_count; ++kk) fold(kk);
    }
    __syncthreads();
  }
  for (int i = 0; i < kThreadRows; ++i) {
    for (int j = 0; j < kThreadColumns; ++j) {
      const int64_t r = my_row0 + i, col = my_column0 + j;
      if (r < rows && col < columns) c[r * columns + col] = sums[i][j];
    }
  }
}

template <int kRows, int kColumns>
cudaError_t launch_ordered_product(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b,
                                   float* c, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((columns + kColumns - 1) / kColumns),
                  static_cast<unsigned>((rows + kRows - 1) / kRows));
  if (a.transposed && b.transposed) {
    ordered_product_kernel<kRows, kColumns, true, true><<<grid, kProductThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else if (a.transposed) {
    ordered_product_kernel<kRows, kColumns, true, false><<<grid, kProductThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else if (b.transposed) {
    ordered_product_kernel<kRows, kColumns, false, true><<<grid, kProductThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else {
    ordered_product_kernel<kRows, kColumns, false, false><<<grid, kProductThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  }
  return cudaGetLastError();
}

}  // namespace

CudaBackendBase::CudaBackendBase(int device, CudaGemm gemm, DType model_dtype)
    : device_(device),
      gemm_(gemm),
      product_compute_type_(model_dtype == DType::kBf16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                            : model_dtype == DType::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                          : CUBLAS_COMPUTE_32F_PEDANTIC) {}

CudaBackendBase::~CudaBackendBase() {
  resident_.reset();
  cudaSetDevice(device_);
  if (cublas_ != nullptr) blas_library_->destroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackendBase::start() {
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaDeviceGetAttribute (multiprocessors)",
                               cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_)));
  if (gemm_ != CudaGemm::kCublas) return Status();
  ZEROSIM_ASSIGN_OR_RETURN(blas_library_, CublasLibrary::load());
  ZEROSIM_RETURN_IF_ERROR(blas("cublasCreate", blas_library_->create(&cublas_)));
  ZEROSIM_RETURN_IF_ERROR(blas("cublasSetStream", blas_library_->set_stream(cublas_, stream_)));
  // Each product's compute type (product_compute_type_) says whether it may use the tensor
  // cores; the handle's math mode is named too, so that no default can differ: pedantic for
  // fp32 runs, and for 16-bit runs the default, which lets the FAST compute types take effect.
  const cublasMath_t math =
      product_compute_type_ == CUBLAS_COMPUTE_32F_PEDANTIC ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
  ZEROSIM_RETURN_IF_ERROR(blas("cublasSetMathMode", blas_library_->set_math_mode(cublas_, math)));
  // A workspace of its own, so that no other stream's use of cuBLAS can change the algorithm's
  // reduction order (cuBLAS's reproducibility condition).
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (cuBLAS workspace)", cublas_workspace_.reserve(kCublasWorkspaceBytes)));
  return blas("cublasSetWorkspace",
              blas_library_->set_workspace(cublas_, cublas_workspace_.as<void>(), kCublasWorkspaceBytes));
}

ResidentState* CudaBackendBase::resident_state() {
  if (!resident_) resident_ = std::make_unique<CudaResidentState>(*this);
  return resident_.get();
}

std::string CudaBackendBase::name() const {
  return std::string(gemm_ == CudaGemm::kCublas ? "cuda-fast:" : "cuda:") + std::to_string(device_);
}

Status CudaBackendBase::adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master,
                                    const float* gradient, float* exp_avg, float* exp_avg_sq, size_t count) {
  if (count == 0) return Status();
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
  const size_t bytes = count * sizeof(float);
  const float* sources[4] = {master, gradient, exp_avg, exp_avg_sq};
  for (int k = 0; k < 4; ++k) {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (optimizer state)", optimizer_state_[k].reserve(bytes)));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (optimizer state in)",
                                 cudaMemcpyAsync(optimizer_state_[k].as<float>(), sources[k], bytes,
                                                 cudaMemcpyHostToDevice, stream_)));
  }
  const DeviceAdamTensor tensor{optimizer_state_[0].as<float>(), optimizer_state_[1].as<float>(),
                                optimizer_state_[2].as<float>(), optimizer_state_[3].as<float>(),
                                static_cast<int64_t>(count)};
  ZEROSIM_RETURN_IF_ERROR(device_adam_update(scalars, grad_multiplier, std::span<const DeviceAdamTensor>(&tensor, 1), stream_));
  float* destinations[3] = {master, exp_avg, exp_avg_sq};
  const int source_of[3] = {0, 2, 3};
  for (int k = 0; k < 3; ++k) {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (optimizer state out)",
                                 cudaMemcpyAsync(destinations[k], optimizer_state_[source_of[k]].as<float>(), bytes,
                                                 cudaMemcpyDeviceToHost, stream_)));
  }
  return cuda("cudaStreamSynchronize (optimizer step)", cudaStreamSynchronize(stream_));
}

Status CudaBackendBase::product(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b,
                                float* c) {
  if (rows == 0 || columns == 0 || inner == 0) return Status();
  if (gemm_ == CudaGemm::kCublas) {
    constexpr int64_t kLimit = std::numeric_limits<int>::max();
    if (rows > kLimit || columns > kLimit || inner > kLimit) {
      return invalid_argument("cuBLAS product of " + std::to_string(rows) + " x " + std::to_string(inner) + " x " +
                              std::to_string(columns) + ": an extent passes 2^31");
    }
    // Row-major C = A B is column-major C^T = B^T A^T: a row-major operand read column-major is
    // already its transpose (no op), a stored transpose needs the op.
    const int m = static_cast<int>(columns), n = static_cast<int>(rows), k = static_cast<int>(inner);
    const float one = 1.0f;
    return blas("cublasGemmEx",
                blas_library_->gemm_ex(cublas_, b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, b.data, CUDA_R_32F,
                                       b.transposed ? k : m, a.data, CUDA_R_32F, a.transposed ? n : k, &one, c,
                                       CUDA_R_32F, m, product_compute_type_, CUBLAS_GEMM_DEFAULT));
  }
  // Small tiles (64 rows) bound the grid's rows; 128 x 128 tiles only where they fill the GPU.
  if ((rows + 63) / 64 > 65535 || (columns + 63) / 64 > std::numeric_limits<int>::max()) {
    return invalid_argument("ordered product of " + std::to_string(rows) + " x " + std::to_string(columns) +
                            " outputs: too many rows for one launch");
  }
  const int64_t large_tiles = ((rows + 127) / 128) * ((columns + 127) / 128);
  if (large_tiles >= 2 * static_cast<int64_t>(multiprocessors_)) {
    return cuda("ordered_product_kernel (128 x 128)", launch_ordered_product<128, 128>(rows, columns, inner, a, b, c, stream_));
  }
  return cuda("ordered_product_kernel (64 x 64)", launch_ordered_product<64, 64>(rows, columns, inner, a, b, c, stream_));
}

Status CudaBackendBase::batched_product(int64_t rows, int64_t columns, int64_t inner, BatchedOperand a,
                                        BatchedOperand b, float* const* c, int64_t ldc, int64_t batch, float alpha) {
  ZEROSIM_CHECK(gemm_ == CudaGemm::kCublas, "batched products are the fast mode's");
  if (rows == 0 || columns == 0 || inner == 0 || batch == 0) return Status();
  constexpr int64_t kLimit = std::numeric_limits<int>::max();
  for (const int64_t extent : {rows, columns, inner, batch, a.ld, b.ld, ldc}) {
    if (extent > kLimit) {
      return invalid_argument("cuBLAS batched product of " + std::to_string(batch) + " x " + std::to_string(rows) +
                              " x " + std::to_string(inner) + " x " + std::to_string(columns) + ": an extent passes 2^31");
    }
  }
  // As in product(): row-major C = A B is column-major C^T = B^T A^T.
  const float zero = 0.0f;
  return blas("cublasGemmBatchedEx",
              blas_library_->gemm_batched_ex(
                  cublas_, b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                  static_cast<int>(columns), static_cast<int>(rows), static_cast<int>(inner), &alpha,
                  reinterpret_cast<const void* const*>(b.pointers), CUDA_R_32F, static_cast<int>(b.ld),
                  reinterpret_cast<const void* const*>(a.pointers), CUDA_R_32F, static_cast<int>(a.ld), &zero,
                  reinterpret_cast<void* const*>(c), CUDA_R_32F, static_cast<int>(ldc), static_cast<int>(batch),
                  product_compute_type_, CUBLAS_GEMM_DEFAULT));
}

Result<float> CudaBackendBase::loss_to_host(const float* device_loss) {
  float loss = 0.0f;
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (loss)",
                               cudaMemcpyAsync(&loss, device_loss, sizeof(float), cudaMemcpyDeviceToHost, stream_)));
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaStreamSynchronize (loss)", cudaStreamSynchronize(stream_)));
  return loss;
}

Status CudaBackendBase::cuda(const char* call, cudaError_t error) const {
  if (error == cudaSuccess) return Status();
  return failed_precondition(std::string(call) + " on CUDA device " + std::to_string(device_) + ": " +
                             cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

Status CudaBackendBase::blas(const char* call, cublasStatus_t status) const {
  if (status == CUBLAS_STATUS_SUCCESS) return Status();
  return failed_precondition(std::string(call) + " on CUDA device " + std::to_string(device_) + ": " +
                             blas_library_->status_name(status) + " (" + blas_library_->status_string(status) + ")");
}

Status CudaBackendBase::upload(std::span<const std::vector<float>> tensors, std::vector<DeviceArray>& arrays,
                               const char* what) {
  if (arrays.size() < tensors.size()) arrays.resize(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const size_t bytes = tensors[k].size() * sizeof(float);
    ZEROSIM_RETURN_IF_ERROR(cuda(what, arrays[k].reserve(bytes)));
    if (bytes == 0) continue;
    ZEROSIM_RETURN_IF_ERROR(
        cuda(what, cudaMemcpyAsync(arrays[k].as<float>(), tensors[k].data(), bytes, cudaMemcpyHostToDevice, stream_)));
  }
  return Status();
}

}  // namespace zerosim
