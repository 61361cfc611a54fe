#include "collector/profile_builder.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "collector/symbolizer.h"
#include "fmt/format.h"
#include "profile/aggregate.h"
#include "profile/string_table.h"

namespace mlprof::collector {
namespace {

using profile::Frame;
using profile::Profile;

profile::EndReason end_reason(const ProcessStream& s) {
  if (!s.ended) return profile::EndReason::kTruncated;
  switch (s.end_reason) {
    case wire::EndReason::kExit: return profile::EndReason::kExit;
    case wire::EndReason::kExec: return profile::EndReason::kExec;
    case wire::EndReason::kDetached: return profile::EndReason::kDetached;
  }
  return profile::EndReason::kTruncated;
}

const char* counter_name(wire::Counter c) {
  switch (c) {
    case wire::Counter::kSamples: return "samples";
    case wire::Counter::kDroppedRingFull: return "dropped_ring_full";
    case wire::Counter::kDroppedNoThread: return "dropped_no_thread";
    case wire::Counter::kUnwindStopped: return "unwind_stopped";
    case wire::Counter::kLeafOnly: return "leaf_only";
    case wire::Counter::kDroppedTransport: return "dropped_transport_bytes";
    case wire::Counter::kStacks: return "stacks";
    case wire::Counter::kThreads: return "threads";
    case wire::Counter::kTicks: return "ticks";
    case wire::Counter::kTimerFailures: return "timer_failures";
    case wire::Counter::kPerfThreads: return "perf_threads";
    case wire::Counter::kPosixTimerThreads: return "posix_timer_threads";
  }
  return nullptr;
}

struct FrameKeyHash {
  size_t operator()(const Frame& f) const {
    size_t h = f.function * 1000003u ^ f.file * 10007u ^ f.line * 101u ^ f.module;
    return h ^ (f.module_offset * 0x9e3779b97f4a7c15ull) ^ (f.inlined ? 7 : 0);
  }
};

struct StackKeyHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    size_t h = v.size();
    for (uint32_t x : v) h = h * 1000003u ^ x;
    return h;
  }
};

class Builder {
 public:
  Builder(Profile& p, const BuildOptions& opts) : p_(p), strings_(p.strings), sym_(opts.extra_debug_dirs) {}

  void add_process(ProcessStream& s) {
    profile::Process proc;
    proc.pid = s.pid;
    proc.ppid = s.ppid;
    proc.exe = s.exe;
    proc.argv = s.argv;
    proc.start_ns = s.start_mono_ns;
    proc.end_reason = end_reason(s);
    proc.exit_status = s.ended && s.end_reason == wire::EndReason::kExit ? s.exit_status : -1;
    for (auto& [k, v] : s.counters)
      if (const char* name = counter_name(k)) proc.counters[name] = v;
    proc.messages = s.messages;
    if (!s.error.empty()) proc.messages.push_back("event stream: " + s.error);
    int64_t last = s.start_mono_ns;
    for (auto& smp : s.samples) last = std::max(last, smp.t_ns);
    for (auto& t : s.threads) last = std::max(last, t.end_ns);
    proc.end_ns = s.ended ? s.end_ns : last;
    uint32_t proc_index = static_cast<uint32_t>(p_.processes.size());
    p_.processes.push_back(std::move(proc));

    // Threads
    std::vector<uint32_t> thread_map(s.threads.size());
    for (size_t i = 0; i < s.threads.size(); ++i) {
      profile::Thread t;
      t.process = proc_index;
      t.tid = s.threads[i].tid;
      t.name = s.threads[i].name;
      t.start_ns = s.threads[i].start_ns;
      t.end_ns = s.threads[i].end_ns;
      thread_map[i] = static_cast<uint32_t>(p_.threads.size());
      p_.threads.push_back(std::move(t));
    }

    // Modules: symbolizer handles.
    std::vector<int> handles;
    for (auto& m : s.modules) handles.push_back(sym_.add_module({m.path, m.load_bias, m.build_id}));

    // Stacks: symbolize each stream-local stack once.
    std::unordered_map<uint64_t, uint32_t> stack_map;
    for (auto& [id, st] : s.stacks) stack_map[id] = symbolize_stack(s, handles, st);

    // Samples -> per (thread, stack) values and time-ordered events.
    const int64_t period_us_x1000 = s.period_ns;  // ns per tick
    std::map<std::pair<uint32_t, uint32_t>, int64_t> cpu_ns;
    for (auto& smp : s.samples) {
      auto it = stack_map.find(smp.stack);
      if (it == stack_map.end()) continue;  // stack record lost (stream cut): nothing to attribute
      uint32_t thread = thread_map[smp.thread];
      cpu_ns[{thread, it->second}] += static_cast<int64_t>(smp.weight) * period_us_x1000;
      p_.samples.push_back({thread, it->second, smp.t_ns, smp.weight});
    }
    for (auto& [key, ns] : cpu_ns) p_.stack_values.push_back({key.first, key.second, {ns / 1000}});
  }

  void finish() {
    for (auto& w : sym_.warnings()) p_.warnings.push_back(w);
  }

 private:
  int module_for(const ProcessStream& s, const std::vector<int>& handles, uint64_t pc, uint64_t seq,
                 size_t* index) {
    // Prefer the module mapped at that address when the stack was recorded; a module unloaded
    // before its last samples were drained still wins over no module at all.
    int best = -1;
    for (size_t i = 0; i < s.modules.size(); ++i) {
      const RawModule& m = s.modules[i];
      bool covers = std::any_of(m.ranges.begin(), m.ranges.end(),
                                [&](auto& r) { return pc >= r.first && pc < r.second; });
      if (!covers) continue;
      bool live = m.loaded_seq <= seq && seq < m.unloaded_seq;
      if (live || best < 0) {
        best = static_cast<int>(i);
        if (live) break;
      }
    }
    if (best >= 0) *index = static_cast<size_t>(best);
    return best < 0 ? -1 : handles[static_cast<size_t>(best)];
  }

  uint32_t intern_frame(const Frame& f) {
    auto [it, inserted] = frames_.try_emplace(f, static_cast<uint32_t>(p_.frames.size()));
    if (inserted) p_.frames.push_back(f);
    return it->second;
  }

  uint32_t symbolize_stack(const ProcessStream& s, const std::vector<int>& handles, const RawStack& st) {
    std::vector<uint32_t> ids;
    for (size_t i = 0; i < st.pcs.size(); ++i) {
      uint64_t pc = st.pcs[i];
      bool is_return = i > 0;  // frame 0 is the interrupted pc; the rest are return addresses
      size_t mi = 0;
      int h = module_for(s, handles, pc, st.seq, &mi);
      if (h < 0) {
        Frame f;
        f.module = strings_.intern("[unknown]");
        f.module_offset = pc;
        ids.push_back(intern_frame(f));
        continue;
      }
      const SymResult& r = sym_.symbolize(h, pc, is_return);
      uint32_t module = strings_.intern(s.modules[mi].path);
      for (const SymFrame& sf : r.frames) {
        Frame f;
        f.function = strings_.intern(sf.function);
        f.file = strings_.intern(sf.file);
        f.line = sf.line;
        f.module = module;
        // Function-level frames share one offset key per (function, line) so that identical
        // source positions merge; unknown functions keep their address.
        f.module_offset = sf.function.empty() ? r.module_offset : 0;
        f.inlined = sf.inlined;
        ids.push_back(intern_frame(f));
      }
    }
    profile::Stack stack;
    stack.frames = std::move(ids);
    stack.truncated = (st.flags & (wire::kStackTruncated | wire::kStackUnwindStop | wire::kStackLeafOnly)) != 0;
    auto key = stack.frames;
    key.push_back(stack.truncated ? 1u : 0u);
    auto [it, inserted] = stacks_.try_emplace(std::move(key), static_cast<uint32_t>(p_.stacks.size()));
    if (inserted) p_.stacks.push_back(std::move(stack));
    return it->second;
  }

  Profile& p_;
  profile::StringTable strings_;
  Symbolizer sym_;
  std::unordered_map<Frame, uint32_t, FrameKeyHash> frames_;
  std::unordered_map<std::vector<uint32_t>, uint32_t, StackKeyHash> stacks_;
};

void link_processes(Profile& p, const std::vector<ProcessStream>& streams) {
  for (size_t i = 0; i < p.processes.size(); ++i) {
    auto& proc = p.processes[i];
    // The image this one replaced: same pid, ended by exec, started before.
    for (size_t j = 0; j < p.processes.size(); ++j) {
      if (j == i) continue;
      auto& o = p.processes[j];
      if (o.pid == proc.pid && o.end_reason == profile::EndReason::kExec && o.start_ns <= proc.start_ns &&
          (proc.exec_prev == profile::kNone || p.processes[proc.exec_prev].start_ns < o.start_ns))
        proc.exec_prev = static_cast<uint32_t>(j);
    }
    // The parent: the latest image of pid == ppid that started before this process.
    for (size_t j = 0; j < p.processes.size(); ++j) {
      auto& o = p.processes[j];
      if (o.pid == proc.ppid && o.start_ns <= proc.start_ns &&
          (proc.parent == profile::kNone || p.processes[proc.parent].start_ns < o.start_ns))
        proc.parent = static_cast<uint32_t>(j);
    }
  }
  (void)streams;
}

}  // namespace

Profile build_profile(std::vector<ProcessStream>& streams, const profile::RunInfo& run, const BuildOptions& opts) {
  Profile p;
  p.run = run;
  p.metrics.push_back({"cpu", "us"});
  // The clock that sampled: the main threads' (every process tells in its start record).
  bool any_perf = false, any_timer = false;
  for (auto& s : streams) (s.timer_kind == static_cast<uint8_t>(wire::TimerKind::kPerfTaskClock) ? any_perf : any_timer) = true;
  if (!streams.empty())
    p.run.timer = any_perf && any_timer ? "mixed" : any_perf ? "perf-task-clock" : "thread-cpu-timer";
  // Processes in start order, so indexes read naturally (parent before child).
  std::sort(streams.begin(), streams.end(),
            [](const ProcessStream& a, const ProcessStream& b) { return a.start_mono_ns < b.start_mono_ns; });
  {
    Builder b(p, opts);
    for (auto& s : streams) b.add_process(s);
    b.finish();
  }
  link_processes(p, streams);
  std::stable_sort(p.samples.begin(), p.samples.end(),
                   [](const profile::SampleEvent& a, const profile::SampleEvent& b) { return a.t_ns < b.t_ns; });

  uint64_t samples = 0, ticks = 0;
  for (auto& proc : p.processes) {
    auto get = [&](const char* k) {
      auto it = proc.counters.find(k);
      return it == proc.counters.end() ? uint64_t{0} : it->second;
    };
    samples += get("samples");
    ticks += get("ticks");
    if (proc.end_reason == profile::EndReason::kTruncated)
      p.warnings.push_back(fmt::format("process {} ({}) ended without a clean end of its event stream (killed or crashed): "
                                       "its profile holds what was collected until then",
                                       proc.pid, proc.argv.empty() ? proc.exe : proc.argv[0]));
  }
  if (ticks > 0 && run.rate_hz > 0) {
    double achieved = run.rate_hz * static_cast<double>(samples) / static_cast<double>(ticks);
    p.run.extra["achieved_rate_hz"] = fmt::format("{:.0f}", achieved);
    if (achieved < 0.8 * run.rate_hz)
      p.warnings.push_back(fmt::format(
          "sampling delivered about {:.0f} samples per CPU-second of the {} requested (the kernel's timer tick limits "
          "CPU-time timers); each sample is weighted by the ticks it stands for, so times stay right",
          achieved, run.rate_hz));
  }
  profile::compute_aggregates(p);
  return p;
}

}  // namespace mlprof::collector
