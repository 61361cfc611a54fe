#include "tools/serving_stats.h"

#include <algorithm>
#include <cmath>

namespace mlprof::tools {

void fill_latency_fields(profile::Serving& s) {
  constexpr int32_t kAborted = profile::ServingRequest::kAborted;
  s.total_queries = 0;
  s.success_queries = 0;
  uint64_t done = 0;  // steady-state requests, those cut off by mlprof-run's interruption aside
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const auto& r = s.requests[i];
    if (r.status == kAborted) continue;
    ++s.total_queries;
    s.success_queries += r.status >= 200 && r.status < 300;
    done += i >= s.warmup;
  }
  std::vector<int64_t> lat;
  for (size_t i = s.warmup; i < s.requests.size(); ++i)
    if (s.requests[i].status != 0 && s.requests[i].status != kAborted)
      lat.push_back(s.requests[i].latency_ns);  // answered or timed out
  std::sort(lat.begin(), lat.end());
  long double sum = 0;
  for (int64_t v : lat) sum += v;
  s.average_latency_ns = lat.empty() ? 0 : static_cast<int64_t>(std::llround(sum / lat.size()));
  s.p50_ns = percentile(lat, 50);
  s.p90_ns = percentile(lat, 90);
  s.p95_ns = percentile(lat, 95);
  s.p99_ns = percentile(lat, 99);
  s.p999_ns = percentile(lat, 99.9);
  const int64_t span = s.window_end_ns - s.window_start_ns;
  s.measured_qps_milli = span > 0 ? static_cast<int64_t>(std::llround(done * 1e12 / static_cast<double>(span))) : 0;
}

}  // namespace mlprof::tools
