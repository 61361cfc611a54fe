// Incremental memory accounting of one event stream (wire records MEM_CONFIG, ALLOC, FREE, COPY,
// MEM_USAGE; docs/wire-format.md). The decoder feeds every memory record here as it arrives and
// nothing is stored per event: the tracker keeps the sampled allocations still live, sums per
// (thread, stack) and per stack, the running heap estimate, a bounded timeline and bounded
// per-stack live series for leak detection. Its memory is bounded by live allocations + distinct
// stacks, not by run length.
//
// Heap estimate H: the weights (estimated bytes) of the sampled allocations still live, updated
// after every record, in record order.
//
// Live bytes at the peak: a copy-on-write snapshot. When a record is about to lower H while H is
// the highest so far (and higher than at the last snapshot), the snapshot epoch is bumped (O(1));
// the first change to a site after that records the site's value at the snapshot. At the end, a
// site's value at the last snapshot is that record, or its current value when it did not change
// since. When the final H is the maximum, the end is the peak.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mlprof::collector {

// Allocation/copy accounting of one (thread, stream-local stack id) pair.
struct MemSite {
  uint32_t thread = 0;       // index into ProcessStream::threads
  uint64_t stack = 0;        // stream-local stack id
  uint32_t stack_index = 0;  // index into MemoryTracker::stacks()
  int64_t alloc_bytes = 0;   // sum of sampled weights
  double alloc_count = 0;    // sum of weight / size (1 / P(sampled))
  int64_t copy_bytes = 0;    // sum of sampled copy weights
  int64_t live_bytes = 0;    // weights of sampled allocations still live
  // Copy-on-write peak snapshot (see the file comment).
  int64_t snap_bytes = 0;
  uint32_t snap_epoch = 0;
  // Inside the MemWindow (when one is set): sampled weights allocated, their estimated count, and
  // the weights of this site's allocations freed (allocated before or inside the window).
  int64_t win_alloc_bytes = 0;
  double win_alloc_count = 0;
  int64_t win_free_bytes = 0;
  int64_t win_copy_bytes = 0;  // sampled copy weights inside the window
  // Sampled blocks allocated inside the window minus sampled blocks freed inside it: how many
  // samples the retained estimate (win_alloc_bytes - win_free_bytes) rests on.
  int64_t win_net_samples = 0;
};

// A time window [start_ns, end_ns) over which allocations and frees are also summed per site
// (mlprof-run --requests: the steady state). Another thread may set the bounds while events flow:
// an event counts by the time it happened (its own timestamp), not by when it arrived, so the
// ~100 ms delivery delay does not matter; the start must only be set before events of the window
// are decoded (the preload's batching gives milliseconds). Unset bounds are INT64_MAX.
struct MemWindow {
  std::atomic<int64_t> start_ns{INT64_MAX};
  std::atomic<int64_t> end_ns{INT64_MAX};
  bool contains(int64_t t) const {
    return t >= start_ns.load(std::memory_order_acquire) && t < end_ns.load(std::memory_order_acquire);
  }
};

// One point of a stack's live series, taken at a MEM_USAGE tick.
struct MemSeriesPoint {
  int64_t bytes = 0;  // estimated live bytes
  float count = 0;    // estimated live blocks
  float var = 0;      // variance of the estimate (sampling noise; 0 in exact mode)
};

// The live state of one stream-local stack over all threads (what leak detection looks at).
struct MemStack {
  uint64_t stack = 0;         // stream-local stack id
  int64_t live_bytes = 0;
  double live_count = 0;
  double live_var = 0;        // sum over live samples of w^2 - w*size
  uint64_t live_samples = 0;  // sampled allocations still live
  // Live series, aligned with MemoryTracker::ticks() from index first_tick (kNoTick: not tracked).
  // A stack is tracked from the first tick at which its live bytes reach track_threshold().
  uint32_t first_tick = UINT32_MAX;
  bool queued = false;  // waiting to be tracked at the next tick
  std::vector<MemSeriesPoint> series;
};

struct MemTimelinePoint {
  int64_t t_ns = 0;
  int64_t rss_bytes = -1;
  int64_t heap_bytes = 0;
};

class MemoryTracker {
 public:
  static constexpr uint32_t kNoTick = UINT32_MAX;
  // Bounds: the timeline and the tick series are halved (pairs merged) when they reach these.
  static constexpr size_t kMaxTimeline = 4096;
  static constexpr size_t kMaxTicks = 256;

  void config(uint64_t interval_bytes, uint64_t copy_interval_bytes, uint64_t flags);
  void alloc(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t id, uint64_t size, uint64_t weight);
  void free(uint64_t id, int64_t t_ns);
  void copy(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t weight);
  // A MEM_USAGE record: the RSS now, and the kernel's high-water mark (0: unknown). The timeline
  // gets a point for it, preceded by one for a peak between this record and the previous one (of
  // the heap: its highest value since; of the RSS: a high-water mark above every RSS seen).
  void usage(int64_t t_ns, int64_t rss_bytes, int64_t hwm_bytes = 0);
  // Also sum allocations and frees inside `w` per site (MemSite::win_*); w outlives the tracker.
  void set_window(const MemWindow* w) { window_ = w; }

  bool active() const { return active_; }  // any memory record seen
  bool configured() const { return configured_; }
  uint64_t interval_bytes() const { return interval_; }
  uint64_t copy_interval_bytes() const { return copy_interval_; }
  uint64_t flags() const { return flags_; }
  bool exact() const { return interval_ == 1; }

  const std::vector<MemSite>& sites() const { return sites_; }
  const std::vector<MemStack>& stacks() const { return stacks_; }
  const std::vector<int64_t>& ticks() const { return ticks_; }
  const std::vector<MemTimelinePoint>& timeline() const { return timeline_; }
  // Live bytes of a site at the heap's peak.
  int64_t peak_bytes(const MemSite& s) const;

  int64_t heap_bytes() const { return heap_; }
  int64_t peak_heap_bytes() const { return max_heap_; }
  int64_t peak_heap_t_ns() const { return max_heap_t_; }
  int64_t peak_rss_bytes() const { return max_rss_; }
  int64_t peak_rss_t_ns() const { return max_rss_t_; }
  size_t live_allocations() const { return live_.size(); }
  size_t pending_frees() const { return pending_.size(); }
  // Live bytes from which a stack's series is recorded.
  int64_t track_threshold() const;

 private:
  struct Live {
    uint64_t id = 0;  // 0: empty slot
    uint64_t size = 0;
    uint64_t weight = 0;
    uint32_t site = 0;
  };
  // Open addressing (linear probing, backward-shift deletion) keyed by alloc id: 32 bytes per
  // live allocation at <= 70% load (exact mode can hold millions).
  class LiveTable {
   public:
    Live* find(uint64_t id);
    // The slot of `id`: its entry when present (*fresh = false), else a new entry holding only the
    // id (*fresh = true). One probe sequence either way.
    Live* emplace(uint64_t id, bool* fresh);
    void erase(Live* slot);
    size_t size() const { return n_; }

   private:
    size_t slot_of(uint64_t id) const { return (id * 0x9e3779b97f4a7c15ull) >> shift_; }
    void grow();
    std::vector<Live> slots_;
    size_t n_ = 0;
    int shift_ = 64;
  };

  uint32_t site_index(uint32_t thread, uint64_t stack);
  void touch(MemSite& s);               // before a site's live bytes change
  void before_decrease();               // before H goes down: maybe take the peak snapshot
  void change_live(MemSite& s, const Live& e, int sign);
  void halve_ticks();

  bool active_ = false, configured_ = false;
  uint64_t interval_ = 0, copy_interval_ = 0, flags_ = 0;
  LiveTable live_;
  std::unordered_map<uint64_t, int64_t> pending_;  // FREE seen before its ALLOC: id -> time of the free
  const MemWindow* window_ = nullptr;
  struct SiteKeyHash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& k) const {
      return (k.second * 0x9e3779b97f4a7c15ull) ^ (uint64_t{k.first} * 0xc2b2ae3d27d4eb4full);
    }
  };
  std::vector<MemSite> sites_;
  std::unordered_map<std::pair<uint32_t, uint64_t>, uint32_t, SiteKeyHash> site_ids_;
  std::vector<MemStack> stacks_;
  std::unordered_map<uint64_t, uint32_t> stack_ids_;
  std::vector<uint32_t> tracked_, queued_;
  std::vector<int64_t> ticks_;
  std::vector<MemTimelinePoint> timeline_;
  int64_t heap_ = 0, max_heap_ = 0, max_heap_t_ = 0, snap_heap_ = 0;
  int64_t max_rss_ = 0, max_rss_t_ = 0;
  int64_t between_heap_ = 0, between_t_ = 0;  // the heap's highest since the last usage record
  uint32_t epoch_ = 0;
};

}  // namespace mlprof::collector
