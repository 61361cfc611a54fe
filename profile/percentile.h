// Nearest-rank percentiles, the definition of the serving figures (docs/serving.md): the smallest
// value with at least q% of the values at or below it, so every percentile is a value that was
// actually measured. Used by the serving run's own fields and by the HTML report's buckets.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlprof::profile {

// Nearest-rank percentile of `sorted` (ascending), q in (0, 100]; 0 when empty.
inline int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  // A tiny tolerance so q*n that is an integer in exact arithmetic is not pushed up by rounding.
  size_t rank = static_cast<size_t>(std::ceil(q / 100.0 * n - 1e-9));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

}  // namespace mlprof::profile
