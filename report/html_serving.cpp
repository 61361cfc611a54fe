#include "report/html_serving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "profile/percentile.h"
#include "report/serving_json.h"

namespace mlprof::report {

nlohmann::json serving_series(const profile::Profile& p) {
  using nlohmann::json;
  using serving_detail::round3;
  const profile::Serving& s = p.serving;
  if (!s.present || s.requests.empty()) return json(nullptr);
  const int64_t run0 = p.run.start_ns;
  int64_t t0 = s.load_start_ns, t1 = s.load_end_ns;
  if (!t0 || !t1 || t1 <= t0) {
    t0 = INT64_MAX;
    t1 = INT64_MIN;
    for (const auto& r : s.requests) {
      t0 = std::min(t0, r.start_ns);
      t1 = std::max(t1, r.start_ns + r.latency_ns);
    }
  }
  const size_t n = std::min<size_t>(120, std::max<size_t>(10, static_cast<size_t>(std::llround(s.requests.size() / 20.0))));
  const int64_t width = std::max<int64_t>((t1 - t0) / static_cast<int64_t>(n), 1000000);  // >= 1 ms
  auto bucket = [&](int64_t t) {
    const int64_t b = (t - t0) / width;
    return static_cast<size_t>(std::clamp<int64_t>(b, 0, static_cast<int64_t>(n) - 1));
  };
  std::vector<std::vector<int64_t>> lat(n);
  std::vector<uint64_t> done(n, 0);
  std::vector<int64_t> steady;  // latencies of the steady window's requests: the histogram
  steady.reserve(s.requests.size());
  uint64_t answered = 0;
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const auto& r = s.requests[i];
    if (r.status == profile::ServingRequest::kAborted) continue;  // cut off at the end of the run: in no figure
    if (r.status != 0) {  // answered, or timed out (at the time it was given up)
      lat[bucket(r.start_ns)].push_back(r.latency_ns);
      ++answered;
      if (i >= s.warmup) steady.push_back(r.latency_ns);
    }
    done[bucket(r.start_ns + r.latency_ns)] += 1;
  }
  json latency = json::array(), throughput = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = t0 - run0 + static_cast<int64_t>(i) * width;
    if (!lat[i].empty()) {
      std::sort(lat[i].begin(), lat[i].end());
      latency.push_back({t, round3(profile::percentile(lat[i], 50) / 1e3), round3(profile::percentile(lat[i], 99) / 1e3)});
    }
    throughput.push_back({t, round3(static_cast<double>(done[i]) * 1e9 / static_cast<double>(width))});
  }
  json hist = json::array();
  if (!steady.empty()) {
    constexpr int kBins = 40;
    const auto [lo_it, hi_it] = std::minmax_element(steady.begin(), steady.end());
    const double lo = *lo_it / 1e3;
    double hi = *hi_it / 1e3;
    if (hi <= lo) hi = lo + 1;
    const double w = (hi - lo) / kBins;
    std::vector<uint64_t> counts(kBins, 0);
    for (int64_t v : steady) {
      const int b = static_cast<int>((v / 1e3 - lo) / w);
      counts[static_cast<size_t>(std::clamp(b, 0, kBins - 1))] += 1;
    }
    for (int i = 0; i < kBins; ++i)
      hist.push_back({{"lo", round3(lo + i * w)}, {"hi", round3(lo + (i + 1) * w)}, {"count", counts[static_cast<size_t>(i)]}});
  }
  return {{"requests", s.requests.size()}, {"answered", answered}, {"steady", steady.size()},
          {"bucket_ms", round3(width / 1e6)}, {"t0_ms", round3((t0 - run0) / 1e6)},
          {"latency", std::move(latency)}, {"throughput", std::move(throughput)}, {"histogram", std::move(hist)}};
}

}  // namespace mlprof::report
