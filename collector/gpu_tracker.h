// GPU records of one process stream (wire 1.3, records 20-24; docs/gpu.md): joins activity
// records to the launching API call's stack by correlation id, converts CUPTI timestamps to
// CLOCK_MONOTONIC, and aggregates per (thread, stream-local stack) as records arrive.
//
// Join: a launch (GPU_LAUNCH) and its activity (GPU_ACTIVITY) may arrive in either order; an
// activity carrying a nested driver call's id follows GPU_CORRELATION to the outer call. Activity
// whose launch is not known yet waits in a bounded pending table and is joined when the launch
// comes, or counted as unjoined at finish(). Launches are kept (one launch may produce many
// activities: graph launches) up to kMaxLaunches, oldest correlation ids forgotten first.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace mlprof::collector {

// Per (thread, stack) sums; times in ns.
struct GpuSite {
  uint32_t thread = 0;  // index into ProcessStream::threads
  uint64_t stack = 0;   // stream-local stack id
  int64_t gpu_ns = 0, kernel_ns = 0, htod_ns = 0, dtoh_ns = 0, dtod_ns = 0, memset_ns = 0;
  int64_t copy_bytes = 0;
};

struct GpuActivityIn {  // one GPU_ACTIVITY as decoded
  uint8_t kind = 0;     // wire::GpuActivityKind
  uint64_t correlation = 0;
  uint64_t start = 0, end = 0;  // CUPTI timestamps
  uint32_t device = 0, stream = 0;
  uint64_t bytes = 0;
  uint8_t copy_kind = 0;
  uint64_t name_id = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t address = 0;
};

struct GpuKernelAgg {
  uint64_t calls = 0;
  int64_t total_ns = 0, max_ns = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  std::map<std::pair<uint32_t, uint64_t>, int64_t> by_site;  // (thread, stack) -> ns
  int64_t unjoined_ns = 0;
};

struct GpuOpRec {  // for traces
  int64_t start_ns = 0, end_ns = 0, launch_ns = 0;
  int64_t thread = -1;  // stream thread index, -1 when not joined
  uint32_t device = 0, stream = 0;
  uint8_t kind = 0, copy_kind = 0;
  uint64_t name_id = 0, bytes = 0, correlation = 0;
};

struct GpuMemEvent {
  int64_t t_ns = 0;
  uint32_t device = 0;
  bool release = false;
  uint64_t address = 0, bytes = 0;
  int64_t thread = -1;
  uint64_t stack = 0;   // valid when thread >= 0
};

class GpuTracker {
 public:
  static constexpr size_t kMaxLaunches = 1u << 21;
  static constexpr size_t kMaxPending = 1u << 20;
  static constexpr size_t kMaxOps = 200000;
  static constexpr size_t kMaxIntervals = 4u << 20;

  void config(uint8_t clock, int64_t offset_ns, uint32_t cupti_version);
  void launch(uint32_t thread, uint64_t stack, int64_t t_ns, uint64_t correlation, uint8_t api, uint32_t cbid);
  void alias(uint64_t inner, uint64_t outer);
  void name(uint64_t id, std::string name);
  void activity(const GpuActivityIn& a);
  // End of the stream: pending activity is joined if it can be, else counted as unjoined.
  void finish();

  bool active() const { return active_; }
  uint8_t clock() const { return clock_; }
  uint32_t cupti_version() const { return cupti_version_; }
  int64_t to_mono(uint64_t cupti_ts) const { return static_cast<int64_t>(cupti_ts) + offset_ns_; }

  const std::vector<GpuSite>& sites() const { return sites_; }
  const std::map<uint64_t, GpuKernelAgg>& kernels() const { return kernels_; }  // by name id
  const std::string& kernel_name(uint64_t id) const;
  const std::vector<GpuOpRec>& ops() const { return ops_; }
  bool ops_truncated() const { return ops_truncated_; }
  // Kernel intervals per device (mono ns), for the utilization timeline.
  const std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>>& kernel_intervals() const { return intervals_; }
  bool intervals_truncated() const { return intervals_truncated_; }
  const std::vector<GpuMemEvent>& memory_events() const { return mem_events_; }
  const std::map<std::string, int64_t>& totals() const { return totals_; }

 private:
  struct Launch {
    uint32_t thread;
    uint64_t stack;
    int64_t t_ns;
    uint8_t api;
  };
  const Launch* find_launch(uint64_t correlation) const;
  void apply(const GpuActivityIn& a, const Launch* l);

  bool active_ = false;
  uint8_t clock_ = 0;
  int64_t offset_ns_ = 0;
  uint32_t cupti_version_ = 0;
  std::unordered_map<uint64_t, Launch> launches_;
  uint64_t max_correlation_ = 0;
  std::unordered_map<uint64_t, uint64_t> aliases_;  // inner -> outer
  std::unordered_map<uint64_t, std::vector<GpuActivityIn>> pending_;  // by correlation id
  size_t pending_count_ = 0;
  std::unordered_map<uint64_t, std::string> names_;
  std::map<std::pair<uint32_t, uint64_t>, size_t> site_index_;
  std::vector<GpuSite> sites_;
  std::map<uint64_t, GpuKernelAgg> kernels_;
  std::vector<GpuOpRec> ops_;
  bool ops_truncated_ = false;
  std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> intervals_;
  size_t interval_count_ = 0;
  bool intervals_truncated_ = false;
  std::vector<GpuMemEvent> mem_events_;
  std::map<std::string, int64_t> totals_;
};

}  // namespace mlprof::collector
