// cublas_library.h: dlopen and dlsym. Host code, compiled by the C++ compiler.
#include "core/cuda/cublas_library.h"

#include <dlfcn.h>

namespace zerosim {

Result<std::unique_ptr<CublasLibrary>> CublasLibrary::load() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::unique_ptr<CublasLibrary> library(new CublasLibrary());
  library->handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle_ == nullptr) {
    const char* reason = ::dlerror();
    return failed_precondition("--device cuda-fast needs cuBLAS: cannot load " + name + " (" +
                               (reason != nullptr ? reason : "unknown reason") +
                               "); is the CUDA toolkit's lib64 on the loader's path?");
  }
  auto resolve = [&](auto& entry, const char* symbol) -> Status {
    void* address = ::dlsym(library->handle_, symbol);
    if (address == nullptr) return failed_precondition(name + " has no " + symbol + " (a cuBLAS older than the headers?)");
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(address);
    return Status();
  };
  ZEROSIM_RETURN_IF_ERROR(resolve(library->create, "cublasCreate_v2"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->destroy, "cublasDestroy_v2"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->set_stream, "cublasSetStream_v2"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->set_math_mode, "cublasSetMathMode"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->set_workspace, "cublasSetWorkspace_v2"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->sgemm, "cublasSgemm_v2"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->gemm_ex, "cublasGemmEx"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->gemm_batched_ex, "cublasGemmBatchedEx"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->status_name, "cublasGetStatusName"));
  ZEROSIM_RETURN_IF_ERROR(resolve(library->status_string, "cublasGetStatusString"));
  return library;
}

CublasLibrary::~CublasLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

}  // namespace zerosim
