// The compute seam (core/engine/compute_backend.h) on a CUDA device: a rank's micro-batch
// forward, loss and backward run with deterministic kernels (the MLP's in device_mlp.h, the
// transformer's in device_gpt_backend.cu), and its AdamW updates with the fused kernel of
// device_adamw.h, so the device writes the CPU backend's bits.
//
// Where the data lives: the micro-batch's activations and the logits' gradient stay in device
// memory from begin_micro_batch to the last backward stage. The partitions either live in
// device memory too (the backend's ResidentState, cuda_resident_state.h, for ranks that share
// one GPU with their parameters not offloaded: gathers, the layer exchange and the norm's bins on
// the device, and AdamW there too unless the optimizer is offloaded, when the CPU steps it), or in
// host memory (every other run): then each stage's gathered weights come from the engine's
// host gather, its gradients go back to the engine's host exchange, and AdamW copies a
// sub-group's four arrays in and three back, so the engine's swap, exchange and checkpoint code
// is the CPU backend's.
//
// Two modes (CudaGemm):
//   * deterministic (the default): the kernels above, the CPU backend's bits;
//   * cuBLAS ("--device cuda-fast"): the dense products (the MLP's layers, the transformer's
//     Conv1D layers and tied head) are cublasGemmEx calls on fp32 arrays, every other kernel as
//     in the deterministic mode. Their math follows the run's parameter type: for bf16 and fp16
//     runs the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF / _16F: inputs down-converted to that
//     type or to TF32, as cuBLAS picks per shape, fp32 accumulation), which is what those runs'
//     16-bit parameters allow; for fp32 runs plain fp32 FMA (pedantic math: no TF32). Not the
//     CPU's bits. Still reproducible: cuBLAS gives the same bits at every run on GPUs of the
//     same architecture and SM count with a workspace of the handle's own, and every
//     micro-batch's products have the same shapes at any world size, so save, resume and a
//     change of world size are bit-identical within the mode, on the same GPU model.
//
// Device memory grows to the largest layer and micro-batch seen and is kept. Every error names
// the CUDA call, the device and the layer.
#pragma once

#include <memory>

#include "core/engine/compute_backend.h"

namespace zerosim {

enum class CudaGemm { kDeterministic, kCublas };

// A backend on CUDA device `device`, for the MLP or the transformer; `model_dtype` (the run's
// parameter type) picks the fast mode's product math. Fails (kFailedPrecondition) without the
// CUDA backend or when the device cannot be used.
Result<std::unique_ptr<ComputeBackend>> make_cuda_compute_backend(const ModelSpec& model, int device,
                                                                  CudaGemm gemm = CudaGemm::kDeterministic,
                                                                  DType model_dtype = DType::kFp32);

// The factory for TrainingOptions::compute: rank r runs on device r mod (devices visible), so W
// ranks share the GPUs round-robin. Touches no CUDA call until a rank makes its backend (so a
// process may fork before); that call fails, naming the rank, when no device is visible. Fails
// itself only without the CUDA backend.
Result<ComputeBackendFactory> cuda_compute_backend_factory(CudaGemm gemm = CudaGemm::kDeterministic);

}  // namespace zerosim
