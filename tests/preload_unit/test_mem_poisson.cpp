// preload/mem_poisson.cpp: the byte-interval Poisson sampler. The truth is the exact byte count
// of a synthetic allocation stream (nothing is allocated); the estimate must be unbiased.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "preload/mem_poisson.h"

namespace mlprof::preload::mem {
namespace {

TEST(MemMath, LogAndExpm1MatchLibm) {
  for (double x = 1e-300; x < 1e300; x *= 1.37) ASSERT_NEAR(fast_log(x), std::log(x), 1e-12 * std::fabs(std::log(x)) + 1e-15) << x;
  for (double u = 1.0 / 9007199254740992.0; u <= 1.0; u *= 1.01) ASSERT_NEAR(fast_log(u), std::log(u), 1e-12 * std::fabs(std::log(u)) + 1e-15);
  EXPECT_EQ(fast_log(1.0), 0.0);
  for (double x = -800; x < 700; x += 0.37) {
    const double want = std::expm1(x);
    ASSERT_NEAR(fast_expm1(x), want, 1e-12 * std::fabs(want) + 1e-300) << x;
  }
  for (double x = -1e-12; x > -1; x *= 1.1) ASSERT_NEAR(fast_expm1(x), std::expm1(x), 1e-13 * std::fabs(std::expm1(x))) << x;
}

// A synthetic allocation stream through the fast path and decide(), as the hook does.
struct Stream {
  explicit Stream(uint64_t interval, uint64_t seed) : interval(interval), rng(seed) {}
  // Returns the weight (0 when not sampled).
  uint64_t alloc(uint64_t size) {
    if ((countdown -= counted(size)) > 0) return 0;
    uint64_t w = 0;
    return decide(&countdown, &seeded, &rng, size, interval, &w) ? w : 0;
  }
  uint64_t interval;
  uint64_t rng;
  int64_t countdown = 0;
  bool seeded = false;
};

// Mixed sizes: many small, some medium, a few large (like a Python or C++ program's mix).
uint64_t size_of(uint64_t r) {
  const uint64_t k = r % 100;
  if (k < 70) return 1 + (r >> 8) % 128;
  if (k < 95) return 1024 + (r >> 8) % 8192;
  return 65536 + (r >> 8) % (1 << 20);
}

TEST(MemPoisson, EstimateOfAllocatedBytesIsUnbiased) {
  for (uint64_t seed : {1ull, 2ull, 3ull}) {
    Stream s(512 * 1024, seed);
    uint64_t r = seed * 0x9e3779b97f4a7c15ull, truth = 0, small_truth = 0;
    double est = 0, small_est = 0, expected_samples = 0;
    size_t samples = 0;
    for (int i = 0; i < 4'000'000; ++i) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t n = size_of(r >> 16);
      truth += n;
      expected_samples += -std::expm1(-static_cast<double>(n) / (512 * 1024));
      const uint64_t w = s.alloc(n);
      est += static_cast<double>(w);
      samples += w != 0;
      if (n <= 128) {
        small_truth += n;
        small_est += static_cast<double>(w);
      }
    }
    // ~ 120 GB in 4 M allocations: ~130,000 samples; the estimate's standard error is ~0.5%.
    EXPECT_NEAR(est / static_cast<double>(truth), 1.0, 0.02) << "seed " << seed;
    // Small allocations are sampled rarely (p ~ 1e-4) but with large weights: still unbiased
    // (a floor/ceil slip in the countdown would bias them by 1/size, i.e. several %).
    EXPECT_NEAR(small_est / static_cast<double>(small_truth), 1.0, 0.05) << "seed " << seed;
    // Each allocation is sampled with probability 1 - exp(-size/T).
    EXPECT_NEAR(static_cast<double>(samples), expected_samples, 5 * std::sqrt(expected_samples));
  }
}

TEST(MemPoisson, SampledFractionIsOneMinusExpOfSizeOverInterval) {
  for (uint64_t size : {16ull, 4096ull, 65536ull, 1048576ull}) {
    Stream s(65536, size);
    int sampled = 0;
    const int n = 400'000;
    for (int i = 0; i < n; ++i) sampled += s.alloc(size) != 0;
    const double p = 1 - std::exp(-static_cast<double>(size) / 65536);
    EXPECT_NEAR(sampled / double(n), p, 4 * std::sqrt(p * (1 - p) / n) + 1e-4) << size;
  }
}

TEST(MemPoisson, WeightIsSizeOverProbability) {
  EXPECT_EQ(sample_weight(0, 512 * 1024), 0u);
  EXPECT_NEAR(static_cast<double>(sample_weight(16, 512 * 1024)), 16 / (1 - std::exp(-16.0 / 524288)), 1.0);
  EXPECT_NEAR(static_cast<double>(sample_weight(1 << 20, 512 * 1024)), (1 << 20) / (1 - std::exp(-2.0)), 1.0);
  EXPECT_EQ(sample_weight(100ull << 30, 512 * 1024), 100ull << 30);  // certain: weight = size
  EXPECT_EQ(sample_weight(123, 1), 123u);  // exact mode
}

TEST(MemPoisson, ExactModeSamplesEveryAllocationWithItsSize) {
  Stream s(1, 7);
  for (uint64_t n : {0ull, 1ull, 16ull, 17ull, 4096ull, 1ull << 30}) {
    uint64_t w = 0;
    // Through the fast path: the countdown is kept at 0, so every call reaches decide(), even
    // the first one (a new thread's countdown is 0) and malloc(0).
    ASSERT_LE(s.countdown - counted(n), 0) << n;
    s.countdown -= counted(n);
    ASSERT_TRUE(decide(&s.countdown, &s.seeded, &s.rng, n, 1, &w)) << n;
    EXPECT_EQ(w, n);
  }
}

TEST(MemPoisson, SameSeedSameDecisions) {
  Stream a(4096, 99), b(4096, 99), c(4096, 100);
  std::vector<uint64_t> wa, wb, wc;
  for (int i = 0; i < 100000; ++i) {
    wa.push_back(a.alloc(100 + i % 1000));
    wb.push_back(b.alloc(100 + i % 1000));
    wc.push_back(c.alloc(100 + i % 1000));
  }
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
}

TEST(MemPoisson, CountdownIsExponentialWithTheIntervalAsMean) {
  uint64_t rng = 12345;
  double sum = 0, sum2 = 0;
  const int n = 1'000'000;
  for (int i = 0; i < n; ++i) {
    const double x = static_cast<double>(draw_countdown(&rng, 1 << 20));
    ASSERT_GE(x, 0);
    sum += x;
    sum2 += x * x;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean / (1 << 20), 1.0, 0.005);  // floor() + 1 adds half a byte: negligible
  EXPECT_NEAR(std::sqrt(var) / (1 << 20), 1.0, 0.01);  // exponential: sd == mean
  EXPECT_EQ(draw_countdown(&rng, 1), 0);
  EXPECT_NE(fresh_seed(1), 0u);
}

}  // namespace
}  // namespace mlprof::preload::mem
