#include "core/cuda/cuda_backend_base.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_resident_state.h"
#include "core/cuda/device_adamw.h"
#include "core/cuda/device_cast.h"
#include "core/cuda/ordered_product.h"

namespace zerosim {

namespace {

constexpr int kBroadcastThreads = 256;

// out [rows, width] = `row` in every row: a thread a column (T: float, or float4 for four
// columns when the rows are 16-byte aligned), over the rows of its block's slice; no division
// per element (a 64-bit remainder had made this copy three times as slow as its writes).
template <typename T>
__global__ void broadcast_rows_kernel(int64_t rows, int64_t columns, const T* row, T* out) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= columns) return;
  const T value = row[j];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) out[r * columns + j] = value;
}

cudaError_t launch_broadcast_rows(int64_t rows, int64_t width, const float* row, float* out, cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const bool four = width % 4 == 0 && ((reinterpret_cast<uintptr_t>(row) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  const int64_t columns = four ? width / 4 : width;
  const int64_t column_blocks = (columns + kBroadcastThreads - 1) / kBroadcastThreads;
  if (column_blocks > std::numeric_limits<int>::max()) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(std::min<int64_t>(rows, 1024)));
  if (four) {
    broadcast_rows_kernel<float4><<<grid, kBroadcastThreads, 0, stream>>>(
        rows, columns, reinterpret_cast<const float4*>(row), reinterpret_cast<float4*>(out));
  } else {
    broadcast_rows_kernel<float><<<grid, kBroadcastThreads, 0, stream>>>(rows, columns, row, out);
  }
  return cudaGetLastError();
}

}  // namespace

CudaBackendBase::CudaBackendBase(int device, CudaGemm gemm, DType model_dtype)
    : device_(device),
      gemm_(gemm),
      product_compute_type_(model_dtype == DType::kBf16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                            : model_dtype == DType::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                          : CUBLAS_COMPUTE_32F_PEDANTIC),
      product_operand_dtype_(model_dtype == DType::kBf16 || model_dtype == DType::kFp16 ? model_dtype : DType::kFp32) {}

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
                                float* c, RoundedMatrix* a_rounded, RoundedMatrix* b_rounded, int64_t c_stride) {
  if (rows == 0 || columns == 0 || inner == 0) return Status();
  const int64_t ldc = c_stride == 0 ? columns : c_stride;
  ZEROSIM_CHECK(ldc >= columns, "a product's C rows at least `columns` apart");
  ZEROSIM_CHECK(ldc == columns || gemm_ == CudaGemm::kCublas, "the ordered product writes packed rows");
  if (gemm_ == CudaGemm::kCublas) {
    constexpr int64_t kLimit = std::numeric_limits<int>::max();
    if (rows > kLimit || columns > kLimit || inner > kLimit || ldc > kLimit) {
      return invalid_argument("cuBLAS product of " + std::to_string(rows) + " x " + std::to_string(inner) + " x " +
                              std::to_string(columns) + ": an extent passes 2^31");
    }
    // Row-major C = A B is column-major C^T = B^T A^T: a row-major operand read column-major is
    // already its transpose (no op), a stored transpose needs the op.
    int m = static_cast<int>(columns);
    const int n = static_cast<int>(rows);
    const float one = 1.0f;
    // A 16-bit run's operands are rounded to its type into rows padded with zeros to a multiple
    // of 8 elements, and an inner extent that is not a multiple of 8 is padded the same way
    // (the zero rows of an operand stored with `inner` rows): cuBLAS's tensor-core kernels need
    // 16-byte rows and take one-element-aligned kernels for an odd inner extent (GPT-2's head,
    // 50,257 columns: 0.6-0.9 ms a product on an H100); the zero terms add nothing. C stays fp32
    // in place, so a product whose C rows are not 16-byte aligned (a row stride not a multiple
    // of 4) keeps fp32 operands.
    const void* a_data = a.data;
    const void* b_data = b.data;
    int64_t a_ld = a.transposed ? rows : inner;  // the stored row's length
    int64_t b_ld = b.transposed ? inner : columns;
    int64_t inner_extent = inner;
    cudaDataType operand_type = CUDA_R_32F;
    cublasComputeType_t compute_type = product_compute_type_;
    if (product_operand_dtype_ != DType::kFp32 && ldc % 4 == 0) {
      inner_extent = padded_row_elements(inner);
      // Where C's rows have room, its columns too run to a multiple of 8: B's rounding holds
      // zeros there, so the padding gains zero terms, and cuBLAS takes its aligned kernels (an
      // odd column count, GPT-2's 50,257 logits, took a one-element-aligned one: 0.91 ms).
      if (padded_row_elements(columns) <= ldc) m = static_cast<int>(padded_row_elements(columns));
      RoundedMatrix& a_matrix = a_rounded != nullptr ? *a_rounded : rounded_a_;
      RoundedMatrix& b_matrix = b_rounded != nullptr ? *b_rounded : rounded_b_;
      rounded_a_.forget();
      rounded_b_.forget();
      // The unpadded operands that need rounding are rounded together in one launch.
      DeviceNarrowing packed[2];
      size_t packed_count = 0;
      ZEROSIM_RETURN_IF_ERROR(round_matrix(a.data, a.transposed ? inner : rows, a_ld, a_matrix, packed, packed_count));
      ZEROSIM_RETURN_IF_ERROR(round_matrix(b.data, b.transposed ? columns : inner, b_ld, b_matrix, packed, packed_count));
      if (packed_count > 0) {
        ZEROSIM_RETURN_IF_ERROR(device_cast_from_fp32_batch(
            product_operand_dtype_, std::span<const DeviceNarrowing>(packed, packed_count), stream_));
      }
      a_data = a_matrix.rounded_.as<void>();
      b_data = b_matrix.rounded_.as<void>();
      a_ld = padded_row_elements(a_ld);
      b_ld = padded_row_elements(b_ld);
      operand_type = product_operand_dtype_ == DType::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
      compute_type = CUBLAS_COMPUTE_32F;  // the operands are 16-bit already
    }
    if (a_ld > kLimit || b_ld > kLimit || inner_extent > kLimit) {
      return invalid_argument("cuBLAS product with operand rows of " + std::to_string(std::max(a_ld, b_ld)) +
                              " elements and an inner extent of " + std::to_string(inner_extent) + ": more than 2^31");
    }
    return blas("cublasGemmEx",
                blas_library_->gemm_ex(cublas_, b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, static_cast<int>(inner_extent),
                                       &one, b_data, operand_type,
                                       static_cast<int>(b_ld), a_data, operand_type, static_cast<int>(a_ld), &one, c,
                                       CUDA_R_32F, static_cast<int>(ldc), compute_type, CUBLAS_GEMM_DEFAULT));
  }
  if (rows > kOrderedProductMaxRows) {
    return invalid_argument("ordered product of " + std::to_string(rows) + " x " + std::to_string(columns) +
                            " outputs: more than " + std::to_string(kOrderedProductMaxRows) + " rows for one launch");
  }
  const OrderedProductTile tile = ordered_product_tile();
  return cuda((std::string("ordered product (") + ordered_product_tile_name(tile) + " tiles)").c_str(),
              launch_ordered_product(tile, rows, columns, inner, a, b, c, stream_));
}

Status CudaBackendBase::round_matrix(const float* source, int64_t rows, int64_t row_elements, RoundedMatrix& rounded,
                                     DeviceNarrowing* packed, size_t& packed_count) {
  if (rounded.filled_) {
    // The owner vouches for the values (a weight gathered again for the backward may sit
    // elsewhere, with the same bits); the shape must be the same.
    ZEROSIM_CHECK(rounded.rows_ == rows && rounded.row_elements_ == row_elements,
                  "a filled RoundedMatrix read as a matrix of its shape");
    return Status();
  }
  const int64_t padded = padded_row_elements(row_elements), padded_rows = padded_row_elements(rows);
  const size_t element_bytes = dtype_size_bytes(product_operand_dtype_);
  const size_t bytes = static_cast<size_t>(padded_rows * padded) * element_bytes;
  ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (rounded product operand)", rounded.rounded_.reserve(bytes)));
  if (padded == row_elements) {
    packed[packed_count++] = DeviceNarrowing{source, rounded.rounded_.as<std::byte>(), rows * row_elements};
  } else {
    ZEROSIM_RETURN_IF_ERROR(device_cast_rows_from_fp32(product_operand_dtype_, source, rows, row_elements, row_elements,
                                                       rounded.rounded_.as<std::byte>(), padded, stream_));
  }
  if (padded_rows > rows) {
    const size_t written = static_cast<size_t>(rows * padded) * element_bytes;
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemsetAsync (a product operand's zero rows)",
                                 cudaMemsetAsync(rounded.rounded_.as<std::byte>() + written, 0, bytes - written, stream_)));
  }
  rounded.rows_ = rows;
  rounded.row_elements_ = row_elements;
  rounded.filled_ = true;
  return Status();
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

Status CudaBackendBase::broadcast_rows(int64_t rows, int64_t width, const float* row, float* out) {
  return cuda("broadcast_rows_kernel", launch_broadcast_rows(rows, width, row, out, stream_));
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
