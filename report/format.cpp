#include "report/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "profile/warnings.h"

namespace mlprof::report::detail {

using profile::EndReason;
using profile::FunctionStat;
using profile::LineStat;
using profile::Process;
using profile::Profile;

std::string basename(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash + 1 == path.size()) return std::string(path);
  return std::string(path.substr(slash + 1));
}

namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes one code point at s[i]; returns its length, or 0 when the sequence is invalid.
size_t decode_utf8(std::string_view s, size_t i, uint32_t* cp) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t len;
  uint32_t min;
  if (b < 0x80) { *cp = b; return 1; }
  if ((b & 0xE0) == 0xC0) { len = 2; *cp = b & 0x1F; min = 0x80; }
  else if ((b & 0xF0) == 0xE0) { len = 3; *cp = b & 0x0F; min = 0x800; }
  else if ((b & 0xF8) == 0xF0) { len = 4; *cp = b & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (c & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

std::string sanitize_utf8(std::string_view s, bool replace_controls) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t len = decode_utf8(s, i, &cp);
    if (len == 0) {
      append_utf8(out, 0xFFFD);
      ++i;
      continue;
    }
    bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0);
    if (replace_controls && control) out += '?';
    else out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t display_width(std::string_view utf8) {
  size_t n = 0;
  for (char c : utf8)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::string truncate_display(std::string_view utf8, size_t max_width) {
  if (display_width(utf8) <= max_width || max_width < 4) return std::string(utf8);
  size_t keep = max_width - 3, n = 0, i = 0;
  for (; i < utf8.size(); ++i) {
    if ((static_cast<unsigned char>(utf8[i]) & 0xC0) != 0x80) {
      if (n == keep) break;
      ++n;
    }
  }
  return std::string(utf8.substr(0, i)) + "...";
}

bool is_time_unit(const std::string& unit) { return unit == "us" || unit == "ns"; }

std::string format_value(int64_t value, const std::string& unit) {
  if (is_time_unit(unit)) return format_duration_ns(unit == "us" ? value * 1000 : value);
  if (unit == "bytes") {
    double v = static_cast<double>(value);
    if (std::fabs(v) < 1024) return fmt::format("{} B", value);
    static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = -1;
    while (std::fabs(v) >= 1024 && u < 3) { v /= 1024; ++u; }
    return fmt::format("{:.1f} {}", v, kUnits[u]);
  }
  return fmt::format("{}", value);
}

std::string format_duration_ns(int64_t ns) {
  double ms = static_cast<double>(ns) / 1e6;
  if (std::fabs(ms) >= 1000) return fmt::format("{:.2f} s", ms / 1000);
  return fmt::format("{:.1f} ms", ms);
}

std::string format_percent(int64_t part, int64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    if (plain) { out += a; continue; }
    out += '\'';
    for (char c : a) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

const char* end_reason_name(EndReason r) {
  switch (r) {
    case EndReason::kExit: return "exit";
    case EndReason::kExec: return "exec";
    case EndReason::kDetached: return "detached";
    case EndReason::kTruncated: return "truncated";
    case EndReason::kStopped: return "stopped";
  }
  return "?";
}

std::string exit_status_text(int32_t status) {
  return status < 0 ? std::string("-") : fmt::format("{}", status);
}

std::string process_name(const Process& p) {
  if (!p.exe.empty()) return basename(p.exe);
  if (!p.argv.empty()) return basename(p.argv[0]);
  return "";
}

uint64_t counter(const Process& p, const std::string& name) {
  auto it = p.counters.find(name);
  return it == p.counters.end() ? 0 : it->second;
}

uint64_t samples_taken(const Process& p) { return std::max(counter(p, "samples"), counter(p, "samples_received")); }

RunCounters run_counters(const Profile& prof) {
  RunCounters c;
  for (const auto& p : prof.processes) {
    c.samples += samples_taken(p);
    c.ring_full += counter(p, "dropped_ring_full");
    c.no_thread += counter(p, "dropped_no_thread");
    c.transport += counter(p, "dropped_transport");
    c.pool_wait += counter(p, "pool_wait_samples");
  }
  return c;
}

uint32_t pick_metric(const Profile& prof, const std::string& requested) {
  if (!requested.empty()) return prof.metric(requested);
  if (prof.metrics.empty()) return profile::kNone;
  uint32_t cpu = prof.metric("cpu");
  return cpu == profile::kNone ? 0 : cpu;
}

std::string metric_names(const Profile& prof) {
  std::string out;
  for (const auto& m : prof.metrics) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

int64_t at(const std::vector<int64_t>& values, uint32_t i) {
  return i < values.size() ? values[i] : 0;
}

int64_t metric_total(const Profile& prof, uint32_t metric) {
  int64_t sum = 0;
  for (const auto& sv : prof.stack_values) sum += at(sv.values, metric);
  return sum;
}

std::vector<int64_t> thread_totals(const Profile& prof, uint32_t metric) {
  std::vector<int64_t> out(prof.threads.size(), 0);
  for (const auto& sv : prof.stack_values)
    if (sv.thread < out.size()) out[sv.thread] += at(sv.values, metric);
  return out;
}

std::vector<int64_t> thread_sample_counts(const Profile& prof) {
  // Samples taken (one event per signal), as the processes' count (`samples`): not the events'
  // weights (the ticks a POSIX timer's sample stands for), which made a one-thread process's row
  // read 30 against its process's 25.
  std::vector<int64_t> out(prof.threads.size(), 0);
  for (const auto& s : prof.samples)
    if (s.thread < out.size()) ++out[s.thread];
  return out;
}

std::vector<int64_t> process_totals(const Profile& prof, uint32_t metric) {
  std::vector<int64_t> out(prof.processes.size(), 0);
  auto per_thread = thread_totals(prof, metric);
  for (size_t t = 0; t < prof.threads.size(); ++t)
    if (prof.threads[t].process < out.size()) out[prof.threads[t].process] += per_thread[t];
  return out;
}

std::string function_label(const Profile& prof, const FunctionStat& f) {
  const std::string& name = prof.str(f.function);
  return name.empty() ? std::string("[unknown]") : name;
}

std::string function_location(const Profile& prof, const FunctionStat& f) {
  const std::string& file = prof.str(f.file);
  if (!file.empty()) return f.first_line ? fmt::format("{}:{}", file, f.first_line) : file;
  return basename(prof.str(f.module));
}

namespace {

template <typename Stat, typename NameFn>
std::vector<size_t> order_by_self(const std::vector<Stat>& stats, uint32_t metric, NameFn name) {
  std::vector<size_t> idx(stats.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    int64_t sa = at(stats[a].self, metric), sb = at(stats[b].self, metric);
    if (sa != sb) return sa > sb;
    int64_t ta = at(stats[a].total, metric), tb = at(stats[b].total, metric);
    if (ta != tb) return ta > tb;
    return name(stats[a]) < name(stats[b]);
  });
  return idx;
}

}  // namespace

std::vector<size_t> functions_by_self(const Profile& prof, uint32_t metric) {
  return order_by_self(prof.functions, metric,
                       [&](const FunctionStat& f) { return prof.str(f.function); });
}

std::vector<size_t> lines_by_self(const Profile& prof, uint32_t metric) {
  return order_by_self(prof.lines, metric, [&](const LineStat& l) {
    return fmt::format("{}:{:010}", prof.str(l.file), l.line);
  });
}

std::vector<std::string> all_warnings(const Profile& prof) {
  std::vector<std::string> out = prof.warnings;
  for (const auto& p : prof.processes)
    for (const auto& m : p.messages)
      out.push_back(fmt::format("[pid {} {}] {}", p.pid, process_name(p), m));
  // One "no debug info" line per library of a Python or PyTorch stack (20 and more) would push
  // the warnings that change what the profile means (a process's degraded Python or GPU support,
  // dropped samples) below the report's fold: those come first, in their order.
  std::stable_partition(out.begin(), out.end(), [](const std::string& w) { return !profile::is_no_debug_info_warning(w); });
  return out;
}

}  // namespace mlprof::report::detail
