// The serving workflow's results as JSON (docs/json-format.md, "serving"): the cloud profile's
// fields under their cloud names, the recommendation, advice, the request and resource series
// (times relative to the run's start) and the per-request tables of the steady window. Used by
// `mlprof export --format json` and by the HTML page's data (report_data). null when the
// profile has no serving run. A template like run_json: both nlohmann JSON flavours use it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "profile/model.h"
#include "report/memory_sites.h"

namespace mlprof::report {

namespace serving_detail {
inline double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
inline double round3(double v) { return static_cast<double>(static_cast<int64_t>(v * 1000 + (v < 0 ? -0.5 : 0.5))) / 1000; }
inline double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }
inline double per(int64_t v, uint64_t n) { return n ? static_cast<double>(v) / static_cast<double>(n) : 0.0; }
// Steady-state requests with a latency (an HTTP answer or a timeout): none when --duration ended
// the replay during the warmup, or when every one failed to connect.
inline uint64_t latencies_measured(const profile::Serving& s) {
  uint64_t n = 0;
  for (size_t i = s.warmup; i < s.requests.size(); ++i)
    n += s.requests[i].status != 0 && s.requests[i].status != profile::ServingRequest::kAborted;
  return n;
}
// Why there is no recommendation (requested_* 0), for the summary.
inline const char* no_recommendation_reason(const profile::Serving& s) {
  return (s.outcome == "completed" || s.outcome == "time-limit") && s.window_requests == 0
             ? "no steady-state request was measured"
             : "the replay did not run to its end";
}
// Requests cut off at the end of the run (status kAborted: mlprof-run was interrupted, or they were
// still in flight kDurationGraceS after --duration): in no figure.
inline uint64_t aborted(const profile::Serving& s) {
  uint64_t n = 0;
  for (const auto& r : s.requests) n += r.status == profile::ServingRequest::kAborted;
  return n;
}
// Requests given up at --timeout (status kTimedOut), warmup included.
inline uint64_t timed_out(const profile::Serving& s) {
  uint64_t n = 0;
  for (const auto& r : s.requests) n += r.status == profile::ServingRequest::kTimedOut;
  return n;
}
// The steady window's lines that cost CPU themselves, most self CPU first (ties in their order).
inline std::vector<const profile::ServingLine*> lines_by_self(const profile::Serving& s) {
  std::vector<const profile::ServingLine*> out;
  for (const auto& l : s.lines)
    if (l.self_us > 0) out.push_back(&l);
  std::stable_sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->self_us > b->self_us; });
  return out;
}
// A sentence when the per-line table leaves out a tenth or more of the steady window's CPU:
// samples with no source line on their stack (a thread pool's workers in a library without line
// information, a stripped binary); empty otherwise or when not known (a profile before 1.4).
inline std::string line_coverage_note(const profile::Serving& s) {
  if (s.window_cpu_us <= 0 || s.window_line_cpu_us * 10 >= s.window_cpu_us * 9) return "";
  const double pct = 100.0 * static_cast<double>(s.window_line_cpu_us) / static_cast<double>(s.window_cpu_us);
  char buf[400];
  snprintf(buf, sizeof buf,
           "the lines hold %.0f%% of the steady state's CPU; the other %.0f%% ran in code without a source line "
           "on its stack, such as a thread pool's workers inside a library without line information: the flame "
           "graph shows it by function",
           pct, 100.0 - pct);
  return buf;
}
// The note under a sites table that shows ~0 (profile::retained_resolved false).
inline std::string retained_noise_note() {
  char buf[200];
  snprintf(buf, sizeof buf,
           "~0: fewer than %d sampled blocks kept in the window, what its last requests still held: no leak at this "
           "sampling interval; a smaller --mem-interval resolves smaller ones",
           static_cast<int>(profile::kMinRetainedSamples));
  return buf;
}
}  // namespace serving_detail

template <class Json>
Json serving_json(const profile::Profile& p) {
  using namespace serving_detail;
  const profile::Serving& s = p.serving;
  if (!s.present) return Json(nullptr);
  const int64_t t0 = p.run.start_ns;
  auto rel = [&](int64_t t) { return t ? Json(round3(ms(t - t0))) : Json(nullptr); };
  const uint64_t n = s.window_requests;
  Json o = Json::object();
  // No recommendation (null) from a replay that did not run to its end (outcome).
  o["requestedCpu"] = s.requested_millicores > 0 ? Json(round3(s.requested_millicores / 1000.0)) : Json(nullptr);
  o["requestedMemoryInGB"] = s.requested_memory_bytes > 0 ? Json(round3(gib(s.requested_memory_bytes))) : Json(nullptr);
  o["requestedQueriesPerSecond"] = s.load_mode == "open" ? Json(s.rps_milli / 1000.0) : Json(nullptr);
  o["maxUtilizedCpu"] = round3(s.max_utilized_millicores / 1000.0);
  o["maxUtilizedMemoryInGB"] = round3(gib(s.max_utilized_memory_bytes));
  // null, not 0, without a steady-state request (throughput) or without a latency among them.
  o["measuredQueriesPerSecond"] = n ? Json(round3(s.measured_qps_milli / 1000.0)) : Json(nullptr);
  const bool measured = latencies_measured(s) > 0;
  auto lat_ms = [&](int64_t ns) { return measured ? Json(round3(ms(ns))) : Json(nullptr); };
  o["averageLatencyInMs"] = lat_ms(s.average_latency_ns);
  o["latencyPercentile50InMs"] = lat_ms(s.p50_ns);
  o["latencyPercentile90InMs"] = lat_ms(s.p90_ns);
  o["latencyPercentile95InMs"] = lat_ms(s.p95_ns);
  o["latencyPercentile99InMs"] = lat_ms(s.p99_ns);
  o["latencyPercentile999InMs"] = lat_ms(s.p999_ns);
  o["totalQueries"] = s.total_queries;
  o["successQueries"] = s.success_queries;
  o["successRate"] = s.total_queries ? static_cast<double>(s.success_queries) / static_cast<double>(s.total_queries) : 0.0;
  o["timed_out_queries"] = timed_out(s);
  o["aborted_queries"] = aborted(s);
  o["outcome"] = s.outcome;
  o["error"] = s.error;
  o["url"] = s.url;
  o["requests_file"] = s.requests_file;
  o["content_type"] = s.content_type;
  o["load_mode"] = s.load_mode;
  o["concurrency"] = s.concurrency;
  o["warmup_queries"] = s.warmup < s.total_queries ? s.warmup : s.total_queries;
  o["window_queries"] = n;
  o["late_starts"] = s.late_starts;
  o["timeout_ms"] = round3(ms(s.timeout_ns));
  o["copy_bytes_per_request"] = round3(per(s.window_copy_bytes, n));
  o["available_cpu"] = round3(s.available_millicores / 1000.0);
  o["times_ms"] = {{"ready", rel(s.ready_ns)},       {"load_start", rel(s.load_start_ns)},
                   {"load_end", rel(s.load_end_ns)}, {"window_start", rel(s.window_start_ns)},
                   {"window_end", rel(s.window_end_ns)}};
  o["thread_env"] = s.thread_env;
  o["advice"] = s.advice;
  Json start = Json::array(), lat = Json::array(), status = Json::array();
  for (const auto& r : s.requests) {
    start.push_back(round3(ms(r.start_ns - t0)));
    lat.push_back(round3(ms(r.latency_ns)));
    status.push_back(r.status);
  }
  o["requests"] = {{"start_ms", std::move(start)}, {"latency_ms", std::move(lat)}, {"status", std::move(status)}};
  Json res = Json::array();
  for (size_t i = 0; i < s.resources.size(); ++i) {
    const auto& r = s.resources[i];
    double cores = 0;
    if (i > 0 && r.t_ns > s.resources[i - 1].t_ns)
      cores = static_cast<double>(r.cpu_ns - s.resources[i - 1].cpu_ns) / static_cast<double>(r.t_ns - s.resources[i - 1].t_ns);
    res.push_back({{"t_ms", round3(ms(r.t_ns - t0))}, {"cpu_cores", round3(cores)}, {"rss_bytes", r.rss_bytes},
                   {"processes", r.processes}, {"threads", r.threads}});
  }
  o["resources"] = std::move(res);
  Json lines = Json::array();
  for (const auto& l : s.lines)
    lines.push_back({{"file", p.str(l.file)}, {"line", l.line}, {"function", p.str(l.function)},
                     {"cpu_ms_per_request", round3(per(l.total_us, n) / 1000)},
                     {"self_cpu_ms_per_request", round3(per(l.self_us, n) / 1000)},
                     {"cpu_ms", round3(l.total_us / 1000.0)}});
  Json sites = Json::array();
  for (const auto& x : s.sites)
    sites.push_back({{"site", detail::site_label(p, x.stack)},
                     {"alloc_bytes_per_request", round3(per(x.alloc_bytes, n))},
                     {"alloc_count_per_request", round3(per(x.alloc_count, n))},
                     {"retained_bytes_per_request", round3(per(x.retained_bytes, n))},
                     {"alloc_bytes", x.alloc_bytes},
                     {"retained_bytes", x.retained_bytes},
                     {"retained_samples", x.retained_samples == profile::kRetainedSamplesUnknown
                                              ? Json(nullptr) : Json(x.retained_samples)},
                     {"retained_resolved", profile::retained_resolved(x)}});
  o["per_request"] = {{"lines", std::move(lines)}, {"sites", std::move(sites)}};
  if (s.window_cpu_us > 0) {  // not known before format 1.4
    o["per_request"]["cpu_ms_per_request"] = round3(per(s.window_cpu_us, n) / 1000);
    o["per_request"]["lines_cpu_share"] = round3(static_cast<double>(s.window_line_cpu_us) / s.window_cpu_us);
  }
  o["per_request"]["lines_note"] = line_coverage_note(s);
  const bool noise = std::any_of(s.sites.begin(), s.sites.end(), [](const auto& x) { return !profile::retained_resolved(x); });
  o["per_request"]["sites_note"] = noise ? retained_noise_note() : "";
  return o;
}

}  // namespace mlprof::report
