#include "preload/mem_poisson.h"

#include <time.h>

#include <cstring>

namespace mlprof::preload::mem {

double fast_log(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // mantissa in [1, 2)
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > 1.4142135623730951) {  // [sqrt(1/2), sqrt(2)): |z| <= 0.1716 below
    m *= 0.5;
    ++e;
  }
  // ln(m) = 2 atanh(z) = 2 (z + z^3/3 + z^5/5 + ...), z = (m - 1) / (m + 1), |z| <= 0.1716; the
  // first omitted term is below 2 * 0.1716^19 / 19 = 4e-16.
  const double z = (m - 1.0) / (m + 1.0), z2 = z * z;
  const double p =
      z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9 + z2 * (1.0 / 11 + z2 * (1.0 / 13 + z2 * (1.0 / 15 + z2 * (1.0 / 17))))))));
  return e * 0.6931471805599453 + 2.0 * z * (1.0 + p);
}

namespace {

// sum_{k=1..n} x^k / k!  for |x| <= 0.5 (error < 0.5^15 / 15! = 2e-17).
double expm1_series(double x) {
  double term = x, sum = x;
  for (int k = 2; k <= 14; ++k) {
    term *= x / k;
    sum += term;
  }
  return sum;
}

double pow2(int64_t k) {  // -1022 <= k <= 1023
  const uint64_t bits = static_cast<uint64_t>(k + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

}  // namespace

double fast_expm1(double x) {
  if (x > -0.5 && x < 0.5) return expm1_series(x);
  if (x < -745.0) return -1.0;
  if (x > 709.0) x = 709.0;
  // exp(x) = 2^k exp(r), |r| <= ln2/2
  const double ln2 = 0.6931471805599453;
  const int64_t k = static_cast<int64_t>(x / ln2 + (x < 0 ? -0.5 : 0.5));
  const double r = x - static_cast<double>(k) * ln2;
  double e = 1.0 + expm1_series(r);
  // Scale by 2^k in two steps so that 2^k itself never leaves the normal range.
  const int64_t half = k / 2;
  e *= pow2(half);
  e *= pow2(k - half);
  return e - 1.0;
}

uint64_t next_random(uint64_t* state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545f4914f6cdd1dull;
}

uint64_t fresh_seed(uint32_t tid) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t local = 0;
  uint64_t s = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 32) ^
               (reinterpret_cast<uintptr_t>(&local) * 0x9e3779b97f4a7c15ull) ^ (uint64_t{tid} << 17);
  // splitmix64 finaliser: nearby inputs give unrelated seeds
  s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
  s = (s ^ (s >> 27)) * 0x94d049bb133111ebull;
  s ^= s >> 31;
  return s ? s : 0x9e3779b97f4a7c15ull;
}

int64_t draw_countdown(uint64_t* rng, uint64_t interval) {
  if (interval <= 1) return 0;
  // u uniform in (0, 1]: 53 random bits
  const double u = static_cast<double>((next_random(rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
  const double x = -fast_log(u) * static_cast<double>(interval);  // Exp(interval), <= 36.8 T
  return x >= 4.0e18 ? int64_t{4000000000000000000} : static_cast<int64_t>(x) + 1;  // floor(x) + 1
}

uint64_t sample_weight(uint64_t size, uint64_t interval) {
  if (interval <= 1 || size == 0) return size;
  const double s = static_cast<double>(size);
  const double p = -fast_expm1(-s / static_cast<double>(interval));
  const double w = s / p + 0.5;
  if (w >= 1.8e19) return UINT64_MAX;
  const uint64_t r = static_cast<uint64_t>(w);
  return r ? r : 1;
}

bool decide(int64_t* countdown, bool* seeded, uint64_t* rng, uint64_t size, uint64_t interval, uint64_t* weight) {
  if (!*seeded) {
    // First allocation of this thread: the countdown was 0 and already lost `size`. Draw it and
    // apply this allocation to it as the fast path would have.
    *seeded = true;
    *countdown = draw_countdown(rng, interval) - counted(size);
    if (interval > 1 && *countdown > 0) return false;
  }
  *weight = sample_weight(size, interval);
  *countdown = draw_countdown(rng, interval);
  return true;
}

}  // namespace mlprof::preload::mem
