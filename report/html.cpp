// html_report: one self-contained page. The summary facts and warnings are rendered here as escaped
// HTML (readable without JS); every other section is drawn by the page's JS modules (assets/*.js,
// docs/report.md) from the embedded JSON (report_data).
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "mlprof_report_assets.h"  // generated from report/assets/ by report/embed_assets.cmake
#include "report/format.h"
#include "report/html.h"
#include "report/html_timeline.h"
#include "report/report.h"

namespace mlprof::report {

using profile::Profile;

namespace {

// Label / value pairs of the run, as plain text (escaped when written).
std::vector<std::pair<std::string, std::string>> summary_facts(const Profile& prof) {
  const auto& r = prof.run;
  std::vector<std::pair<std::string, std::string>> f;
  f.emplace_back("Command", r.command.empty() ? "-" : detail::shell_join(r.command));
  f.emplace_back("Duration",
                 r.end_ns > r.start_ns ? detail::format_duration_ns(r.end_ns - r.start_ns) : "-");
  f.emplace_back("Exit status", detail::exit_status_text(r.exit_status));
  if (auto it = r.extra.find("stopped_by"); it != r.extra.end()) f.emplace_back("Stopped by", it->second);
  f.emplace_back("Processes", fmt::format("{}", prof.processes.size()));
  f.emplace_back("Threads", fmt::format("{}", prof.threads.size()));
  detail::RunCounters c = detail::run_counters(prof);
  f.emplace_back("Samples taken", fmt::format("{}", c.samples));
  f.emplace_back("Samples dropped",
                 fmt::format("{} (ring full {}, no thread {}, transport {})", c.dropped(),
                             c.ring_full, c.no_thread, c.transport));
  uint64_t unmerged = 0;
  for (const auto& p : prof.processes) unmerged += detail::counter(p, "python_merge_failures");
  if (unmerged)
    f.emplace_back("Python samples unmerged",
                   fmt::format("{} (Python frames could not be placed in the native stack)", unmerged));
  auto achieved = r.extra.find("achieved_rate_hz");
  f.emplace_back("Sampling rate", fmt::format("{} Hz requested{}", r.rate_hz,
                                              achieved == r.extra.end() ? "" : ", " + achieved->second + " Hz achieved"));
  f.emplace_back("Timer", r.timer.empty() ? "-" : r.timer);
  if (uint32_t cpu = prof.metric("cpu"); cpu != profile::kNone) {
    CpuUsage u = cpu_usage(prof);
    f.emplace_back("CPU time", detail::format_value(detail::metric_total(prof, cpu), "us"));
    if (u.duration_ns > 0)
      f.emplace_back("Cores used", fmt::format("{:.2f} on average, {:.2f} at peak{}", u.average_cores, u.peak_cores,
                                               u.cpus ? fmt::format(" (of {} CPUs)", u.cpus) : ""));
  }
  int64_t peak_rss = 0;
  for (const auto& m : prof.memory) peak_rss = std::max(peak_rss, m.peak_rss_bytes);
  if (peak_rss > 0)
    f.emplace_back("Peak RSS",
                   detail::format_value(peak_rss, "bytes") + (prof.memory.size() > 1 ? " (largest process)" : ""));
  for (uint32_t m = 0; m < prof.metrics.size(); ++m)
    if (prof.metrics[m].name != "cpu")  // shown as "CPU time" above
      f.emplace_back("Total " + prof.metrics[m].name,
                     detail::format_value(detail::metric_total(prof, m), prof.metrics[m].unit));
  if (!r.hostname.empty()) f.emplace_back("Host", r.hostname);
  if (!r.cwd.empty()) f.emplace_back("Working directory", r.cwd);
  if (!r.mlprof_version.empty()) f.emplace_back("mlprof version", r.mlprof_version);
  return f;
}

// Values from the profile: valid UTF-8 without control characters, then HTML-escaped.
std::string esc(const std::string& s) {
  return html_escape(detail::sanitize_utf8(s, /*replace_controls=*/true));
}

std::string facts_section(const Profile& prof) {
  std::string out = "<section id=\"summary\">\n<h2>Summary</h2>\n<dl class=\"facts\">\n";
  for (const auto& [k, v] : summary_facts(prof))
    out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(v));
  // "What to look at first" (data["hints"], rendered by assets/summary.js).
  return out + "</dl>\n<div id=\"hints\" class=\"hints\"></div>\n</section>\n";
}

std::string warnings_section(const Profile& prof) {
  auto all = detail::all_warnings(prof);
  if (all.empty()) return "";
  std::string out = fmt::format("<section id=\"warnings\">\n<h2>Warnings ({})</h2>\n<ul class=\"warnings\">\n",
                                all.size());
  // A long list (typically one "no debug info" line per library of a Python stack) shows its first
  // kShown lines; the rest stay in the page, folded.
  constexpr size_t kShown = 6;
  for (size_t i = 0; i < all.size() && i < kShown; ++i) out += "<li>" + esc(all[i]) + "</li>\n";
  out += "</ul>\n";
  if (all.size() > kShown) {
    out += fmt::format("<details class=\"more-warnings\">\n<summary>{} more</summary>\n<ul class=\"warnings\">\n",
                       all.size() - kShown);
    for (size_t i = kShown; i < all.size(); ++i) out += "<li>" + esc(all[i]) + "</li>\n";
    out += "</ul>\n</details>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::string html_report(const Profile& prof) {
  std::string title = prof.run.command.empty() ? std::string("profile")
                                               : detail::basename(prof.run.command[0]);
  SummaryOptions text_opt;
  text_opt.top = 50;
  std::string out;
  out.reserve(64 * 1024);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>mlprof: " + esc(title) + "</title>\n<style>\n";
  out += assets::report_css;
  out += "</style>\n</head>\n<body>\n<header>\n<div class=\"title\"><h1>mlprof</h1>\n";
  out += "<p class=\"command\"><code>" + esc(detail::shell_join(prof.run.command)) + "</code></p></div>\n";
  out += "<nav id=\"nav\" aria-label=\"Sections\"></nav>\n</header>\n<main>\n";
  out += facts_section(prof);
  out += warnings_section(prof);
  out += "<noscript>\n<p class=\"note\">JavaScript is off: the interactive views (flame graph, source, timelines, "
         "tables) are replaced by the text summary.</p>\n<pre class=\"text-summary\">";
  out += html_escape(text_summary(prof, text_opt));
  out += "</pre>\n</noscript>\n";
  // The interactive sections are built by the page's JS (assets/*.js) from the embedded data.
  out += "<div id=\"sections\"></div>\n";
  out += "</main>\n<script type=\"application/json\" id=\"mlprof-data\">";
  out += json_for_script(report_data(prof));
  out += "</script>\n<script>\n";
  for (std::string_view js : assets::scripts) out += js;  // the modules, in report/CMakeLists.txt order
  out += "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace mlprof::report
