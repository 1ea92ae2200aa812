// cuBLAS, loaded when a `cuda-fast` backend is made instead of linked into zerosim: linking it
// made every zerosim command (`--help`, `ckpt verify`) pay cuBLAS's static initializers, about a
// quarter second of CPU per start, although only `--device cuda-fast` calls it. Each backend
// holds one CublasLibrary; the dynamic loader shares the mapping between them.
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace zerosim {

class CublasLibrary {
 public:
  // dlopen("libcublas.so.<major of the headers>") and the entry points the backend uses;
  // kFailedPrecondition naming the library and the dynamic loader's reason when absent.
  static Result<std::unique_ptr<CublasLibrary>> load();
  ~CublasLibrary();
  CublasLibrary(const CublasLibrary&) = delete;
  CublasLibrary& operator=(const CublasLibrary&) = delete;

  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // cublasGemmEx with a cublasComputeType_t (the header also declares an inline overload that
  // takes a cudaDataType, so decltype cannot name it).
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  using GemmBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void*, const void* const[], cudaDataType, int, const void* const[],
                                           cudaDataType, int, const void*, void* const[], cudaDataType, int, int,
                                           cublasComputeType_t, cublasGemmAlgo_t);
  GemmBatchedEx gemm_batched_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;

 private:
  CublasLibrary() = default;
  void* handle_ = nullptr;
};

}  // namespace zerosim
