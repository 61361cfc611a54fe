// Timelines for the HTML report (html_timeline.h).
#include "report/html_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "profile/pool_stacks.h"
#include "report/format.h"

namespace mlprof::report {

using nlohmann::json;
using profile::kNone;
using profile::Profile;

namespace {

struct Span {
  int64_t t0 = 0, duration = 0;
};

Span run_span(const Profile& p) {
  Span s;
  if (p.run.end_ns > p.run.start_ns && p.run.start_ns > 0) {
    s.t0 = p.run.start_ns;
    s.duration = p.run.end_ns - p.run.start_ns;
  } else if (!p.samples.empty()) {
    s.t0 = p.samples.front().t_ns;
    s.duration = std::max<int64_t>(1, p.samples.back().t_ns - s.t0 + 1);
  }
  for (const auto& m : p.memory)
    if (!m.timeline.empty() && s.duration == 0) {
      s.t0 = m.timeline.front().t_ns;
      s.duration = std::max<int64_t>(1, m.timeline.back().t_ns - s.t0 + 1);
    }
  return s;
}

// Per stack: 1 when its rows carry wait time and no CPU (wall mode's off-CPU samples).
std::vector<char> wait_stacks(const Profile& p) {
  std::vector<char> wait(p.stacks.size(), 0);
  uint32_t cpu = p.metric("cpu"), w = p.metric("wait");
  if (w == kNone) return wait;
  for (const auto& sv : p.stack_values)
    if (sv.stack < wait.size() && detail::at(sv.values, w) > 0 &&
        (cpu == kNone || detail::at(sv.values, cpu) == 0))
      wait[sv.stack] = 1;
  return wait;
}

// CPU nanoseconds one unit of sample weight stands for.
double ns_per_weight(const Profile& p, const std::vector<char>& wait) {
  uint32_t cpu = p.metric("cpu");
  uint64_t weight = 0;
  for (const auto& s : p.samples)
    if (s.stack >= wait.size() || !wait[s.stack]) weight += s.weight;
  if (cpu != kNone && weight > 0) {
    int64_t total = detail::metric_total(p, cpu);
    if (total > 0) return static_cast<double>(total) * 1000.0 / static_cast<double>(weight);
  }
  return p.run.rate_hz ? 1e9 / p.run.rate_hz : 1e7;
}

// The smaller of the CPU count and the cgroup quota (rounded up); 0 when neither is known.
uint32_t cpus_available(const Profile& p) {
  uint32_t n = 0;
  for (const char* key : {"cpu_quota", "cpus"}) {
    auto it = p.run.extra.find(key);
    if (it == p.run.extra.end()) continue;
    double v = std::atof(it->second.c_str());
    if (v <= 0) continue;
    uint32_t c = static_cast<uint32_t>(std::ceil(v));
    n = n == 0 ? c : std::min(n, c);
  }
  return n;
}

// Buckets [t0 + i*w, t0 + (i+1)*w) with i clamped into range.
struct Buckets {
  int64_t t0 = 0, width = 1;
  size_t n = 1;
  size_t at(int64_t t) const {
    if (t <= t0) return 0;
    size_t i = static_cast<size_t>((t - t0) / width);
    return std::min(i, n - 1);
  }
};

Buckets make_buckets(const Span& s, int64_t min_width, size_t max_n) {
  Buckets b;
  b.t0 = s.t0;
  b.width = std::max<int64_t>(min_width,
                              (s.duration + static_cast<int64_t>(max_n) - 1) / static_cast<int64_t>(max_n));
  b.n = static_cast<size_t>(std::max<int64_t>(1, (s.duration + b.width - 1) / b.width));
  return b;
}

json downsample(const std::vector<profile::MemoryPoint>& tl, int64_t t0, bool rss, size_t max_points) {
  json out = json::array();
  std::vector<std::pair<int64_t, int64_t>> pts;
  for (const auto& m : tl) {
    int64_t v = rss ? m.rss_bytes : m.heap_bytes;
    if (rss && v < 0) continue;
    pts.emplace_back(m.t_ns - t0, v);
  }
  size_t step = (pts.size() + max_points - 1) / std::max<size_t>(1, max_points);
  if (step <= 1) {
    for (auto& [t, v] : pts) out.push_back({t, v});
    return out;
  }
  for (size_t i = 0; i < pts.size(); i += step) {  // the maximum of each group: peaks stay visible
    size_t best = i;
    for (size_t j = i; j < std::min(pts.size(), i + step); ++j)
      if (pts[j].second > pts[best].second) best = j;
    out.push_back({pts[best].first, pts[best].second});
  }
  return out;
}

}  // namespace

CpuUsage cpu_usage(const Profile& p) {
  CpuUsage u;
  Span s = run_span(p);
  u.duration_ns = s.duration;
  u.cpus = cpus_available(p);
  uint32_t cpu = p.metric("cpu");
  if (s.duration > 0 && cpu != kNone)
    u.average_cores =
        static_cast<double>(detail::metric_total(p, cpu)) * 1000.0 / static_cast<double>(s.duration);
  Buckets b = make_buckets(s, 50'000'000, 400);
  u.bucket_ns = b.width;
  if (p.samples.empty() || s.duration <= 0) return u;
  auto wait = wait_stacks(p);
  double npw = ns_per_weight(p, wait);
  std::vector<double> busy(b.n, 0.0);
  // Per thread and bucket: CPU ns (sparse through the time order: one running bucket per thread).
  std::vector<double> thread_ns(p.threads.size(), 0.0);
  std::vector<size_t> thread_bucket(p.threads.size(), SIZE_MAX);
  std::vector<uint32_t> busy_threads(b.n, 0), busy_pool_threads(b.n, 0);
  // A thread pool's threads: any of their samples on a pool's stack (working or spinning).
  std::vector<char> pool_thread(p.threads.size(), 0), pool_stack(p.stacks.size(), 2);  // 2: not looked at
  for (const auto& smp : p.samples) {
    if (smp.thread >= p.threads.size() || smp.stack >= p.stacks.size() || pool_thread[smp.thread]) continue;
    char& k = pool_stack[smp.stack];
    if (k == 2)
      k = profile::is_pool_thread_stack(p, p.stacks[smp.stack]) || profile::is_pool_wait_stack(p, p.stacks[smp.stack]);
    pool_thread[smp.thread] = k;
  }
  auto flush = [&](size_t th) {
    if (thread_bucket[th] != SIZE_MAX && thread_ns[th] >= 0.5 * static_cast<double>(b.width)) {
      ++busy_threads[thread_bucket[th]];
      busy_pool_threads[thread_bucket[th]] += pool_thread[th];
    }
    thread_ns[th] = 0;
  };
  for (const auto& smp : p.samples) {
    if (smp.stack < wait.size() && wait[smp.stack]) continue;
    size_t i = b.at(smp.t_ns);
    double ns = smp.weight * npw;
    busy[i] += ns;
    if (smp.thread < p.threads.size()) {
      if (thread_bucket[smp.thread] != i) {
        flush(smp.thread);
        thread_bucket[smp.thread] = i;
      }
      thread_ns[smp.thread] += ns;
    }
  }
  for (size_t th = 0; th < p.threads.size(); ++th) flush(th);
  for (size_t i = 0; i < b.n; ++i) {
    double cores = busy[i] / static_cast<double>(b.width);
    if (cores > u.peak_cores) {
      u.peak_cores = cores;
      u.peak_t_ns = static_cast<int64_t>(i) * b.width;
    }
    if (busy_threads[i] > u.peak_busy_threads) {
      u.peak_busy_threads = busy_threads[i];
      u.peak_busy_pool_threads = busy_pool_threads[i];
      u.busy_t_ns = static_cast<int64_t>(i) * b.width;
    }
  }
  return u;
}

json timeline_data(const Profile& p) {
  Span s = run_span(p);
  json out;
  out["duration_ns"] = s.duration;
  uint32_t cpus = cpus_available(p);
  out["cpus"] = cpus ? json(cpus) : json(nullptr);
  json& cpu_series = out["cpu"] = json::array();
  json& mem_series = out["memory"] = json::array();
  json& strips = out["strips"] = json::object();
  strips["threads"] = json::array();
  if (s.duration <= 0) return out;

  auto wait = wait_stacks(p);
  double npw = ns_per_weight(p, wait);
  // Buckets of at least 5 sampling periods (and 10 ms), so a busy thread's bucket holds samples.
  const int64_t period = p.run.rate_hz ? 1'000'000'000LL / p.run.rate_hz : 10'000'000;
  Buckets b = make_buckets(s, std::max<int64_t>(10'000'000, 5 * period), 400);
  out["bucket_ns"] = b.width;
  // Processes by samples, the busiest 8 get their own series.
  std::vector<double> per_process_total(p.processes.size(), 0.0);
  for (const auto& smp : p.samples)
    if (smp.thread < p.threads.size() && p.threads[smp.thread].process < p.processes.size())
      per_process_total[p.threads[smp.thread].process] += smp.weight;
  std::vector<size_t> procs;
  for (size_t i = 0; i < p.processes.size(); ++i)
    if (per_process_total[i] > 0) procs.push_back(i);
  std::stable_sort(procs.begin(), procs.end(),
                   [&](size_t a, size_t c) { return per_process_total[a] > per_process_total[c]; });
  if (procs.size() > 8) procs.resize(8);
  std::vector<int> series_of(p.processes.size(), -1);
  if (p.processes.size() >= 2)
    for (size_t k = 0; k < procs.size(); ++k) series_of[procs[k]] = static_cast<int>(k) + 1;
  std::vector<std::vector<double>> busy(1 + (p.processes.size() >= 2 ? procs.size() : 0),
                                        std::vector<double>(b.n, 0.0));

  Buckets sb = make_buckets(s, 1, 100);
  std::vector<double> thread_total(p.threads.size(), 0.0);
  for (const auto& smp : p.samples)
    if (smp.thread < p.threads.size() && !(smp.stack < wait.size() && wait[smp.stack]))
      thread_total[smp.thread] += smp.weight;
  std::vector<size_t> threads;
  for (size_t i = 0; i < p.threads.size(); ++i)
    if (thread_total[i] > 0) threads.push_back(i);
  std::stable_sort(threads.begin(), threads.end(),
                   [&](size_t a, size_t c) { return thread_total[a] > thread_total[c]; });
  if (threads.size() > 64) threads.resize(64);
  std::vector<int> strip_of(p.threads.size(), -1);
  for (size_t k = 0; k < threads.size(); ++k) strip_of[threads[k]] = static_cast<int>(k);
  std::vector<std::vector<double>> strip(threads.size(), std::vector<double>(sb.n, 0.0));

  for (const auto& smp : p.samples) {
    if (smp.stack < wait.size() && wait[smp.stack]) continue;
    double ns = smp.weight * npw;
    size_t i = b.at(smp.t_ns);
    busy[0][i] += ns;
    if (smp.thread >= p.threads.size()) continue;
    uint32_t proc = p.threads[smp.thread].process;
    if (proc < series_of.size() && series_of[proc] > 0) busy[series_of[proc]][i] += ns;
    if (strip_of[smp.thread] >= 0) strip[strip_of[smp.thread]][sb.at(smp.t_ns)] += ns;
  }
  auto points = [&](const std::vector<double>& v) {
    json pts = json::array();
    for (size_t i = 0; i < v.size(); ++i)
      pts.push_back({static_cast<int64_t>(i) * b.width,
                     std::round(v[i] / static_cast<double>(b.width) * 1000.0) / 1000.0});
    return pts;
  };
  if (!p.samples.empty()) {
    cpu_series.push_back({{"label", "all processes"}, {"points", points(busy[0])}});
    for (size_t k = 0; k + 1 < busy.size(); ++k) {
      const auto& proc = p.processes[procs[k]];
      cpu_series.push_back({{"label", fmt::format("{} ({})", detail::process_name(proc), proc.pid)},
                            {"pid", proc.pid},
                            {"points", points(busy[k + 1])}});
    }
  }
  strips["bucket_ns"] = sb.width;
  for (size_t k = 0; k < threads.size(); ++k) {
    json pct = json::array();
    for (double ns : strip[k])
      pct.push_back(std::min(100, static_cast<int>(std::lround(100.0 * ns / static_cast<double>(sb.width)))));
    strips["threads"].push_back({{"thread", threads[k]}, {"busy", std::move(pct)}});
  }
  for (const auto& m : p.memory) {
    if (m.timeline.empty() || m.process >= p.processes.size()) continue;
    const auto& proc = p.processes[m.process];
    mem_series.push_back({{"label", fmt::format("{} ({})", detail::process_name(proc), proc.pid)},
                          {"pid", proc.pid},
                          {"rss", downsample(m.timeline, s.t0, true, 800)},
                          {"heap", downsample(m.timeline, s.t0, false, 800)}});
  }
  return out;
}

}  // namespace mlprof::report
