// The transformer (core/model/gpt.h): its parameters are GPT-2's (names, shapes, and the 124 M
// count of GPT-2 small), its gradients agree with central finite differences in double
// precision for every parameter (the tied wte's two uses included), and the float path is
// deterministic and close to the double one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/env/rng.h"
#include "core/model/gpt.h"
#include "core/tensor/dtype.h"

namespace zerosim {
namespace {

TEST(Gpt, TheSpecParsesAndBadOnesAreRefusedNamingTheKey) {
  const Result<GptSpec> spec = parse_gpt_spec("gpt:layers=2,embd=8,heads=2,vocab=11,block=6");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(*spec, (GptSpec{2, 8, 2, 11, 6}));
  EXPECT_EQ(gpt_spec_to_string(*spec), "gpt:layers=2,embd=8,heads=2,vocab=11,block=6");
  EXPECT_EQ(parse_gpt_spec("gpt:vocab=11,block=6,layers=2,heads=2,embd=8").value(), *spec);
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"gpt:layers=2,embd=8,heads=2,vocab=11", "block= is missing"},
           {"gpt:layers=2,embd=8,heads=3,vocab=11,block=6", "embd 8 is not divisible by heads 3"},
           {"gpt:layers=2,layers=3,embd=8,heads=2,vocab=11,block=6", "layers is given twice"},
           {"gpt:layers=2,embd=8,heads=2,vocab=11,block=6,depth=4", "'depth=4' is not one of"},
           {"gpt:layers=x,embd=8,heads=2,vocab=11,block=6", "layers must be a positive integer, found 'x'"},
           {"gpt:layers=0,embd=8,heads=2,vocab=11,block=6", "layers must be in 1..2^20, found 0"},
           {"gpt:layers=2,embd=8,heads=2,vocab=11,block=", "block must be a positive integer, found ''"},
           {"13,37,5", "a transformer is gpt:"}}) {
    const Result<GptSpec> bad = parse_gpt_spec(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(expected), std::string::npos) << bad.status().to_string();
  }
}

// GPT-2 small as Hugging Face counts it (GPT2LMHeadModel, lm_head tied to wte): 124,439,808.
TEST(Gpt, GptTwoSmallHasHuggingFacesNamesShapesAndParameterCount) {
  const std::vector<ParameterInfo> parameters = gpt_parameters(GptSpec{12, 768, 12, 50257, 1024});
  ASSERT_EQ(parameters.size(), 2u + 12u * 12u + 2u);
  const int64_t total = std::accumulate(parameters.begin(), parameters.end(), int64_t{0},
                                        [](int64_t sum, const ParameterInfo& p) { return sum + p.element_count; });
  EXPECT_EQ(total, 124439808);
  EXPECT_EQ(parameters[0].name, "transformer.wte.weight");
  EXPECT_EQ(parameters[0].shape, (std::vector<int64_t>{50257, 768}));
  EXPECT_EQ(parameters[4].name, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(parameters[4].shape, (std::vector<int64_t>{768, 2304}));  // Conv1D: [in, out]
  EXPECT_EQ(parameters[12].name, "transformer.h.0.mlp.c_proj.weight");
  EXPECT_EQ(parameters[12].shape, (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(parameters.back().name, "transformer.ln_f.bias");
}

struct Problem {
  GptSpec spec{2, 8, 2, 11, 6};
  std::vector<int32_t> tokens;
  int64_t sequences = 2, length = 5;
  int32_t token_range = 11;
  std::vector<std::vector<double>> parameters;
};

// Initial values moved off their symmetric starts (LayerNorm weights 1, biases 0) so that every
// term of the backward is exercised.
Problem make_problem(uint64_t seed, Problem problem = {}) {
  const std::vector<ParameterInfo> infos = gpt_parameters(problem.spec);
  for (size_t p = 0; p < infos.size(); ++p) {
    std::vector<double> values(static_cast<size_t>(infos[p].element_count));
    for (int64_t k = 0; k < infos[p].element_count; ++k) {
      values[static_cast<size_t>(k)] =
          gpt_initial_value(problem.spec, seed, static_cast<int64_t>(p), k) +
          0.3 * random_symmetric_unit_float(mix_random_bits(seed, 0x77 + p, static_cast<uint64_t>(k)));
    }
    problem.parameters.push_back(std::move(values));
  }
  for (int64_t k = 0; k < problem.sequences * (problem.length + 1); ++k) {
    problem.tokens.push_back(static_cast<int32_t>(mix_random_bits(seed, 0x99, static_cast<uint64_t>(k)) %
                                                static_cast<uint64_t>(problem.token_range)));
  }
  return problem;
}

double loss_of(const Problem& problem, const std::vector<std::vector<double>>& parameters) {
  std::vector<std::vector<double>> unused;
  for (const std::vector<double>& tensor : parameters) unused.emplace_back(tensor.size(), 0.0);
  const Result<double> loss = gpt_forward_backward<double>(problem.spec, parameters, problem.tokens, problem.sequences,
                                                           problem.length, 1.0, unused);
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  return loss.ok() ? *loss : 0.0;
}

TEST(Gpt, GradientsAgreeWithCentralFiniteDifferencesForEveryParameter) {
  const Problem problem = make_problem(5);
  const double predictions = static_cast<double>(problem.sequences * problem.length);
  std::vector<std::vector<double>> gradients;
  for (const std::vector<double>& tensor : problem.parameters) gradients.emplace_back(tensor.size(), 0.0);
  // The gradient of the mean loss: scale 1 / predictions.
  const Result<double> loss = gpt_forward_backward<double>(problem.spec, problem.parameters, problem.tokens,
                                                           problem.sequences, problem.length, 1.0 / predictions, gradients);
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  EXPECT_GT(*loss, 0.0);
  const std::vector<ParameterInfo> infos = gpt_parameters(problem.spec);
  constexpr double kStep = 1e-5;
  int checked = 0;
  for (size_t p = 0; p < infos.size(); ++p) {
    SCOPED_TRACE(infos[p].name);
    // Every element of the small tensors, a stride through the large ones (wte: rows that are and
    // are not tokens of the batch, both uses of the tied weight).
    // A stride coprime with the row width, so the samples walk through every column.
    int64_t stride = std::max<int64_t>(1, infos[p].element_count / 24);
    while (std::gcd(stride, infos[p].shape.back()) != 1) ++stride;
    for (int64_t k = 0; k < infos[p].element_count; k += stride) {
      std::vector<std::vector<double>> plus = problem.parameters, minus = problem.parameters;
      plus[p][static_cast<size_t>(k)] += kStep;
      minus[p][static_cast<size_t>(k)] -= kStep;
      const double numeric = (loss_of(problem, plus) - loss_of(problem, minus)) / (2.0 * kStep);
      const double analytic = gradients[p][static_cast<size_t>(k)];
      EXPECT_NEAR(analytic, numeric, 1e-8 + 1e-6 * std::fabs(numeric)) << "element " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

TEST(Gpt, TheFloatPathIsDeterministicAndCloseToDouble) {
  const Problem problem = make_problem(9);
  std::vector<std::vector<float>> parameters;
  for (const std::vector<double>& tensor : problem.parameters) parameters.emplace_back(tensor.begin(), tensor.end());
  auto run = [&]() {
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& tensor : parameters) gradients.emplace_back(tensor.size(), 0.0f);
    const Result<float> loss = gpt_forward_backward<float>(problem.spec, parameters, problem.tokens, problem.sequences,
                                                           problem.length, 0.1f, gradients);
    EXPECT_TRUE(loss.ok());
    return std::pair{loss.ok() ? *loss : 0.0f, gradients};
  };
  const auto [loss_a, gradients_a] = run();
  const auto [loss_b, gradients_b] = run();
  EXPECT_EQ(float_bits(loss_a), float_bits(loss_b));
  std::vector<std::vector<double>> reference;
  for (const std::vector<double>& tensor : problem.parameters) reference.emplace_back(tensor.size(), 0.0);
  std::vector<std::vector<double>> rounded;
  for (const std::vector<float>& tensor : parameters) rounded.emplace_back(tensor.begin(), tensor.end());
  const Result<double> loss_double = gpt_forward_backward<double>(problem.spec, rounded, problem.tokens,
                                                                  problem.sequences, problem.length, 0.1, reference);
  ASSERT_TRUE(loss_double.ok());
  EXPECT_NEAR(loss_a, *loss_double, 1e-5 * *loss_double);
  for (size_t p = 0; p < gradients_a.size(); ++p) {
    double difference = 0.0, norm = 0.0;
    for (size_t k = 0; k < gradients_a[p].size(); ++k) {
      EXPECT_EQ(float_bits(gradients_a[p][k]), float_bits(gradients_b[p][k]));
      difference += (gradients_a[p][k] - reference[p][k]) * (gradients_a[p][k] - reference[p][k]);
      norm += reference[p][k] * reference[p][k];
    }
    EXPECT_LE(std::sqrt(difference), 1e-4 * std::sqrt(norm) + 1e-9) << p;
  }
}

// The float path's bits are the element-by-element scalar folds' (each product's element a fused
// left fold in order, vector_ops' add_product_scalar): a model wide enough for the blocked
// products' paired strips, their narrower last strips and the head's transposed operands. The
// digest of the loss and every gradient was recorded with add_product temporarily forced onto
// its scalar path, and the AVX-512 path gives it too; vector_ops_test holds every path to the
// scalar fold, so a kernel that changes one bit here changes the digest.
TEST(Gpt, TheFloatPathKeepsTheScalarLoopsBits) {
  Problem wide;
  wide.spec = GptSpec{2, 48, 4, 100, 16};
  wide.sequences = 2;
  wide.length = 16;
  wide.token_range = 100;
  const Problem problem = make_problem(5, wide);
  std::vector<std::vector<float>> parameters, gradients;
  for (const std::vector<double>& tensor : problem.parameters) {
    parameters.emplace_back(tensor.begin(), tensor.end());
    gradients.emplace_back(tensor.size(), 0.0f);
  }
  const Result<float> loss = gpt_forward_backward<float>(problem.spec, parameters, problem.tokens, problem.sequences,
                                                         problem.length, 0.1f, gradients);
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  XXH3_state_t* state = XXH3_createState();
  ASSERT_NE(state, nullptr);
  XXH3_64bits_reset(state);
  const uint32_t loss_bits = float_bits(*loss);
  XXH3_64bits_update(state, &loss_bits, sizeof loss_bits);
  for (const std::vector<float>& gradient : gradients) XXH3_64bits_update(state, gradient.data(), gradient.size() * 4);
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  EXPECT_EQ(digest, 0x5402cb83d98458bfull) << std::hex << "digest 0x" << digest << ", loss bits 0x" << loss_bits;
}

// A micro-batch large enough that every stage splits among threads (each product's result, the
// attention's (sequence, head) pairs, GELU's values, the loss's rows) gives one thread's loss
// and gradients, bit for bit, at 2 and 3 threads.
TEST(Gpt, SeveralThreadsGiveOneThreadsBits) {
  Problem large;
  large.spec = GptSpec{1, 128, 2, 4096, 128};  // a head of 64 dimensions over 128 tokens: 2^20 products
  large.sequences = 2;
  large.length = 128;
  large.token_range = 4096;
  const Problem problem = make_problem(11, large);
  std::vector<std::vector<float>> parameters;
  for (const std::vector<double>& tensor : problem.parameters) parameters.emplace_back(tensor.begin(), tensor.end());
  auto run = [&](int threads, std::vector<std::vector<float>>& gradients) {
    for (const std::vector<float>& tensor : parameters) gradients.emplace_back(tensor.size(), 0.0f);
    const Result<float> loss = gpt_forward_backward<float>(problem.spec, parameters, problem.tokens, problem.sequences,
                                                           problem.length, 0.01f, gradients, threads);
    EXPECT_TRUE(loss.ok()) << loss.status().to_string();
    return loss.ok() ? *loss : 0.0f;
  };
  std::vector<std::vector<float>> one_thread;
  const float one_thread_loss = run(1, one_thread);
  for (const int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<std::vector<float>> gradients;
    const float loss = run(threads, gradients);
    EXPECT_EQ(float_bits(loss), float_bits(one_thread_loss));
    for (size_t p = 0; p < gradients.size(); ++p) {
      size_t differing = 0;
      for (size_t k = 0; k < gradients[p].size(); ++k) differing += float_bits(gradients[p][k]) != float_bits(one_thread[p][k]);
      EXPECT_EQ(differing, 0u) << "parameter " << p << ": " << differing << " of " << gradients[p].size() << " differ";
    }
  }
}

// Pinned to Hugging Face's GPT-2: the loss of GPT2LMHeadModel on the same weights and batch,
// computed by PyTorch on the GPU machine (tests/data/gpt/hf_gpt2_losses.json says how), on its
// CPU and on CUDA. The three fold the same sums in three orders (PyTorch's two already differ by
// one ulp on the larger case), so the check is the distance to each: at most 2 ulps (a LayerNorm
// epsilon of 2e-5 for GPT-2's 1e-5 moves the loss by 180 to 300 ulps).
TEST(Gpt, TheLossIsHuggingFacesGpt2LossOnTheSameWeightsAndBatch) {
  std::ifstream file(std::string(ZEROSIM_TEST_DATA_DIR) + "/gpt/hf_gpt2_losses.json");
  const nlohmann::json golden = nlohmann::json::parse(file);
  ASSERT_EQ(golden["cases"].size(), 2u);
  for (const nlohmann::json& golden_case : golden["cases"]) {
    SCOPED_TRACE(golden_case["model"].get<std::string>());
    const Result<GptSpec> spec = parse_gpt_spec(golden_case["model"]);
    ASSERT_TRUE(spec.ok());
    const uint64_t seed = golden_case["seed"];
    const int64_t sequences = golden_case["sequences"], length = golden_case["length"];
    const std::vector<std::vector<float>> parameters = gpt_initial_parameters(*spec, seed);
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& tensor : parameters) gradients.emplace_back(tensor.size(), 0.0f);
    const std::vector<int32_t> tokens = gpt_check_tokens(*spec, seed, sequences, length);
    const Result<float> loss = gpt_forward_backward<float>(*spec, parameters, tokens, sequences, length,
                                                           1.0f / static_cast<float>(sequences * length), gradients);
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    const float cuda = std::stof(golden_case["torch_cuda_loss"].get<std::string>());
    const float cpu = std::stof(golden_case["torch_cpu_loss"].get<std::string>());
    auto ulps_to = [&](float torch_loss) {
      return std::llabs(static_cast<int64_t>(float_bits(*loss)) - static_cast<int64_t>(float_bits(torch_loss)));
    };
    EXPECT_LE(ulps_to(cuda), 2) << *loss << " vs PyTorch's CUDA loss " << cuda;
    EXPECT_LE(ulps_to(cpu), 2) << *loss << " vs PyTorch's CPU loss " << cpu;
  }
}

TEST(Gpt, BadBatchesAreRefusedNamingWhatIsWrong) {
  const Problem problem = make_problem(3);
  std::vector<std::vector<double>> gradients;
  for (const std::vector<double>& tensor : problem.parameters) gradients.emplace_back(tensor.size(), 0.0);
  std::vector<int32_t> tokens = problem.tokens;
  tokens[3] = 11;
  Result<double> bad = gpt_forward_backward<double>(problem.spec, problem.parameters, tokens, 2, 5, 1.0, gradients);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token 11 outside the vocabulary of 11"), std::string::npos);
  bad = gpt_forward_backward<double>(problem.spec, problem.parameters, problem.tokens, 1, 11, 1.0, gradients);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the model's block is 6"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace zerosim
