#include "core/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/env/rng.h"
#include "core/tensor/portable_math.h"
#include "core/tensor/thread_split.h"
#include "core/tensor/vector_ops.h"

namespace zerosim {
namespace {

// Parameters per block, in module order.
constexpr int64_t kLayerNormEpsilonTimes1e5 = 1;  // GPT-2's layer_norm_epsilon, 1e-5

template <typename Real>
Real real_log(Real x) { return static_cast<Real>(portable_log(static_cast<double>(x))); }
// values[i] = exp(values[i]) for i < n: the portable exp evaluated in double and rounded once to
// Real, through its array forms (eight lanes at a time where the CPU has AVX-512).
inline void real_exp_in_place(float* values, int64_t n) { portable_expf_array(values, values, static_cast<size_t>(n)); }
inline void real_exp_in_place(double* values, int64_t n) { portable_exp_array(values, values, static_cast<size_t>(n)); }


// GPT-2's gelu_new, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative, over n
// values; tanh(u) = 1 - 2 / (exp(2u) + 1) from the portable exp, the exponentials of a whole
// block at once through real_exp_in_place (derivative holds 2u, then exp(2u), then the result).
template <typename Real>
void gelu_rows(const Real* x, int64_t n, Real* value, Real* derivative) {
  const Real c = static_cast<Real>(0.7978845608028654);  // sqrt(2 / pi)
  const Real a = static_cast<Real>(0.044715);
  for (int64_t k = 0; k < n; ++k) derivative[k] = Real(2) * (c * (x[k] + a * x[k] * x[k] * x[k]));
  real_exp_in_place(derivative, n);
  for (int64_t k = 0; k < n; ++k) {
    const Real t = Real(1) - Real(2) / (derivative[k] + Real(1));
    value[k] = Real(0.5) * x[k] * (Real(1) + t);
    derivative[k] = Real(0.5) * (Real(1) + t) + Real(0.5) * x[k] * (Real(1) - t * t) * c * (Real(1) + Real(3) * a * x[k] * x[k]);
  }
}

// y[k] = y[k] + a * x[k]: the float path is vector_ops' add_scaled (the same bits as this loop).
template <typename Real>
void axpy(Real a, const Real* x, Real* y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = y[k] + a * x[k];
}
template <>
void axpy<float>(float a, const float* x, float* y, int64_t n) {
  add_scaled(a, x, y, static_cast<size_t>(n));
}

// A product operand read where it is stored: element (i, k) at data[i * row_stride + k *
// column_stride] (vector_ops' ProductOperand, for either precision).
template <typename Real>
struct Operand {
  const Real* data;
  int64_t row_stride, column_stride;
};
template <typename Real>
Operand<Real> row_major(const Real* data, int64_t columns) {
  return {data, columns, 1};
}
// The transpose of the row-major `stored`, which has `stored_columns` columns.
template <typename Real>
Operand<Real> transpose_of(const Real* stored, int64_t stored_columns) {
  return {stored, 1, stored_columns};
}

// C[r][j] = fma(A[r][k], B[k][j], C[r][j]) for k = 0, 1, ... in turn (C [rows, n] holds the
// fold's start: zero, or a bias): for float, vector_ops' add_product on up to `threads` threads
// (the same bits as this loop); the double loop is the gradient checks' reference.
template <typename Real>
void fold_product(Operand<Real> a, int64_t rows, int64_t inner, Operand<Real> b, int64_t n, Real* c,
                  int /*threads*/) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < inner; ++k) {
      const Real a_value = a.data[r * a.row_stride + k * a.column_stride];
      for (int64_t j = 0; j < n; ++j) {
        c[r * n + j] = std::fma(a_value, b.data[k * b.row_stride + j * b.column_stride], c[r * n + j]);
      }
    }
  }
}

template <>
void fold_product<float>(Operand<float> a, int64_t rows, int64_t inner, Operand<float> b, int64_t n, float* c,
                         int threads) {
  auto view = [](Operand<float> m) {
    return ProductOperand{m.data, static_cast<size_t>(m.row_stride), static_cast<size_t>(m.column_stride)};
  };
  add_product_threads(view(a), static_cast<size_t>(rows), static_cast<size_t>(inner), view(b), static_cast<size_t>(n), c,
                      threads);
}

// out[r][j] = bias[j] + sum_i in[r][i] * weight[i][j] (a Conv1D: weight [in, out]), left folds.
template <typename Real>
void conv1d(const Real* in, int64_t rows, int64_t in_width, const Real* weight, const Real* bias, int64_t out_width,
            Real* out, int threads) {
  for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out_width, out + r * out_width);
  fold_product(row_major(in, in_width), rows, in_width, row_major(weight, out_width), out_width, out, threads);
}

// The backward of conv1d: weight_gradient += in^T d_out, bias_gradient += column sums of
// d_out (folds over rows in order), d_in = d_out weight^T (overwritten; folds over the
// outputs in order). The transposes are read in place.
template <typename Real>
void conv1d_backward(const Real* in, int64_t rows, int64_t in_width, const Real* weight, int64_t out_width,
                     const Real* d_out, Real* weight_gradient, Real* bias_gradient, Real* d_in, int threads) {
  fold_product(transpose_of(in, in_width), in_width, rows, row_major(d_out, out_width), out_width, weight_gradient,
               threads);
  for (int64_t r = 0; r < rows; ++r) axpy(Real(1), d_out + r * out_width, bias_gradient, out_width);
  std::fill(d_in, d_in + rows * in_width, Real(0));
  fold_product(row_major(d_out, out_width), rows, out_width, transpose_of(weight, out_width), in_width, d_in, threads);
}

template <typename Real>
void layer_norm(const Real* in, int64_t rows, int64_t width, const Real* gamma, const Real* beta, Real* out,
                GptLayerNormCache<Real>& cache) {
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
void layer_norm_backward(const GptLayerNormCache<Real>& cache, int64_t rows, int64_t width, const Real* gamma,
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
  const int64_t last_block_parameter = gpt_final_norm_parameter(spec);
  float deviation = 0.02f;
  if (parameter >= 2 && parameter < last_block_parameter) {
    const int64_t role = (parameter - 2) % kGptBlockParameters;
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

std::vector<float> gpt_causal_mask(const GptSpec& spec) {
  std::vector<float> mask(static_cast<size_t>(spec.block * spec.block), 0.0f);
  for (int64_t i = 0; i < spec.block; ++i) {
    for (int64_t j = 0; j <= i; ++j) mask[static_cast<size_t>(i * spec.block + j)] = 1.0f;
  }
  return mask;
}

template <typename Real>
Status gpt_begin_micro_batch(const GptSpec& spec, std::span<const int32_t> tokens, int64_t sequence_count,
                             int64_t sequence_length, std::span<const float> causal_mask, GptActivations<Real>& a) {
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
  ZEROSIM_CHECK(static_cast<int64_t>(causal_mask.size()) == spec.block * spec.block, "the causal mask is [block, block]");
  a.sequence_count = sequence_count;
  a.sequence_length = sequence_length;
  a.tokens.assign(tokens.begin(), tokens.end());
  a.causal_mask = causal_mask;
  a.blocks.resize(static_cast<size_t>(spec.layers));
  a.parameter_element_counts.clear();
  for (const ParameterInfo& parameter : gpt_parameters(spec)) a.parameter_element_counts.push_back(parameter.element_count);
  return Status();
}

namespace {

template <typename Real>
void check_stage(std::span<const std::vector<Real>> tensors, const std::vector<int64_t>& element_counts, int64_t first,
                 int64_t count) {
  ZEROSIM_CHECK(static_cast<int64_t>(tensors.size()) == count, "one tensor per parameter of the stage");
  for (int64_t k = 0; k < count; ++k) {
    ZEROSIM_CHECK(static_cast<int64_t>(tensors[static_cast<size_t>(k)].size()) == element_counts[static_cast<size_t>(first + k)],
                  "full tensors");
  }
}

// The rows of the micro-batch: sequence-major, one per predicted position.
template <typename Real>
int64_t row_count(const GptActivations<Real>& a) { return a.sequence_count * a.sequence_length; }

// Key positions query i of a sequence of `length` may attend to, per the mask: `allowed` lists them;
// empty when none is (then the row attends uniformly to all `length`, as a lowest-float fill gives).
void allowed_keys(std::span<const float> mask, int64_t block, int64_t i, int64_t length, std::vector<int64_t>& allowed) {
  allowed.clear();
  for (int64_t j = 0; j < length; ++j) {
    if (mask[static_cast<size_t>(i * block + j)] != 0.0f) allowed.push_back(j);
  }
}

bool is_prefix(const std::vector<int64_t>& allowed) {
  return !allowed.empty() && allowed.back() == static_cast<int64_t>(allowed.size()) - 1;
}

// out[k][j] = qkv[j][offset + k] for j < t_count, k < d: one head's keys or values, transposed.
template <typename Real>
void head_transposed(const Real* qkv, int64_t t_count, int64_t e, int64_t offset, int64_t d, std::vector<Real>& out) {
  out.resize(static_cast<size_t>(d * t_count));
  for (int64_t j = 0; j < t_count; ++j) {
    for (int64_t k = 0; k < d; ++k) out[static_cast<size_t>(k * t_count + j)] = qkv[j * 3 * e + offset + k];
  }
}

// What one thread's share of the attention needs for itself: a head's keys or values
// transposed, the keys a query may attend to, one row's shifted scores, one row's score
// gradients.
template <typename Real>
struct AttentionScratch {
  std::vector<Real> transposed, shifted, d_p;
  std::vector<int64_t> allowed;
};

// head(s, h, scratch) for every (sequence, head) pair, in contiguous ranges of pairs on up to
// a.threads threads, each with scratch of its own. A pair is worth a thread's share from about
// 2^20 multiply-adds (its scores and weighted sums, t^2 d each).
template <typename Real, typename Head>
void for_each_attention_head(const GptActivations<Real>& a, int64_t t_count, int64_t heads, int64_t d, Head&& head) {
  const size_t pairs = static_cast<size_t>(a.sequence_count * heads);
  const size_t pair_work = static_cast<size_t>(std::max<int64_t>(1, t_count * t_count * d));
  const size_t parts = part_count(pairs, a.threads, std::max<size_t>(1, (size_t{1} << 20) / pair_work));
  std::vector<AttentionScratch<Real>> scratch(parts);
  run_in_ranges(pairs, parts, 1, [&](size_t first, size_t end, size_t part) {
    for (size_t pair = first; pair < end; ++pair) {
      head(static_cast<int64_t>(pair) / heads, static_cast<int64_t>(pair) % heads, scratch[part]);
    }
  });
}

// One head's attention over one sequence: its rows of the probabilities and its columns of the
// attended values (outputs no other (sequence, head) pair writes).
template <typename Real>
void attention_forward_head(const GptSpec& spec, const GptActivations<Real>& a, GptBlockCache<Real>& c, int64_t s,
                            int64_t h, Real attention_scale, AttentionScratch<Real>& scratch) {
  const int64_t e = spec.embd, t_count = a.sequence_length, heads = spec.heads, d = e / heads;
  const Real* qkv = c.qkv.data() + s * t_count * 3 * e;
  Real* attended = c.attended.data() + s * t_count * e;
  head_transposed(qkv, t_count, e, h * d + e, d, scratch.transposed);  // K^T [d, T]
  for (int64_t i = 0; i < t_count; ++i) {
    allowed_keys(a.causal_mask, spec.block, i, t_count, scratch.allowed);
    Real* p = &c.probabilities[static_cast<size_t>(((s * heads + h) * t_count + i) * t_count)];
    const Real* q = qkv + i * 3 * e + h * d;
    if (scratch.allowed.empty()) {
      // Every score is the same lowest float: softmax is uniform over the sequence.
      for (int64_t j = 0; j < t_count; ++j) p[j] = Real(1) / static_cast<Real>(t_count);
    } else {
      const int64_t n = static_cast<int64_t>(scratch.allowed.size());
      if (is_prefix(scratch.allowed)) {
        // Scores of keys 0..n-1 together: each a fold over the head's dimensions.
        std::fill(p, p + n, Real(0));
        for (int64_t k = 0; k < d; ++k) axpy(q[k], scratch.transposed.data() + k * t_count, p, n);
      } else {
        for (const int64_t j : scratch.allowed) {
          Real score = Real(0);
          for (int64_t k = 0; k < d; ++k) score = score + q[k] * qkv[j * 3 * e + e + h * d + k];
          p[j] = score;
        }
      }
      Real maximum = Real(0);
      for (size_t m = 0; m < scratch.allowed.size(); ++m) {
        const int64_t j = scratch.allowed[m];
        p[j] = p[j] * attention_scale;
        if (m == 0 || p[j] > maximum) maximum = p[j];
      }
      // The exponentials of the row at once (the same bits), then the sum in key order.
      scratch.shifted.resize(scratch.allowed.size());
      for (size_t m = 0; m < scratch.allowed.size(); ++m) scratch.shifted[m] = p[scratch.allowed[m]] - maximum;
      real_exp_in_place(scratch.shifted.data(), static_cast<int64_t>(scratch.shifted.size()));
      Real sum = Real(0);
      for (size_t m = 0; m < scratch.allowed.size(); ++m) {
        p[scratch.allowed[m]] = scratch.shifted[m];
        sum = sum + scratch.shifted[m];
      }
      for (const int64_t j : scratch.allowed) p[j] = p[j] / sum;
    }
    // attended[i] = sum_j p[j] v[j], a fold over j per dimension.
    Real* value = attended + i * e + h * d;
    std::fill(value, value + d, Real(0));
    if (scratch.allowed.empty()) {
      for (int64_t j = 0; j < t_count; ++j) axpy(p[j], qkv + j * 3 * e + 2 * e + h * d, value, d);
    } else {
      for (const int64_t j : scratch.allowed) axpy(p[j], qkv + j * 3 * e + 2 * e + h * d, value, d);
    }
  }
}

// The backward of one head's attention over one sequence: its columns of d_qkv (queries', keys'
// and values' gradients), which no other (sequence, head) pair writes; a key's and a value's
// gradients fold over the queries in ascending order, whichever thread runs the pair.
template <typename Real>
void attention_backward_head(const GptSpec& spec, GptActivations<Real>& a, const GptBlockCache<Real>& c, int64_t s,
                             int64_t h, Real attention_scale, AttentionScratch<Real>& scratch) {
  const int64_t e = spec.embd, t_count = a.sequence_length, heads = spec.heads, d = e / heads;
  const Real* qkv = c.qkv.data() + s * t_count * 3 * e;
  const Real* d_attended = a.d_attended.data() + s * t_count * e;
  Real* d_qkv = a.d_qkv.data() + s * t_count * 3 * e;
  head_transposed(qkv, t_count, e, h * d + 2 * e, d, scratch.transposed);  // V^T [d, T]
  for (int64_t i = 0; i < t_count; ++i) {
    allowed_keys(a.causal_mask, spec.block, i, t_count, scratch.allowed);
    const bool uniform = scratch.allowed.empty();
    if (uniform) {
      for (int64_t j = 0; j < t_count; ++j) scratch.allowed.push_back(j);
    }
    const Real* p = &c.probabilities[static_cast<size_t>(((s * heads + h) * t_count + i) * t_count)];
    const Real* d_att = d_attended + i * e + h * d;
    // d_p[j] = d_attended[i] . v[j] (a fold over the head's dimensions); weighted = sum_j d_p[j] p[j].
    scratch.d_p.assign(static_cast<size_t>(t_count), Real(0));
    if (is_prefix(scratch.allowed)) {
      for (int64_t k = 0; k < d; ++k) {
        axpy(d_att[k], scratch.transposed.data() + k * t_count, scratch.d_p.data(),
             static_cast<int64_t>(scratch.allowed.size()));
      }
    } else {
      for (const int64_t j : scratch.allowed) {
        Real dot = Real(0);
        for (int64_t k = 0; k < d; ++k) dot = dot + d_att[k] * qkv[j * 3 * e + 2 * e + h * d + k];
        scratch.d_p[static_cast<size_t>(j)] = dot;
      }
    }
    Real weighted = Real(0);
    for (const int64_t j : scratch.allowed) weighted = weighted + scratch.d_p[static_cast<size_t>(j)] * p[j];
    Real* d_q = d_qkv + i * 3 * e + h * d;
    const Real* q = qkv + i * 3 * e + h * d;
    for (const int64_t j : scratch.allowed) {
      axpy(p[j], d_att, d_qkv + j * 3 * e + 2 * e + h * d, d);  // d_v[j] += p[j] d_attended[i]
      if (uniform) continue;  // a constant (masked) score has no gradient
      const Real d_score = p[j] * (scratch.d_p[static_cast<size_t>(j)] - weighted) * attention_scale;
      axpy(d_score, qkv + j * 3 * e + e + h * d, d_q, d);      // d_q[i] += d_score k[j]
      axpy(d_score, q, d_qkv + j * 3 * e + e + h * d, d);      // d_k[j] += d_score q[i]
    }
  }
}

}  // namespace

template <typename Real>
void gpt_embeddings_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  check_stage(parameters, counts, 0, 2);
  const int64_t e = spec.embd, t_count = a.sequence_length;
  const Real* wte = parameters[0].data();
  const Real* wpe = parameters[1].data();
  a.x.assign(static_cast<size_t>(row_count(a) * e), Real(0));
  for (int64_t s = 0; s < a.sequence_count; ++s) {
    const int32_t* sequence = a.tokens.data() + s * (t_count + 1);
    for (int64_t t = 0; t < t_count; ++t) {
      Real* x = a.x.data() + (s * t_count + t) * e;
      for (int64_t i = 0; i < e; ++i) x[i] = wte[sequence[t] * e + i] + wpe[t * e + i];
    }
  }
}

template <typename Real>
void gpt_block_forward(const GptSpec& spec, int64_t block, std::span<const std::vector<Real>> parameters,
                       GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  check_stage(parameters, counts, gpt_block_first_parameter(block), kGptBlockParameters);
  auto param = [&](int64_t k) { return parameters[static_cast<size_t>(k)].data(); };
  const int64_t e = spec.embd, t_count = a.sequence_length, heads = spec.heads, d = e / heads, rows = row_count(a);
  const Real attention_scale = Real(1) / std::sqrt(static_cast<Real>(d));
  GptBlockCache<Real>& c = a.blocks[static_cast<size_t>(block)];
  c.ln_1.resize(static_cast<size_t>(rows * e));
  layer_norm(a.x.data(), rows, e, param(0), param(1), c.ln_1.data(), c.ln_1_cache);
  c.qkv.resize(static_cast<size_t>(rows * 3 * e));
  conv1d(c.ln_1.data(), rows, e, param(2), param(3), 3 * e, c.qkv.data(), a.threads);
  c.probabilities.assign(static_cast<size_t>(a.sequence_count * heads * t_count * t_count), Real(0));
  c.attended.assign(static_cast<size_t>(rows * e), Real(0));
  for_each_attention_head(a, t_count, heads, d, [&](int64_t s, int64_t h, AttentionScratch<Real>& scratch) {
    attention_forward_head(spec, a, c, s, h, attention_scale, scratch);
  });
  c.middle.resize(static_cast<size_t>(rows * e));
  conv1d(c.attended.data(), rows, e, param(4), param(5), e, c.middle.data(), a.threads);
  for (int64_t k = 0; k < rows * e; ++k) c.middle[k] = c.middle[k] + a.x[k];
  c.ln_2.resize(static_cast<size_t>(rows * e));
  layer_norm(c.middle.data(), rows, e, param(6), param(7), c.ln_2.data(), c.ln_2_cache);
  c.fc.resize(static_cast<size_t>(rows * 4 * e));
  conv1d(c.ln_2.data(), rows, e, param(8), param(9), 4 * e, c.fc.data(), a.threads);
  c.fc_gelu.resize(c.fc.size());
  c.fc_derivative.resize(c.fc.size());
  // Elementwise, so split among the threads from 2^16 values a share (the same bits).
  const size_t wide_count = c.fc.size();
  run_in_ranges(wide_count, part_count(wide_count, a.threads, size_t{1} << 16), 1, [&](size_t first, size_t end, size_t) {
    gelu_rows(c.fc.data() + first, static_cast<int64_t>(end - first), c.fc_gelu.data() + first,
              c.fc_derivative.data() + first);
  });
  conv1d(c.fc_gelu.data(), rows, 4 * e, param(10), param(11), e, a.x.data(), a.threads);
  for (int64_t k = 0; k < rows * e; ++k) a.x[k] = a.x[k] + c.middle[k];
}

template <typename Real>
void gpt_final_norm_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  const int64_t ln_f = gpt_final_norm_parameter(spec);
  check_stage(parameters, counts, ln_f, 2);
  const int64_t rows = row_count(a), e = spec.embd;
  a.final_normalized.resize(static_cast<size_t>(rows * e));
  layer_norm(a.x.data(), rows, e, parameters[0].data(), parameters[1].data(), a.final_normalized.data(), a.final_cache);
}

template <typename Real>
void gpt_head_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  check_stage(parameters, counts, 0, 1);
  const int64_t rows = row_count(a), e = spec.embd, v = spec.vocab;
  const Real* wte = parameters[0].data();
  // The tied head: logits = normalized wte^T, each logit a fold in i from zero, wte^T read in place.
  a.logits.assign(static_cast<size_t>(rows * v), Real(0));
  fold_product(row_major(a.final_normalized.data(), e), rows, e, transpose_of(wte, e), v, a.logits.data(), a.threads);
}

template <typename Real>
Real gpt_loss(const GptSpec& spec, Real gradient_scale, GptActivations<Real>& a) {
  const int64_t t_count = a.sequence_length, v = spec.vocab, rows = row_count(a);
  // Each row's term (and its logits' gradients in place) on its own, the rows split among the
  // threads; then the terms folded in row order, the order of a single loop over the rows.
  std::vector<Real> row_terms(static_cast<size_t>(rows));
  auto one_row = [&](int64_t r) {
    const int32_t* sequence = a.tokens.data() + (r / t_count) * (t_count + 1);
    const int64_t t = r % t_count;
    Real* z = &a.logits[r * v];
    Real maximum = z[0];
    for (int64_t w = 1; w < v; ++w) maximum = z[w] > maximum ? z[w] : maximum;
    const int32_t target = sequence[t + 1];
    const Real target_logit = z[target];
    // Each exponential once, kept in place of its logit for the gradient below.
    for (int64_t w = 0; w < v; ++w) z[w] = z[w] - maximum;
    real_exp_in_place(z, v);
    Real sum = Real(0);
    for (int64_t w = 0; w < v; ++w) sum = sum + z[w];
    row_terms[static_cast<size_t>(r)] = real_log(sum) - (target_logit - maximum);
    for (int64_t w = 0; w < v; ++w) {
      const Real probability = z[w] / sum;
      z[w] = gradient_scale * (probability - (w == target ? Real(1) : Real(0)));
    }
  };
  // A thread's share: 2^18 logits or more (a row is the vocabulary's exponentials and three passes).
  run_in_ranges(static_cast<size_t>(rows), part_count(static_cast<size_t>(rows * v), a.threads, size_t{1} << 18), 1,
                [&](size_t first, size_t end, size_t) {
                  for (size_t r = first; r < end; ++r) one_row(static_cast<int64_t>(r));
                });
  Real loss_sum = Real(0);
  for (const Real term : row_terms) loss_sum = loss_sum + term;
  return loss_sum / static_cast<Real>(rows);
}

template <typename Real>
void gpt_head_backward(const GptSpec& spec, std::span<const std::vector<Real>> parameters,
                       std::span<std::vector<Real>> gradients, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  check_stage(parameters, counts, 0, 1);
  check_stage(std::span<const std::vector<Real>>(gradients.data(), gradients.size()), counts, 0, 1);
  const int64_t rows = row_count(a), e = spec.embd, v = spec.vocab;
  const Real* wte = parameters[0].data();
  Real* d_wte = gradients[0].data();
  // d_wte += d_logits^T normalized (the head's use, first; folds over the rows); d_normalized =
  // d_logits wte (folds over the vocabulary).
  fold_product(transpose_of(a.logits.data(), v), v, rows, row_major(a.final_normalized.data(), e), e, d_wte, a.threads);
  a.d_scratch.assign(static_cast<size_t>(rows * e), Real(0));
  fold_product(row_major(a.logits.data(), v), rows, v, row_major(wte, e), e, a.d_scratch.data(), a.threads);
}

template <typename Real>
void gpt_final_norm_backward(const GptSpec& spec, std::span<const std::vector<Real>> parameters,
                             std::span<std::vector<Real>> gradients, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  const int64_t ln_f = gpt_final_norm_parameter(spec);
  check_stage(parameters, counts, ln_f, 2);
  check_stage(std::span<const std::vector<Real>>(gradients.data(), gradients.size()), counts, ln_f, 2);
  const int64_t rows = row_count(a), e = spec.embd;
  a.d_x.assign(static_cast<size_t>(rows * e), Real(0));
  layer_norm_backward(a.final_cache, rows, e, parameters[0].data(), a.d_scratch.data(), gradients[0].data(),
                      gradients[1].data(), a.d_x.data());
}

template <typename Real>
void gpt_block_backward(const GptSpec& spec, int64_t block, std::span<const std::vector<Real>> parameters,
                        std::span<std::vector<Real>> gradients, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  const int64_t base = gpt_block_first_parameter(block);
  check_stage(parameters, counts, base, kGptBlockParameters);
  check_stage(std::span<const std::vector<Real>>(gradients.data(), gradients.size()), counts, base, kGptBlockParameters);
  auto param = [&](int64_t k) { return parameters[static_cast<size_t>(k)].data(); };
  auto grad = [&](int64_t k) { return gradients[static_cast<size_t>(k)].data(); };
  const int64_t e = spec.embd, t_count = a.sequence_length, heads = spec.heads, d = e / heads, rows = row_count(a);
  const Real attention_scale = Real(1) / std::sqrt(static_cast<Real>(d));
  GptBlockCache<Real>& c = a.blocks[static_cast<size_t>(block)];
  // x_out = middle + mlp(ln_2(middle)): d_middle = d_x + ln_2 backward of the MLP's input gradient.
  // Sized only: conv1d_backward overwrites each d_in with its product from zero.
  a.d_wide.resize(static_cast<size_t>(rows * 4 * e));
  a.d_scratch.resize(static_cast<size_t>(rows * e));
  conv1d_backward(c.fc_gelu.data(), rows, 4 * e, param(10), e, a.d_x.data(), grad(10), grad(11), a.d_wide.data(), a.threads);
  for (size_t k = 0; k < a.d_wide.size(); ++k) a.d_wide[k] = a.d_wide[k] * c.fc_derivative[k];
  conv1d_backward(c.ln_2.data(), rows, e, param(8), 4 * e, a.d_wide.data(), grad(8), grad(9), a.d_scratch.data(), a.threads);
  layer_norm_backward(c.ln_2_cache, rows, e, param(6), a.d_scratch.data(), grad(6), grad(7),
                      a.d_x.data());  // d_x is now d_middle
  // middle = input + proj(attention(ln_1(input))).
  a.d_attended.resize(static_cast<size_t>(rows * e));
  conv1d_backward(c.attended.data(), rows, e, param(4), e, a.d_x.data(), grad(4), grad(5), a.d_attended.data(), a.threads);
  a.d_qkv.assign(static_cast<size_t>(rows * 3 * e), Real(0));
  for_each_attention_head(a, t_count, heads, d, [&](int64_t s, int64_t h, AttentionScratch<Real>& scratch) {
    attention_backward_head(spec, a, c, s, h, attention_scale, scratch);
  });
  conv1d_backward(c.ln_1.data(), rows, e, param(2), 3 * e, a.d_qkv.data(), grad(2), grad(3), a.d_scratch.data(), a.threads);
  layer_norm_backward(c.ln_1_cache, rows, e, param(0), a.d_scratch.data(), grad(0), grad(1),
                      a.d_x.data());  // d_x is now d_input
}

template <typename Real>
void gpt_embeddings_backward(const GptSpec& spec, std::span<std::vector<Real>> gradients, GptActivations<Real>& a) {
  const std::vector<int64_t>& counts = a.parameter_element_counts;
  check_stage(std::span<const std::vector<Real>>(gradients.data(), gradients.size()), counts, 0, 2);
  const int64_t e = spec.embd, t_count = a.sequence_length;
  Real* d_wte = gradients[0].data();
  Real* d_wpe = gradients[1].data();
  // wte's second use (after the head's), then wpe, row by row in order.
  for (int64_t s = 0; s < a.sequence_count; ++s) {
    const int32_t* sequence = a.tokens.data() + s * (t_count + 1);
    for (int64_t t = 0; t < t_count; ++t) {
      const Real* d_x = a.d_x.data() + (s * t_count + t) * e;
      for (int64_t i = 0; i < e; ++i) {
        d_wte[sequence[t] * e + i] = d_wte[sequence[t] * e + i] + d_x[i];
        d_wpe[t * e + i] = d_wpe[t * e + i] + d_x[i];
      }
    }
  }
}

template <typename Real>
Result<Real> gpt_forward_backward(const GptSpec& spec, const std::vector<std::vector<Real>>& parameters,
                                  std::span<const int32_t> tokens, int64_t sequence_count, int64_t sequence_length,
                                  Real gradient_scale, std::vector<std::vector<Real>>& gradients, int threads) {
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  ZEROSIM_CHECK(parameters.size() == infos.size() && gradients.size() == infos.size(), "one tensor per parameter");
  const std::vector<float> mask = gpt_causal_mask(spec);
  GptActivations<Real> a;
  a.threads = threads;
  ZEROSIM_RETURN_IF_ERROR(gpt_begin_micro_batch(spec, tokens, sequence_count, sequence_length, mask, a));
  const std::span<const std::vector<Real>> all(parameters);
  const std::span<std::vector<Real>> all_gradients(gradients);
  const size_t ln_f = static_cast<size_t>(gpt_final_norm_parameter(spec));
  auto block_span = [&](int64_t l) { return static_cast<size_t>(gpt_block_first_parameter(l)); };
  gpt_embeddings_forward(spec, all.subspan(0, 2), a);
  for (int64_t l = 0; l < spec.layers; ++l) gpt_block_forward(spec, l, all.subspan(block_span(l), kGptBlockParameters), a);
  gpt_final_norm_forward(spec, all.subspan(ln_f, 2), a);
  gpt_head_forward(spec, all.subspan(0, 1), a);
  const Real loss = gpt_loss(spec, gradient_scale, a);
  gpt_head_backward(spec, all.subspan(0, 1), all_gradients.subspan(0, 1), a);
  gpt_final_norm_backward(spec, all.subspan(ln_f, 2), all_gradients.subspan(ln_f, 2), a);
  for (int64_t l = spec.layers - 1; l >= 0; --l) {
    gpt_block_backward(spec, l, all.subspan(block_span(l), kGptBlockParameters),
                       all_gradients.subspan(block_span(l), kGptBlockParameters), a);
  }
  gpt_embeddings_backward(spec, all_gradients.subspan(0, 2), a);
  return loss;
}

#define ZEROSIM_GPT_INSTANTIATE(Real)                                                                                     \
  template Status gpt_begin_micro_batch<Real>(const GptSpec&, std::span<const int32_t>, int64_t, int64_t,                 \
                                              std::span<const float>, GptActivations<Real>&);                             \
  template void gpt_embeddings_forward<Real>(const GptSpec&, std::span<const std::vector<Real>>, GptActivations<Real>&);  \
  template void gpt_block_forward<Real>(const GptSpec&, int64_t, std::span<const std::vector<Real>>,                      \
                                        GptActivations<Real>&);                                                           \
  template void gpt_final_norm_forward<Real>(const GptSpec&, std::span<const std::vector<Real>>, GptActivations<Real>&);  \
  template void gpt_head_forward<Real>(const GptSpec&, std::span<const std::vector<Real>>, GptActivations<Real>&);        \
  template Real gpt_loss<Real>(const GptSpec&, Real, GptActivations<Real>&);                                              \
  template void gpt_head_backward<Real>(const GptSpec&, std::span<const std::vector<Real>>, std::span<std::vector<Real>>, \
                                        GptActivations<Real>&);                                                           \
  template void gpt_final_norm_backward<Real>(const GptSpec&, std::span<const std::vector<Real>>,                         \
                                              std::span<std::vector<Real>>, GptActivations<Real>&);                       \
  template void gpt_block_backward<Real>(const GptSpec&, int64_t, std::span<const std::vector<Real>>,                     \
                                         std::span<std::vector<Real>>, GptActivations<Real>&);                            \
  template void gpt_embeddings_backward<Real>(const GptSpec&, std::span<std::vector<Real>>, GptActivations<Real>&);       \
  template Result<Real> gpt_forward_backward<Real>(const GptSpec&, const std::vector<std::vector<Real>>&,                 \
                                                   std::span<const int32_t>, int64_t, int64_t, Real,                      \
                                                   std::vector<std::vector<Real>>&, int);
ZEROSIM_GPT_INSTANTIATE(float)
ZEROSIM_GPT_INSTANTIATE(double)
#undef ZEROSIM_GPT_INSTANTIATE

}  // namespace zerosim
