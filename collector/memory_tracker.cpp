#include "collector/memory_tracker.h"

#include <algorithm>

namespace mlprof::collector {

namespace {
// A sampled weight above 1 TiB is a damaged stream; clamping keeps every sum far from overflow.
constexpr uint64_t kMaxWeight = uint64_t{1} << 40;

// A sampled block of `site` freed inside the window: its bytes and one sample fewer retained.
void window_free(MemSite& site, uint64_t weight) {
  site.win_free_bytes += static_cast<int64_t>(weight);
  if (weight > 0) --site.win_net_samples;
}
}  // namespace

// ------------------------------------------------------------------------------------------------
// Live allocation table

MemoryTracker::Live* MemoryTracker::LiveTable::find(uint64_t id) {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(id);; i = (i + 1) & mask) {
    if (slots_[i].id == id) return &slots_[i];
    if (slots_[i].id == 0) return nullptr;
  }
}

MemoryTracker::Live* MemoryTracker::LiveTable::emplace(uint64_t id, bool* fresh) {
  if ((n_ + 1) * 10 > slots_.size() * 7) grow();
  const size_t mask = slots_.size() - 1;
  size_t i = slot_of(id);
  while (slots_[i].id != 0 && slots_[i].id != id) i = (i + 1) & mask;
  *fresh = slots_[i].id == 0;
  if (*fresh) {
    slots_[i] = Live{};
    slots_[i].id = id;
    ++n_;
  }
  return &slots_[i];
}

void MemoryTracker::LiveTable::erase(Live* slot) {
  const size_t mask = slots_.size() - 1;
  size_t i = static_cast<size_t>(slot - slots_.data());
  // Backward shift: move later entries of the probe run into the hole when their home slot does
  // not lie cyclically in (hole, their position].
  for (size_t j = (i + 1) & mask; slots_[j].id != 0; j = (j + 1) & mask) {
    const size_t home = slot_of(slots_[j].id);
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].id = 0;
  --n_;
}

void MemoryTracker::LiveTable::grow() {
  std::vector<Live> old = std::move(slots_);
  const size_t size = std::max<size_t>(1024, old.size() * 2);
  slots_.assign(size, Live{});
  shift_ = 64 - __builtin_ctzll(size);
  n_ = 0;
  bool fresh = false;
  for (const Live& e : old)
    if (e.id != 0) *emplace(e.id, &fresh) = e;
}

// ------------------------------------------------------------------------------------------------

void MemoryTracker::config(uint64_t interval_bytes, uint64_t copy_interval_bytes, uint64_t flags) {
  active_ = configured_ = true;
  interval_ = interval_bytes;
  copy_interval_ = copy_interval_bytes;
  flags_ = flags;
}

int64_t MemoryTracker::track_threshold() const {
  constexpr int64_t kMin = 64 << 10;
  if (interval_ <= 1) return kMin;
  return std::max<int64_t>(kMin, 2 * static_cast<int64_t>(std::min<uint64_t>(interval_, INT64_MAX / 4)));
}

uint32_t MemoryTracker::site_index(uint32_t thread, uint64_t stack) {
  auto [it, fresh] = site_ids_.try_emplace({thread, stack}, static_cast<uint32_t>(sites_.size()));
  if (fresh) {
    auto [sit, sfresh] = stack_ids_.try_emplace(stack, static_cast<uint32_t>(stacks_.size()));
    if (sfresh) {
      MemStack st;
      st.stack = stack;
      stacks_.push_back(std::move(st));
    }
    MemSite s;
    s.thread = thread;
    s.stack = stack;
    s.stack_index = sit->second;
    s.snap_epoch = epoch_;  // it had nothing live at any earlier snapshot
    sites_.push_back(s);
  }
  return it->second;
}

void MemoryTracker::touch(MemSite& s) {
  if (s.snap_epoch == epoch_) return;
  s.snap_bytes = s.live_bytes;
  s.snap_epoch = epoch_;
}

void MemoryTracker::before_decrease() {
  if (heap_ == max_heap_ && heap_ > snap_heap_) {
    ++epoch_;
    snap_heap_ = heap_;
  }
}

int64_t MemoryTracker::peak_bytes(const MemSite& s) const {
  if (heap_ >= max_heap_ && heap_ > snap_heap_) return s.live_bytes;  // the end is the peak
  if (epoch_ == 0) return 0;
  return s.snap_epoch == epoch_ ? s.snap_bytes : s.live_bytes;
}

void MemoryTracker::change_live(MemSite& s, const Live& e, int sign) {
  touch(s);
  const auto w = static_cast<int64_t>(e.weight);
  const double wd = static_cast<double>(e.weight);
  const double count = e.size ? wd / static_cast<double>(e.size) : 1.0;
  const double var = wd * wd - wd * static_cast<double>(e.size);
  s.live_bytes += sign * w;
  MemStack& st = stacks_[s.stack_index];
  st.live_bytes += sign * w;
  if (sign > 0) {
    ++st.live_samples;
    st.live_count += count;
    st.live_var += var;
    if (st.first_tick == kNoTick && !st.queued && st.live_bytes >= track_threshold()) {
      st.queued = true;
      queued_.push_back(s.stack_index);
    }
  } else {
    --st.live_samples;
    st.live_count -= count;
    st.live_var -= var;
    if (st.live_samples == 0) st.live_count = st.live_var = 0;  // no drift from float sums
  }
}

void MemoryTracker::alloc(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t id, uint64_t size,
                          uint64_t weight) {
  active_ = true;
  if (id == 0) return;  // never sent (ids start at 1)
  weight = std::min<uint64_t>(weight, kMaxWeight);
  const uint32_t si = site_index(thread, stack);
  sites_[si].alloc_bytes += static_cast<int64_t>(weight);
  sites_[si].alloc_count += size ? static_cast<double>(weight) / static_cast<double>(size) : 1.0;
  if (window_ && window_->contains(t_ns)) {
    sites_[si].win_alloc_bytes += static_cast<int64_t>(weight);
    sites_[si].win_alloc_count += size ? static_cast<double>(weight) / static_cast<double>(size) : 1.0;
    if (weight > 0) ++sites_[si].win_net_samples;
  }
  if (!pending_.empty()) {  // its FREE came first (another thread's ring)
    if (auto it = pending_.find(id); it != pending_.end()) {
      if (window_ && window_->contains(it->second)) window_free(sites_[si], weight);
      pending_.erase(it);
      return;
    }
  }
  bool fresh = false;
  Live* slot = live_.emplace(id, &fresh);
  if (!fresh) {  // a repeated id: the old allocation is gone
    const Live old = *slot;
    if (old.weight > 0) before_decrease();
    change_live(sites_[old.site], old, -1);
    heap_ -= static_cast<int64_t>(old.weight);
  }
  const Live e{id, size, weight, si};
  *slot = e;
  change_live(sites_[e.site], e, +1);
  heap_ += static_cast<int64_t>(weight);
  if (heap_ > max_heap_) {
    max_heap_ = heap_;
    max_heap_t_ = t_ns;
  }
  if (heap_ > between_heap_) {
    between_heap_ = heap_;
    between_t_ = t_ns;
  }
}

void MemoryTracker::free(uint64_t id, int64_t t_ns) {
  active_ = true;
  Live* slot = live_.find(id);
  if (!slot) {
    if (id != 0) pending_[id] = t_ns;
    return;
  }
  const Live e = *slot;
  if (window_ && window_->contains(t_ns)) window_free(sites_[e.site], e.weight);
  if (e.weight > 0) before_decrease();
  live_.erase(slot);
  change_live(sites_[e.site], e, -1);
  heap_ -= static_cast<int64_t>(e.weight);
}

void MemoryTracker::copy(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t weight) {
  active_ = true;
  MemSite& site = sites_[site_index(thread, stack)];
  const auto w = static_cast<int64_t>(std::min<uint64_t>(weight, kMaxWeight));
  site.copy_bytes += w;
  if (window_ && window_->contains(t_ns)) site.win_copy_bytes += w;
}

void MemoryTracker::usage(int64_t t_ns, int64_t rss_bytes, int64_t hwm_bytes) {
  active_ = true;
  // Peaks between two records (they are 80-100 ms apart): the heap's (exact from the events) and
  // the RSS's (the kernel's high-water mark; when it peaked is not known: halfway, or at the
  // heap's peak, the likelier cause, when the heap peaked in between too).
  const int64_t prev_t = timeline_.empty() ? INT64_MIN : timeline_.back().t_ns;
  const int64_t prev_heap = timeline_.empty() ? 0 : timeline_.back().heap_bytes;
  const bool heap_peak = between_heap_ > std::max(heap_, prev_heap);
  // The high-water mark is the peak RSS whatever the margin; a point of its own only for a peak
  // worth seeing (most processes' first record finds VmHWM a little above the RSS: start-up).
  const int64_t seen = std::max(max_rss_, rss_bytes);
  const bool rss_higher = hwm_bytes > seen;
  const bool rss_peak = rss_higher && hwm_bytes - seen >= std::max<int64_t>(int64_t{1} << 20, seen / 50);
  int64_t t = t_ns;
  if (heap_peak || rss_peak) {
    // An event can arrive after the record that followed it (drained later): kept in between.
    const int64_t lo = prev_t == INT64_MIN ? INT64_MIN : prev_t + 1;
    t = heap_peak ? std::clamp(between_t_, std::min(lo, t_ns - 1), t_ns - 1)
                  : prev_t == INT64_MIN ? t_ns - 1 : prev_t + (t_ns - prev_t) / 2;
    timeline_.push_back({t, rss_peak ? hwm_bytes : -1, heap_peak ? between_heap_ : std::max(heap_, prev_heap)});
  }
  if (rss_higher) {
    max_rss_ = hwm_bytes;
    max_rss_t_ = t;
  }
  between_heap_ = heap_;
  between_t_ = t_ns;
  timeline_.push_back({t_ns, rss_bytes, heap_});
  if (rss_bytes > max_rss_) {
    max_rss_ = rss_bytes;
    max_rss_t_ = t_ns;
  }
  if (timeline_.size() >= kMaxTimeline) {
    // Merge pairs; the higher value of each survives, so peaks stay visible.
    size_t n = timeline_.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      const MemTimelinePoint &a = timeline_[2 * i], &b = timeline_[2 * i + 1];
      timeline_[i] = {a.t_ns, std::max(a.rss_bytes, b.rss_bytes), std::max(a.heap_bytes, b.heap_bytes)};
    }
    if (timeline_.size() % 2) timeline_[n++] = timeline_.back();
    timeline_.resize(n);
  }

  // Per-stack live series: stacks that reached the threshold start at this tick.
  for (uint32_t i : queued_) {
    stacks_[i].queued = false;
    stacks_[i].first_tick = static_cast<uint32_t>(ticks_.size());
    tracked_.push_back(i);
  }
  queued_.clear();
  ticks_.push_back(t_ns);
  for (uint32_t i : tracked_) {
    MemStack& st = stacks_[i];
    st.series.push_back({st.live_bytes, static_cast<float>(st.live_count), static_cast<float>(st.live_var)});
  }
  if (ticks_.size() >= kMaxTicks) halve_ticks();
}

void MemoryTracker::halve_ticks() {
  // Pairs of ticks (2j, 2j+1) become tick j: times and values averaged. A series that starts at
  // an odd tick keeps its first point alone.
  const size_t n = ticks_.size(), half = n / 2;
  for (size_t j = 0; j < half; ++j) ticks_[j] = ticks_[2 * j] + (ticks_[2 * j + 1] - ticks_[2 * j]) / 2;
  if (n % 2) ticks_[half] = ticks_[n - 1];
  ticks_.resize(half + n % 2);
  for (uint32_t i : tracked_) {
    MemStack& st = stacks_[i];
    const size_t f = st.first_tick;
    std::vector<MemSeriesPoint> out;
    out.reserve(ticks_.size() - f / 2);
    for (size_t j = f / 2; j < ticks_.size(); ++j) {
      const size_t a = 2 * j, b = 2 * j + 1;
      if (b >= n) {  // odd tick count: the last tick stays alone
        out.push_back(st.series[a - f]);
      } else if (a < f) {
        out.push_back(st.series[b - f]);
      } else {
        const MemSeriesPoint &x = st.series[a - f], &y = st.series[b - f];
        out.push_back({x.bytes + (y.bytes - x.bytes) / 2, (x.count + y.count) / 2, (x.var + y.var) / 2});
      }
    }
    st.series = std::move(out);
    st.first_tick = static_cast<uint32_t>(f / 2);
  }
}

}  // namespace mlprof::collector
