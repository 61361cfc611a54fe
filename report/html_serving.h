// The serving section's request series for the HTML report, bucketed here so the page never
// carries one entry per request (a run of 1,000,000 requests would otherwise embed ~40 MB):
//   {"requests": N (all replayed), "answered": M (with a latency: an HTTP answer or a timeout),
//    "steady": K (of those, the steady window's: after the warmup),
//    "bucket_ms": width, "t0_ms": start of the first bucket (relative to the run's start),
//    "latency": [[t_ns, p50_us, p99_us] per bucket with answered requests, by request start],
//    "throughput": [[t_ns, completed per second] per bucket, by completion time],
//    "histogram": [{"lo", "hi", "count"}: 40 equal bins of the steady requests' latency in us]}
// Buckets: min(120, max(10, N / 20)) equal spans over the load (load_start..load_end, else the
// requests' own span); percentiles are nearest-rank within a bucket, as the run's own figures.
// null without a serving run or without requests.
#pragma once
#include <nlohmann/json.hpp>

#include "profile/model.h"

namespace mlprof::report {

nlohmann::json serving_series(const profile::Profile& p);

}  // namespace mlprof::report
