#include "core/model/gpt.h"

#include <cmath>
#include <map>

#include "core/env/rng.h"
#include "core/tensor/portable_math.h"

namespace zerosim {
namespace {

// Parameters per block, in module order.
constexpr int64_t kBlockParameters = 12;
constexpr int64_t kLayerNormEpsilonTimes1e5 = 1;  // GPT-2's layer_norm_epsilon, 1e-5

template <typename Real>
Real real_exp(Real x) { return static_cast<Real>(portable_exp(static_cast<double>(x))); }
template <typename Real>
Real real_log(Real x) { return static_cast<Real>(portable_log(static_cast<double>(x))); }
// tanh from the portable exp: 1 - 2 / (exp(2x) + 1), exact at the infinities.
template <typename Real>
Real real_tanh(Real x) { return Real(1) - Real(2) / (real_exp(Real(2) * x) + Real(1)); }

// GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative.
template <typename Real>
void gelu(Real x, Real& value, Real& derivative) {
  const Real c = static_cast<Real>(0.7978845608028654);  // sqrt(2 / pi)
  const Real a = static_cast<Real>(0.044715);
  const Real u = c * (x + a * x * x * x);
  const Real t = real_tanh(u);
  value = Real(0.5) * x * (Real(1) + t);
  derivative = Real(0.5) * (Real(1) + t) + Real(0.5) * x * (Real(1) - t * t) * c * (Real(1) + Real(3) * a * x * x);
}

// out[r][j] = bias[j] + sum_i in[r][i] * weight[i][j] (a Conv1D: weight [in, out]), left folds.
template <typename Real>
void conv1d(const Real* in, int64_t rows, int64_t in_width, const Real* weight, const Real* bias, int64_t out_width,
            Real* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out_width; ++j) {
      Real sum = bias[j];
      for (int64_t i = 0; i < in_width; ++i) sum = sum + in[r * in_width + i] * weight[i * out_width + j];
      out[r * out_width + j] = sum;
    }
  }
}

// The backward of conv1d: weight_gradient += in^T d_out, bias_gradient += column sums of
// d_out (folds over rows in order), d_in = d_out weight^T (overwritten).
template <typename Real>
void conv1d_backward(const Real* in, int64_t rows, int64_t in_width, const Real* weight, int64_t out_width,
                     const Real* d_out, Real* weight_gradient, Real* bias_gradient, Real* d_in) {
  for (int64_t i = 0; i < in_width; ++i) {
    for (int64_t j = 0; j < out_width; ++j) {
      Real sum = weight_gradient[i * out_width + j];
      for (int64_t r = 0; r < rows; ++r) sum = sum + in[r * in_width + i] * d_out[r * out_width + j];
      weight_gradient[i * out_width + j] = sum;
    }
  }
  for (int64_t j = 0; j < out_width; ++j) {
    Real sum = bias_gradient[j];
    for (int64_t r = 0; r < rows; ++r) sum = sum + d_out[r * out_width + j];
    bias_gradient[j] = sum;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in_width; ++i) {
      Real sum = Real(0);
      for (int64_t j = 0; j < out_width; ++j) sum = sum + d_out[r * out_width + j] * weight[i * out_width + j];
      d_in[r * in_width + i] = sum;
    }
  }
}

template <typename Real>
struct LayerNormCache {
  std::vector<Real> normalized;  // x-hat, rows x width
  std::vector<Real> inverse_std;  // per row
};

template <typename Real>
void layer_norm(const Real* in, int64_t rows, int64_t width, const Real* gamma, const Real* beta, Real* out,
                LayerNormCache<Real>& cache) {
  const Real epsilon = static_cast<Real>(kLayerNormEpsilonTimes1e5) / static_cast<Real>(100000);
  cache.normalized.resize(static_cast<size_t>(rows * width));
  cache.inverse_std.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const Real* x = in + r * width;
    Real mean = Real(0);
    for (int64_t i = 0; i < width; ++i) mean = mean + x[i];
    mean = mean / static_cast<Real>(width);
    Real variance = Real(0);
    for (int64_t i = 0; i < width; ++i) variance = variance + (x[i] - mean) * (x[i] - mean);
    variance = variance / static_cast<Real>(width);
    const Real inverse_std = Real(1) / std::sqrt(variance + epsilon);
    cache.inverse_std[static_cast<size_t>(r)] = inverse_std;
    for (int64_t i = 0; i < width; ++i) {
      const Real normalized = (x[i] - mean) * inverse_std;
      cache.normalized[static_cast<size_t>(r * width + i)] = normalized;
      out[r * width + i] = normalized * gamma[i] + beta[i];
    }
  }
}

// d_in = inverse_std (d_hat - mean(d_hat) - x_hat mean(d_hat x_hat)), d_hat = d_out gamma; adds
// to d_in (the residual stream's gradient) and to the gamma and beta gradients.
template <typename Real>
void layer_norm_backward(const LayerNormCache<Real>& cache, int64_t rows, int64_t width, const Real* gamma,
                         const Real* d_out, Real* gamma_gradient, Real* beta_gradient, Real* d_in_accumulate) {
  for (int64_t i = 0; i < width; ++i) {
    Real gamma_sum = gamma_gradient[i], beta_sum = beta_gradient[i];
    for (int64_t r = 0; r < rows; ++r) {
      gamma_sum = gamma_sum + d_out[r * width + i] * cache.normalized[static_cast<size_t>(r * width + i)];
      beta_sum = beta_sum + d_out[r * width + i];
    }
    gamma_gradient[i] = gamma_sum;
    beta_gradient[i] = beta_sum;
  }
  for (int64_t r = 0; r < rows; ++r) {
    Real mean_d = Real(0), mean_dx = Real(0);
    for (int64_t i = 0; i < width; ++i) {
      const Real d_hat = d_out[r * width + i] * gamma[i];
      mean_d = mean_d + d_hat;
      mean_dx = mean_dx + d_hat * cache.normalized[static_cast<size_t>(r * width + i)];
    }
    mean_d = mean_d / static_cast<Real>(width);
    mean_dx = mean_dx / static_cast<Real>(width);
    const Real inverse_std = cache.inverse_std[static_cast<size_t>(r)];
    for (int64_t i = 0; i < width; ++i) {
      const Real d_hat = d_out[r * width + i] * gamma[i];
      const Real x_hat = cache.normalized[static_cast<size_t>(r * width + i)];
      d_in_accumulate[r * width + i] = d_in_accumulate[r * width + i] + inverse_std * (d_hat - mean_d - x_hat * mean_dx);
    }
  }
}

// What one block keeps from its forward for its backward (one sequence).
template <typename Real>
struct BlockCache {
  std::vector<Real> input, ln_1, qkv, probabilities, attended, middle, ln_2, fc, fc_gelu, fc_derivative;
  LayerNormCache<Real> ln_1_cache, ln_2_cache;
};

}  // namespace

Status validate_gpt_spec(const GptSpec& spec) {
  for (const auto& [key, value] : {std::pair{"layers", spec.layers}, std::pair{"embd", spec.embd},
                                   std::pair{"heads", spec.heads}, std::pair{"vocab", spec.vocab},
                                   std::pair{"block", spec.block}}) {
    if (value < 1 || value > (int64_t{1} << 20)) {
      return invalid_argument(std::string("gpt model: ") + key + " must be in 1..2^20, found " + std::to_string(value));
    }
  }
  if (spec.embd % spec.heads != 0) {
    return invalid_argument("gpt model: embd " + std::to_string(spec.embd) + " is not divisible by heads " +
                            std::to_string(spec.heads));
  }
  if (spec.vocab * spec.embd > (int64_t{1} << 31) || 4 * spec.embd * spec.embd > (int64_t{1} << 31) ||
      spec.block * spec.embd > (int64_t{1} << 31)) {
    return invalid_argument("gpt model: a tensor of " + gpt_spec_to_string(spec) + " would pass 2^31 elements");
  }
  return Status();
}

std::string gpt_spec_to_string(const GptSpec& spec) {
  return "gpt:layers=" + std::to_string(spec.layers) + ",embd=" + std::to_string(spec.embd) +
         ",heads=" + std::to_string(spec.heads) + ",vocab=" + std::to_string(spec.vocab) +
         ",block=" + std::to_string(spec.block);
}

Result<GptSpec> parse_gpt_spec(const std::string& text) {
  const std::string prefix = "gpt:";
  if (text.rfind(prefix, 0) != 0) return invalid_argument("model '" + text + "': a transformer is gpt:layers=L,embd=E,heads=H,vocab=V,block=B");
  std::map<std::string, int64_t*> fields;
  GptSpec spec;
  fields["layers"] = &spec.layers;
  fields["embd"] = &spec.embd;
  fields["heads"] = &spec.heads;
  fields["vocab"] = &spec.vocab;
  fields["block"] = &spec.block;
  std::map<std::string, bool> seen;
  size_t position = prefix.size();
  while (position <= text.size()) {
    const size_t comma = text.find(',', position);
    const std::string item = text.substr(position, comma == std::string::npos ? std::string::npos : comma - position);
    const size_t equals = item.find('=');
    const std::string key = item.substr(0, equals);
    if (equals == std::string::npos || !fields.count(key)) {
      return invalid_argument("model '" + text + "': '" + item + "' is not one of layers=, embd=, heads=, vocab=, block=");
    }
    if (seen[key]) return invalid_argument("model '" + text + "': " + key + " is given twice");
    seen[key] = true;
    const std::string digits = item.substr(equals + 1);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument("model '" + text + "': " + key + " must be a positive integer, found '" + digits + "'");
    }
    *fields[key] = std::stoll(digits);
    if (comma == std::string::npos) break;
    position = comma + 1;
  }
  for (const auto& [key, field] : fields) {
    if (!seen[key]) return invalid_argument("model '" + text + "': " + key + "= is missing");
  }
  ZEROSIM_RETURN_IF_ERROR(validate_gpt_spec(spec));
  return spec;
}

std::vector<ParameterInfo> gpt_parameters(const GptSpec& spec) {
  const int64_t e = spec.embd;
  std::vector<ParameterInfo> parameters;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int64_t layer) {
    int64_t count = 1;
    for (int64_t extent : shape) count *= extent;
    parameters.push_back({name, std::move(shape), count, layer});
  };
  add("transformer.wte.weight", {spec.vocab, e}, 0);
  add("transformer.wpe.weight", {spec.block, e}, 0);
  for (int64_t l = 0; l < spec.layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {e}, l + 1);
    add(h + "ln_1.bias", {e}, l + 1);
    add(h + "attn.c_attn.weight", {e, 3 * e}, l + 1);
    add(h + "attn.c_attn.bias", {3 * e}, l + 1);
    add(h + "attn.c_proj.weight", {e, e}, l + 1);
    add(h + "attn.c_proj.bias", {e}, l + 1);
    add(h + "ln_2.weight", {e}, l + 1);
    add(h + "ln_2.bias", {e}, l + 1);
    add(h + "mlp.c_fc.weight", {e, 4 * e}, l + 1);
    add(h + "mlp.c_fc.bias", {4 * e}, l + 1);
    add(h + "mlp.c_proj.weight", {4 * e, e}, l + 1);
    add(h + "mlp.c_proj.bias", {e}, l + 1);
  }
  add("transformer.ln_f.weight", {e}, spec.layers + 1);
  add("transformer.ln_f.bias", {e}, spec.layers + 1);
  return parameters;
}

float gpt_initial_value(const GptSpec& spec, uint64_t seed, int64_t parameter, int64_t element) {
  const int64_t last_block_parameter = 2 + spec.layers * kBlockParameters;
  float deviation = 0.02f;
  if (parameter >= 2 && parameter < last_block_parameter) {
    const int64_t role = (parameter - 2) % kBlockParameters;
    if (role == 0 || role == 6) return 1.0f;  // ln_1.weight, ln_2.weight
    if (role % 2 == 1) return 0.0f;           // biases
    if (role == 4 || role == 10) deviation = 0.02f / std::sqrt(2.0f * static_cast<float>(spec.layers));  // c_proj
  } else if (parameter == last_block_parameter) {
    return 1.0f;  // ln_f.weight
  } else if (parameter == last_block_parameter + 1) {
    return 0.0f;  // ln_f.bias
  }
  // Uniform on [-sqrt(3) d, sqrt(3) d): deviation d.
  constexpr uint64_t kInitStream = 0x2000;
  return deviation * 1.7320508f *
         random_symmetric_unit_float(
             mix_random_bits(seed, kInitStream + static_cast<uint64_t>(parameter), static_cast<uint64_t>(element)));
}

std::vector<std::vector<float>> gpt_initial_parameters(const GptSpec& spec, uint64_t seed) {
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  std::vector<std::vector<float>> parameters;
  for (size_t p = 0; p < infos.size(); ++p) {
    std::vector<float> values(static_cast<size_t>(infos[p].element_count));
    for (int64_t k = 0; k < infos[p].element_count; ++k) {
      values[static_cast<size_t>(k)] = gpt_initial_value(spec, seed, static_cast<int64_t>(p), k);
    }
    parameters.push_back(std::move(values));
  }
  return parameters;
}

std::vector<int32_t> gpt_check_tokens(const GptSpec& spec, uint64_t seed, int64_t sequence_count, int64_t sequence_length) {
  std::vector<int32_t> tokens;
  for (int64_t k = 0; k < sequence_count * (sequence_length + 1); ++k) {
    tokens.push_back(static_cast<int32_t>(mix_random_bits(seed, 0x70c, static_cast<uint64_t>(k)) %
                                          static_cast<uint64_t>(spec.vocab)));
  }
  return tokens;
}

template <typename Real>
Result<Real> gpt_forward_backward(const GptSpec& spec, const std::vector<std::vector<Real>>& parameters,
                                  std::span<const int32_t> tokens, int64_t sequence_count, int64_t sequence_length,
                                  Real gradient_scale, std::vector<std::vector<Real>>& gradients) {
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  ZEROSIM_CHECK(parameters.size() == infos.size() && gradients.size() == infos.size(), "one tensor per parameter");
  for (size_t p = 0; p < infos.size(); ++p) {
    ZEROSIM_CHECK(static_cast<int64_t>(parameters[p].size()) == infos[p].element_count &&
                      static_cast<int64_t>(gradients[p].size()) == infos[p].element_count,
                  "full tensors");
  }
  if (sequence_count < 1 || sequence_length < 1 || sequence_length > spec.block) {
    return invalid_argument("gpt: " + std::to_string(sequence_count) + " sequences of " + std::to_string(sequence_length) +
                            " positions (the model's block is " + std::to_string(spec.block) + ")");
  }
  if (static_cast<int64_t>(tokens.size()) != sequence_count * (sequence_length + 1)) {
    return invalid_argument("gpt: expected " + std::to_string(sequence_count * (sequence_length + 1)) + " tokens, found " +
                            std::to_string(tokens.size()));
  }
  for (int32_t token : tokens) {
    if (token < 0 || token >= spec.vocab) {
      return invalid_argument("gpt: token " + std::to_string(token) + " outside the vocabulary of " + std::to_string(spec.vocab));
    }
  }
  const int64_t e = spec.embd, t_count = sequence_length, v = spec.vocab, heads = spec.heads, d = e / heads;
  const Real attention_scale = Real(1) / std::sqrt(static_cast<Real>(d));
  auto param = [&](int64_t index) { return parameters[static_cast<size_t>(index)].data(); };
  auto grad = [&](int64_t index) { return gradients[static_cast<size_t>(index)].data(); };
  const int64_t ln_f = 2 + spec.layers * kBlockParameters;

  Real loss_sum = Real(0);
  std::vector<BlockCache<Real>> blocks(static_cast<size_t>(spec.layers));
  std::vector<Real> x, final_input, final_normalized, logits, d_x, d_scratch, d_wide, d_qkv, d_attended;
  LayerNormCache<Real> final_cache;
  for (int64_t s = 0; s < sequence_count; ++s) {
    const int32_t* sequence = tokens.data() + s * (t_count + 1);
    // Forward.
    x.assign(static_cast<size_t>(t_count * e), Real(0));
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t i = 0; i < e; ++i) x[t * e + i] = param(0)[sequence[t] * e + i] + param(1)[t * e + i];
    }
    for (int64_t l = 0; l < spec.layers; ++l) {
      BlockCache<Real>& c = blocks[static_cast<size_t>(l)];
      const int64_t base = 2 + l * kBlockParameters;
      c.input = x;
      c.ln_1.resize(static_cast<size_t>(t_count * e));
      layer_norm(x.data(), t_count, e, param(base), param(base + 1), c.ln_1.data(), c.ln_1_cache);
      c.qkv.resize(static_cast<size_t>(t_count * 3 * e));
      conv1d(c.ln_1.data(), t_count, e, param(base + 2), param(base + 3), 3 * e, c.qkv.data());
      c.probabilities.assign(static_cast<size_t>(heads * t_count * t_count), Real(0));
      c.attended.assign(static_cast<size_t>(t_count * e), Real(0));
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < t_count; ++i) {
          Real* p = &c.probabilities[static_cast<size_t>((h * t_count + i) * t_count)];
          Real maximum = Real(0);
          for (int64_t j = 0; j <= i; ++j) {  // causal: position i attends to 0..i
            Real score = Real(0);
            for (int64_t k = 0; k < d; ++k) score = score + c.qkv[i * 3 * e + h * d + k] * c.qkv[j * 3 * e + e + h * d + k];
            p[j] = score * attention_scale;
            if (j == 0 || p[j] > maximum) maximum = p[j];
          }
          Real sum = Real(0);
          for (int64_t j = 0; j <= i; ++j) {
            p[j] = real_exp(p[j] - maximum);
            sum = sum + p[j];
          }
          for (int64_t j = 0; j <= i; ++j) p[j] = p[j] / sum;
          for (int64_t k = 0; k < d; ++k) {
            Real value = Real(0);
            for (int64_t j = 0; j <= i; ++j) value = value + p[j] * c.qkv[j * 3 * e + 2 * e + h * d + k];
            c.attended[i * e + h * d + k] = value;
          }
        }
      }
      c.middle.resize(static_cast<size_t>(t_count * e));
      conv1d(c.attended.data(), t_count, e, param(base + 4), param(base + 5), e, c.middle.data());
      for (int64_t k = 0; k < t_count * e; ++k) c.middle[k] = c.middle[k] + x[k];
      c.ln_2.resize(static_cast<size_t>(t_count * e));
      layer_norm(c.middle.data(), t_count, e, param(base + 6), param(base + 7), c.ln_2.data(), c.ln_2_cache);
      c.fc.resize(static_cast<size_t>(t_count * 4 * e));
      conv1d(c.ln_2.data(), t_count, e, param(base + 8), param(base + 9), 4 * e, c.fc.data());
      c.fc_gelu.resize(c.fc.size());
      c.fc_derivative.resize(c.fc.size());
      for (size_t k = 0; k < c.fc.size(); ++k) gelu(c.fc[k], c.fc_gelu[k], c.fc_derivative[k]);
      x.resize(static_cast<size_t>(t_count * e));
      conv1d(c.fc_gelu.data(), t_count, 4 * e, param(base + 10), param(base + 11), e, x.data());
      for (int64_t k = 0; k < t_count * e; ++k) x[k] = x[k] + c.middle[k];
    }
    final_input = x;
    final_normalized.resize(static_cast<size_t>(t_count * e));
    layer_norm(x.data(), t_count, e, param(ln_f), param(ln_f + 1), final_normalized.data(), final_cache);
    // The tied head: logits[t][w] = sum_i normalized[t][i] wte[w][i].
    logits.resize(static_cast<size_t>(t_count * v));
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t w = 0; w < v; ++w) {
        Real sum = Real(0);
        for (int64_t i = 0; i < e; ++i) sum = sum + final_normalized[t * e + i] * param(0)[w * e + i];
        logits[t * v + w] = sum;
      }
    }
    // Loss and its gradient (logits become d_logits in place).
    for (int64_t t = 0; t < t_count; ++t) {
      Real* z = &logits[t * v];
      Real maximum = z[0];
      for (int64_t w = 1; w < v; ++w) maximum = z[w] > maximum ? z[w] : maximum;
      Real sum = Real(0);
      for (int64_t w = 0; w < v; ++w) sum = sum + real_exp(z[w] - maximum);
      const int32_t target = sequence[t + 1];
      loss_sum = loss_sum + (real_log(sum) - (z[target] - maximum));
      for (int64_t w = 0; w < v; ++w) {
        const Real probability = real_exp(z[w] - maximum) / sum;
        z[w] = gradient_scale * (probability - (w == target ? Real(1) : Real(0)));
      }
    }
    // Backward. The head's use of wte first: d_wte += d_logits^T normalized; d_normalized = d_logits wte.
    for (int64_t w = 0; w < v; ++w) {
      for (int64_t i = 0; i < e; ++i) {
        Real sum = grad(0)[w * e + i];
        for (int64_t t = 0; t < t_count; ++t) sum = sum + logits[t * v + w] * final_normalized[t * e + i];
        grad(0)[w * e + i] = sum;
      }
    }
    d_scratch.assign(static_cast<size_t>(t_count * e), Real(0));
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t i = 0; i < e; ++i) {
        Real sum = Real(0);
        for (int64_t w = 0; w < v; ++w) sum = sum + logits[t * v + w] * param(0)[w * e + i];
        d_scratch[t * e + i] = sum;
      }
    }
    d_x.assign(static_cast<size_t>(t_count * e), Real(0));
    layer_norm_backward(final_cache, t_count, e, param(ln_f), d_scratch.data(), grad(ln_f), grad(ln_f + 1), d_x.data());
    for (int64_t l = spec.layers - 1; l >= 0; --l) {
      BlockCache<Real>& c = blocks[static_cast<size_t>(l)];
      const int64_t base = 2 + l * kBlockParameters;
      // x_out = middle + mlp(ln_2(middle)): d_middle = d_x + ln_2 backward of the MLP's input gradient.
      d_wide.assign(static_cast<size_t>(t_count * 4 * e), Real(0));
      conv1d_backward(c.fc_gelu.data(), t_count, 4 * e, param(base + 10), e, d_x.data(), grad(base + 10), grad(base + 11),
                      d_wide.data());
      for (size_t k = 0; k < d_wide.size(); ++k) d_wide[k] = d_wide[k] * c.fc_derivative[k];
      conv1d_backward(c.ln_2.data(), t_count, e, param(base + 8), 4 * e, d_wide.data(), grad(base + 8), grad(base + 9),
                      d_scratch.data());
      layer_norm_backward(c.ln_2_cache, t_count, e, param(base + 6), d_scratch.data(), grad(base + 6), grad(base + 7),
                          d_x.data());  // d_x is now d_middle
      // middle = input + proj(attention(ln_1(input))).
      d_attended.assign(static_cast<size_t>(t_count * e), Real(0));
      conv1d_backward(c.attended.data(), t_count, e, param(base + 4), e, d_x.data(), grad(base + 4), grad(base + 5),
                      d_attended.data());
      d_qkv.assign(static_cast<size_t>(t_count * 3 * e), Real(0));
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < t_count; ++i) {
          const Real* p = &c.probabilities[static_cast<size_t>((h * t_count + i) * t_count)];
          // d_p[j] = d_attended[i] . v[j]; d_v[j] += p[j] d_attended[i].
          std::vector<Real> d_p(static_cast<size_t>(i + 1), Real(0));
          Real weighted = Real(0);
          for (int64_t j = 0; j <= i; ++j) {
            Real dot = Real(0);
            for (int64_t k = 0; k < d; ++k) dot = dot + d_attended[i * e + h * d + k] * c.qkv[j * 3 * e + 2 * e + h * d + k];
            d_p[static_cast<size_t>(j)] = dot;
            weighted = weighted + dot * p[j];
          }
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t k = 0; k < d; ++k) {
              Real& d_v = d_qkv[j * 3 * e + 2 * e + h * d + k];
              d_v = d_v + p[j] * d_attended[i * e + h * d + k];
            }
            const Real d_score = p[j] * (d_p[static_cast<size_t>(j)] - weighted) * attention_scale;
            for (int64_t k = 0; k < d; ++k) {
              Real& d_q = d_qkv[i * 3 * e + h * d + k];
              d_q = d_q + d_score * c.qkv[j * 3 * e + e + h * d + k];
              Real& d_k = d_qkv[j * 3 * e + e + h * d + k];
              d_k = d_k + d_score * c.qkv[i * 3 * e + h * d + k];
            }
          }
        }
      }
      conv1d_backward(c.ln_1.data(), t_count, e, param(base + 2), 3 * e, d_qkv.data(), grad(base + 2), grad(base + 3),
                      d_scratch.data());
      layer_norm_backward(c.ln_1_cache, t_count, e, param(base), d_scratch.data(), grad(base), grad(base + 1),
                          d_x.data());  // d_x is now d_input
    }
    // The embeddings: wte's second use, then wpe, position by position.
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t i = 0; i < e; ++i) {
        grad(0)[sequence[t] * e + i] = grad(0)[sequence[t] * e + i] + d_x[t * e + i];
        grad(1)[t * e + i] = grad(1)[t * e + i] + d_x[t * e + i];
      }
    }
  }
  return loss_sum / static_cast<Real>(sequence_count * t_count);
}

template Result<float> gpt_forward_backward<float>(const GptSpec&, const std::vector<std::vector<float>>&,
                                                   std::span<const int32_t>, int64_t, int64_t, float,
                                                   std::vector<std::vector<float>>&);
template Result<double> gpt_forward_backward<double>(const GptSpec&, const std::vector<std::vector<double>>&,
                                                     std::span<const int32_t>, int64_t, int64_t, double,
                                                     std::vector<std::vector<double>>&);

}  // namespace zerosim
