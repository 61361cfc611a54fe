#include "tools/serving_recommend.h"

#include <algorithm>

namespace mlprof::tools {

namespace {
int64_t round_up(int64_t v, int64_t step) { return (v + step - 1) / step * step; }
}  // namespace

Recommendation recommend(int64_t peak_millicores, int64_t peak_rss_bytes) {
  Recommendation r;
  // x 1.2 in integers: v + v/5, rounded up.
  const int64_t cpu = peak_millicores + (peak_millicores + 4) / 5;
  const int64_t mem = peak_rss_bytes + (peak_rss_bytes + 4) / 5;
  r.millicores = std::max(kCpuStepMillicores, round_up(std::max<int64_t>(cpu, 0), kCpuStepMillicores));
  r.memory_bytes = std::max(kMemoryStepBytes, round_up(std::max<int64_t>(mem, 0), kMemoryStepBytes));
  return r;
}

}  // namespace mlprof::tools
