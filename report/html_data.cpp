// report_data: the profile as the JSON the HTML page renders.
#include <fmt/format.h>

#include <algorithm>

#include "report/format.h"
#include "report/gpu_json.h"
#include "report/html.h"
#include "report/html_flame.h"
#include "report/html_hints.h"
#include "report/html_source.h"
#include "report/html_timeline.h"
#include "report/json_export.h"
#include "report/memory_sites.h"
#include "report/html_serving.h"
#include "report/serving_json.h"
#include "report/source.h"

namespace mlprof::report {

using nlohmann::json;
using profile::Profile;

namespace {

json per_metric(const Profile& prof, const std::vector<int64_t>& values) {
  json out = json::array();
  for (uint32_t m = 0; m < prof.metrics.size(); ++m) out.push_back(detail::at(values, m));
  return out;
}

}  // namespace

json report_data(const Profile& prof) {
  json d;
  d["format"] = 2;
  d["run"] = run_json<json>(prof.run);
  d["gpu"] = gpu_json<json>(prof);  // the GPU section (docs/gpu.md); rendered by the page once wired
  detail::RunCounters c = detail::run_counters(prof);
  d["counters"] = {{"samples", c.samples},
                   {"dropped_ring_full", c.ring_full},
                   {"dropped_no_thread", c.no_thread},
                   {"dropped_transport", c.transport}};

  d["metrics"] = json::array();
  std::vector<std::vector<int64_t>> thread_totals, process_totals;
  for (uint32_t m = 0; m < prof.metrics.size(); ++m) {
    d["metrics"].push_back({{"name", prof.metrics[m].name},
                            {"unit", prof.metrics[m].unit},
                            {"total", detail::metric_total(prof, m)}});
    thread_totals.push_back(detail::thread_totals(prof, m));
    process_totals.push_back(detail::process_totals(prof, m));
  }
  uint32_t dm = detail::pick_metric(prof, "");
  d["default_metric"] = dm == profile::kNone ? -1 : static_cast<int64_t>(dm);
  d["warnings"] = detail::all_warnings(prof);

  uint32_t sort_metric = dm == profile::kNone ? 0 : dm;
  // The tables list the hottest rows; the rest are counted (functions_omitted / lines_omitted).
  constexpr size_t kMaxRows = 5000;
  json& fns = d["functions"] = json::array();
  auto fn_order = detail::functions_by_self(prof, sort_metric);
  d["functions_omitted"] = fn_order.size() > kMaxRows ? fn_order.size() - kMaxRows : 0;
  if (fn_order.size() > kMaxRows) fn_order.resize(kMaxRows);
  for (size_t i : fn_order) {
    const auto& f = prof.functions[i];
    fns.push_back({{"name", prof.str(f.function)},
                   {"module", prof.str(f.module)},
                   {"file", prof.str(f.file)},
                   {"line", f.first_line},
                   {"self", per_metric(prof, f.self)},
                   {"total", per_metric(prof, f.total)}});
  }
  json& lines = d["lines"] = json::array();
  SourceCache sources(prof.run.cwd);
  size_t with_source = 0;
  constexpr size_t kMaxSourceLines = 2000;  // the hottest lines carry their text; the rest do not
  auto line_order = detail::lines_by_self(prof, sort_metric);
  d["lines_omitted"] = line_order.size() > kMaxRows ? line_order.size() - kMaxRows : 0;
  if (line_order.size() > kMaxRows) line_order.resize(kMaxRows);
  for (size_t i : line_order) {
    const auto& l = prof.lines[i];
    const std::string& file = prof.str(l.file);
    lines.push_back({{"file", file},
                     {"line", l.line},
                     {"function", prof.str(l.function)},
                     {"source", with_source++ < kMaxSourceLines ? sources.line(file, l.line) : std::string()},
                     {"self", per_metric(prof, l.self)},
                     {"total", per_metric(prof, l.total)}});
  }

  json& procs = d["processes"] = json::array();
  for (size_t i = 0; i < prof.processes.size(); ++i) {
    const auto& p = prof.processes[i];
    json values = json::array();
    for (const auto& t : process_totals) values.push_back(t[i]);
    procs.push_back({{"pid", p.pid},
                     {"ppid", p.ppid},
                     {"name", detail::process_name(p)},
                     {"exe", p.exe},
                     {"argv", p.argv},
                     {"end_reason", detail::end_reason_name(p.end_reason)},
                     {"exit_status", p.exit_status},
                     {"start_ns", p.start_ns},
                     {"end_ns", p.end_ns},
                     {"counters", p.counters},
                     {"samples", detail::samples_taken(p)},
                     {"values", values}});
  }
  auto samples = detail::thread_sample_counts(prof);
  json& threads = d["threads"] = json::array();
  for (size_t i = 0; i < prof.threads.size(); ++i) {
    const auto& t = prof.threads[i];
    json values = json::array();
    for (const auto& tt : thread_totals) values.push_back(tt[i]);
    uint32_t pid = t.process < prof.processes.size() ? prof.processes[t.process].pid : 0;
    threads.push_back({{"pid", pid},
                       {"tid", t.tid},
                       {"name", t.name},
                       {"samples", prof.samples.empty() ? json(nullptr) : json(samples[i])},
                       {"values", values}});
  }
  // Memory profiling: the leak candidates (docs/report.md, "Leak candidates").
  json& leaks = d["leak_candidates"] = json::array();
  for (const auto& c : prof.leaks)
    leaks.push_back({{"kind", detail::leak_kind_name(c.kind)},
                     {"pid", c.process < prof.processes.size() ? prof.processes[c.process].pid : 0},
                     {"bytes", c.bytes},
                     {"count", c.count},
                     {"growth_bytes_per_s", c.growth_bytes_per_s},
                     {"confidence", c.confidence_permille / 1000.0},
                     {"site", detail::site_label(prof, c.stack)}});
  d["memory"] = detail::has_memory(prof);

  // The interactive views (docs/report.md): flame graph trees, source view, hints, timelines.
  CpuUsage u = cpu_usage(prof);
  d["usage"] = {{"duration_ns", u.duration_ns}, {"average_cores", u.average_cores},
                {"peak_cores", u.peak_cores}, {"peak_t_ns", u.peak_t_ns}, {"bucket_ns", u.bucket_ns},
                {"peak_busy_threads", u.peak_busy_threads},
                {"cpus", u.cpus ? json(u.cpus) : json(nullptr)}};
  int64_t peak_rss = 0;
  for (const auto& m : prof.memory) peak_rss = std::max(peak_rss, m.peak_rss_bytes);
  d["usage"]["peak_rss_bytes"] = peak_rss ? json(peak_rss) : json(nullptr);
  d["hints"] = hints_json(hints(prof));
  d["flame"] = flame_data(prof);
  d["source"] = source_data(prof);
  d["serving"] = serving_json<json>(prof);  // the Serving section (null without --requests)
  if (d["serving"].is_object()) {
    // The page gets the requests bucketed (html_serving.h), not one entry each.
    d["serving"].erase("requests");
    d["serving"]["series"] = serving_series(prof);
  }
  d["timelines"] = timeline_data(prof);
  return d;
}

std::string html_escape(std::string_view text) {
  std::string valid = detail::sanitize_utf8(text, /*replace_controls=*/false);
  std::string out;
  out.reserve(valid.size() + valid.size() / 8);
  for (char c : valid) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\0': out += "\xEF\xBF\xBD"; break;
      default: out += c;
    }
  }
  return out;
}

std::string json_for_script(const json& value) {
  // Invalid UTF-8 from the profiled program becomes U+FFFD instead of throwing.
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
             (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mlprof::report
