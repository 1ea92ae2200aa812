// What the CUDA compute backends (the MLP's in device_compute_backend.cu, the transformer's in
// device_gpt_backend.cu) share: the device and its stream, cuBLAS for the fast mode (its own
// workspace; the products' math from the run's parameter type), AdamW on a sub-group through the fused kernel, the naming of
// CUDA and cuBLAS errors, and one product routine that both modes' dense layers go through.
// Host code, included by the CUDA backend's .cu files only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/cublas_library.h"
#include "core/cuda/device_array.h"
#include "core/cuda/device_cast.h"
#include "core/cuda/device_compute_backend.h"
#include "core/cuda/ordered_product.h"

namespace zerosim {

class CudaResidentState;

// An fp32 matrix, [rows, row_elements] row-major and packed, rounded to a 16-bit fast run's
// product type the way CudaBackendBase::product() rounds an operand: rows padded with zeros to
// a multiple of 8 elements, and zero rows after them up to a multiple of 8. The layout is the
// same for either orientation of use, so one rounding serves every product that reads the
// matrix: a dense layer's input and weight rounded for its forward product serve its backward
// weight-gradient and input-gradient products, and an output gradient rounded for one of those
// serves the other. product() fills an empty one on first use and afterwards trusts it for
// any matrix of its shape, wherever that sits (a weight gathered again for the backward has
// the same bits in another buffer): its owner forget()s it whenever the values change. The
// values a product reads are the same bits either way, so sharing changes no result, only the
// traffic.
class RoundedMatrix {
 public:
  void forget() { filled_ = false; }

 private:
  friend class CudaBackendBase;
  DeviceArray rounded_;
  int64_t rows_ = 0, row_elements_ = 0;
  bool filled_ = false;
};

class CudaBackendBase : public ComputeBackend {
 public:
  // `model_dtype`: the run's parameter type, which picks the fast mode's product math.
  CudaBackendBase(int device, CudaGemm gemm, DType model_dtype);
  ~CudaBackendBase() override;

  // Selects the device, makes the stream and, in the fast mode, the cuBLAS handle.
  Status start();
  std::string name() const override;
  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master, const float* gradient,
                     float* exp_avg, float* exp_avg_sq, size_t count) override;
  ResidentState* resident_state() override;

 protected:
  friend class CudaResidentState;
  // The model's stages over device memory: the stage's full fp32 weights (module order), and
  // for a backward its full gradients, which the stage adds to (the MLP's may write: each of its
  // parameters has one use). Enqueued on the stream; the callers synchronize.
  virtual Status forward_on_device(int64_t stage, std::span<const float* const> parameters) = 0;
  virtual Status backward_on_device(int64_t stage, std::span<const float* const> parameters,
                                    std::span<float* const> gradients) = 0;

  // C [rows, columns] = C + A [rows, inner] x B [inner, columns], row-major on the device,
  // enqueued on the stream. Deterministic mode: each element a left fold over `inner` in order
  // from C's value, one fused multiply-add a step (__fmaf_rn: vector_ops' add_product bits, for
  // either operand stored transposed); fast mode: cublasGemmEx with beta = 1. In a 16-bit run
  // the fast mode first rounds both operands to the run's type (the CPU's rounding; one launch
  // for both unless one is padded) and multiplies those on the tensor cores, accumulating in
  // fp32: the bf16 (fp16) kernels move half the bytes of the fp32 operands and run at twice
  // TF32's rate; a W = 1 run's weights are bf16 values already, so their rounding is exact and
  // only the activations lose bits. The rounded operands' rows, and the inner extent, are
  // padded with zeros to a multiple of 8 elements (the tensor-core kernels' 16-byte alignment),
  // whatever the extents; a product whose C rows are not 16-byte aligned (columns not a
  // multiple of 4) keeps its fp32 operands. `a_rounded` / `b_rounded`, where given, hold (or
  // receive) the operand's stored matrix rounded (RoundedMatrix); a filled one of another
  // shape is a programmer error. Without them the rounding lives for this product only.
  // `c_stride`: C's rows that many elements apart (fast mode only; 0: columns, packed), so that
  // a caller may pad C's rows to 16 bytes and keep the 16-bit operands; where the stride leaves
  // room, a 16-bit product also adds zero terms to C's padding up to a multiple of 8 columns.
  Status product(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b, float* c,
                 RoundedMatrix* a_rounded = nullptr, RoundedMatrix* b_rounded = nullptr, int64_t c_stride = 0);

  // Fast mode only: for each of `batch` entries, C = alpha A B (C's values replaced), row-major,
  // each operand given by a device array of `batch` device pointers and its row stride (`ld`,
  // in elements); `transposed` as for DeviceOperand. One cublasGemmBatchedEx call in
  // product_compute_type_.
  struct BatchedOperand {
    const float* const* pointers = nullptr;
    int64_t ld = 0;
    bool transposed = false;
  };
  Status batched_product(int64_t rows, int64_t columns, int64_t inner, BatchedOperand a, BatchedOperand b,
                         float* const* c, int64_t ldc, int64_t batch, float alpha);

  // out [rows, width] = `row` repeated in every row, enqueued on the stream (a layer's bias
  // before its product adds to it; both modes, the same bytes).
  Status broadcast_rows(int64_t rows, int64_t width, const float* row, float* out);

  // The micro-batch's loss, one device float, once the stream has computed it (waits for it).
  Result<float> loss_to_host(const float* device_loss);

  Status cuda(const char* call, cudaError_t error) const;
  Status blas(const char* call, cublasStatus_t status) const;
  // Copies host tensors into device arrays (grown as needed), in order, on the stream.
  Status upload(std::span<const std::vector<float>> tensors, std::vector<DeviceArray>& arrays, const char* what);

  int device_;
  CudaGemm gemm_;
  // The fast mode's product math: the tensor cores for 16-bit runs, pedantic fp32 for fp32 runs.
  cublasComputeType_t product_compute_type_ = CUBLAS_COMPUTE_32F_PEDANTIC;
  // The type product() rounds its operands to in the fast mode (fp32: none).
  DType product_operand_dtype_ = DType::kFp32;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasLibrary> blas_library_;  // loaded for CudaGemm::kCublas only
  cublasHandle_t cublas_ = nullptr;

 private:
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  DeviceArray cublas_workspace_;
  // A row of `row_elements` rounded to 16 bits, padded to 16 bytes.
  static int64_t padded_row_elements(int64_t row_elements) { return (row_elements + 7) / 8 * 8; }
  // Fills `rounded` (unless it is filled already) with `source`, [rows, row_elements]
  // fp32, rounded to product_operand_dtype_ (RoundedMatrix's layout): a padded matrix's rounding
  // and the zero rows are enqueued on the stream here, an unpadded one's rounding is added to
  // `packed` (`packed_count` jobs so far) for the caller's one batch.
  Status round_matrix(const float* source, int64_t rows, int64_t row_elements, RoundedMatrix& rounded,
                      DeviceNarrowing* packed, size_t& packed_count);
  RoundedMatrix rounded_a_, rounded_b_;  // a 16-bit fast product's operands used once
  DeviceArray optimizer_state_[4];  // master, gradient, exp_avg, exp_avg_sq of one sub-group
  std::unique_ptr<CudaResidentState> resident_;
};

// The transformer's backend (device_gpt_backend.cu), started.
Result<std::unique_ptr<ComputeBackend>> make_cuda_gpt_backend(const GptSpec& spec, int device, CudaGemm gemm,
                                                              DType model_dtype);

}  // namespace zerosim
