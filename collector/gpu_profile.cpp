#include "collector/gpu_profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "common/wire_format.h"

namespace mlprof::collector {

std::string demangle_kernel(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (!d || status != 0) {
    free(d);
    return name;
  }
  std::string out(d);
  free(d);
  return out;
}

std::vector<profile::GpuPoint> utilization(std::vector<std::pair<int64_t, int64_t>> iv, int64_t from, int64_t to,
                                           int64_t bucket_ns) {
  std::vector<profile::GpuPoint> out;
  if (bucket_ns <= 0 || to <= from) return out;
  const size_t n = static_cast<size_t>((to - from + bucket_ns - 1) / bucket_ns);
  if (n > 1000000) return out;
  std::vector<int64_t> busy(n, 0);
  std::sort(iv.begin(), iv.end());
  // Merge overlapping intervals (kernels of concurrent streams), then spread each over buckets.
  auto spread = [&](int64_t s, int64_t e) {
    s = std::max(s, from);
    e = std::min(e, to);
    while (s < e) {
      const size_t b = static_cast<size_t>((s - from) / bucket_ns);
      const int64_t bend = from + static_cast<int64_t>(b + 1) * bucket_ns;
      const int64_t piece = std::min(e, bend) - s;
      busy[b] += piece;
      s += piece;
    }
  };
  int64_t cs = 0, ce = 0;
  bool open = false;
  for (auto [s, e] : iv) {
    if (e <= s) continue;
    if (open && s <= ce) {
      ce = std::max(ce, e);
      continue;
    }
    if (open) spread(cs, ce);
    cs = s;
    ce = e;
    open = true;
  }
  if (open) spread(cs, ce);
  for (size_t b = 0; b < n; ++b) {
    const int64_t bs = from + static_cast<int64_t>(b) * bucket_ns;
    const int64_t width = std::min(bucket_ns, to - bs);
    out.push_back({bs, width > 0 ? busy[b] * 1000 / width : 0});
  }
  return out;
}

profile::ProcessGpu build_gpu(const GpuTracker& g, const GpuBuildContext& ctx) {
  profile::ProcessGpu pg;
  pg.process = ctx.process;
  pg.cupti_version = g.cupti_version();
  pg.clock = g.clock() == static_cast<uint8_t>(wire::GpuClock::kOffset) ? "offset" : "monotonic";
  pg.totals = g.totals();
  const auto& tmap = *ctx.thread_map;
  auto thread_of = [&](int64_t t) -> uint32_t {
    return t >= 0 && static_cast<size_t>(t) < tmap.size() ? tmap[static_cast<size_t>(t)] : profile::kNone;
  };

  // Per-stack metrics.
  if (ctx.metrics && ctx.values) {
    for (const GpuSite& s : g.sites()) {
      const uint32_t stack = ctx.stack_of(s.stack), thread = thread_of(s.thread);
      if (stack == profile::kNone || thread == profile::kNone) continue;
      auto& v = (*ctx.values)[{thread, stack}];
      if (v.empty()) v.assign(ctx.metric_count, 0);
      int64_t* m = &v[ctx.first];
      m[kGpu] += s.gpu_ns / 1000;
      m[kGpuKernel] += s.kernel_ns / 1000;
      m[kGpuHtoD] += s.htod_ns / 1000;
      m[kGpuDtoH] += s.dtoh_ns / 1000;
      m[kGpuDtoD] += s.dtod_ns / 1000;
      m[kGpuMemset] += s.memset_ns / 1000;
      m[kGpuCopyBytes] += s.copy_bytes;
    }
  }

  // Kernel table.
  for (const auto& [id, k] : g.kernels()) {
    profile::GpuKernel pk;
    const std::string& raw = g.kernel_name(id);
    pk.name = ctx.intern(raw);
    pk.demangled = ctx.intern(demangle_kernel(raw));
    pk.calls = k.calls;
    pk.total_ns = k.total_ns;
    pk.max_ns = k.max_ns;
    std::copy(k.grid, k.grid + 3, pk.grid);
    std::copy(k.block, k.block + 3, pk.block);
    // The launching stack with the most time (stream stacks that symbolize alike add up).
    std::map<uint32_t, int64_t> by_stack;
    for (const auto& [site, ns] : k.by_site) {
      const uint32_t st = ctx.stack_of(site.second);
      if (st != profile::kNone) by_stack[st] += ns;
    }
    int64_t best = -1;
    for (auto [st, ns] : by_stack)
      if (ns > best) best = ns, pk.stack = st;
    pg.kernels.push_back(pk);
  }
  std::stable_sort(pg.kernels.begin(), pg.kernels.end(),
                   [](const profile::GpuKernel& a, const profile::GpuKernel& b) { return a.total_ns > b.total_ns; });

  // Devices: utilization from kernel intervals, device memory from MEMORY2 records.
  std::map<uint32_t, profile::GpuDevice> devices;
  int64_t last = ctx.end_ns;
  for (const auto& [dev, iv] : g.kernel_intervals())
    for (auto [s, e] : iv) last = std::max(last, e);
  for (const auto& [dev, iv] : g.kernel_intervals()) {
    profile::GpuDevice& d = devices[dev];
    d.device = dev;
    d.bucket_ns = kGpuBucketNs;
    d.utilization = utilization(iv, ctx.start_ns, last, kGpuBucketNs);
  }
  struct Live {
    uint64_t bytes;
    uint32_t stack;
  };
  std::map<uint32_t, std::unordered_map<uint64_t, Live>> live;
  std::map<uint32_t, int64_t> current;
  for (const GpuMemEvent& e : g.memory_events()) {
    profile::GpuDevice& d = devices[e.device];
    d.device = e.device;
    if (!d.bucket_ns) d.bucket_ns = kGpuBucketNs;
    auto& lv = live[e.device];
    int64_t& cur = current[e.device];
    if (e.release) {
      auto it = lv.find(e.address);
      const uint64_t bytes = it != lv.end() ? it->second.bytes : e.bytes;
      if (it != lv.end()) lv.erase(it);
      cur -= static_cast<int64_t>(bytes);
      if (cur < 0) cur = 0;  // freed memory allocated before CUPTI attached
    } else {
      const uint32_t st = e.thread >= 0 ? ctx.stack_of(e.stack) : profile::kNone;
      lv[e.address] = {e.bytes, st};
      cur += static_cast<int64_t>(e.bytes);
    }
    if (d.memory.size() < 100000) d.memory.push_back({e.t_ns, cur});
    if (cur > d.peak_bytes) {
      d.peak_bytes = cur;
      d.peak_t_ns = e.t_ns;
      std::map<uint32_t, int64_t> holders;
      for (auto& [addr, l] : lv) holders[l.stack] += static_cast<int64_t>(l.bytes);
      d.peak_holders.clear();
      for (auto [st, b] : holders) d.peak_holders.push_back({st, b});
      std::stable_sort(d.peak_holders.begin(), d.peak_holders.end(),
                       [](const profile::GpuHolder& a, const profile::GpuHolder& b) { return a.bytes > b.bytes; });
    }
  }
  for (auto& [dev, d] : devices) pg.devices.push_back(std::move(d));

  // Operations, for traces.
  std::unordered_map<uint64_t, uint32_t> demangled;
  for (const GpuOpRec& o : g.ops()) {
    profile::GpuOp op;
    op.start_ns = o.start_ns;
    op.end_ns = o.end_ns;
    op.launch_ns = o.launch_ns;
    op.thread = thread_of(o.thread);
    op.device = o.device;
    op.stream = o.stream;
    op.kind = static_cast<profile::GpuOpKind>(o.kind);
    op.copy_kind = o.copy_kind;
    if (o.name_id) {
      auto [it, fresh] = demangled.try_emplace(o.name_id, 0);
      if (fresh) it->second = ctx.intern(demangle_kernel(g.kernel_name(o.name_id)));
      op.name = it->second;
    }
    op.bytes = o.bytes;
    op.correlation = o.correlation;
    pg.ops.push_back(op);
  }
  pg.ops_truncated = g.ops_truncated();
  return pg;
}

}  // namespace mlprof::collector
