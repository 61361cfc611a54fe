// Timelines for the HTML report, bucketed here (never per sample in the page): CPU cores used
// over time (from Profile::samples), RSS and live heap (Profile::memory), per-thread activity
// strips; and the figures the summary and the hints derive from them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "profile/model.h"

namespace mlprof::report {

struct CpuUsage {
  int64_t duration_ns = 0;         // the run (RunInfo end - start; else the samples' span)
  int64_t bucket_ns = 0;           // width of the buckets below
  double average_cores = 0;        // CPU time / duration
  double peak_cores = 0;           // the busiest bucket
  int64_t peak_t_ns = 0;           // its start, relative to the run's start
  uint32_t peak_busy_threads = 0;  // most threads busy >= 50% of one bucket at once
  uint32_t peak_busy_pool_threads = 0;  // of those (the first such bucket), a thread pool's threads
  int64_t busy_t_ns = 0;
  uint32_t cpus = 0;  // CPUs the run could use: min(extra "cpus", extra "cpu_quota" rounded up); 0 unknown
};

// Buckets of max(50 ms, duration / 400). CPU samples only (wall mode's wait samples are not CPU);
// a sample stands for its share of the profile's "cpu" total (weight x period).
CpuUsage cpu_usage(const profile::Profile&);

// {"duration_ns", "bucket_ns", "cpus",
//  "cpu": [{"label", "pid" (absent for all), "points": [[t_ns, cores], ..]}],   // all, then per process
//  "memory": [{"label", "pid", "rss": [[t_ns, bytes], ..], "heap": [[t_ns, bytes], ..]}],
//  "strips": {"bucket_ns", "threads": [{"thread" (index into report data threads), "busy": [0..100 per
//  bucket]}]}}
// t_ns is relative to the run's start. CPU buckets: at least 5 sampling periods and 10 ms, at most
// 400 of them; at most 800 memory points per series,
// 100 strip buckets for the 64 busiest threads.
nlohmann::json timeline_data(const profile::Profile&);

}  // namespace mlprof::report
