// Questions the memory tests ask of a profile: metric values per line, leak candidates by the
// function or line of their allocation stack, and a readable dump of the candidates for failure
// messages.
#pragma once
#include <cinttypes>
#include <string>

#include "e2e_util.h"

namespace e2e {

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline bool has_memory_metrics(const profile::Profile& p) {
  for (const char* m : {"alloc-bytes", "alloc-count", "live-peak-bytes", "live-end-bytes", "copy-bytes"})
    if (p.metric(m) == profile::kNone) return false;
  return true;
}

// Sum of a metric over every stack.
inline int64_t metric_sum(const profile::Profile& p, const std::string& metric) {
  uint32_t m = p.metric(metric);
  if (m == profile::kNone) return 0;
  int64_t v = 0;
  for (auto& sv : p.stack_values) v += sv.values.at(m);
  return v;
}

// Self value of a metric on one source line (file matched by suffix).
inline int64_t line_metric(const profile::Profile& p, const std::string& metric, const std::string& file_suffix,
                           uint32_t line) {
  uint32_t m = p.metric(metric);
  if (m == profile::kNone) return 0;
  int64_t v = 0;
  for (auto& l : p.lines)
    if (l.line == line && ends_with(p.str(l.file), file_suffix)) v += l.self.at(m);
  return v;
}

// Value of a metric summed over the stacks that hold `file_suffix:line` in any frame (a Python line
// is rarely the leaf: the interpreter's own frames are under it), each stack counted once.
inline int64_t line_metric_in_stacks(const profile::Profile& p, const std::string& metric,
                                     const std::string& file_suffix, uint32_t line) {
  uint32_t m = p.metric(metric);
  if (m == profile::kNone) return 0;
  int64_t v = 0;
  for (auto& sv : p.stack_values) {
    for (uint32_t f : p.stacks.at(sv.stack).frames) {
      const auto& fr = p.frames.at(f);
      if (fr.line == line && ends_with(p.str(fr.file), file_suffix)) {
        v += sv.values.at(m);
        break;
      }
    }
  }
  return v;
}

// Whether a frame of the stack is in a function whose name starts with `prefix`, ignoring an
// "(anonymous namespace)::" in front (the fixtures keep their functions file-local).
inline bool stack_has_function(const profile::Profile& p, uint32_t stack, const std::string& prefix) {
  static const std::string anon = "(anonymous namespace)::";
  for (uint32_t f : p.stacks.at(stack).frames) {
    const std::string& name = p.str(p.frames.at(f).function);
    size_t at = name.rfind(anon, 0) == 0 ? anon.size() : 0;
    if (name.compare(at, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

inline bool stack_has_line(const profile::Profile& p, uint32_t stack, const std::string& file_suffix, uint32_t line) {
  for (uint32_t f : p.stacks.at(stack).frames) {
    const auto& fr = p.frames.at(f);
    if (fr.line == line && ends_with(p.str(fr.file), file_suffix)) return true;
  }
  return false;
}

// The line of the innermost Python frame of `file` in the stack, 0 if none.
inline uint32_t innermost_python_line(const profile::Profile& p, uint32_t stack, const std::string& file) {
  for (uint32_t f : p.stacks.at(stack).frames) {
    const auto& fr = p.frames.at(f);
    if (fr.kind == profile::FrameKind::kPython && p.str(fr.file) == file) return fr.line;
  }
  return 0;
}

inline const char* leak_kind_name(profile::LeakKind k) {
  return k == profile::LeakKind::kGrowth ? "growth" : "unfreed-at-exit";
}

inline std::string describe_frame(const profile::Profile& p, uint32_t f) {
  const auto& fr = p.frames.at(f);
  std::string s = p.str(fr.function).empty() ? "?" : p.str(fr.function).substr(0, 60);
  if (fr.line) s += " (" + p.str(fr.file).substr(p.str(fr.file).rfind('/') + 1) + ":" + std::to_string(fr.line) + ")";
  return s;
}

// Every candidate on one line each, for failure messages.
inline std::string describe_leaks(const profile::Profile& p) {
  std::string out = std::to_string(p.leaks.size()) + " leak candidate(s):\n";
  for (auto& l : p.leaks) {
    char head[200];
    snprintf(head, sizeof head, "  pid %u %s bytes %" PRId64 " count %" PRId64 " growth %" PRId64 " B/s conf %u:",
             l.process < p.processes.size() ? p.processes[l.process].pid : 0, leak_kind_name(l.kind), l.bytes,
             l.count, l.growth_bytes_per_s, l.confidence_permille);
    out += head;
    const auto& frames = p.stacks.at(l.stack).frames;
    for (size_t i = 0; i < frames.size() && i < 6; ++i) out += " <- " + describe_frame(p, frames[i]);
    out += "\n";
  }
  return out;
}

// The ProcessMemory of process index `process`, or nullptr.
inline const profile::ProcessMemory* process_memory(const profile::Profile& p, uint32_t process = 0) {
  for (auto& m : p.memory)
    if (m.process == process) return &m;
  return nullptr;
}

}  // namespace e2e
