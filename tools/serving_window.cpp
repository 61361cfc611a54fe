#include "tools/serving_window.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include "profile/modules.h"
#include "profile/pool_stacks.h"

namespace mlprof::tools {

namespace {

using RowKey = std::pair<uint32_t, uint32_t>;  // thread, stack

struct Rows {
  std::map<RowKey, std::vector<int64_t>> values;  // per metric
  std::map<RowKey, uint64_t> weights;             // sample weights over the whole run
};

Rows rows_of(const profile::Profile& p) {
  Rows r;
  for (auto& sv : p.stack_values) r.values[{sv.thread, sv.stack}] = sv.values;
  for (auto& s : p.samples) r.weights[{s.thread, s.stack}] += s.weight;
  return r;
}

int64_t share(const Rows& r, const RowKey& k, uint32_t metric, uint32_t weight) {
  if (metric == profile::kNone) return 0;
  auto v = r.values.find(k);
  auto w = r.weights.find(k);
  if (v == r.values.end() || w == r.weights.end() || w->second == 0 || metric >= v->second.size()) return 0;
  return v->second[metric] * static_cast<int64_t>(weight) / static_cast<int64_t>(w->second);
}

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// The C runtime's frames that start a thread or the program (glibc's, with line information where
// its debug symbols are installed): every stack ends in one, so as a line they would take the
// CPU of any code without lines above them (a thread pool's worker read "start_thread
// pthread_create.c:442"); such CPU is in no line instead. Indexed by frame.
std::vector<bool> start_frames(const profile::Profile& p) {
  std::vector<bool> out(p.frames.size(), false);
  for (size_t i = 0; i < p.frames.size(); ++i) {
    const std::string& fn = p.str(p.frames[i].function);
    for (const char* name : {"start_thread", "__libc_start_call_main", "__libc_start_main", "__libc_start_main_impl",
                             "_start", "clone", "clone3", "__clone", "__clone3"})
      if (fn == name) out[i] = true;
  }
  return out;
}

// Frames of mlprof's own preload (its allocator wrappers, its signal handler): not the service's
// code; the per-request lines count them at the line that called them.
std::vector<bool> own_modules(const profile::Profile& p) {
  std::vector<bool> own(p.strings.size(), false);
  for (const auto& f : p.frames) {
    if (f.module == 0 || f.module >= own.size() || own[f.module]) continue;
    own[f.module] = profile::module_basename(p.str(f.module)).substr(0, 17) == "libmlprof_preload";
  }
  return own;
}

}  // namespace

bool is_matmul_function(const std::string& name) {
  std::string n = name;
  for (auto& c : n) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  for (const char* k : {"gemm", "matmul", "gemv", "mkl_blas", "dnnl", "sdot", "ddot", "cblas_", "dot_kernel",
                        "openblas", "mkldnn", "addmm"})
    if (contains(n, k)) return true;
  return false;
}

bool is_gil_handoff_function(const std::string& name) {
  for (const char* k : {"PyEval_SaveThread", "PyEval_RestoreThread", "PyEval_AcquireThread", "PyEval_ReleaseThread",
                        "PyGILState_Ensure", "PyGILState_Release", "take_gil", "drop_gil"}) {
    const size_t n = strlen(k);
    if (name.compare(0, n, k) == 0 && (name.size() == n || name[n] == '.')) return true;
  }
  return false;
}

WindowCpu window_cpu(const profile::Profile& p, int64_t from_ns, int64_t to_ns) {
  WindowCpu w;
  Rows rows = rows_of(p);
  const uint32_t cpu = p.metric("cpu"), interp = p.metric("cpu-interpreter"), native = p.metric("cpu-native"),
                 sys = p.metric("cpu-system"), wait = p.metric("wait");
  // matmul, gc, lock, gil, a pool worker's, a pool waiting for work
  std::map<uint32_t, std::tuple<bool, bool, bool, bool, bool, bool>> stack_kind;
  for (auto& s : p.samples) {
    if (s.t_ns < from_ns || s.t_ns >= to_ns) continue;
    const RowKey k{s.thread, s.stack};
    const int64_t c = share(rows, k, cpu, s.weight);
    w.total_us += c;
    w.interpreter_us += share(rows, k, interp, s.weight);
    w.native_us += share(rows, k, native, s.weight);
    w.system_us += share(rows, k, sys, s.weight);
    w.per_thread_us[s.thread] += c;
    auto it = stack_kind.find(s.stack);
    if (it == stack_kind.end()) {
      bool mm = false, gc = false, lock = false, gil = false, pool = false, waiting = false;
      if (s.stack < p.stacks.size()) {
        pool = profile::is_pool_thread_stack(p, p.stacks[s.stack]);
        waiting = profile::is_pool_wait_stack(p, p.stacks[s.stack]);
      }
      if (s.stack < p.stacks.size())
        for (uint32_t f : p.stacks[s.stack].frames) {
          const std::string& fn = p.str(p.frames.at(f).function);
          mm = mm || is_matmul_function(fn);
          gc = gc || fn == profile::kGcFrameName || contains(fn, "gc_collect") || fn == "collect" ||
               contains(fn, "_PyGC_");
          lock = lock || contains(fn, "pthread_mutex") || contains(fn, "take_gil") || contains(fn, "futex") ||
                 contains(fn, "pthread_cond");
          gil = gil || is_gil_handoff_function(fn);
        }
      it = stack_kind.emplace(s.stack, std::make_tuple(mm, gc, lock, gil, pool, waiting)).first;
    }
    auto [mm, gc, lock, gil, pool, waiting] = it->second;
    if (pool || waiting) w.pool_threads.insert(s.thread);
    if (waiting) {
      w.pool_wait_us += c;
      const uint32_t m = profile::pool_routine_module(p, p.stacks[s.stack]);
      w.pool_wait_by_library[m ? std::string(profile::module_basename(p.str(m))) : "?"] += c;
    }
    if (mm) w.matmul_us += c;
    if (gc) w.gc_us += c;
    if (gil) w.gil_us += c;
    if (lock) w.lock_wait_us += share(rows, k, wait, s.weight);
  }
  return w;
}

void fill_window_lines(profile::Profile& p, profile::Serving& s, size_t max_lines) {
  s.lines.clear();
  s.window_cpu_us = s.window_line_cpu_us = 0;
  if (s.window_end_ns <= s.window_start_ns) return;
  Rows rows = rows_of(p);
  const uint32_t cpu = p.metric("cpu");
  struct Acc {
    int64_t self = 0, total = 0;
  };
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Acc> acc;  // file, line, function
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
  const std::vector<bool> own = own_modules(p), start = start_frames(p);
  for (auto& smp : p.samples) {
    if (smp.t_ns < s.window_start_ns || smp.t_ns >= s.window_end_ns || smp.stack >= p.stacks.size()) continue;
    const int64_t c = share(rows, {smp.thread, smp.stack}, cpu, smp.weight);
    if (c == 0) continue;
    s.window_cpu_us += c;
    const auto& frames = p.stacks[smp.stack].frames;
    seen.clear();
    bool self_done = false;
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto& f = p.frames.at(frames[i]);
      if (f.line == 0 || f.file == 0 || (f.module < own.size() && own[f.module]) || start[frames[i]]) continue;
      auto key = std::make_tuple(f.file, f.line, f.function);
      if (!self_done) acc[key].self += c, self_done = true, s.window_line_cpu_us += c;  // the innermost line: code without line info below it counts here
      if (seen.insert(key).second) acc[key].total += c;
    }
  }
  for (auto& [k, a] : acc) s.lines.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), a.self, a.total});
  std::sort(s.lines.begin(), s.lines.end(), [](const auto& a, const auto& b) {
    return a.total_us != b.total_us ? a.total_us > b.total_us : a.self_us > b.self_us;
  });
  if (s.lines.size() > max_lines) s.lines.resize(max_lines);
}

}  // namespace mlprof::tools
