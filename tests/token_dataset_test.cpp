// Token data for the transformer (core/data/token_dataset.h): the synthetic stream is a pure
// function of (seed, sample), mostly follows its bigram, and a small GPT learns it (the loss
// falls); a nanoGPT uint16 file is read window by window, and a bad file is refused naming what
// is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/data/token_dataset.h"
#include "core/env/env.h"
#include "core/model/gpt.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

std::vector<int32_t> window_of(TokenDataset& dataset, int64_t sample) {
  std::vector<int32_t> tokens(static_cast<size_t>(dataset.spec().window + 1));
  const Status read = dataset.tokens(sample, tokens);
  EXPECT_TRUE(read.ok()) << read.to_string();
  return tokens;
}

TEST(TokenDataset, TheSyntheticStreamIsAPureFunctionOfSeedAndSampleAndMostlyABigram) {
  RealEnv real_env;
  TokenDatasetSpec spec{/*vocab=*/50, /*window=*/12, /*sample_count=*/300, /*seed=*/4, ""};
  Result<std::unique_ptr<TokenDataset>> a = TokenDataset::open(spec, *real_env.env().disk);
  Result<std::unique_ptr<TokenDataset>> b = TokenDataset::open(spec, *real_env.env().disk);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->sample_count(), 300);
  EXPECT_EQ(window_of(**a, 17), window_of(**b, 17));
  EXPECT_NE(window_of(**a, 17), window_of(**a, 18));
  spec.seed = 5;
  Result<std::unique_ptr<TokenDataset>> other = TokenDataset::open(spec, *real_env.env().disk);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(window_of(**a, 17), window_of(**other, 17));
  // The most frequent successor of each token carries about 7/8 of its transitions.
  std::vector<std::vector<int>> counts(50, std::vector<int>(50, 0));
  int transitions = 0;
  for (int64_t s = 0; s < 300; ++s) {
    const std::vector<int32_t> tokens = window_of(**a, s);
    for (size_t t = 0; t + 1 < tokens.size(); ++t) {
      ASSERT_GE(tokens[t], 0);
      ASSERT_LT(tokens[t], 50);
      ++counts[static_cast<size_t>(tokens[t])][static_cast<size_t>(tokens[t + 1])];
      ++transitions;
    }
  }
  int followed = 0;
  for (const std::vector<int>& row : counts) followed += *std::max_element(row.begin(), row.end());
  EXPECT_GT(static_cast<double>(followed) / transitions, 0.8);
  EXPECT_LT(static_cast<double>(followed) / transitions, 0.95);
}

// The learnable signal: a small GPT trained with plain SGD on the stream lowers its loss well
// below the uniform guess's ln(vocab).
TEST(TokenDataset, ASmallGptLearnsTheSyntheticStream) {
  RealEnv real_env;
  const GptSpec spec{1, 16, 2, 16, 8};
  Result<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::open(TokenDatasetSpec{16, 8, 512, 3, ""}, *real_env.env().disk);
  ASSERT_TRUE(dataset.ok());
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  std::vector<std::vector<float>> parameters;
  for (size_t p = 0; p < infos.size(); ++p) {
    std::vector<float> values(static_cast<size_t>(infos[p].element_count));
    for (int64_t k = 0; k < infos[p].element_count; ++k) values[static_cast<size_t>(k)] = gpt_initial_value(spec, 3, static_cast<int64_t>(p), k);
    parameters.push_back(std::move(values));
  }
  constexpr int64_t kSequences = 8;
  float first_loss = 0.0f, last_loss = 0.0f;
  for (int64_t step = 0; step < 150; ++step) {
    std::vector<int32_t> tokens;
    for (int64_t s = 0; s < kSequences; ++s) {
      const std::vector<int32_t> window = window_of(**dataset, (step * kSequences + s) % 512);
      tokens.insert(tokens.end(), window.begin(), window.end());
    }
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& tensor : parameters) gradients.emplace_back(tensor.size(), 0.0f);
    const Result<float> loss =
        gpt_forward_backward<float>(spec, parameters, tokens, kSequences, 8, 1.0f / (kSequences * 8), gradients);
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    if (step == 0) first_loss = *loss;
    last_loss = *loss;
    for (size_t p = 0; p < parameters.size(); ++p) {
      for (size_t k = 0; k < parameters[p].size(); ++k) parameters[p][k] -= 0.5f * gradients[p][k];
    }
  }
  EXPECT_NEAR(first_loss, std::log(16.0f), 0.2f);
  EXPECT_LT(last_loss, 0.6f * first_loss) << "first " << first_loss << ", last " << last_loss;
}

TEST(TokenDataset, ANanoGptFileIsReadWindowByWindowAndBadOnesAreRefused) {
  TestDirectory directory;
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  const std::string path = directory.path() + "/train.bin";
  std::vector<uint16_t> file_tokens;
  for (uint16_t k = 0; k < 41; ++k) file_tokens.push_back(static_cast<uint16_t>((k * 7) % 30));
  auto write = [&](const std::vector<uint16_t>& values, size_t extra_bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 2));
    for (size_t k = 0; k < extra_bytes; ++k) out.put('\0');
  };
  write(file_tokens, 0);
  Result<std::unique_ptr<TokenDataset>> dataset = TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, path}, disk);
  ASSERT_TRUE(dataset.ok()) << dataset.status().to_string();
  EXPECT_EQ((*dataset)->sample_count(), 5);  // (41 - 1) / 8
  const std::vector<int32_t> third = window_of(**dataset, 2);
  for (size_t t = 0; t < third.size(); ++t) EXPECT_EQ(third[t], file_tokens[16 + t]) << t;

  file_tokens[20] = 31;  // outside the vocabulary of 30
  write(file_tokens, 0);
  dataset = TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, path}, disk);
  ASSERT_TRUE(dataset.ok());
  std::vector<int32_t> tokens(9);
  const Status bad_token = (*dataset)->tokens(2, tokens);
  ASSERT_FALSE(bad_token.ok());
  EXPECT_NE(bad_token.message().find("token 31 at token offset 20 is outside the vocabulary of 30"), std::string::npos)
      << bad_token.to_string();
  write(file_tokens, 1);
  Result<std::unique_ptr<TokenDataset>> odd = TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, path}, disk);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("not a whole number of uint16 tokens"), std::string::npos);
  write(std::vector<uint16_t>(5, 1), 0);
  Result<std::unique_ptr<TokenDataset>> short_file = TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, path}, disk);
  ASSERT_FALSE(short_file.ok());
  EXPECT_NE(short_file.status().message().find("5 tokens, fewer than one window of 8 + 1"), std::string::npos);
  Result<std::unique_ptr<TokenDataset>> missing =
      TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, directory.path() + "/none.bin"}, disk);
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(TokenDataset::open(TokenDatasetSpec{70000, 8, 10, 1, ""}, disk).ok());
  EXPECT_FALSE(TokenDataset::open(TokenDatasetSpec{30, 8, 0, 1, ""}, disk).ok());  // synthetic needs a count
  write(file_tokens, 0);
  const Result<std::unique_ptr<TokenDataset>> counted = TokenDataset::open(TokenDatasetSpec{30, 8, 12, 1, path}, disk);
  ASSERT_FALSE(counted.ok());
  EXPECT_NE(counted.status().message().find("the file's size decides it"), std::string::npos);
}

}  // namespace
}  // namespace zerosim
