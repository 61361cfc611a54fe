// export_json(): docs/json-format.md is the schema; fields appear in the order documented there.
#include "report/json_export.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "report/format.h"
#include "report/gpu_json.h"
#include "report/memory_sites.h"
#include "report/report.h"
#include "report/serving_json.h"

namespace mlprof::report {

using json = nlohmann::ordered_json;
using profile::kNone;
using profile::Profile;

namespace {

json opt_index(uint32_t i) { return i == kNone ? json(nullptr) : json(i); }

json memory_json(const Profile& p, const profile::ProcessMemory& m) {
  const int64_t start = m.process < p.processes.size() ? p.processes[m.process].start_ns : 0;
  json timeline = json::array();
  for (const auto& pt : m.timeline)
    timeline.push_back({{"t_ns", pt.t_ns - start},
                        {"rss_bytes", pt.rss_bytes < 0 ? json(nullptr) : json(pt.rss_bytes)},
                        {"heap_bytes", pt.heap_bytes}});
  return {{"interval_bytes", m.interval_bytes},
          {"exact", m.interval_bytes == 1},
          {"copy_interval_bytes", m.copy_interval_bytes},
          {"python_allocator", m.python_allocator},
          {"peak_heap_bytes", m.peak_heap_bytes},
          {"peak_heap_t_ns", m.peak_heap_t_ns - start},
          {"peak_rss_bytes", m.peak_rss_bytes},
          {"peak_rss_t_ns", m.peak_rss_t_ns - start},
          {"end_heap_bytes", m.end_heap_bytes},
          {"timeline", std::move(timeline)}};
}

json processes_json(const Profile& p) {
  json out = json::array();
  for (uint32_t i = 0; i < p.processes.size(); ++i) {
    const auto& x = p.processes[i];
    const auto* mem = detail::process_memory(p, i);
    out.push_back({{"index", i},
                   {"pid", x.pid},
                   {"ppid", x.ppid},
                   {"parent", opt_index(x.parent)},
                   {"exec_prev", opt_index(x.exec_prev)},
                   {"exe", x.exe},
                   {"argv", x.argv},
                   {"start_ns", x.start_ns},
                   {"end_ns", x.end_ns},
                   {"end_reason", detail::end_reason_name(x.end_reason)},
                   {"exit_status", x.exit_status},
                   {"counters", x.counters},
                   {"messages", x.messages},
                   {"memory", mem ? memory_json(p, *mem) : json(nullptr)}});
  }
  return out;
}

json frame_json(const Profile& p, uint32_t f) {
  if (f >= p.frames.size()) return {{"function", ""}, {"file", ""}, {"line", 0}, {"module", ""}, {"kind", "unknown"}, {"inlined", false}};
  const auto& fr = p.frames[f];
  return {{"function", p.str(fr.function)},
          {"file", p.str(fr.file)},
          {"line", fr.line},
          {"module", p.str(fr.module)},
          {"kind", detail::frame_kind_name(fr.kind)},
          {"inlined", fr.inlined}};
}

json top_json(const Profile& p, uint32_t m, size_t top) {
  json fns = json::array(), lines = json::array();
  for (size_t i : detail::functions_by_self(p, m)) {
    const auto& f = p.functions[i];
    if (fns.size() >= top) break;
    if (detail::at(f.self, m) == 0 && detail::at(f.total, m) == 0) continue;
    fns.push_back({{"function", p.str(f.function)},
                   {"module", p.str(f.module)},
                   {"file", p.str(f.file)},
                   {"first_line", f.first_line},
                   {"self", detail::at(f.self, m)},
                   {"total", detail::at(f.total, m)}});
  }
  for (size_t i : detail::lines_by_self(p, m)) {
    const auto& l = p.lines[i];
    if (lines.size() >= top) break;
    if (detail::at(l.self, m) == 0 && detail::at(l.total, m) == 0) continue;
    lines.push_back({{"file", p.str(l.file)},
                     {"line", l.line},
                     {"function", p.str(l.function)},
                     {"self", detail::at(l.self, m)},
                     {"total", detail::at(l.total, m)}});
  }
  json out = {{"functions", std::move(fns)}, {"lines", std::move(lines)}};
  if (p.metrics[m].unit == "bytes" || p.metrics[m].unit == "count") {
    json sites = json::array();
    for (const auto& row : detail::sites_by(p, m)) {
      if (sites.size() >= top) break;
      json s = frame_json(p, row.frame);
      s["value"] = row.values[m];
      sites.push_back(std::move(s));
    }
    out["sites"] = std::move(sites);
  }
  return out;
}

json leaks_json(const Profile& p) {
  json out = json::array();
  for (const auto& c : p.leaks) {
    json frames = json::array();
    bool truncated = false;
    if (c.stack < p.stacks.size()) {
      for (uint32_t f : p.stacks[c.stack].frames) frames.push_back(frame_json(p, f));
      truncated = p.stacks[c.stack].truncated;
    }
    out.push_back({{"kind", detail::leak_kind_name(c.kind)},
                   {"pid", c.process < p.processes.size() ? json(p.processes[c.process].pid) : json(nullptr)},
                   {"process", c.process},
                   {"bytes", c.bytes},
                   {"count", c.count},
                   {"growth_bytes_per_s", c.growth_bytes_per_s},
                   {"confidence", c.confidence_permille / 1000.0},
                   {"site", detail::site_label(p, c.stack)},
                   {"frames", std::move(frames)},
                   {"truncated", truncated}});
  }
  return out;
}

}  // namespace

std::string export_json(const Profile& p, const JsonOptions& opt) {
  json d;
  d["format"] = "mlprof-json";
  d["version"] = kJsonVersion;
  d["profile_version"] = fmt::format("{}.{}", p.version_major, p.version_minor);
  d["run"] = run_json<json>(p.run);
  json metrics = json::array();
  for (uint32_t m = 0; m < p.metrics.size(); ++m)
    metrics.push_back({{"name", p.metrics[m].name}, {"unit", p.metrics[m].unit}, {"total", detail::metric_total(p, m)}});
  d["metrics"] = std::move(metrics);
  d["processes"] = processes_json(p);
  json top = json::object();
  for (uint32_t m = 0; m < p.metrics.size(); ++m) top[p.metrics[m].name] = top_json(p, m, opt.top);
  d["top"] = std::move(top);
  d["leak_candidates"] = leaks_json(p);
  d["serving"] = serving_json<json>(p);
  d["gpu"] = gpu_json<json>(p);
  d["warnings"] = detail::all_warnings(p);
  return d.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace mlprof::report
