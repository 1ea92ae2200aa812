#include "core/cuda/cuda_backend_base.h"

#include <algorithm>
#include <limits>

#include "core/cuda/cuda_resident_state.h"
#include "core/cuda/device_adamw.h"

namespace zerosim {

namespace {

// The ordered product's tiles: 64 x 64 outputs per block of 16 x 16 threads (4 x 4 each, rows
// ty + 16 i and columns tx + 16 j), the inner index staged 16 at a time through shared memory.
// Tiling only decides which thread holds which output; each output is still one left fold over
// the inner index in order.
constexpr int kTile = 64;
constexpr int kInnerTile = 16;
constexpr int kSide = 16;

__global__ void ordered_product_kernel(int64_t rows, int64_t columns, int64_t inner, const float* a, bool a_transposed,
                                       const float* b, bool b_transposed, float* c) {
  __shared__ float a_tile[kInnerTile][kTile];
  __shared__ float b_tile[kInnerTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y, thread = ty * kSide + tx;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, column0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float sums[4][4];
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + ty + kSide * i, col = column0 + tx + kSide * j;
      sums[i][j] = r < rows && col < columns ? c[r * columns + col] : 0.0f;
    }
  }
  for (int64_t k0 = 0; k0 < inner; k0 += kInnerTile) {
    const int k_count = inner - k0 < kInnerTile ? static_cast<int>(inner - k0) : kInnerTile;
    for (int index = thread; index < kInnerTile * kTile; index += kSide * kSide) {
      // The contiguous index of each operand varies fastest across threads.
      const int kk_a = a_transposed ? index / kTile : index % kInnerTile;
      const int m = a_transposed ? index % kTile : index / kInnerTile;
      const int64_t r = row0 + m, k = k0 + kk_a;
      a_tile[kk_a][m] = r < rows && k < inner ? (a_transposed ? a[k * rows + r] : a[r * inner + k]) : 0.0f;
      const int kk_b = b_transposed ? index % kInnerTile : index / kTile;
      const int n = b_transposed ? index / kInnerTile : index % kTile;
      const int64_t col = column0 + n, kb = k0 + kk_b;
      b_tile[kk_b][n] = col < columns && kb < inner ? (b_transposed ? b[col * inner + kb] : b[kb * columns + col]) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < k_count; ++kk) {
      float a_values[4], b_values[4];
      for (int i = 0; i < 4; ++i) a_values[i] = a_tile[kk][ty + kSide * i];
      for (int j = 0; j < 4; ++j) b_values[j] = b_tile[kk][tx + kSide * j];
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) sums[i][j] = __fadd_rn(sums[i][j], __fmul_rn(a_values[i], b_values[j]));
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + ty + kSide * i, col = column0 + tx + kSide * j;
      if (r < rows && col < columns) c[r * columns + col] = sums[i][j];
    }
  }
}

}  // namespace

CudaBackendBase::CudaBackendBase(int device, CudaGemm gemm) : device_(device), gemm_(gemm) {}

CudaBackendBase::~CudaBackendBase() {
  resident_.reset();
  cudaSetDevice(device_);
  if (cublas_ != nullptr) blas_library_->destroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackendBase::start() {
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
  if (gemm_ != CudaGemm::kCublas) return Status();
  ZEROSIM_ASSIGN_OR_RETURN(blas_library_, CublasLibrary::load());
  ZEROSIM_RETURN_IF_ERROR(blas("cublasCreate", blas_library_->create(&cublas_)));
  ZEROSIM_RETURN_IF_ERROR(blas("cublasSetStream", blas_library_->set_stream(cublas_, stream_)));
  // Plain fp32 FMA GEMMs (no TF32): the default math mode, named so that an environment
  // override cannot change what the mode computes.
  ZEROSIM_RETURN_IF_ERROR(blas("cublasSetMathMode", blas_library_->set_math_mode(cublas_, CUBLAS_PEDANTIC_MATH)));
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
    return blas("cublasSgemm", blas_library_->sgemm(cublas_, b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                    a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, b.data,
                                                    b.transposed ? k : m, a.data, a.transposed ? n : k, &one, c, m));
  }
  const dim3 threads(kSide, kSide);
  const int64_t row_blocks = (rows + kTile - 1) / kTile, column_blocks = (columns + kTile - 1) / kTile;
  if (row_blocks > 65535 || column_blocks > std::numeric_limits<int>::max()) {
    return invalid_argument("ordered product of " + std::to_string(rows) + " x " + std::to_string(columns) +
                            " outputs: too many rows for one launch");
  }
  ordered_product_kernel<<<dim3(static_cast<unsigned>(column_blocks), static_cast<unsigned>(row_blocks)), threads, 0,
                           stream_>>>(rows, columns, inner, a.data, a.transposed, b.data, b.transposed, c);
  return cuda("ordered_product_kernel", cudaGetLastError());
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
