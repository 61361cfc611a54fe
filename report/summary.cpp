// The terminal summary: what a py-spy / perf user expects to see after a run.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "profile/warnings.h"
#include "report/serving_summary.h"
#include "report/format.h"
#include "report/gpu_summary.h"
#include "report/memory_sites.h"
#include "report/report.h"
#include "report/source.h"

namespace mlprof::report {

using profile::Profile;

namespace {

constexpr size_t kMaxName = 80;  // long C++ names are cut in the terminal (the HTML has them whole)

struct Style {
  bool on;
  std::string wrap(const std::string& s, const char* code) const {
    return on && !s.empty() ? fmt::format("\x1b[{}m{}\x1b[0m", code, s) : s;
  }
  std::string bold(const std::string& s) const { return wrap(s, "1"); }
  std::string dim(const std::string& s) const { return wrap(s, "2"); }
  std::string warn(const std::string& s) const { return wrap(s, "33"); }
};

// Program-provided text for the terminal: valid UTF-8, no control characters, bounded length.
std::string clean(const std::string& s, size_t max = 0) {
  std::string out = detail::sanitize_utf8(s, /*replace_controls=*/true);
  return max ? detail::truncate_display(out, max) : out;
}

// Aligned columns; numbers right-aligned; the last column is not padded.
struct Table {
  struct Column {
    std::string header;
    bool right = false;
    const char* style = nullptr;  // ANSI SGR code for the cells, when color is on
  };
  std::vector<Column> cols;
  std::vector<std::vector<std::string>> rows;

  std::string render(const Style& st, const std::string& indent = "  ") const {
    std::vector<size_t> width(cols.size(), 0);
    for (size_t c = 0; c < cols.size(); ++c) width[c] = detail::display_width(cols[c].header);
    for (const auto& r : rows)
      for (size_t c = 0; c < cols.size() && c < r.size(); ++c)
        width[c] = std::max(width[c], detail::display_width(r[c]));
    auto line = [&](const std::vector<std::string>& cells, bool header) {
      std::string out = indent;
      for (size_t c = 0; c < cols.size(); ++c) {
        const std::string& s = c < cells.size() ? cells[c] : std::string();
        size_t pad = width[c] - detail::display_width(s);
        bool last = c + 1 == cols.size();
        std::string styled = header ? st.bold(s) : (cols[c].style ? st.wrap(s, cols[c].style) : s);
        if (cols[c].right) out += std::string(pad, ' ') + styled;
        else out += styled + (last ? "" : std::string(pad, ' '));
        if (!last) out += "  ";
      }
      while (!out.empty() && out.back() == ' ') out.pop_back();
      return out + "\n";
    };
    std::vector<std::string> headers;
    for (const auto& c : cols) headers.push_back(c.header);
    std::string out = line(headers, true);
    for (const auto& r : rows) out += line(r, false);
    return out;
  }
};

std::string more_line(size_t shown, size_t total, const char* what) {
  return total > shown ? fmt::format("  ... and {} more {}\n", total - shown, what) : "";
}

std::string header(const Profile& prof, const Style& st, uint32_t m, int64_t grand) {
  std::string out;
  auto kv = [&](const char* k, const std::string& v) {
    out += fmt::format("{} {}\n", st.bold(fmt::format("{:<11}", k)), v);
  };
  kv("Command:", prof.run.command.empty() ? "-" : clean(detail::shell_join(prof.run.command)));
  std::string dur = prof.run.end_ns > prof.run.start_ns
                        ? detail::format_duration_ns(prof.run.end_ns - prof.run.start_ns)
                        : std::string("-");
  if (auto it = prof.run.extra.find("stopped_by"); it != prof.run.extra.end())
    kv("Duration:", fmt::format("{} (exit status {}: stopped by {})", dur, detail::exit_status_text(prof.run.exit_status),
                                it->second));
  else
    kv("Duration:", fmt::format("{} (exit status {})", dur, detail::exit_status_text(prof.run.exit_status)));
  kv("Processes:", fmt::format("{}", prof.processes.size()));
  kv("Threads:", fmt::format("{}", prof.threads.size()));
  detail::RunCounters c = detail::run_counters(prof);
  std::string samples = fmt::format("{} taken, {} dropped", c.samples, c.dropped());
  if (c.dropped()) {
    std::vector<std::string> parts;
    if (c.ring_full) parts.push_back(fmt::format("ring full {}", c.ring_full));
    if (c.no_thread) parts.push_back(fmt::format("no thread {}", c.no_thread));
    if (c.transport) parts.push_back(fmt::format("transport {}", c.transport));
    samples += fmt::format(" ({}; {} of all)", fmt::join(parts, ", "),
                           detail::format_percent(static_cast<int64_t>(c.dropped()),
                                                  static_cast<int64_t>(c.samples + c.dropped())));
  }
  kv("Samples:", samples);
  // Thread-pool workers' samples charged to the line that started their work
  // (collector/pool_attribution.h): how many, so a worker table that still shows its own frames is
  // explained.
  uint64_t pool = 0, pool_charged = 0;
  for (const auto& proc : prof.processes) {
    if (auto it = proc.counters.find("pool_worker_samples"); it != proc.counters.end()) pool += it->second;
    if (auto it = proc.counters.find("pool_worker_samples_charged"); it != proc.counters.end()) pool_charged += it->second;
  }
  const uint64_t pool_wait = c.pool_wait;
  std::string pools;
  if (pool > 0)
    pools = fmt::format("{} of {} worker samples ({}) charged to the lines that started their work", pool_charged, pool,
                        detail::format_percent(static_cast<int64_t>(pool_charged), static_cast<int64_t>(pool)));
  // The pools' threads spinning while they wait for work: CPU the service pays that no line asked for.
  if (pool_wait > 0 && c.samples > 0)
    pools += fmt::format("{}{} samples ({} of all) were pool threads waiting for work (spinning)", pools.empty() ? "" : "; ",
                         pool_wait, detail::format_percent(static_cast<int64_t>(pool_wait), static_cast<int64_t>(c.samples)));
  if (!pools.empty()) kv("Thread pools:", pools);
  kv("Sampling:", fmt::format("{} Hz requested, timer {}", prof.run.rate_hz,
                              prof.run.timer.empty() ? "-" : clean(prof.run.timer)));
  if (m != profile::kNone) {
    const auto& md = prof.metrics[m];
    kv("Total:", fmt::format("{} {}", detail::format_value(grand, md.unit), clean(md.name)));
  }
  return out;
}

std::string warnings(const Profile& prof, const Style& st) {
  auto all = detail::all_warnings(prof);
  if (all.empty()) return "";
  std::string out = "\n" + st.bold(fmt::format("Warnings ({}):", all.size())) + "\n";
  // "no debug info for PATH: ..." comes once per library (all_warnings puts them last): 14-22
  // lines for a PyTorch or scikit-learn run. From kGroupFrom on they are one line of basenames;
  // the HTML report and `mlprof export --format json` keep each.
  constexpr size_t kGroupFrom = 4;
  const size_t prefix = profile::kNoDebugInfoPrefix.size();
  std::vector<std::string> no_debug;
  for (const auto& w : all)
    if (profile::is_no_debug_info_warning(w)) no_debug.push_back(w.substr(prefix, w.find(": ") - prefix));
  const bool group = no_debug.size() >= kGroupFrom;
  for (const auto& w : all)
    if (!group || !profile::is_no_debug_info_warning(w)) out += st.warn("  ! " + clean(w)) + "\n";
  if (group) {
    std::string names;
    for (const auto& path : no_debug) names += (names.empty() ? "" : ", ") + detail::basename(path);
    out += st.warn(fmt::format("  ! no debug info for {} modules, functions only (install their -dbgsym packages, "
                               "or rebuild with -g; each is listed in the HTML report): {}",
                               no_debug.size(), clean(names))) + "\n";
  }
  return out;
}

std::string functions(const Profile& prof, const Style& st, uint32_t m, int64_t grand, size_t top) {
  const auto& md = prof.metrics[m];
  std::string out = "\n" + st.bold(fmt::format("Top functions by self {} ({} functions):", clean(md.name),
                                               prof.functions.size())) + "\n";
  if (prof.functions.empty()) return out + "  (no function statistics in this profile)\n";
  Table t{{{"self", true}, {"self%", true}, {"total", true}, {"total%", true},
           {"function"}, {"location", false, "2"}}, {}};
  auto order = detail::functions_by_self(prof, m);
  size_t n = std::min(top, order.size());
  std::set<std::pair<uint32_t, uint32_t>> python;  // (function, file) of Python frames
  for (const auto& fr : prof.frames)
    if (fr.kind == profile::FrameKind::kPython) python.insert({fr.function, fr.file});
  bool any_python = false;
  for (size_t i = 0; i < n; ++i) {
    const auto& f = prof.functions[order[i]];
    any_python |= python.count({f.function, f.file}) > 0;
    int64_t self = detail::at(f.self, m), total = detail::at(f.total, m);
    t.rows.push_back({detail::format_value(self, md.unit), detail::format_percent(self, grand),
                      detail::format_value(total, md.unit), detail::format_percent(total, grand),
                      clean(detail::function_label(prof, f), kMaxName),
                      clean(detail::function_location(prof, f))});
  }
  out += t.render(st) + more_line(n, order.size(), "functions");
  if (any_python)  // the same time is a Python function's self and its native callee's self
    out += "  (a Python function's self: its time as the innermost Python frame, the native code it called\n"
           "   included, which is also that code's own self; so self% can add up to more than 100%)\n";
  return out;
}

std::string lines(const Profile& prof, const Style& st, uint32_t m, int64_t grand, size_t top) {
  const auto& md = prof.metrics[m];
  std::string out = "\n" + st.bold(fmt::format("Top source lines by self {}:", clean(md.name))) + "\n";
  if (prof.lines.empty()) return out + "  (no line statistics: no debug info or no samples)\n";
  Table t{{{"self", true}, {"self%", true}, {"total", true}, {"total%", true},
           {"line"}, {"function", false, "2"}}, {}};
  auto order = detail::lines_by_self(prof, m);
  size_t n = std::min(top, order.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& l = prof.lines[order[i]];
    int64_t self = detail::at(l.self, m), total = detail::at(l.total, m);
    const std::string& file = prof.str(l.file);
    t.rows.push_back({detail::format_value(self, md.unit), detail::format_percent(self, grand),
                      detail::format_value(total, md.unit), detail::format_percent(total, grand),
                      clean(fmt::format("{}:{}", file.empty() ? "?" : file, l.line)),
                      clean(prof.str(l.function), kMaxName)});
  }
  return out + t.render(st) + more_line(n, order.size(), "lines");
}

// Python lines with where their time went: the interpreter, native code, or system calls
// (percent of the line's own self time), and the line's source text when it can be read.
std::string python_lines(const Profile& prof, const Style& st, uint32_t m, int64_t grand, size_t top) {
  uint32_t mi = prof.metric("cpu-interpreter"), mn = prof.metric("cpu-native"), ms = prof.metric("cpu-system");
  std::set<std::pair<uint32_t, uint32_t>> py;
  for (const auto& f : prof.frames)
    if (f.kind == profile::FrameKind::kPython && f.line > 0) py.insert({f.file, f.line});
  if (py.empty() || mi == profile::kNone || mn == profile::kNone || ms == profile::kNone) return "";
  const auto& md = prof.metrics[m];
  std::string out = "\n" + st.bold(fmt::format("Top Python lines by self {}:", clean(md.name))) + "\n";
  // Which threads (and so processes) spent a line's self time: the line of a stack's innermost
  // Python frame, per thread.
  std::vector<std::pair<uint32_t, uint32_t>> innermost(prof.stacks.size(), {0, 0});
  for (size_t si = 0; si < prof.stacks.size(); ++si)
    for (uint32_t f : prof.stacks[si].frames)
      if (f < prof.frames.size() && prof.frames[f].kind == profile::FrameKind::kPython) {
        innermost[si] = {prof.frames[f].file, prof.frames[f].line};
        break;
      }
  std::map<std::pair<uint32_t, uint32_t>, std::map<uint32_t, int64_t>> by_thread;
  for (const auto& sv : prof.stack_values)
    if (sv.stack < innermost.size() && innermost[sv.stack].second > 0)
      by_thread[innermost[sv.stack]][sv.thread] += detail::at(sv.values, m);
  auto where = [&](const profile::LineStat& l) -> std::string {
    auto it = by_thread.find({l.file, l.line});
    if (it == by_thread.end() || it->second.empty()) return "";
    auto top_thread = std::max_element(it->second.begin(), it->second.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    if (top_thread->first >= prof.threads.size()) return "";
    const auto& th = prof.threads[top_thread->first];
    uint32_t pid = th.process < prof.processes.size() ? prof.processes[th.process].pid : 0;
    std::string s = fmt::format("{} tid {} pid {}", clean(th.name, 16), th.tid, pid);
    if (it->second.size() > 1) s += fmt::format(" +{}", it->second.size() - 1);
    return s;
  };
  Table t{{{"self", true}, {"self%", true}, {"interp", true}, {"native", true}, {"system", true},
           {"line"}, {"thread", false, "2"}, {"source", false, "2"}}, {}};
  SourceCache sources(prof.run.cwd);
  size_t shown = 0, total = 0;
  for (size_t i : detail::lines_by_self(prof, m)) {
    const auto& l = prof.lines[i];
    if (!py.count({l.file, l.line})) continue;
    ++total;
    if (shown >= top) continue;
    int64_t self = detail::at(l.self, m);
    if (self == 0) continue;
    ++shown;
    const std::string& file = prof.str(l.file);
    t.rows.push_back({detail::format_value(self, md.unit), detail::format_percent(self, grand),
                      detail::format_percent(detail::at(l.self, mi), self),
                      detail::format_percent(detail::at(l.self, mn), self),
                      detail::format_percent(detail::at(l.self, ms), self),
                      clean(fmt::format("{}:{}", file, l.line)), where(l), clean(sources.line(file, l.line), kMaxName)});
  }
  return out + t.render(st) + more_line(shown, total, "Python lines") +
         "  (thread: the one that spent the most on the line; +N: other threads that did too)\n";
}

// Memory: per process the heap estimate and RSS at their peaks; the allocation sites by bytes
// allocated, by bytes held at the heap's peak and by bytes copied; the leak candidates.
std::string memory(const Profile& prof, const Style& st, size_t top) {
  if (!detail::has_memory(prof)) return "";
  std::string out = "\n" + st.bold("Memory:") + "\n";
  // Processes by peak heap, then peak RSS (a shell wrapper's processes come last).
  std::vector<const profile::ProcessMemory*> procs;
  for (const auto& pm : prof.memory)
    if (pm.process < prof.processes.size()) procs.push_back(&pm);
  std::stable_sort(procs.begin(), procs.end(), [](auto* a, auto* b) {
    return a->peak_heap_bytes != b->peak_heap_bytes ? a->peak_heap_bytes > b->peak_heap_bytes
                                                    : a->peak_rss_bytes > b->peak_rss_bytes;
  });
  const size_t shown_procs = std::min(procs.size(), std::min<size_t>(top, 5));
  for (size_t i = 0; i < shown_procs; ++i) {
    const auto& pm = *procs[i];
    const auto& proc = prof.processes[pm.process];
    auto since = [&](int64_t t) { return detail::format_duration_ns(t - proc.start_ns); };
    std::string mode = pm.interval_bytes == 1 ? std::string("exact (every allocation)")
                                              : "sampled every " + detail::format_value(static_cast<int64_t>(pm.interval_bytes), "bytes");
    if (pm.python_allocator) mode += ", Python objects included";
    out += fmt::format("  pid {} {}: {}\n", proc.pid, clean(detail::process_name(proc), 40), mode);
    out += fmt::format("    peak heap {}{} at {}; peak RSS {} at {}; heap at end {}\n",
                       pm.interval_bytes == 1 ? "" : "~", detail::format_value(pm.peak_heap_bytes, "bytes"),
                       since(pm.peak_heap_t_ns),
                       pm.peak_rss_bytes > 0 ? detail::format_value(pm.peak_rss_bytes, "bytes") : std::string("-"),
                       pm.peak_rss_bytes > 0 ? since(pm.peak_rss_t_ns) : std::string("-"),
                       detail::format_value(pm.end_heap_bytes, "bytes"));
  }
  out += more_line(shown_procs, procs.size(), "processes with memory profiling");
  auto site_table = [&](const char* title, const char* metric, const std::vector<const char*>& cols) {
    uint32_t m = prof.metric(metric);
    if (m == profile::kNone) return std::string();
    auto rows = detail::sites_by(prof, m);
    if (rows.empty()) return std::string();
    std::vector<uint32_t> idx;
    Table t;
    for (const char* c : cols) {
      idx.push_back(prof.metric(c));
      t.cols.push_back({c, true});
    }
    t.cols.push_back({"%", true});
    t.cols.push_back({"site"});
    const int64_t total = detail::metric_total(prof, m);
    size_t n = std::min(top, rows.size());
    for (size_t i = 0; i < n; ++i) {
      std::vector<std::string> r;
      for (uint32_t k : idx)
        r.push_back(k == profile::kNone ? "-" : detail::format_value(rows[i].values[k], prof.metrics[k].unit));
      r.push_back(detail::format_percent(rows[i].values[m], total));
      r.push_back(clean(frame_name(prof, rows[i].frame), 2 * kMaxName));
      t.rows.push_back(std::move(r));
    }
    return "\n" + st.bold(title) + "\n" + t.render(st) + more_line(n, rows.size(), "sites");
  };
  out += site_table("Top allocation sites by alloc-bytes:", "alloc-bytes",
                    {"alloc-bytes", "alloc-count", "live-peak-bytes", "live-end-bytes"});
  out += site_table("Sites holding the heap at its peak (live-peak-bytes):", "live-peak-bytes",
                    {"live-peak-bytes", "alloc-bytes"});
  out += site_table("Top copy sites by copy-bytes (memcpy/memmove):", "copy-bytes", {"copy-bytes"});

  out += "\n" + st.bold(fmt::format("Leak candidates ({}):", prof.leaks.size())) + "\n";
  if (prof.leaks.empty()) return out + "  none\n";
  Table t{{{"kind"}, {"bytes", true}, {"count", true}, {"growth/s", true}, {"confidence", true},
           {"pid", true}, {"site"}}, {}};
  size_t n = std::min(top, prof.leaks.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& c = prof.leaks[i];
    uint32_t pid = c.process < prof.processes.size() ? prof.processes[c.process].pid : 0;
    t.rows.push_back({detail::leak_kind_name(c.kind), detail::format_value(c.bytes, "bytes"), fmt::format("{}", c.count),
                      c.growth_bytes_per_s ? detail::format_value(c.growth_bytes_per_s, "bytes") + "/s" : "-",
                      fmt::format("{:.0f}%", c.confidence_permille / 10.0), fmt::format("{}", pid),
                      clean(detail::site_label(prof, c.stack), 2 * kMaxName)});
  }
  out += t.render(st) + more_line(n, prof.leaks.size(), "candidates");
  // The stacks of the biggest candidates from their site outwards (the allocator's and the
  // interpreter's own frames inside it are left out); Python stacks show their Python frames.
  constexpr size_t kStacks = 5, kFrames = 6;
  for (size_t i = 0; i < std::min(n, kStacks); ++i) {
    const auto& c = prof.leaks[i];
    if (c.stack >= prof.stacks.size()) continue;
    const auto& all = prof.stacks[c.stack].frames;
    const uint32_t site = detail::site_frame(prof, c.stack);
    const bool python = site < prof.frames.size() && prof.frames[site].kind == profile::FrameKind::kPython;
    std::vector<uint32_t> frames;
    bool from_site = false;
    for (uint32_t f : all) {
      from_site = from_site || f == site;
      if (from_site && f < prof.frames.size() && (!python || prof.frames[f].kind == profile::FrameKind::kPython))
        frames.push_back(f);
    }
    out += fmt::format("  #{} {} {}:\n", i + 1, detail::leak_kind_name(c.kind), detail::format_value(c.bytes, "bytes"));
    for (size_t k = 0; k < std::min(kFrames, frames.size()); ++k)
      out += st.dim("      " + clean(frame_name(prof, frames[k]), 2 * kMaxName)) + "\n";
    if (frames.size() > kFrames) out += st.dim(fmt::format("      ... {} more frames", frames.size() - kFrames)) + "\n";
  }
  return out;
}

std::string processes(const Profile& prof, const Style& st, uint32_t m, size_t top) {
  if (prof.processes.empty()) return "";
  std::string out = "\n" + st.bold(fmt::format("Processes ({}):", prof.processes.size())) + "\n";
  std::string mname = m == profile::kNone ? "" : prof.metrics[m].name;
  Table t{{{"pid", true}, {"ppid", true}, {"end"}, {"exit", true}, {"samples", true}}, {}};
  if (m != profile::kNone) t.cols.push_back({clean(mname), true});
  t.cols.push_back({"command"});
  auto totals = m == profile::kNone ? std::vector<int64_t>() : detail::process_totals(prof, m);
  size_t n = std::min(top, prof.processes.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& p = prof.processes[i];
    std::vector<std::string> row{fmt::format("{}", p.pid), fmt::format("{}", p.ppid),
                                 detail::end_reason_name(p.end_reason),
                                 detail::exit_status_text(p.exit_status),
                                 fmt::format("{}", detail::samples_taken(p))};
    if (m != profile::kNone) row.push_back(detail::format_value(totals[i], prof.metrics[m].unit));
    row.push_back(clean(p.argv.empty() ? p.exe : detail::shell_join(p.argv), 2 * kMaxName));
    t.rows.push_back(std::move(row));
  }
  return out + t.render(st) + more_line(n, prof.processes.size(), "processes");
}

std::string threads(const Profile& prof, const Style& st, uint32_t m, int64_t grand, size_t top) {
  if (prof.threads.empty()) return "";
  std::string out = "\n" + st.bold(fmt::format("Threads ({}):", prof.threads.size())) + "\n";
  auto samples = detail::thread_sample_counts(prof);
  bool have_samples = !prof.samples.empty();
  auto totals = m == profile::kNone ? std::vector<int64_t>(prof.threads.size(), 0)
                                    : detail::thread_totals(prof, m);
  std::vector<size_t> order(prof.threads.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return totals[a] > totals[b]; });
  Table t{{{"pid", true}, {"tid", true}}, {}};
  if (have_samples) t.cols.push_back({"samples", true});
  if (m != profile::kNone) {
    t.cols.push_back({clean(prof.metrics[m].name), true});
    t.cols.push_back({"%", true});
  }
  t.cols.push_back({"name"});
  size_t n = std::min(top, order.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& th = prof.threads[order[i]];
    uint32_t pid = th.process < prof.processes.size() ? prof.processes[th.process].pid : 0;
    std::vector<std::string> row{fmt::format("{}", pid), fmt::format("{}", th.tid)};
    if (have_samples) row.push_back(fmt::format("{}", samples[order[i]]));
    if (m != profile::kNone) {
      row.push_back(detail::format_value(totals[order[i]], prof.metrics[m].unit));
      row.push_back(detail::format_percent(totals[order[i]], grand));
    }
    row.push_back(clean(th.name, kMaxName));
    t.rows.push_back(std::move(row));
  }
  return out + t.render(st) + more_line(n, order.size(), "threads");
}

}  // namespace

std::string text_summary(const Profile& prof, const SummaryOptions& opt) {
  Style st{opt.color};
  uint32_t m = detail::pick_metric(prof, opt.metric);
  int64_t grand = m == profile::kNone ? 0 : detail::metric_total(prof, m);
  std::string out = header(prof, st, m, grand);
  out += warnings(prof, st);
  if (m == profile::kNone) {
    out += opt.metric.empty()
               ? "\nNo metrics in this profile.\n"
               : fmt::format("\nUnknown metric '{}'; metrics in this profile: {}\n", clean(opt.metric),
                             clean(detail::metric_names(prof)));
  } else {
    out += functions(prof, st, m, grand, opt.top);
    out += python_lines(prof, st, m, grand, opt.top);
    out += lines(prof, st, m, grand, opt.top);
  }
  out += memory(prof, st, opt.top);
  out += gpu_summary(prof, opt.top);
  out += processes(prof, st, m, opt.top);
  out += threads(prof, st, m, grand, opt.top);
  out += serving_summary(prof, opt.top);
  return out;
}

}  // namespace mlprof::report
