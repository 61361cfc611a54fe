// The load loop of the serving workflow: replays request bodies against a URL with libcurl's multi
// interface, closed loop (a fixed number in flight) or open loop (arrivals on a schedule that does
// not depend on latency), and waits for the service to answer at all before that. Runs on its own
// thread inside mlprof-run; `stop` ends it early (the service exited, the user interrupted).
// curl_global_init must have been called before (mlprof-run's main does).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "profile/model.h"

namespace mlprof::collector {
struct MemWindow;
}

namespace mlprof::tools {

struct ReadyResult {
  bool ready = false;
  int64_t ready_ns = 0;    // CLOCK_MONOTONIC when the first HTTP response arrived
  std::string last_error;  // the last attempt's failure ("Couldn't connect to server", ...)
  bool stopped = false;    // `stop` ended the wait
};

// Polls `url` (GET, 1 s per attempt) every 100 ms for up to timeout_s: any HTTP response but 503
// (Service Unavailable: still loading) means ready.
ReadyResult wait_ready(const std::string& url, double timeout_s, const std::atomic<bool>& stop, pid_t service_pid = 0);

// Whether child `pid` has exited (without reaping it: the main thread does that).
bool child_exited(pid_t pid);

struct LoadConfig {
  std::string url, content_type = "application/json";
  const std::vector<std::string>* bodies = nullptr;  // non-empty
  uint32_t concurrency = 1;   // closed loop
  double rps = 0;             // > 0: open loop
  uint64_t max_requests = 0;  // 0: each body once
  uint64_t warmup = 0;
  double timeout_s = 30;
  double duration_s = 0;      // > 0: start no request after this many seconds of load; those in
                              // flight then get until their --timeout or kDurationGraceS more,
                              // whichever comes first, and are cut off after that (not counted)
  pid_t service_pid = 0;      // > 0: a failed transfer checks that this child still lives (and stops if not)
};

// How long requests in flight when --duration ends may still take (a hung request kept a 1 s run
// going for the default --timeout's 30 s).
inline constexpr double kDurationGraceS = 5;

struct LoadResult {
  std::vector<profile::ServingRequest> requests;  // in start order; the first `warmup` are warmup
  int64_t start_ns = 0, end_ns = 0;
  int64_t window_start_ns = 0, window_end_ns = 0;  // end of warmup (all of it answered) .. last answer
  uint64_t late_starts = 0;   // open loop: started > 1 ms after their scheduled time
  uint32_t max_in_flight = 0;
  bool stopped = false;       // `stop` ended it: in-flight requests were abandoned (status 0)
  bool time_limit = false;    // duration_s ended it before every request was sent
  uint64_t cut_at_limit = 0;  // requests still in flight kDurationGraceS after duration_s: cut off
                              // (status kAborted: in no figure)
  std::string first_error;    // the first transport error, for messages
};

// Runs the whole load. When `window` is given its bounds are set as the window opens and closes
// (the memory tracker sums allocations inside it).
LoadResult run_load(const LoadConfig& c, const std::atomic<bool>& stop, collector::MemWindow* window);

}  // namespace mlprof::tools
