// The cloud profile's latency and throughput fields from the recorded requests (docs/serving.md):
// totalQueries / successQueries over every request sent (warmup included); latencies and
// measuredQueriesPerSecond over the steady window (requests after the warmup) that got an HTTP
// response or timed out (at the time they were given up, >= --timeout: a tail of timeouts shows
// in p99 instead of vanishing from it); refused or reset connections have no latency. Percentiles are nearest-rank: the smallest recorded latency with at least q% of the
// values at or below it (so every percentile is a latency that was actually measured).
#pragma once
#include <cstdint>
#include <vector>

#include "profile/model.h"
#include "profile/percentile.h"

namespace mlprof::tools {

using profile::percentile;  // nearest rank (profile/percentile.h)

// Fills total/success queries, average latency, p50..p99.9 and measured QPS of `s` from
// s.requests, s.warmup and s.window_start_ns/window_end_ns.
void fill_latency_fields(profile::Serving& s);

}  // namespace mlprof::tools
