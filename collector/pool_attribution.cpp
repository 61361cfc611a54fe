#include "collector/pool_attribution.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "profile/modules.h"
#include "profile/pool_stacks.h"

namespace mlprof::collector {
namespace {

using profile::Frame;
using profile::FrameKind;
using profile::Profile;

// Frames searched above the pool's thread routine: its own loop and dispatch (libgomp: none named;
// libc10: the std::function call), then the handed-over function. Deeper frames are the function's
// callees (kernels, memcpy), which other threads run for other reasons.
constexpr size_t kMaxWorkerDepth = 8;

// A function's identity across stacks: a named frame by (function, module), whatever its line; an
// unnamed one (a stripped library's static function) by its module and the function's start from
// the unwind table, or failing that by its frame, that is its module and address, which another
// thread shares only at the same pc.
uint64_t function_key(const Profile& p, const UnnamedStart& unnamed_start, uint32_t frame) {
  const Frame& f = p.frames[frame];
  if (f.function != 0) return (uint64_t{f.function} << 32) | f.module;
  const uint64_t start = unnamed_start ? unnamed_start(frame) : kNoFunctionStart;
  if (start != kNoFunctionStart && start < (uint64_t{1} << 40) && f.module < (1u << 22))
    return (uint64_t{1} << 62) | (uint64_t{f.module} << 40) | start;
  return (uint64_t{1} << 63) | frame;
}

struct Module {
  bool runtime = false;  // the C runtime or libstdc++ (a thread's start, memcpy, syscall wrappers)
  bool pool = false;
  bool pool_only = false;  // a runtime of nothing but the pool (libgomp): its functions never match
};

class Matcher {
 public:
  explicit Matcher(const Profile& p) : p_(p), modules_(p.strings.size()), known_(p.strings.size(), false) {}

  const Module& module(uint32_t frame) {
    const uint32_t m = p_.frames[frame].module;
    if (m >= modules_.size()) return none_;
    if (!known_[m]) {
      const std::string& path = p_.str(m);
      modules_[m].runtime = m == 0 || profile::is_nobodys_module(path);
      modules_[m].pool = profile::is_thread_pool_module(path);
      modules_[m].pool_only = profile::is_pool_runtime_only_module(path);
      known_[m] = true;
    }
    return modules_[m];
  }

  // A frame another thread's stack can be matched at: machine code of a program or library, not
  // the C runtime's (everyone's memcpy and futex), not an address outside every module, not a
  // pool runtime's own (a worker spinning in libgomp between teams would match the thread that
  // started the last team, spinning at its barrier in the same function, and charge it idle time).
  bool matchable(uint32_t frame) {
    if (p_.frames[frame].kind != FrameKind::kNative) return false;
    const Module& mod = module(frame);
    return !mod.runtime && !mod.pool_only;
  }

  // For a pool worker's stack, the index (leaf first) of the frame just above the pool's thread
  // routine, the first from the root that is not the C runtime's; -1 for any other stack. The root
  // must be the C runtime's thread start: a stack cut short inside the pool's code (a caller's
  // GOMP_parallel) is not a worker's.
  int worker_top(const profile::Stack& s) {
    const auto& frames = s.frames;
    const int root = static_cast<int>(frames.size()) - 1;
    int i = root;
    while (i >= 0 && p_.frames[frames[i]].kind == FrameKind::kNative && module(frames[i]).runtime) --i;
    if (s.truncated || i == root || i < 1 || p_.frames[frames[i]].kind != FrameKind::kNative ||
        !module(frames[i]).pool)
      return -1;
    return i - 1;
  }

  // How many frames of a launcher's stack, from the leaf, run below its innermost Python frame
  // (all of them in a stack without Python frames).
  static size_t native_part(const Profile& p, const std::vector<uint32_t>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      if (p.frames[frames[i]].kind == FrameKind::kPython) return i;
    return frames.size();
  }

 private:
  const Profile& p_;
  std::vector<Module> modules_;
  std::vector<bool> known_;
  Module none_{true, false, false};  // a module index past the strings: no one's code
};

struct Hit {
  int64_t t_ns;
  uint32_t stack;
  uint32_t pos;  // where the function is in that stack
};

}  // namespace

PoolCounts charge_pool_workers(const Profile& p, std::vector<PoolSample>& samples,
                               const UnnamedStart& unnamed_start, const InternMarker& marker,
                               const InternStack& intern) {
  PoolCounts counts;
  Matcher m(p);
  const size_t nstacks = p.stacks.size();
  // Per stack: -2 not looked at, -1 not a worker's, else worker_top.
  std::vector<int> top(nstacks, -2);
  auto worker_top = [&](uint32_t s) {
    if (top[s] == -2) top[s] = m.worker_top(p.stacks[s]);
    return top[s];
  };
  // The pool's threads: those with a stack that starts at a pool's thread routine.
  std::unordered_set<uint32_t> pool_threads;
  for (const PoolSample& smp : samples)
    if (smp.eligible && smp.stack < nstacks && worker_top(smp.stack) >= 0) pool_threads.insert(smp.thread);
  // Where a sample's candidates start: its stack's worker_top or, for a native stack the unwinder
  // cut short on a pool's thread (in an assembly kernel without unwind information, as OpenBLAS's
  // are), its rootmost frame; -1 for a sample that is no worker's.
  auto sample_top = [&](const PoolSample& smp) {
    if (!smp.eligible || smp.stack >= nstacks) return -1;
    if (worker_top(smp.stack) >= 0) return top[smp.stack];
    const profile::Stack& s = p.stacks[smp.stack];
    if (s.truncated && !s.frames.empty() && pool_threads.count(smp.thread) &&
        Matcher::native_part(p, s.frames) == s.frames.size())
      return static_cast<int>(s.frames.size()) - 1;
    return -1;
  };
  // The functions workers could be matched at.
  std::unordered_set<uint64_t> wanted;
  std::vector<bool> scanned(nstacks, false);
  for (const PoolSample& smp : samples) {
    if (smp.stack >= nstacks || scanned[smp.stack]) continue;
    const int hi = sample_top(smp);
    if (hi < 0) continue;
    scanned[smp.stack] = true;
    const auto& frames = p.stacks[smp.stack].frames;
    for (int j = hi; j >= 0 && hi - j < static_cast<int>(kMaxWorkerDepth); --j)
      if (m.matchable(frames[j])) wanted.insert(function_key(p, unnamed_start, frames[j]));
  }
  // The pools' waiting (profile::is_pool_wait_stack).
  std::vector<int8_t> only(nstacks, -1);
  for (const PoolSample& smp : samples) {
    if (!smp.eligible || smp.stack >= nstacks) continue;
    if (only[smp.stack] < 0) only[smp.stack] = profile::is_pool_wait_stack(p, p.stacks[smp.stack]);
    counts.waiting += only[smp.stack];
  }
  if (wanted.empty()) return counts;

  // Where other threads' samples run those functions, in time order: their leafmost position in
  // each stack, below the stack's innermost Python frame. A stack the unwinder did not finish gives
  // callers only through its Python frames (the interpreter's own chain, whole whatever the native
  // unwinder did); without them it has none to give.
  std::unordered_map<uint64_t, std::vector<Hit>> hits;
  std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint32_t>>> launcher_keys;  // per stack
  for (const PoolSample& smp : samples) {
    if (!smp.eligible || smp.stack >= nstacks || pool_threads.count(smp.thread) || worker_top(smp.stack) >= 0) continue;
    const profile::Stack& st = p.stacks[smp.stack];
    if (st.truncated && Matcher::native_part(p, st.frames) == st.frames.size()) continue;
    auto [it, fresh] = launcher_keys.try_emplace(smp.stack);
    if (fresh) {
      const auto& frames = st.frames;
      const size_t n = Matcher::native_part(p, frames);
      std::unordered_set<uint64_t> seen;
      for (size_t i = 0; i < n; ++i) {
        if (!m.matchable(frames[i])) continue;
        const uint64_t k = function_key(p, unnamed_start, frames[i]);
        if (wanted.count(k) && seen.insert(k).second) it->second.push_back({k, static_cast<uint32_t>(i)});
      }
    }
    for (auto [k, pos] : it->second) hits[k].push_back({smp.t_ns, smp.stack, pos});
  }
  for (auto& [k, v] : hits)
    std::stable_sort(v.begin(), v.end(), [](const Hit& a, const Hit& b) { return a.t_ns < b.t_ns; });

  std::map<std::tuple<uint32_t, int, uint32_t, uint32_t>, uint32_t> charged;  // (worker, j, launcher, pos)
  uint32_t marker_frame = profile::kNone;
  for (PoolSample& smp : samples) {
    const int hi = sample_top(smp);
    if (hi < 0) continue;
    // A pool waiting for work is no worker sample; it is never charged either: its frames above the
    // pool's routine are all the pool runtime's or the C runtime's, which never match.
    counts.worker_samples += only[smp.stack] != 1;
    const std::vector<uint32_t> frames = p.stacks[smp.stack].frames;
    for (int j = hi; j >= 0 && hi - j < static_cast<int>(kMaxWorkerDepth); --j) {
      if (!m.matchable(frames[j])) continue;
      auto hit = hits.find(function_key(p, unnamed_start, frames[j]));
      if (hit == hits.end()) continue;
      const auto& v = hit->second;
      auto after = std::lower_bound(v.begin(), v.end(), smp.t_ns, [](const Hit& h, int64_t t) { return h.t_ns < t; });
      const Hit& h = after == v.end() ? v.back()
                     : after == v.begin() || after->t_ns - smp.t_ns <= smp.t_ns - std::prev(after)->t_ns
                         ? *after
                         : *std::prev(after);
      auto key = std::make_tuple(smp.stack, j, h.stack, h.pos);
      auto c = charged.find(key);
      if (c == charged.end()) {
        const profile::Stack& launcher = p.stacks[h.stack];
        std::vector<uint32_t> out(frames.begin(), frames.begin() + j + 1);
        out.push_back(marker_frame == profile::kNone ? marker_frame = marker() : marker_frame);
        out.insert(out.end(), launcher.frames.begin() + h.pos + 1, launcher.frames.end());
        const bool truncated = launcher.truncated;
        c = charged.emplace(key, intern(std::move(out), truncated)).first;
      }
      smp.stack = c->second;
      ++counts.charged;
      break;
    }
  }
  return counts;
}

}  // namespace mlprof::collector
