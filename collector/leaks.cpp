#include "collector/leaks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

namespace mlprof::collector {

GrowthFit fit_growth(const LeakInput& in, const LeakSite& site, const LeakRules& rules) {
  GrowthFit fit;
  const auto& s = site.series;
  const double run = static_cast<double>(in.end_ns - in.start_ns);
  if (s.size() < rules.min_points || run <= 0 || site.first_tick + s.size() > in.ticks.size()) return fit;
  auto t_of = [&](size_t i) { return static_cast<double>(in.ticks[site.first_tick + i] - in.start_ns); };

  // The last maximum: a teardown that frees the site's blocks comes after it.
  size_t m = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].bytes >= s[m].bytes) m = i;
  fit.peak = m;
  if (t_of(m) < rules.late_fraction * run) return fit;

  size_t i0 = 0;
  while (i0 < m && t_of(i0) < rules.window_start_fraction * run) ++i0;
  if (m - i0 + 1 < rules.min_points) return fit;
  const double span = t_of(m) - t_of(i0);
  if (span < rules.min_window_fraction * run) return fit;

  // Least squares over the window, time in seconds from the window start.
  const double n = static_cast<double>(m - i0 + 1);
  double st = 0, sy = 0;
  for (size_t i = i0; i <= m; ++i) st += (t_of(i) - t_of(i0)) * 1e-9, sy += static_cast<double>(s[i].bytes);
  const double mt = st / n, my = sy / n;
  double stt = 0, sty = 0, syy = 0;
  for (size_t i = i0; i <= m; ++i) {
    const double dt = (t_of(i) - t_of(i0)) * 1e-9 - mt, dy = static_cast<double>(s[i].bytes) - my;
    stt += dt * dt, sty += dt * dy, syy += dy * dy;
  }
  if (stt <= 0 || syy <= 0) return fit;  // no time span, or a flat series
  fit.bytes_per_s = sty / stt;
  fit.r2 = sty * sty / (stt * syy);
  if (fit.bytes_per_s <= 0 || fit.r2 < rules.min_r2) return fit;

  // The climb must stand out of the sampling noise and be worth several sampled allocations.
  const double rise = fit.bytes_per_s * span * 1e-9;
  const double noise = std::sqrt(std::max(0.0, static_cast<double>(s[i0].var) + static_cast<double>(s[m].var)));
  fit.noise_ratio = noise > 0 ? rise / noise : std::numeric_limits<double>::infinity();
  const double min_rise = std::max(static_cast<double>(rules.min_rise_bytes),
                                   rules.min_rise_intervals * static_cast<double>(std::max<uint64_t>(in.interval_bytes, 1)));
  if (fit.noise_ratio < rules.min_noise_ratio || rise < min_rise) return fit;
  fit.found = true;
  return fit;
}

std::vector<profile::LeakCandidate> find_leaks(const LeakInput& in, const LeakRules& rules) {
  std::vector<profile::LeakCandidate> out;
  const bool exact = in.interval_bytes == 1;
  for (const LeakSite& site : in.sites) {
    if (site.suppressed) continue;
    const GrowthFit g = fit_growth(in, site, rules);
    const bool unfreed = in.exited && site.end_samples >= rules.min_live_samples && site.end_bytes > 0;
    if (!unfreed && !g.found) continue;
    profile::LeakCandidate c;
    c.process = in.process;
    c.stack = site.stack;
    if (g.found) c.growth_bytes_per_s = std::llround(g.bytes_per_s);
    if (unfreed) {
      c.kind = profile::LeakKind::kUnfreedAtExit;
      c.bytes = site.end_bytes;
      c.count = std::llround(site.end_count);
      // Exact mode saw every block; sampled, the estimate firms up with the samples behind it.
      const double conf = exact ? 1.0 : 1.0 - 1.0 / std::sqrt(static_cast<double>(site.end_samples));
      c.confidence_permille = static_cast<uint32_t>(std::lround(1000 * std::clamp(conf, 0.0, 1.0)));
    } else {
      const MemSeriesPoint& p = site.series[g.peak];
      c.kind = profile::LeakKind::kGrowth;
      c.bytes = p.bytes;
      c.count = std::llround(p.count);
      const double z = g.noise_ratio;
      const double conf = g.r2 * (std::isinf(z) ? 1.0 : z / (1.0 + z));
      c.confidence_permille = static_cast<uint32_t>(std::lround(1000 * std::clamp(conf, 0.0, 1.0)));
    }
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  if (out.size() > rules.max_candidates) out.resize(rules.max_candidates);
  return out;
}

namespace {

// create_module (3.8-3.10 name their frames by function, 3.11+ by qualified name) in one of the
// importer's frozen modules.
bool importer_create_module(std::string_view function, std::string_view file) {
  if (file != "<frozen importlib._bootstrap_external>" && file != "<frozen importlib._bootstrap>") return false;
  return function == "create_module" || function.ends_with(".create_module");
}

}  // namespace

bool runtime_internal_stack(const profile::Profile& p, uint32_t stack) {
  if (stack >= p.stacks.size()) return false;
  for (uint32_t f : p.stacks[stack].frames) {
    if (f >= p.frames.size()) continue;
    const profile::Frame& frame = p.frames[f];
    std::string_view name = p.str(frame.function);
    if (frame.kind == profile::FrameKind::kPython) {
      if (importer_create_module(name, p.str(frame.file))) return true;
      continue;
    }
    if (frame.kind != profile::FrameKind::kNative) continue;
    for (std::string_view internal : {"_dl_allocate_tls", "__tls_get_addr", "_dl_update_slotinfo", "pthread_create", "PyInit_"})
      if (name.starts_with(internal)) return true;
  }
  return false;
}

}  // namespace mlprof::collector
