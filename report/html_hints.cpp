// "What to look at first" (html_hints.h).
#include "report/html_hints.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "profile/modules.h"
#include "report/format.h"
#include "report/html_timeline.h"
#include "report/memory_sites.h"
#include "report/report.h"
#include "report/serving_json.h"

namespace mlprof::report {

using profile::kNone;
using profile::Profile;

namespace {

double share(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// The C runtime's (profile::is_c_runtime_module, and the C++ runtime's) and the Python
// interpreter's own modules: a line there (libc's futex wait as a Python service's threads hand
// the GIL over, ceval.c outside any Python frame) can hold the most self CPU, but is no code the
// program's author can change, so the hints pass over it (its time stays in the tables, the
// flame graph and the system-time hint).
bool runtime_module(const std::string& path) {
  if (profile::is_c_runtime_module(path)) return true;
  const std::string b = detail::basename(path);
  for (std::string_view prefix : {"libstdc++", "libgcc_s", "libpython", "linux-vdso"})
    if (b.compare(0, prefix.size(), prefix) == 0) return true;
  // The interpreter executable itself (python3.11: Debian's links it statically).
  return b.compare(0, 6, "python") == 0 && b.find_first_not_of("0123456789.", 6) == std::string::npos;
}

// (function, file) pairs of the runtime's lines, from the functions table, which knows modules.
class RuntimeLines {
 public:
  explicit RuntimeLines(const Profile& p) {
    for (const auto& f : p.functions)
      if (runtime_module(p.str(f.module))) keys_.insert(key(f.function, f.file));
  }
  bool contains(uint32_t function, uint32_t file) const { return keys_.count(key(function, file)) != 0; }

 private:
  static uint64_t key(uint32_t function, uint32_t file) { return (uint64_t{function} << 32) | file; }
  std::unordered_set<uint64_t> keys_;
};

std::string where(const Profile& p, const profile::LineStat& l) {
  std::string fn = p.str(l.function);
  return fmt::format("{}:{}{}", detail::basename(p.str(l.file)), l.line, fn.empty() ? "" : " (" + fn + ")");
}

// The service's CPU (its process tree, as mlprof-run polled it) at t, interpolated between the
// polls around it; -1 outside them.
double tree_cpu_at(const profile::Serving& s, int64_t t) {
  const auto& r = s.resources;
  for (size_t i = 1; i < r.size(); ++i) {
    if (r[i - 1].t_ns <= t && t <= r[i].t_ns) {
      const double span = static_cast<double>(r[i].t_ns - r[i - 1].t_ns);
      const double f = span > 0 ? static_cast<double>(t - r[i - 1].t_ns) / span : 0.0;
      return static_cast<double>(r[i - 1].cpu_ns) + f * static_cast<double>(r[i].cpu_ns - r[i - 1].cpu_ns);
    }
  }
  return -1;
}

// A serving run (mlprof-run --requests): its start-up (imports, model loading) often outweighs a
// short replay in the whole run's figures, so the steady state's costliest lines per request come
// first: up to 3, the first always, the others from 5% of the service's CPU per request.
void serving_hints(const Profile& p, const RuntimeLines& runtime, std::vector<Hint>* out) {
  const profile::Serving& s = p.serving;
  if (!s.present || s.window_requests == 0 || s.lines.empty()) return;
  const double n = static_cast<double>(s.window_requests);
  const double a = tree_cpu_at(s, s.window_start_ns), b = tree_cpu_at(s, s.window_end_ns);
  const double per_request_ms = a >= 0 && b > a ? (b - a) / 1e6 / n : 0.0;
  auto by_self = serving_detail::lines_by_self(s);
  const bool passed_over = !by_self.empty() && runtime.contains(by_self[0]->function, by_self[0]->file);
  // When the runtime lines passed over are the GIL changing hands, the advice says so
  // (tools/serving_advice.cpp): the first hint points there instead of leaving them unexplained.
  const bool gil_advice = std::any_of(s.advice.begin(), s.advice.end(), [](const std::string& a) {
    return a.find(profile::kGilHandoffAdvice) != std::string::npos;
  });
  by_self.erase(std::remove_if(by_self.begin(), by_self.end(),
                               [&](const profile::ServingLine* l) { return runtime.contains(l->function, l->file); }),
                by_self.end());
  for (size_t i = 0; i < by_self.size() && i < 3; ++i) {
    const auto& l = *by_self[i];
    const double ms = static_cast<double>(l.self_us) / 1000.0 / n;
    const double pct = per_request_ms > 0 ? 100.0 * ms / per_request_ms : 0.0;
    if (i > 0 && pct < 5.0) break;
    std::string fn = p.str(l.function);
    std::string place = fmt::format("{}:{}{}", detail::basename(p.str(l.file)), l.line, fn.empty() ? "" : " (" + fn + ")");
    std::string of = per_request_ms > 0 ? fmt::format(" ({:.0f}% of the service's {:.2f} ms)", pct, per_request_ms) : "";
    // A short window has few samples: lines tied for the most are said to be.
    const bool tied = by_self.size() > 1 && by_self[1]->self_us == by_self[0]->self_us;
    out->push_back({"serving-line", "info",
                    i == 0 ? fmt::format("In the steady state, {} costs {:.3f} ms of CPU per request{}, the most of "
                                         "any line{}{}: start with this line.{}",
                                         place, ms, of, passed_over ? " outside the C runtime and the interpreter" : "",
                                         tied ? ", tied with others (the window has few samples)" : "",
                                         passed_over && gil_advice
                                             ? " The C runtime's lines above it are the service's threads handing the "
                                               "GIL over: see the advice in the Serving section."
                                             : "")
                           : fmt::format("In the steady state, {} costs {:.3f} ms of CPU per request{}.", place, ms, of),
                    p.str(l.file), l.line, fn});
  }
}

}  // namespace

std::vector<Hint> hints(const Profile& p) {
  std::vector<Hint> out;
  const uint32_t cpu = p.metric("cpu");
  const int64_t cpu_total = cpu == kNone ? 0 : detail::metric_total(p, cpu);
  const RuntimeLines runtime(p);
  serving_hints(p, runtime, &out);
  const bool serving = !out.empty();  // the whole run's lines come after the steady state's

  // Hottest lines (self CPU: the innermost Python line, or a native leaf line), up to 3 above 5%.
  if (cpu_total > 0) {
    size_t n = 0;
    for (size_t i : detail::lines_by_self(p, cpu)) {
      const auto& l = p.lines[i];
      if (runtime.contains(l.function, l.file)) continue;
      double s = share(detail::at(l.self, cpu), cpu_total);
      if (s < 5.0 || n == 3) break;
      Hint h{"hot-line",
             "info",
             fmt::format("{} uses {:.0f}% of the CPU time: start with this line.", where(p, l), s),
             p.str(l.file),
             l.line,
             p.str(l.function)};
      if (n > 0) h.text = fmt::format("{} uses {:.0f}% of the CPU time.", where(p, l), s);
      if (serving) h.text = fmt::format("Over the whole run, start-up included, {} uses {:.0f}% of the CPU time.", where(p, l), s);
      out.push_back(std::move(h));
      ++n;
    }
    if (n == 0) {  // no line stands out (or no line info): the hottest named function of the program
      for (size_t i : detail::functions_by_self(p, cpu)) {
        const auto& f = p.functions[i];
        if (runtime_module(p.str(f.module)) || p.str(f.function).empty()) continue;
        double s = share(detail::at(f.self, cpu), cpu_total);
        if (s >= 5.0)
          out.push_back({"hot-function", "info",
                         fmt::format("Function {} uses {:.0f}% of the CPU time itself.",
                                     detail::function_label(p, f), s),
                         p.str(f.file), f.first_line, p.str(f.function)});
        break;
      }
    }
  }
  // High system time.
  if (uint32_t sys = p.metric("cpu-system"); sys != kNone && cpu_total > 0) {
    double s = share(detail::metric_total(p, sys), cpu_total);
    if (s >= 20.0)
      out.push_back({"system-time", "warn",
                     fmt::format("{:.0f}% of the CPU time is spent in the kernel (system calls: I/O, memory "
                                 "mapping, locks): look at the cpu-system metric in the flame graph.",
                                 s),
                     "", 0, ""});
  }
  // Waiting (wall mode).
  if (uint32_t w = p.metric("wait"), wall = p.metric("wall"); w != kNone && wall != kNone) {
    double s = share(detail::metric_total(p, w), detail::metric_total(p, wall));
    if (s >= 50.0)
      out.push_back(
          {"waiting", "info",
           fmt::format("Threads spent {:.0f}% of their wall time waiting off-CPU (sleep, I/O, locks, GIL): "
                       "the wait metric shows where.",
                       s),
           "", 0, ""});
  }
  // Memory: the biggest allocation site and the site holding most at the peak.
  auto site_hint = [&](const char* metric, const char* kind, const char* what) {
    uint32_t m = p.metric(metric);
    if (m == kNone) return;
    int64_t total = detail::metric_total(p, m);
    auto rows = detail::sites_by(p, m);
    if (rows.empty() || total <= 0 || rows[0].frame >= p.frames.size()) return;
    const auto& f = p.frames[rows[0].frame];
    int64_t v = detail::at(rows[0].values, m);
    if (share(v, total) < 10.0) return;  // no site stands out
    out.push_back({kind, "info",
                   fmt::format("{} {} {} ({:.0f}% of the total).", frame_name(p, rows[0].frame), what,
                               detail::format_value(v, p.metrics[m].unit), share(v, total)),
                   p.str(f.file), f.line, p.str(f.function)});
  };
  site_hint("alloc-bytes", "alloc-site", "allocates");
  site_hint("live-peak-bytes", "peak-site", "holds at the heap's peak");
  // Leak candidates.
  if (!p.leaks.empty()) {
    const auto& c = p.leaks[0];
    std::string growth =
        c.growth_bytes_per_s ? ", growing " + detail::format_value(c.growth_bytes_per_s, "bytes") + "/s" : "";
    out.push_back(
        {"leak", "warn",
         fmt::format("{} leak candidate{}; the biggest: {} ({}{}, {}).", p.leaks.size(),
                     p.leaks.size() == 1 ? "" : "s", detail::site_label(p, c.stack),
                     detail::format_value(c.bytes, "bytes"), growth, detail::leak_kind_name(c.kind)),
         "", 0, ""});
  }
  // More busy threads than CPUs.
  CpuUsage u = cpu_usage(p);
  if (u.cpus > 0 && u.peak_busy_threads > u.cpus) {
    size_t procs = 0;
    for (const auto& pr : p.processes) procs += detail::samples_taken(pr) > 0;
    // The knob depends on whose threads they were: a pool's size, or the program's own threads.
    const std::string advice =
        u.peak_busy_pool_threads > 0
            ? fmt::format("{} of them were thread pools' workers: thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, "
                          "torch.set_num_threads) times processes should not exceed the CPUs.",
                          u.peak_busy_pool_threads)
            : "None was a thread pool's: fewer busy threads or processes at once, or more CPUs, would let each "
              "run at full speed.";
    out.push_back({"oversubscribed", "warn",
                   fmt::format("Up to {} threads were busy at the same time{} on {} CPU{}: they take turns. {}",
                               u.peak_busy_threads, procs >= 2 ? fmt::format(" in {} processes", procs) : "",
                               u.cpus, u.cpus == 1 ? "" : "s", advice),
                   "", 0, ""});
  }
  // Thread pools spinning while they wait for work (collector/pool_attribution.h).
  detail::RunCounters rc = detail::run_counters(p);
  const uint64_t pool_wait = rc.pool_wait;
  if (rc.samples > 0 && pool_wait * 10 >= rc.samples)
    out.push_back({"pool-waiting", "warn",
                   fmt::format("{:.0f}% of the samples were thread pools' threads spinning while they waited for "
                               "work (OpenMP's, PyTorch's, OpenBLAS's): CPU no line asked for. OMP_WAIT_POLICY=passive "
                               "makes OpenMP's threads sleep instead; fewer pool threads spin less.",
                               share(static_cast<int64_t>(pool_wait), static_cast<int64_t>(rc.samples))),
                   "", 0, ""});
  // Lost samples.
  if (rc.samples > 0 && rc.dropped() * 100 >= rc.samples) {
    out.push_back(
        {"dropped-samples", "warn",
         fmt::format(
             "{} samples were dropped ({:.1f}% of {}): figures are underestimated; try a lower --rate.",
             rc.dropped(), share(static_cast<int64_t>(rc.dropped()), static_cast<int64_t>(rc.samples)),
             rc.samples),
         "", 0, ""});
  }
  return out;
}

nlohmann::json hints_json(const std::vector<Hint>& hs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& h : hs) {
    nlohmann::json j{{"kind", h.kind}, {"severity", h.severity}, {"text", h.text}};
    if (!h.file.empty()) j["file"] = h.file;
    if (h.line) j["line"] = h.line;
    if (!h.function.empty()) j["function"] = h.function;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace mlprof::report
