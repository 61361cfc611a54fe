#include "report/gpu_summary.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/format.h"
#include "report/gpu_json.h"

namespace mlprof::report {

namespace {

std::string clean(const std::string& s, size_t max) {
  return detail::truncate_display(detail::sanitize_utf8(s, /*replace_controls=*/true), max);
}

int64_t total(const profile::ProcessGpu& g, const char* k) {
  auto it = g.totals.find(k);
  return it == g.totals.end() ? 0 : it->second;
}

std::string where(const profile::Profile& p, uint32_t stack) {
  const uint32_t f = gpu_launch_frame(p, stack);
  if (f == profile::kNone) return "(launch not seen)";
  const auto& fr = p.frames[f];
  if (fr.line) return clean(detail::basename(p.str(fr.file)) + ":" + std::to_string(fr.line) + " " + p.str(fr.function), 60);
  return clean(p.str(fr.function).empty() ? "?" : p.str(fr.function), 60);
}

}  // namespace

std::string gpu_summary(const profile::Profile& p, size_t top) {
  if (p.gpu.empty()) return "";
  std::string out = "\nGPU:\n";
  for (const profile::ProcessGpu& g : p.gpu) {
    const uint32_t pid = g.process < p.processes.size() ? p.processes[g.process].pid : 0;
    out += fmt::format("  process {}: kernels {}, memcpy HtoD {} / DtoH {} / DtoD {} ({} copied), memset {}\n", pid,
                       detail::format_duration_ns(total(g, "kernel_ns")),
                       detail::format_duration_ns(total(g, "memcpy_htod_ns")),
                       detail::format_duration_ns(total(g, "memcpy_dtoh_ns")),
                       detail::format_duration_ns(total(g, "memcpy_dtod_ns")),
                       detail::format_value(total(g, "copy_bytes"), "bytes"),
                       detail::format_duration_ns(total(g, "memset_ns")));
    out += fmt::format("  {} API calls seen, {} GPU records, {} without their launch", total(g, "launches"),
                       total(g, "activities"), total(g, "unjoined"));
    if (total(g, "dropped") || total(g, "cupti_dropped"))
      out += fmt::format(", {} events lost in mlprof, {} records dropped by CUPTI", total(g, "dropped"),
                         total(g, "cupti_dropped"));
    out += "\n";
    if (!g.kernels.empty()) {
      out += fmt::format("  {:<40} {:>7} {:>10} {:>10} {:>10}  {}\n", "kernel", "calls", "total", "mean", "max",
                         "launched from");
      size_t shown = 0;
      for (const auto& k : g.kernels) {
        if (shown++ >= top) break;
        out += fmt::format("  {:<40} {:>7} {:>10} {:>10} {:>10}  {}\n", clean(p.str(k.demangled), 40), k.calls,
                           detail::format_duration_ns(k.total_ns),
                           detail::format_duration_ns(k.calls ? k.total_ns / static_cast<int64_t>(k.calls) : 0),
                           detail::format_duration_ns(k.max_ns), where(p, k.stack));
      }
      if (g.kernels.size() > top) out += fmt::format("  ... and {} more kernels\n", g.kernels.size() - top);
    }
    for (const auto& d : g.devices) {
      int64_t busy = 0, n = 0;
      for (const auto& pt : d.utilization) busy += pt.value, ++n;
      out += fmt::format("  device {}: kernels running {:.1f}% of the time", d.device, n ? busy / 10.0 / n : 0.0);
      if (d.peak_bytes > 0) {
        out += fmt::format(", device memory peak {}", detail::format_value(d.peak_bytes, "bytes"));
        std::string holders;
        size_t shown = 0;
        for (const auto& h : d.peak_holders) {
          if (shown++ >= 3) break;
          holders += fmt::format("{}{} {}", holders.empty() ? "" : "; ", where(p, h.stack),
                                 detail::format_value(h.bytes, "bytes"));
        }
        if (!holders.empty()) out += " held by " + holders;
      }
      out += "\n";
    }
    if (!g.devices.empty())
      out += "  (device memory is counted at cudaMalloc level: caching allocators such as PyTorch's show pool growth)\n";
  }
  return out;
}

}  // namespace mlprof::report
