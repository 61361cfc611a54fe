#include "report/serving_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "report/format.h"
#include "report/memory_sites.h"
#include "report/serving_json.h"

namespace mlprof::report {

namespace {
double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
std::string clean(const std::string& s) { return detail::sanitize_utf8(s, true); }
std::string bytes(double b) {
  const double a = b < 0 ? -b : b;
  if (a >= 1048576.0) return fmt::format("{:.2f} MiB", b / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}
}  // namespace

std::string serving_summary(const profile::Profile& p, size_t top) {
  const profile::Serving& s = p.serving;
  if (!s.present) return "";
  std::string out = fmt::format("\nServing: {} ({} loop{}), {}\n", clean(s.url), s.load_mode,
                                s.load_mode == "open" ? fmt::format(", {:g} req/s", s.rps_milli / 1000.0)
                                                      : fmt::format(", concurrency {}", s.concurrency),
                                s.outcome);
  if (!s.error.empty()) out += "  " + clean(s.error) + "\n";
  const double rate = s.total_queries ? static_cast<double>(s.success_queries) / static_cast<double>(s.total_queries) : 0;
  const uint64_t timed_out = serving_detail::timed_out(s), aborted = serving_detail::aborted(s);
  out += fmt::format("  queries {} total, {} succeeded (successRate {:.3f}){}{}; warmup {}, steady {}\n", s.total_queries,
                     s.success_queries, rate, timed_out ? fmt::format(", {} timed out", timed_out) : "",
                     aborted ? fmt::format("; {} cut off at the end of the run (interrupted, or in flight 5 s after --duration), not counted", aborted) : "",
                     std::min<uint64_t>(s.warmup, s.total_queries), s.window_requests);
  if (s.ready_ns > 0 && p.run.start_ns > 0 && s.ready_ns >= p.run.start_ns)
    out += fmt::format("  start-up: the service was ready (first answer, 503 aside) {:.2f} s after the run started\n",
                       (s.ready_ns - p.run.start_ns) / 1e9);
  if (serving_detail::latencies_measured(s))
    out += fmt::format("  latency ms: average {:.2f}  p50 {:.2f}  p90 {:.2f}  p95 {:.2f}  p99 {:.2f}  p99.9 {:.2f}\n",
                       ms(s.average_latency_ns), ms(s.p50_ns), ms(s.p90_ns), ms(s.p95_ns), ms(s.p99_ns), ms(s.p999_ns));
  else
    out += "  latency ms: none (no steady-state request got an answer)\n";
  const std::string late = s.late_starts ? fmt::format(" ({} request{} started late)", s.late_starts, s.late_starts == 1 ? "" : "s") : "";
  if (s.window_requests)
    out += fmt::format("  throughput {:.1f} req/s{}\n", s.measured_qps_milli / 1000.0, late);
  else
    out += "  throughput: none (no steady-state request)" + late + "\n";
  out += fmt::format("  used: max {:.2f} cores, max {:.3f} GiB RSS ({:.1f} cores available)\n",
                     s.max_utilized_millicores / 1000.0, s.max_utilized_memory_bytes / 1073741824.0,
                     s.available_millicores / 1000.0);
  if (s.requested_millicores > 0)
    out += fmt::format("  recommended: requestedCpu {:.1f}, requestedMemoryInGB {:.2f}\n", s.requested_millicores / 1000.0,
                       s.requested_memory_bytes / 1073741824.0);
  else
    out += fmt::format("  recommended: none ({})\n", serving_detail::no_recommendation_reason(s));
  const uint64_t n = s.window_requests;
  if (n && (!s.lines.empty() || s.window_cpu_us > 0)) {  // no line at all: the note says so
    // By self (the innermost line of each sample): the lines that cost, not the frames around them.
    const auto by_self = serving_detail::lines_by_self(s);
    out += "  CPU per request (steady state), by line: self / total ms\n";
    if (const std::string note = serving_detail::line_coverage_note(s); !note.empty()) out += "    (" + note + ")\n";
    for (size_t i = 0; i < by_self.size() && i < top; ++i) {
      const auto& l = *by_self[i];
      out += fmt::format("    {:>8.3f} / {:>8.3f}  {}:{}  {}\n", l.self_us / 1000.0 / n, l.total_us / 1000.0 / n,
                         clean(detail::basename(p.str(l.file))), l.line,
                         clean(detail::truncate_display(p.str(l.function), 60)));
    }
  }
  if (n && !s.sites.empty()) {
    out += "  Memory per request (steady state), by allocation site: retained / allocated\n";
    bool noise = false;
    for (size_t i = 0; i < s.sites.size() && i < top; ++i) {
      const auto& x = s.sites[i];
      const bool resolved = profile::retained_resolved(x);
      noise |= !resolved;
      out += fmt::format("    {:>12} / {:>12}  {}\n", resolved ? bytes(static_cast<double>(x.retained_bytes) / n) : "~0",
                         bytes(static_cast<double>(x.alloc_bytes) / n),
                         clean(detail::truncate_display(detail::site_label(p, x.stack), 80)));
    }
    if (noise) out += "    (" + serving_detail::retained_noise_note() + ")\n";
  }
  for (const auto& a : s.advice) out += "  advice: " + clean(a) + "\n";
  return out;
}

}  // namespace mlprof::report
