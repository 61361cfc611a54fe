#include "collector/gpu_tracker.h"

#include <algorithm>

#include "common/wire_format.h"

namespace mlprof::collector {

using K = wire::GpuActivityKind;

void GpuTracker::config(uint8_t clock, int64_t offset_ns, uint32_t cupti_version) {
  active_ = true;
  clock_ = clock;
  offset_ns_ = clock == static_cast<uint8_t>(wire::GpuClock::kOffset) ? offset_ns : 0;
  cupti_version_ = cupti_version;
}

void GpuTracker::launch(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t correlation, uint8_t api, uint32_t) {
  active_ = true;
  ++totals_["launches"];
  if (launches_.size() >= kMaxLaunches) {
    // Forget the older half (correlation ids grow): their activity has long been delivered.
    const uint64_t cut = max_correlation_ > kMaxLaunches / 2 ? max_correlation_ - kMaxLaunches / 2 : 0;
    for (auto it = launches_.begin(); it != launches_.end();)
      it = it->first < cut ? launches_.erase(it) : std::next(it);
  }
  launches_[correlation] = {thread, stack, t_ns, api};
  max_correlation_ = std::max(max_correlation_, correlation);
  auto p = pending_.find(correlation);
  if (p != pending_.end()) {
    std::vector<GpuActivityIn> acts = std::move(p->second);
    pending_.erase(p);
    pending_count_ -= acts.size();
    for (auto& a : acts) apply(a, &launches_[correlation]);
  }
}

void GpuTracker::alias(uint64_t inner, uint64_t outer) {
  active_ = true;
  if (aliases_.size() >= kMaxLaunches) aliases_.clear();
  aliases_[inner] = outer;
  auto p = pending_.find(inner);
  if (p == pending_.end()) return;
  const Launch* l = find_launch(inner);
  if (!l) return;
  std::vector<GpuActivityIn> acts = std::move(p->second);
  pending_.erase(p);
  pending_count_ -= acts.size();
  for (auto& a : acts) apply(a, l);
}

void GpuTracker::name(uint64_t id, std::string n) { names_[id] = std::move(n); }

const std::string& GpuTracker::kernel_name(uint64_t id) const {
  static const std::string unknown = "(unknown kernel)";
  auto it = names_.find(id);
  return it == names_.end() ? unknown : it->second;
}

const GpuTracker::Launch* GpuTracker::find_launch(uint64_t correlation) const {
  auto it = launches_.find(correlation);
  if (it != launches_.end()) return &it->second;
  auto a = aliases_.find(correlation);
  if (a == aliases_.end()) return nullptr;
  it = launches_.find(a->second);
  return it == launches_.end() ? nullptr : &it->second;
}

void GpuTracker::activity(const GpuActivityIn& a) {
  active_ = true;
  ++totals_["activities"];
  if (a.kind == static_cast<uint8_t>(K::kOverhead)) {
    totals_["overhead_ns"] += a.end > a.start ? static_cast<int64_t>(a.end - a.start) : 0;
    return;
  }
  const Launch* l = find_launch(a.correlation);
  if (l) {
    apply(a, l);
    return;
  }
  if (pending_count_ >= kMaxPending) {
    apply(a, nullptr);  // no room to wait for its launch
    return;
  }
  pending_[a.correlation].push_back(a);
  ++pending_count_;
}

void GpuTracker::finish() {
  for (auto& [corr, acts] : pending_)
    for (auto& a : acts) apply(a, find_launch(corr));
  pending_.clear();
  pending_count_ = 0;
  std::stable_sort(ops_.begin(), ops_.end(), [](const GpuOpRec& x, const GpuOpRec& y) { return x.start_ns < y.start_ns; });
  std::stable_sort(mem_events_.begin(), mem_events_.end(),
                   [](const GpuMemEvent& x, const GpuMemEvent& y) { return x.t_ns < y.t_ns; });
}

void GpuTracker::apply(const GpuActivityIn& a, const Launch* l) {
  const int64_t start = to_mono(a.start), end = to_mono(a.end);
  const int64_t dur = end > start ? end - start : 0;
  if (!l) ++totals_["unjoined"];
  if (a.kind == static_cast<uint8_t>(K::kMemAlloc) || a.kind == static_cast<uint8_t>(K::kMemFree)) {
    GpuMemEvent e;
    e.t_ns = start;
    e.device = a.device;
    e.release = a.kind == static_cast<uint8_t>(K::kMemFree);
    e.address = a.address;
    e.bytes = a.bytes;
    if (l) {
      e.thread = l->thread;
      e.stack = l->stack;
    }
    if (mem_events_.size() < kMaxPending) mem_events_.push_back(e);
    return;
  }
  GpuSite* site = nullptr;
  if (l) {
    auto [it, fresh] = site_index_.try_emplace({l->thread, l->stack}, sites_.size());
    if (fresh) sites_.push_back({l->thread, l->stack});
    site = &sites_[it->second];
  }
  auto add = [&](int64_t GpuSite::*field, const char* total) {
    totals_[total] += dur;
    if (site) {
      site->*field += dur;
      site->gpu_ns += dur;
    }
  };
  switch (static_cast<K>(a.kind)) {
    case K::kKernel: {
      add(&GpuSite::kernel_ns, "kernel_ns");
      GpuKernelAgg& k = kernels_[a.name_id];
      ++k.calls;
      k.total_ns += dur;
      if (dur >= k.max_ns) {
        k.max_ns = dur;
        std::copy(a.grid, a.grid + 3, k.grid);
        std::copy(a.block, a.block + 3, k.block);
      }
      if (l)
        k.by_site[{l->thread, l->stack}] += dur;
      else
        k.unjoined_ns += dur;
      if (interval_count_ < kMaxIntervals) {
        intervals_[a.device].emplace_back(start, end);
        ++interval_count_;
      } else {
        intervals_truncated_ = true;
      }
      break;
    }
    case K::kMemcpy: {
      using C = wire::GpuCopyKind;
      const auto c = static_cast<C>(a.copy_kind);
      if (c == C::kHtoD)
        add(&GpuSite::htod_ns, "memcpy_htod_ns");
      else if (c == C::kDtoH)
        add(&GpuSite::dtoh_ns, "memcpy_dtoh_ns");
      else if (c == C::kDtoD)
        add(&GpuSite::dtod_ns, "memcpy_dtod_ns");
      else {
        totals_["memcpy_other_ns"] += dur;
        if (site) site->gpu_ns += dur;
      }
      totals_["copy_bytes"] += static_cast<int64_t>(a.bytes);
      if (site) site->copy_bytes += static_cast<int64_t>(a.bytes);
      break;
    }
    case K::kMemset:
      add(&GpuSite::memset_ns, "memset_ns");
      totals_["memset_bytes"] += static_cast<int64_t>(a.bytes);
      break;
    case K::kSync:
      totals_["sync_ns"] += dur;  // CPU waiting for the GPU: not GPU time
      break;
    default:
      return;
  }
  if (ops_.size() < kMaxOps) {
    GpuOpRec op;
    op.start_ns = start;
    op.end_ns = end;
    op.launch_ns = l ? l->t_ns : 0;
    op.thread = l ? static_cast<int64_t>(l->thread) : -1;
    op.device = a.device;
    op.stream = a.stream;
    op.kind = a.kind;
    op.copy_kind = a.copy_kind;
    op.name_id = a.name_id;
    op.bytes = a.bytes;
    op.correlation = a.correlation;
    ops_.push_back(op);
  } else {
    ops_truncated_ = true;
  }
}

}  // namespace mlprof::collector
