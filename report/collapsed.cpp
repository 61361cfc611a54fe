// frame_name and the collapsed-stack export (Brendan Gregg's folded format, py-spy's frame names).
#include <fmt/format.h>

#include <map>

#include "report/format.h"
#include "report/report.h"

namespace mlprof::report {

using profile::Profile;

std::string frame_name(const Profile& prof, uint32_t frame_id) {
  if (frame_id >= prof.frames.size()) return fmt::format("[invalid frame {}]", frame_id);
  const profile::Frame& f = prof.frames[frame_id];
  const std::string& function = prof.str(f.function);
  const std::string& file = prof.str(f.file);
  std::string module = detail::basename(prof.str(f.module));
  if (!function.empty()) {
    if (!file.empty() && f.line != 0) return fmt::format("{} ({}:{})", function, file, f.line);
    if (!module.empty()) return fmt::format("{} ({})", function, module);
    return function;
  }
  return fmt::format("{}+{:#x}", module.empty() ? "[unknown]" : module, f.module_offset);
}

namespace {

// A frame of a folded line: no ';' (the separator) and no line breaks.
std::string folded(std::string s) {
  for (char& c : s) {
    if (c == ';') c = ':';
    else if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string process_frame(const profile::Process& p) {
  std::string name = detail::process_name(p);
  return name.empty() ? fmt::format("process (pid {})", p.pid)
                      : fmt::format("process {} (pid {})", name, p.pid);
}

std::string thread_frame(const profile::Thread& t) {
  return t.name.empty() ? fmt::format("thread (tid {})", t.tid)
                        : fmt::format("thread {} (tid {})", t.name, t.tid);
}

}  // namespace

Result<std::string> export_collapsed(const Profile& prof, const CollapsedOptions& opt) {
  uint32_t m = prof.metric(opt.metric);
  if (m == profile::kNone) {
    if (prof.metrics.empty())
      return Error{fmt::format("unknown metric '{}': this profile has no metrics", opt.metric)};
    return Error{fmt::format("unknown metric '{}'; metrics in this profile: {}", opt.metric,
                             detail::metric_names(prof))};
  }
  // Frame names are computed once per frame id.
  std::vector<std::string> names(prof.frames.size());
  for (uint32_t i = 0; i < prof.frames.size(); ++i) names[i] = folded(frame_name(prof, i));

  std::map<std::string, int64_t> lines;  // sorted, and equal stacks of different threads merge
  std::string key;
  for (const auto& sv : prof.stack_values) {
    int64_t v = detail::at(sv.values, m);
    if (v == 0) continue;
    key.clear();
    auto add = [&](const std::string& frame) {
      if (!key.empty()) key += ';';
      key += frame;
    };
    const profile::Thread* thread = sv.thread < prof.threads.size() ? &prof.threads[sv.thread] : nullptr;
    if (opt.by_process) {
      if (thread && thread->process < prof.processes.size())
        add(folded(process_frame(prof.processes[thread->process])));
      else
        add("process [unknown]");
    }
    if (opt.by_thread) add(thread ? folded(thread_frame(*thread)) : std::string("thread [unknown]"));
    if (sv.stack < prof.stacks.size()) {
      const profile::Stack& st = prof.stacks[sv.stack];
      if (st.truncated) add("[truncated]");
      if (st.frames.empty()) add("[unknown]");
      for (auto it = st.frames.rbegin(); it != st.frames.rend(); ++it)
        add(*it < names.size() ? names[*it] : folded(frame_name(prof, *it)));
    } else {
      add("[unknown]");
    }
    lines[key] += v;
  }
  std::string out;
  for (const auto& [stack, value] : lines) {
    if (value == 0) continue;  // values that cancelled out when merged
    out += stack;
    out += ' ';
    out += fmt::format("{}", value);
    out += '\n';
  }
  return out;
}

}  // namespace mlprof::report
