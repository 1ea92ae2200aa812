#include "core/cuda/device_compute_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_backend_base.h"
#include "core/cuda/device_dataset.h"
#include "core/cuda/device_mlp.h"
#include "core/model/mlp.h"

namespace zerosim {

namespace {

constexpr int kThreads = 256;
int blocks_for(int64_t work) { return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 65535)); }

// The fast mode's elementwise pieces around the GEMMs.
__global__ void relu_kernel(int64_t count, const float* pre_activation, float* next_input) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    next_input[k] = pre_activation[k] > 0.0f ? pre_activation[k] : 0.0f;
  }
}
__global__ void column_sum_kernel(int64_t samples, int64_t out, const float* output_gradient, float* bias_gradient) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < out;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t s = 0; s < samples; ++s) sum += output_gradient[s * out + o];
    bias_gradient[o] = sum;
  }
}
__global__ void relu_mask_kernel(int64_t count, const float* previous_pre_activation, float* gradient) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!(previous_pre_activation[k] > 0.0f)) gradient[k] = 0.0f;
  }
}

class CudaComputeBackend final : public CudaBackendBase {
 public:
  CudaComputeBackend(const ModelSpec& model, int device, CudaGemm gemm, DType model_dtype)
      : CudaBackendBase(device, gemm, model_dtype), model_(model) {}

  Status start() {
    ZEROSIM_RETURN_IF_ERROR(CudaBackendBase::start());
    const size_t layer_count = static_cast<size_t>(mlp_layer_count(model_));
    inputs_.resize(layer_count);
    pre_activations_.resize(layer_count);
    return Status();
  }

  // The device makes the samples (device_dataset.h) when the dataset fits the model; otherwise
  // the host does, and begin_micro_batch's check names the mismatch.
  Result<bool> make_synthetic_batches(const SyntheticDataset& dataset) override {
    makes_batches_ = false;
    const DatasetSpec& spec = dataset.spec();
    if (spec.feature_count != model_.layer_widths.front() || spec.class_count != model_.layer_widths.back()) return false;
    const std::span<const float> teacher = dataset.teacher_by_feature();
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (dataset teacher)", teacher_.reserve(teacher.size_bytes())));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpy (dataset teacher)", cudaMemcpy(teacher_.as<float>(), teacher.data(),
                                                                          teacher.size_bytes(), cudaMemcpyHostToDevice)));
    dataset_spec_ = spec;
    makes_batches_ = true;
    return true;
  }

  Status begin_micro_batch(const MicroBatchInput& batch) override {
    const int64_t samples = batch.samples;
    const std::span<const float> input = batch.features;
    const std::span<const int32_t> labels = batch.labels;
    if (makes_batches_) {
      ZEROSIM_CHECK(batch.sample_indices.size() == static_cast<size_t>(samples) && input.empty() && labels.empty(),
                    "a micro-batch the device makes comes as one sample index per sample");
    } else {
      ZEROSIM_CHECK(input.size() == static_cast<size_t>(samples * model_.layer_widths.front()) &&
                        labels.size() == static_cast<size_t>(samples),
                    "micro-batch input or labels do not match the sample count");
    }
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    samples_ = samples;
    int64_t widest = 0;
    for (size_t l = 0; l < inputs_.size(); ++l) {
      const int64_t in = model_.layer_widths[l], out = model_.layer_widths[l + 1];
      widest = std::max({widest, in, out});
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (layer input)", inputs_[l].reserve(bytes_of(samples * in))));
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (layer output)", pre_activations_[l].reserve(bytes_of(samples * out))));
    }
    for (DeviceArray& gradient : output_gradients_) {
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (activation gradient)", gradient.reserve(bytes_of(samples * widest))));
    }
    ZEROSIM_RETURN_IF_ERROR(
        cuda("cudaMalloc (labels)", labels_.reserve(static_cast<size_t>(samples) * sizeof(int32_t))));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (sample losses)", sample_losses_.reserve(bytes_of(samples + 1))));
    if (makes_batches_) {
      const std::span<const int64_t> indices = batch.sample_indices;
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (sample indices)", sample_indices_.reserve(indices.size_bytes())));
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (sample indices)",
                                   cudaMemcpyAsync(sample_indices_.as<int64_t>(), indices.data(), indices.size_bytes(),
                                                   cudaMemcpyHostToDevice, stream_)));
      return device_synthetic_batch(dataset_spec_, teacher_.as<float>(), sample_indices_.as<int64_t>(), samples,
                                    inputs_[0].as<float>(), labels_.as<int32_t>(), stream_);
    }
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (micro-batch input)",
                                 cudaMemcpyAsync(inputs_[0].as<float>(), input.data(), input.size_bytes(),
                                                 cudaMemcpyHostToDevice, stream_)));
    return cuda("cudaMemcpyAsync (labels)",
                cudaMemcpyAsync(labels_.as<int32_t>(), labels.data(), labels.size_bytes(), cudaMemcpyHostToDevice, stream_));
  }

  Status forward(int64_t stage, std::span<const std::vector<float>> parameters) override {
    ZEROSIM_CHECK(parameters.size() == 2, "an MLP layer has a weight and a bias");
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    ZEROSIM_RETURN_IF_ERROR(upload_weights(stage, parameters[0], parameters[1]));
    const float* const pointers[2] = {weight_.as<float>(), bias_.as<float>()};
    return forward_on_device(stage, pointers);
  }

  Result<float> loss(float gradient_scale) override {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    const int64_t classes = model_.layer_widths.back();
    float* sample_losses = sample_losses_.as<float>();
    ZEROSIM_RETURN_IF_ERROR(device_softmax_cross_entropy(samples_, classes, pre_activations_.back().as<float>(),
                                                         labels_.as<int32_t>(), gradient_scale,
                                                         output_gradients_[0].as<float>(), sample_losses,
                                                         sample_losses + samples_, stream_));
    current_gradient_ = 0;
    return loss_to_host(sample_losses + samples_);
  }

  Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                  std::span<std::vector<float>> gradients) override {
    ZEROSIM_CHECK(parameters.size() == 2 && gradients.size() == 2, "an MLP layer has a weight and a bias");
    const int64_t layer_index = static_cast<int64_t>(inputs_.size()) - 1 - stage;
    const std::span<const float> weight = parameters[0];
    const std::span<float> weight_gradient = gradients[0], bias_gradient = gradients[1];
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    const size_t l = static_cast<size_t>(layer_index);
    ZEROSIM_CHECK(weight_gradient.size() == weight.size() &&
                      bias_gradient.size() == static_cast<size_t>(model_.layer_widths[l + 1]),
                  "layer gradient sizes do not match the layer");
    ZEROSIM_RETURN_IF_ERROR(upload_weights(layer_index, weight, {}));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (weight gradient)", weight_gradient_.reserve(weight_gradient.size_bytes())));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (bias gradient)", bias_gradient_.reserve(bias_gradient.size_bytes())));
    const float* const weights[2] = {weight_.as<float>(), nullptr};
    float* const sums[2] = {weight_gradient_.as<float>(), bias_gradient_.as<float>()};
    ZEROSIM_RETURN_IF_ERROR(backward_on_device(stage, weights, sums));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (weight gradient)",
                                 cudaMemcpyAsync(weight_gradient.data(), weight_gradient_.as<float>(),
                                                 weight_gradient.size_bytes(), cudaMemcpyDeviceToHost, stream_)));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemcpyAsync (bias gradient)",
                                 cudaMemcpyAsync(bias_gradient.data(), bias_gradient_.as<float>(),
                                                 bias_gradient.size_bytes(), cudaMemcpyDeviceToHost, stream_)));
    return in_layer(layer_index, cuda("cudaStreamSynchronize (layer gradients)", cudaStreamSynchronize(stream_)));
  }

 protected:
  Status forward_on_device(int64_t stage, std::span<const float* const> parameters) override {
    ZEROSIM_CHECK(parameters.size() == 2, "an MLP layer has a weight and a bias");
    const int64_t layer_index = stage;
    const size_t l = static_cast<size_t>(layer_index);
    const bool last = l + 1 == inputs_.size();
    const float* weight = parameters[0];
    const float* bias = parameters[1];
    if (gemm_ == CudaGemm::kCublas) return in_layer(layer_index, fast_forward(layer_index, weight, bias));
    return in_layer(layer_index, device_mlp_layer_forward(shape(layer_index), inputs_[l].as<float>(), weight, bias,
                                                          pre_activations_[l].as<float>(),
                                                          last ? nullptr : inputs_[l + 1].as<float>(), stream_));
  }

  // Writes the layer's weight and bias gradients (each MLP parameter has one use).
  Status backward_on_device(int64_t stage, std::span<const float* const> parameters,
                            std::span<float* const> gradients) override {
    ZEROSIM_CHECK(parameters.size() == 2 && gradients.size() == 2, "an MLP layer has a weight and a bias");
    const int64_t layer_index = static_cast<int64_t>(inputs_.size()) - 1 - stage;
    const size_t l = static_cast<size_t>(layer_index);
    const float* weight = parameters[0];
    float* weight_gradient = gradients[0];
    float* bias_gradient = gradients[1];
    const bool first = l == 0;
    const int next = 1 - current_gradient_;
    ZEROSIM_RETURN_IF_ERROR(in_layer(
        layer_index,
        gemm_ == CudaGemm::kCublas
            ? fast_backward(layer_index, weight, output_gradients_[current_gradient_].as<float>(),
                            first ? nullptr : output_gradients_[next].as<float>(), weight_gradient, bias_gradient)
            : device_mlp_layer_backward(shape(layer_index), inputs_[l].as<float>(), weight,
                                        output_gradients_[current_gradient_].as<float>(),
                                        first ? nullptr : pre_activations_[l - 1].as<float>(), weight_gradient,
                                        bias_gradient, first ? nullptr : output_gradients_[next].as<float>(), stream_)));
    current_gradient_ = next;
    return Status();
  }

 private:
  // Row-major [samples, out] = [samples, in] x [out, in]^T is, to column-major cuBLAS, the
  // [out, samples] product W^T(as stored) x X: op(A) = T on the weight (lda = in).
  Status fast_forward(int64_t layer_index, const float* weight, const float* bias) {
    const size_t l = static_cast<size_t>(layer_index);
    const DeviceLayerShape s = shape(layer_index);
    float* pre_activation = pre_activations_[l].as<float>();
    ZEROSIM_RETURN_IF_ERROR(broadcast_rows(s.samples, s.out, bias, pre_activation));
    const float one = 1.0f;
    ZEROSIM_RETURN_IF_ERROR(blas("cublasSgemm (forward)",
                                 blas_library_->sgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.out),
                                             static_cast<int>(s.samples), static_cast<int>(s.in), &one,
                                             weight, static_cast<int>(s.in), inputs_[l].as<float>(),
                                             static_cast<int>(s.in), &one, pre_activation, static_cast<int>(s.out))));
    if (l + 1 == inputs_.size()) return Status();
    relu_kernel<<<blocks_for(s.samples * s.out), kThreads, 0, stream_>>>(s.samples * s.out, pre_activation,
                                                                       inputs_[l + 1].as<float>());
    return cuda("relu_kernel", cudaGetLastError());
  }

  // dW [out, in] = dZ^T x X (column-major: [in, out] = X(in x samples) x dZ^T), the bias
  // gradient a column sum, and dX [samples, in] = dZ x W (column-major: [in, samples] =
  // W(as stored, in x out) x dZ(out x samples)) masked by the previous layer's ReLU.
  Status fast_backward(int64_t layer_index, const float* weight, const float* output_gradient,
                       float* previous_output_gradient, float* weight_gradient, float* bias_gradient) {
    const size_t l = static_cast<size_t>(layer_index);
    const DeviceLayerShape s = shape(layer_index);
    const int samples = static_cast<int>(s.samples), in = static_cast<int>(s.in), out = static_cast<int>(s.out);
    const float one = 1.0f, zero = 0.0f;
    ZEROSIM_RETURN_IF_ERROR(blas("cublasSgemm (weight gradient)",
                                 blas_library_->sgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, samples, &one,
                                             inputs_[l].as<float>(), in, output_gradient, out, &zero,
                                             weight_gradient, in)));
    column_sum_kernel<<<blocks_for(s.out), kThreads, 0, stream_>>>(s.samples, s.out, output_gradient,
                                                                  bias_gradient);
    ZEROSIM_RETURN_IF_ERROR(cuda("column_sum_kernel", cudaGetLastError()));
    if (previous_output_gradient == nullptr) return Status();
    ZEROSIM_RETURN_IF_ERROR(blas("cublasSgemm (input gradient)",
                                 blas_library_->sgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in, samples, out, &one,
                                             weight, in, output_gradient, out, &zero,
                                             previous_output_gradient, in)));
    relu_mask_kernel<<<blocks_for(s.samples * s.in), kThreads, 0, stream_>>>(
        s.samples * s.in, pre_activations_[l - 1].as<float>(), previous_output_gradient);
    return cuda("relu_mask_kernel", cudaGetLastError());
  }

  static size_t bytes_of(int64_t floats) { return static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float); }

  DeviceLayerShape shape(int64_t layer_index) const {
    const size_t l = static_cast<size_t>(layer_index);
    return DeviceLayerShape{samples_, model_.layer_widths[l], model_.layer_widths[l + 1]};
  }

  Status upload_weights(int64_t layer_index, std::span<const float> weight, std::span<const float> bias) {
    ZEROSIM_RETURN_IF_ERROR(in_layer(layer_index, cuda("cudaMalloc (layer weight)", weight_.reserve(weight.size_bytes()))));
    ZEROSIM_RETURN_IF_ERROR(in_layer(layer_index, cuda("cudaMemcpyAsync (layer weight)",
                                                       cudaMemcpyAsync(weight_.as<float>(), weight.data(), weight.size_bytes(),
                                                                       cudaMemcpyHostToDevice, stream_))));
    if (bias.empty()) return Status();
    ZEROSIM_RETURN_IF_ERROR(in_layer(layer_index, cuda("cudaMalloc (layer bias)", bias_.reserve(bias.size_bytes()))));
    return in_layer(layer_index, cuda("cudaMemcpyAsync (layer bias)",
                                      cudaMemcpyAsync(bias_.as<float>(), bias.data(), bias.size_bytes(),
                                                      cudaMemcpyHostToDevice, stream_)));
  }

  static Status in_layer(int64_t layer_index, Status status) {
    if (status.ok()) return status;
    return Status(status.code(), "layers." + std::to_string(layer_index) + ": " + status.message());
  }

  ModelSpec model_;
  int64_t samples_ = 0;
  std::vector<DeviceArray> inputs_, pre_activations_;
  DeviceArray output_gradients_[2];  // the gradient of the current layer's output, and the next one's
  int current_gradient_ = 0;
  DeviceArray labels_, sample_losses_;  // sample_losses_ holds the samples' losses, then the mean
  bool makes_batches_ = false;           // make_synthetic_batches said yes
  DatasetSpec dataset_spec_;
  DeviceArray teacher_, sample_indices_;  // the dataset's teacher; a micro-batch's sample indices
  DeviceArray weight_, bias_, weight_gradient_, bias_gradient_;
};

}  // namespace

Result<std::unique_ptr<ComputeBackend>> make_cuda_compute_backend(const ModelSpec& model, int device, CudaGemm gemm,
                                                                  DType model_dtype) {
  if (model.is_transformer()) return make_cuda_gpt_backend(*model.gpt, device, gemm, model_dtype);
  auto backend = std::make_unique<CudaComputeBackend>(model, device, gemm, model_dtype);
  ZEROSIM_RETURN_IF_ERROR(backend->start());
  return Result<std::unique_ptr<ComputeBackend>>(std::unique_ptr<ComputeBackend>(std::move(backend)));
}

Result<ComputeBackendFactory> cuda_compute_backend_factory(CudaGemm gemm) {
  // The CUDA runtime is first touched when a rank makes its backend, not here: a process that
  // forks workers (the real-kill mode) must not have initialized CUDA before the fork.
  return ComputeBackendFactory([gemm](int rank, int, const ModelSpec& model,
                                      DType model_dtype) -> Result<std::unique_ptr<ComputeBackend>> {
    int device_count = 0;
    const cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess || device_count < 1) {
      return failed_precondition(std::string("--device cuda: no CUDA device is visible to rank ") + std::to_string(rank) +
                                 " (" + (error == cudaSuccess ? "cudaGetDeviceCount found 0 devices" : cudaGetErrorString(error)) +
                                 ")");
    }
    return make_cuda_compute_backend(model, rank % device_count, gemm, model_dtype);
  });
}

}  // namespace zerosim
