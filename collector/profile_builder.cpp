#include "collector/profile_builder.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

#include "collector/gpu_profile.h"
#include "collector/leaks.h"
#include "collector/pool_attribution.h"
#include "collector/python_frames.h"
#include "collector/symbolizer.h"
#include "fmt/format.h"
#include "profile/aggregate.h"
#include "profile/modules.h"
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
    case wire::Counter::kPyWalkFailed: return "python_walk_failed";
    case wire::Counter::kPyCodes: return "python_codes";
    case wire::Counter::kWaitSamples: return "wait_samples";
    case wire::Counter::kWallUnwinds: return "wall_unwinds";
    case wire::Counter::kMemSamples: return "mem_samples";
    case wire::Counter::kMemFrees: return "mem_frees";
    case wire::Counter::kMemDropped: return "mem_dropped";
    case wire::Counter::kCopySamples: return "copy_samples";
    case wire::Counter::kMemTableFull: return "mem_table_full";
    case wire::Counter::kGpuLaunches: return "gpu_launches";
    case wire::Counter::kGpuActivities: return "gpu_activities";
    case wire::Counter::kGpuDropped: return "gpu_dropped";
    case wire::Counter::kGpuCuptiDropped: return "gpu_cupti_dropped";
    case wire::Counter::kShortThreads: return "short_threads";
    case wire::Counter::kWriterCycles: return "writer_cycles";
    default: break;
  }
  return nullptr;
}

// Metric columns, in this order (docs/profile-format.md: metric names). Wall mode appends wall and
// wait, so the CPU metrics keep their indexes; CPU-mode profiles have only the first four.
// Memory profiling appends its five metrics after those (MemMetric: offsets from the first).
enum Metric : uint32_t {
  kCpu = 0, kCpuInterpreter = 1, kCpuNative = 2, kCpuSystem = 3, kCpuMetricCount = 4,
  kWall = 4, kWait = 5, kWallMetricCount = 6
};
enum MemMetric : uint32_t { kAllocBytes = 0, kAllocCount = 1, kLivePeakBytes = 2, kLiveEndBytes = 3, kCopyBytes = 4,
                            kMemMetricCount = 5 };
constexpr const char* kMemMetricNames[kMemMetricCount][2] = {
    {"alloc-bytes", "bytes"}, {"alloc-count", "count"}, {"live-peak-bytes", "bytes"},
    {"live-end-bytes", "bytes"}, {"copy-bytes", "bytes"}};

// Where a sample's CPU went, decided by the frames between its leaf and the innermost eval loop.
enum class CpuClass : uint8_t { kInterpreter, kNative, kSystem };

bool is_eval_function(const std::string& name) {
  return name.rfind("_PyEval_EvalFrameDefault", 0) == 0;  // also its GCC-split ".cold" part
}

struct SymbolizedStack {
  uint32_t stack = 0;
  CpuClass cls = CpuClass::kNative;
  bool merge_failed = false;
  bool python = false;  // the stack has Python frames
  bool gil_held = false;  // the thread held the GIL when sampled
  bool eval_transition = false;    // merged with the innermost eval invocation as interpreter frames
  bool unwind_incomplete = false;  // the native stack ended early
  bool wait = false;               // an off-CPU wait stack (wall mode): no CPU classification
};

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
  Builder(Profile& p, const BuildOptions& opts, bool wall, bool memory, bool gpu)
      : p_(p), strings_(p.strings), sym_(opts.extra_debug_dirs), wall_(wall), memory_(memory), gpu_(gpu),
        time_metrics_(wall ? kWallMetricCount : kCpuMetricCount),
        metric_count_(time_metrics_ + (memory ? uint32_t{kMemMetricCount} : 0u) + (gpu ? uint32_t{kGpuMetricCount} : 0u)) {
    if (opts.memory_window) window_sites_ = std::make_unique<std::map<uint32_t, profile::ServingSite>>();
  }

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
    if (!s.ended && s.closed_while_running) proc.counters["closed_while_running"] = 1;
    proc.messages = s.messages;
    if (!s.error.empty()) proc.messages.push_back("event stream: " + s.error);
    // Memory events the preload could not queue (its ring stayed full past the wait): said, since
    // every figure they would have added to is low by their share.
    if (auto it = proc.counters.find("mem_dropped"); it != proc.counters.end() && it->second > 0) {
      const uint64_t kept = proc.counters.count("mem_samples") ? proc.counters.at("mem_samples") : 0;
      proc.messages.push_back(fmt::format(
          "{} memory events (allocation and copy samples, frees) were lost, against {} allocation samples kept: "
          "the writer thread could not drain "
          "its rings in time (a busy machine, a very small --mem-interval); allocation figures are low by about "
          "that share, and a lost free can leave a block counted as live",
          it->second, kept));
    }
    int64_t last = s.start_mono_ns;
    for (auto& smp : s.samples) last = std::max(last, smp.t_ns);
    for (auto& t : s.threads) last = std::max(last, t.end_ns);
    if (!s.memory.timeline().empty()) last = std::max(last, s.memory.timeline().back().t_ns);
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
    std::unordered_map<uint64_t, SymbolizedStack> stack_map;
    for (auto& [id, st] : s.stacks) stack_map[id] = symbolize_stack(s, handles, st);

    // Samples -> per (thread, stack) values per metric, and time-ordered events.
    std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>> ns;
    uint64_t merge_failed = 0, python_samples = 0, transitions = 0, unmergeable = 0, gil_held = 0;
    // Wall mode: a wait sample weighs wall ticks (the stream's wall period); CPU samples count as
    // wall time too. A wait sample in a CPU-mode profile has no column: it is skipped.
    const int64_t wall_period = s.wall_period_ns > 0 ? s.wall_period_ns : s.period_ns;
    // The stack each sample is charged to: its own, or for a thread-pool worker's, the one that
    // started its work (collector/pool_attribution.h).
    std::vector<PoolSample> charged;
    std::vector<const SymbolizedStack*> symbolized;  // per sample; null: its stack record was lost
    charged.reserve(s.samples.size());
    symbolized.reserve(s.samples.size());
    for (auto& smp : s.samples) {
      auto it = stack_map.find(smp.stack);
      symbolized.push_back(it == stack_map.end() ? nullptr : &it->second);
      if (it == stack_map.end()) {
        charged.push_back({profile::kNone, smp.t_ns, false});
        continue;
      }
      charged.push_back({it->second.stack, smp.t_ns, !it->second.wait, smp.thread});
    }
    auto unnamed_start = [this](uint32_t frame) {
      auto it = unnamed_starts_.find(frame);
      return it == unnamed_starts_.end() ? kNoFunctionStart : it->second;
    };
    const PoolCounts pool = charge_pool_workers(
        p_, charged, unnamed_start, [this] { return pool_frame(); },
        [this](std::vector<uint32_t> frames, bool truncated) { return intern_stack(std::move(frames), truncated); });
    uint64_t received = 0;  // CPU samples that reached the collector (one record per signal)
    for (size_t i = 0; i < s.samples.size(); ++i) {
      const auto& smp = s.samples[i];
      received += symbolized[i] == nullptr || !symbolized[i]->wait;
      if (symbolized[i] == nullptr) continue;  // stack record lost (stream cut): nothing to attribute
      const SymbolizedStack& st = *symbolized[i];
      if (st.wait && !wall_) continue;
      uint32_t thread = thread_map[smp.thread];
      const uint32_t stack = charged[i].stack;
      auto& v = ns[{thread, stack}];
      if (v.empty()) v.assign(metric_count_, 0);
      if (st.wait) {
        int64_t t = static_cast<int64_t>(smp.weight) * wall_period;
        v[kWait] += t;
        v[kWall] += t;
        p_.samples.push_back({thread, stack, smp.t_ns, smp.weight});
        continue;
      }
      int64_t t = static_cast<int64_t>(smp.weight) * s.period_ns;
      v[kCpu] += t;
      v[st.cls == CpuClass::kInterpreter ? kCpuInterpreter : st.cls == CpuClass::kNative ? kCpuNative : kCpuSystem] += t;
      if (wall_) v[kWall] += t;
      if (st.python) {
        ++python_samples;
        if (st.merge_failed && st.unwind_incomplete)
          ++unmergeable;
        else
          merge_failed += st.merge_failed;
        transitions += st.eval_transition;
        gil_held += st.gil_held;
      }
      p_.samples.push_back({thread, stack, smp.t_ns, smp.weight});
    }
    for (auto& [key, v] : ns)
      for (uint32_t m = 0; m < time_metrics_; ++m) v[m] /= 1000;  // ns -> us
    if (memory_ && s.memory.active()) add_memory(s, proc_index, thread_map, stack_map, ns);
    if (s.gpu.active()) add_gpu(s, proc_index, thread_map, stack_map, ns);
    for (auto& [key, v] : ns) p_.stack_values.push_back({key.first, key.second, std::move(v)});
    auto& proc_ref = p_.processes[proc_index];
    // The preload's counters come every second and at the end: a process killed (or whose stream
    // was cut) after its last counters took at least the samples that arrived. Kept apart from
    // the preload's own counters (the achieved rate divides those by the ticks of the same snapshot).
    if (!s.ended) {
      auto it = proc_ref.counters.find("samples");
      if (received > (it == proc_ref.counters.end() ? 0 : it->second)) proc_ref.counters["samples_received"] = received;
    }
    if (pool.worker_samples > 0) {
      proc_ref.counters["pool_worker_samples"] = pool.worker_samples;
      proc_ref.counters["pool_worker_samples_charged"] = pool.charged;
    }
    if (pool.waiting > 0) proc_ref.counters["pool_wait_samples"] = pool.waiting;
    if (s.python.present) {
      proc_ref.counters["python_samples"] = python_samples;
      proc_ref.counters["python_merge_failures"] = merge_failed;
      proc_ref.counters["python_eval_transitions"] = transitions;
      proc_ref.counters["python_gil_held"] = gil_held;
      proc_ref.counters["python_unmergeable_truncated"] = unmergeable;
      if (!s.python.supported) proc_ref.messages.push_back(s.python.description);
      python_seen_ = python_seen_.empty() ? s.python.description : python_seen_;
    }
    merge_failed_ += merge_failed;
    python_samples_ += python_samples;
  }

  void finish() {
    if (window_sites_) {  // most retained first, then most allocated; bounded
      auto& out = p_.serving.sites;
      for (auto& [stack, w] : *window_sites_) out.push_back(w);
      // A retained figure that rests on too few samples to be a leak sorts as 0 (profile::retained_resolved).
      auto retained = [](const profile::ServingSite& x) { return profile::retained_resolved(x) ? x.retained_bytes : 0; };
      std::sort(out.begin(), out.end(), [&](const profile::ServingSite& a, const profile::ServingSite& b) {
        const int64_t ra = retained(a), rb = retained(b);
        return ra != rb ? ra > rb : a.alloc_bytes > b.alloc_bytes;
      });
      constexpr size_t kMaxWindowSites = 2000;
      if (out.size() > kMaxWindowSites) out.resize(kMaxWindowSites);
    }
    std::stable_sort(p_.leaks.begin(), p_.leaks.end(),
                     [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    for (auto& w : sym_.warnings()) p_.warnings.push_back(w);
    for (auto& [path, id] : build_ids_) p_.modules.push_back({path, id});
    if (!python_seen_.empty()) p_.run.extra["python"] = python_seen_;
    if (python_samples_ > 0 && merge_failed_ * 100 > python_samples_)
      p_.warnings.push_back(fmt::format(
          "{} of {} samples with Python frames ({:.1f}%) could not be merged with their native stack (the "
          "interpreter's _PyEval_EvalFrameDefault frames did not match its Python frames); those show the Python "
          "frames under the native ones",
          merge_failed_, python_samples_, 100.0 * merge_failed_ / python_samples_));
  }

 private:
  // GPU metrics per (thread, stack) and the process's GPU section (collector/gpu_profile.h).
  void add_gpu(ProcessStream& s, uint32_t proc_index, const std::vector<uint32_t>& thread_map,
               const std::unordered_map<uint64_t, SymbolizedStack>& stack_map,
               std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>>& ns) {
    s.gpu.finish();
    GpuBuildContext ctx;
    ctx.process = proc_index;
    ctx.start_ns = p_.processes[proc_index].start_ns;
    ctx.end_ns = p_.processes[proc_index].end_ns;
    ctx.thread_map = &thread_map;
    ctx.stack_of = [&stack_map](uint64_t id) {
      auto it = stack_map.find(id);
      return it == stack_map.end() ? profile::kNone : it->second.stack;
    };
    ctx.intern = [this](const std::string& str) { return strings_.intern(str); };
    ctx.values = &ns;
    ctx.metrics = gpu_;
    ctx.first = time_metrics_ + (memory_ ? uint32_t{kMemMetricCount} : 0u);
    ctx.metric_count = metric_count_;
    profile::ProcessGpu pg = build_gpu(s.gpu, ctx);
    auto& counters = p_.processes[proc_index].counters;
    for (const char* c : {"gpu_dropped", "gpu_cupti_dropped"})
      if (auto it = counters.find(c); it != counters.end()) pg.totals[c + 4] = static_cast<int64_t>(it->second);
    p_.gpu.push_back(std::move(pg));
  }

  // Memory metrics per (thread, stack), the process's memory summary and its leak candidates.
  void add_memory(const ProcessStream& s, uint32_t proc_index, const std::vector<uint32_t>& thread_map,
                  const std::unordered_map<uint64_t, SymbolizedStack>& stack_map,
                  std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>>& ns) {
    const MemoryTracker& mem = s.memory;
    for (const MemSite& site : mem.sites()) {
      auto it = stack_map.find(site.stack);
      if (it == stack_map.end() || site.thread >= thread_map.size()) continue;  // stack record lost
      auto& v = ns[{thread_map[site.thread], it->second.stack}];
      if (v.empty()) v.assign(metric_count_, 0);
      int64_t* m = &v[time_metrics_];
      m[kAllocBytes] += site.alloc_bytes;
      m[kAllocCount] += std::llround(site.alloc_count);
      m[kLivePeakBytes] += mem.peak_bytes(site);
      m[kLiveEndBytes] += site.live_bytes;
      m[kCopyBytes] += site.copy_bytes;
      if (window_sites_) p_.serving.window_copy_bytes += site.win_copy_bytes;
      if (window_sites_ && (site.win_alloc_bytes || site.win_free_bytes)) {
        auto [wi, fresh] = window_sites_->try_emplace(it->second.stack);
        auto& w = wi->second;
        if (fresh) w.retained_samples = 0;
        w.stack = it->second.stack;
        w.alloc_bytes += site.win_alloc_bytes;
        w.alloc_count += std::llround(site.win_alloc_count);
        w.retained_bytes += site.win_alloc_bytes - site.win_free_bytes;
        w.retained_samples += site.win_net_samples;
      }
    }

    profile::ProcessMemory pm;
    pm.process = proc_index;
    pm.interval_bytes = mem.interval_bytes();
    pm.copy_interval_bytes = mem.copy_interval_bytes();
    pm.python_allocator = (mem.flags() & wire::kMemPythonAllocator) != 0;
    // Nothing allocated (or RSS never measured): the peak is 0, at the start.
    const int64_t start = p_.processes[proc_index].start_ns;
    pm.peak_heap_bytes = mem.peak_heap_bytes();
    pm.peak_heap_t_ns = pm.peak_heap_bytes > 0 ? mem.peak_heap_t_ns() : start;
    pm.peak_rss_bytes = mem.peak_rss_bytes();
    pm.peak_rss_t_ns = pm.peak_rss_bytes > 0 ? mem.peak_rss_t_ns() : start;
    pm.end_heap_bytes = mem.heap_bytes();
    for (const auto& pt : mem.timeline()) pm.timeline.push_back({pt.t_ns, pt.rss_bytes, pt.heap_bytes});
    p_.memory.push_back(std::move(pm));

    // Leak detection per profile stack: stream stacks that symbolize alike are one site (their
    // series share the tracker's ticks, so they add point by point).
    const profile::Process& proc = p_.processes[proc_index];
    LeakInput in;
    in.process = proc_index;
    in.start_ns = proc.start_ns;
    in.end_ns = proc.end_ns;
    in.exited = proc.end_reason == profile::EndReason::kExit;
    in.interval_bytes = mem.interval_bytes();
    in.ticks = mem.ticks();
    std::unordered_map<uint32_t, size_t> by_stack;
    for (const MemStack& ms : mem.stacks()) {
      if (ms.live_samples == 0 && ms.first_tick == MemoryTracker::kNoTick) continue;
      auto it = stack_map.find(ms.stack);
      if (it == stack_map.end()) continue;
      auto [bit, fresh] = by_stack.try_emplace(it->second.stack, in.sites.size());
      if (fresh) {
        LeakSite site;
        site.stack = it->second.stack;
        site.suppressed = runtime_internal_stack(p_, site.stack);
        site.first_tick = MemoryTracker::kNoTick;
        in.sites.push_back(std::move(site));
      }
      LeakSite& site = in.sites[bit->second];
      site.end_bytes += ms.live_bytes;
      site.end_count += ms.live_count;
      site.end_samples += ms.live_samples;
      if (ms.first_tick == MemoryTracker::kNoTick || ms.series.empty()) continue;
      if (site.first_tick == MemoryTracker::kNoTick) {
        site.first_tick = ms.first_tick;
        site.series = ms.series;
        continue;
      }
      if (ms.first_tick < site.first_tick) {  // extend the front with zeros
        site.series.insert(site.series.begin(), site.first_tick - ms.first_tick, MemSeriesPoint{});
        site.first_tick = ms.first_tick;
      }
      const size_t off = ms.first_tick - site.first_tick;
      if (site.series.size() < off + ms.series.size()) site.series.resize(off + ms.series.size());
      for (size_t i = 0; i < ms.series.size(); ++i) {
        MemSeriesPoint& d = site.series[off + i];
        d.bytes += ms.series[i].bytes;
        d.count += ms.series[i].count;
        d.var += ms.series[i].var;
      }
    }
    for (auto& site : in.sites)
      if (site.first_tick == MemoryTracker::kNoTick) site.first_tick = 0;  // no series
    for (auto& c : find_leaks(in)) p_.leaks.push_back(c);
  }

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

  // Symbolizes one native pc into frames (its inline chain, innermost first).
  void native_frames(const ProcessStream& s, const std::vector<int>& handles, uint64_t pc, bool is_return,
                     uint64_t seq, std::vector<uint32_t>* out, bool* is_eval, uint32_t* module_out) {
    size_t mi = 0;
    int h = module_for(s, handles, pc, seq, &mi);
    *is_eval = false;
    if (h < 0) {
      Frame f;
      f.module = strings_.intern("[unknown]");
      f.module_offset = pc;
      *module_out = f.module;
      out->push_back(intern_frame(f));
      return;
    }
    const SymResult& r = sym_.symbolize(h, pc, is_return);
    uint32_t module = strings_.intern(s.modules[mi].path);
    *module_out = module;
    if (std::string& id = build_ids_[module]; id.empty()) id = build_id_hex(s.modules[mi].build_id);
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
      out->push_back(intern_frame(f));
    }
    if (r.unnamed_start != SymResult::kNoStart) unnamed_starts_[out->back()] = r.unnamed_start;
    if (!r.frames.empty() && is_eval_function(r.frames.back().function)) *is_eval = true;
  }

  uint32_t python_frame(const ProcessStream& s, const RawPyFrame& pf) {
    Frame f;
    f.kind = profile::FrameKind::kPython;
    auto it = s.py_codes.find(pf.code_id);
    if (it == s.py_codes.end()) {
      f.function = strings_.intern("<unknown code>");
      return intern_frame(f);
    }
    const RawPyCode& c = it->second;
    f.function = strings_.intern(c.qualname);
    f.file = strings_.intern(c.filename);
    int32_t line = python::line_for_offset(static_cast<python::TableFormat>(c.format), c.firstlineno, c.table,
                                           pf.offset);
    f.line = line > 0 ? static_cast<uint32_t>(line) : 0;
    return intern_frame(f);
  }

  uint32_t gc_frame() {
    Frame f;
    f.kind = profile::FrameKind::kNative;
    f.function = strings_.intern(std::string(profile::kGcFrameName));
    return intern_frame(f);
  }

  uint32_t pool_frame() {
    Frame f;
    f.kind = profile::FrameKind::kNative;
    f.function = strings_.intern(std::string(profile::kPoolWorkersFrameName));
    return intern_frame(f);
  }

  uint32_t intern_stack(std::vector<uint32_t> frames, bool truncated) {
    profile::Stack stack;
    stack.frames = std::move(frames);
    stack.truncated = truncated;
    auto key = stack.frames;
    key.push_back(stack.truncated ? 1u : 0u);
    auto [it, inserted] = stacks_.try_emplace(std::move(key), static_cast<uint32_t>(p_.stacks.size()));
    if (inserted) p_.stacks.push_back(std::move(stack));
    return it->second;
  }

  SymbolizedStack symbolize_stack(const ProcessStream& s, const std::vector<int>& handles, const RawStack& st) {
    SymbolizedStack out;
    out.python = !st.py.empty();
    out.gil_held = (st.flags & wire::kStackGilHeld) != 0;
    out.wait = (st.flags & wire::kStackOffCpuWait) != 0;
    // Native frames: the inline chain of each pc, whether it runs the eval loop, its module.
    std::vector<std::vector<uint32_t>> native(st.pcs.size());
    std::vector<bool> is_eval(st.pcs.size());
    std::vector<uint32_t> modules(st.pcs.size());
    for (size_t i = 0; i < st.pcs.size(); ++i) {
      bool ev = false;
      // frame 0 is the interrupted pc; the rest are return addresses
      native_frames(s, handles, st.pcs[i], i > 0, st.seq, &native[i], &ev, &modules[i]);
      is_eval[i] = ev;
    }
    std::vector<uint32_t> ids;
    if (st.py.empty()) {
      for (auto& v : native) ids.insert(ids.end(), v.begin(), v.end());
    } else {
      std::vector<bool> entry;
      for (auto& f : st.py) entry.push_back(f.flags & 1);
      // The innermost eval-loop invocation may be entering or leaving its frame (a generator
      // resumed by next(), a function call from C): it is on the native stack, but its frame is
      // not (yet, or any more) on the thread's frame chain. Its native frames then work on behalf
      // of the next Python frame out, so that invocation merges as interpreter frames.
      size_t groups = static_cast<size_t>(std::count(entry.begin(), entry.end(), true)) + (entry.back() ? 0 : 1);
      size_t evals = static_cast<size_t>(std::count(is_eval.begin(), is_eval.end(), true));
      if (evals == groups + 1) {
        *std::find(is_eval.begin(), is_eval.end(), true) = false;
        out.eval_transition = true;
      }
      std::vector<python::FrameRef> merged;
      out.merge_failed = !python::merge_stacks(is_eval, entry, &merged);
      // A native stack the unwinder could not finish cannot be merged by any rule: those samples
      // are counted as unwind_stopped, not as merge failures.
      out.unwind_incomplete = (st.flags & (wire::kStackUnwindStop | wire::kStackLeafOnly | wire::kStackTruncated)) != 0;
      // Cut short before the innermost eval loop (a BLAS kernel in assembly without unwind
      // information): every native frame there is runs below every Python frame, on behalf of the
      // innermost Python line. They go above the Python frames (what is missing in between is the
      // stack's truncated flag) instead of being dropped.
      if (out.unwind_incomplete && !native.empty() && std::none_of(is_eval.begin(), is_eval.end(), [](bool e) { return e; })) {
        merged.clear();
        for (uint32_t i = 0; i < native.size(); ++i) merged.push_back({false, i});
        for (uint32_t i = 0; i < st.py.size(); ++i) merged.push_back({true, i});
      }
      for (auto& ref : merged) {
        if (ref.python) {
          // The interpreter's garbage collector ran on this thread (preload: kFrameInGc on the
          // innermost Python frame): a frame of its own between that line and the native frames
          // it ran, so that the collection shows under the line that triggered it, by name even
          // in an interpreter without symbols.
          if (ref.index == 0 && (st.py[0].flags & 2)) ids.push_back(gc_frame());
          ids.push_back(python_frame(s, st.py[ref.index]));
        } else {
          ids.insert(ids.end(), native[ref.index].begin(), native[ref.index].end());
        }
      }
    }

    // Interpreter, native or system: system when interrupted at a syscall; interpreter when
    // every native frame between the leaf and the innermost eval loop is the interpreter's own
    // (or the C runtime it calls); native otherwise (extensions, BLAS, any library).
    if (out.wait) {
      // Off-CPU: interpreter / native / system do not apply (wait samples add to wait and wall only).
    } else if (st.flags & wire::kStackInSyscall) {
      out.cls = CpuClass::kSystem;
    } else if (!st.py.empty()) {
      size_t first_eval = std::find(is_eval.begin(), is_eval.end(), true) - is_eval.begin();
      if (first_eval < is_eval.size()) {
        uint32_t interp = modules[first_eval];
        bool all_interp = true;
        for (size_t i = 0; i < first_eval && all_interp; ++i)
          // C runtime libraries the interpreter calls for its own work (memcpy, malloc): time in
          // them, with only interpreter frames between them and the eval loop, is interpreter time.
          all_interp = modules[i] == interp || profile::is_c_runtime_module(p_.str(modules[i]));
        out.cls = all_interp ? CpuClass::kInterpreter : CpuClass::kNative;
      } else if (out.unwind_incomplete && !modules.empty()) {
        // Cut short before any eval loop: native unless every frame there is the interpreter's
        // (python3.X, libpython3.X) or the C runtime's.
        bool all_interp = true;
        for (uint32_t m : modules) all_interp = all_interp && (profile::is_interpreter_module(p_.str(m)) || profile::is_c_runtime_module(p_.str(m)));
        out.cls = all_interp ? CpuClass::kInterpreter : CpuClass::kNative;
      } else {
        out.cls = CpuClass::kInterpreter;  // no eval frame found (no symbols): Python frames only
      }
    }

    out.stack = intern_stack(std::move(ids),
                             (st.flags & (wire::kStackTruncated | wire::kStackUnwindStop | wire::kStackLeafOnly)) != 0);
    return out;
  }

  Profile& p_;
  profile::StringTable strings_;
  std::unique_ptr<std::map<uint32_t, profile::ServingSite>> window_sites_;  // BuildOptions::memory_window
  std::map<uint32_t, std::string> build_ids_;  // module string -> hex build id (Profile::modules)
  Symbolizer sym_;
  std::unordered_map<Frame, uint32_t, FrameKeyHash> frames_;
  std::unordered_map<std::vector<uint32_t>, uint32_t, StackKeyHash> stacks_;
  std::unordered_map<uint32_t, uint64_t> unnamed_starts_;  // frame -> its function's start (SymResult)
  std::string python_seen_;
  uint64_t merge_failed_ = 0, python_samples_ = 0;
  bool wall_ = false, memory_ = false, gpu_ = false;
  uint32_t time_metrics_ = kCpuMetricCount, metric_count_ = kCpuMetricCount;
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
  p.metrics = {{"cpu", "us"}, {"cpu-interpreter", "us"}, {"cpu-native", "us"}, {"cpu-system", "us"}};
  // Wall mode: asked for by the run (mlprof-run --mode wall) or told by any stream (event files).
  bool wall = run.mode == "wall";
  for (auto& s : streams) wall = wall || (s.flags & wire::kProcessWallMode) != 0;
  if (wall) {
    p.run.mode = "wall";
    p.metrics.push_back({"wall", "us"});  // kWall = 4
    p.metrics.push_back({"wait", "us"});  // kWait = 5
  }
  // Memory metrics when any process profiled memory (a MEM_CONFIG or any memory record).
  bool memory = false;
  for (auto& s : streams) memory = memory || s.memory.active();
  if (memory)
    for (auto& [name, unit] : kMemMetricNames) p.metrics.push_back({name, unit});
  // GPU metrics when any process had GPU activity (docs/gpu.md).
  bool gpu = false;
  for (auto& s : streams) gpu = gpu || !s.gpu.sites().empty() || !s.gpu.kernels().empty() || s.gpu.totals().count("activities");
  if (gpu)
    for (auto& [name, unit] : kGpuMetricNames) p.metrics.push_back({name, unit});
  // The clock that sampled: the main threads' (every process tells in its start record).
  bool any_perf = false, any_timer = false;
  for (auto& s : streams) {
    (s.timer_kind == static_cast<uint8_t>(wire::TimerKind::kPerfTaskClock) ? any_perf : any_timer) = true;
    // Threads the preload moved to the other clock later (many short threads: perf events).
    auto threads_on = [&](wire::Counter c) {
      auto it = s.counters.find(c);
      return it != s.counters.end() && it->second > 0;
    };
    any_perf = any_perf || threads_on(wire::Counter::kPerfThreads);
    any_timer = any_timer || threads_on(wire::Counter::kPosixTimerThreads);
  }
  if (!streams.empty())
    p.run.timer = any_perf && any_timer ? "mixed" : any_perf ? "perf-task-clock" : "thread-cpu-timer";
  // Processes in start order, so indexes read naturally (parent before child).
  std::sort(streams.begin(), streams.end(),
            [](const ProcessStream& a, const ProcessStream& b) { return a.start_mono_ns < b.start_mono_ns; });
  {
    Builder b(p, opts, wall, memory, gpu);
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
    if (opts.command_pid != 0 && proc.pid == opts.command_pid && proc.end_reason == profile::EndReason::kTruncated &&
        proc.exit_status < 0)
      proc.exit_status = run.exit_status;
    if (proc.end_reason == profile::EndReason::kTruncated && opts.stopped_pids.count(proc.pid))
      proc.end_reason = profile::EndReason::kStopped;  // on purpose, after a flush: not a crash
    if (proc.end_reason == profile::EndReason::kTruncated)
      p.warnings.push_back(
          get("closed_while_running")
              ? fmt::format("process {} ({}) closed mlprof's connection while it ran (it closes descriptors it did "
                            "not open, as a daemon's close-all loop does): its profile holds what was collected "
                            "until then",
                            proc.pid, proc.argv.empty() ? proc.exe : proc.argv[0])
              : fmt::format("process {} ({}) ended without a clean end of its event stream (killed or crashed): "
                            "its profile holds what was collected until then",
                            proc.pid, proc.argv.empty() ? proc.exe : proc.argv[0]));
    // Short-lived threads on POSIX CPU-time timers only (perf events not allowed, or MLPROF_TIMER=timer):
    // the tick-driven timer sees a fraction of their CPU (docs/how-it-works.md, Clocks). 32: the
    // number after which the preload would have switched (ThreadRegistry::kShortThreadsToSwitch).
    if (get("short_threads") >= 32 && get("perf_threads") == 0 && get("posix_timer_threads") > 0)
      p.warnings.push_back(fmt::format(
          "process {} ({}): {} threads ended within two sampling periods of CPU each; POSIX CPU-time timers (perf "
          "events were not allowed or MLPROF_TIMER=timer) see only part of such threads' CPU, so their lines are "
          "undercounted: allow perf events (sysctl kernel.perf_event_paranoid=2) for a full count",
          proc.pid, proc.argv.empty() ? proc.exe : proc.argv[0], get("short_threads")));
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
