// Turns one stream's GpuTracker into the profile: per-stack GPU metrics and the process's
// ProcessGpu (kernel table, per-device utilization and device-memory timelines, peak holders,
// operations for traces). docs/gpu.md, docs/profile-format.md (metrics, section 16).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "collector/gpu_tracker.h"
#include "profile/model.h"

namespace mlprof::collector {

// The GPU metric columns, appended after the memory ones when any process had GPU activity.
enum GpuMetric : uint32_t {
  kGpu = 0, kGpuKernel = 1, kGpuHtoD = 2, kGpuDtoH = 3, kGpuDtoD = 4, kGpuMemset = 5, kGpuCopyBytes = 6,
  kGpuMetricCount = 7
};
inline constexpr const char* kGpuMetricNames[kGpuMetricCount][2] = {
    {"gpu", "us"},         {"gpu-kernel", "us"}, {"gpu-memcpy-htod", "us"}, {"gpu-memcpy-dtoh", "us"},
    {"gpu-memcpy-dtod", "us"}, {"gpu-memset", "us"}, {"gpu-copy-bytes", "bytes"}};

// Utilization bucket width.
inline constexpr int64_t kGpuBucketNs = 100'000'000;

// Demangles a C++ (Itanium) kernel name; returns it unchanged when it is not mangled.
std::string demangle_kernel(const std::string& name);

struct GpuBuildContext {
  uint32_t process = 0;
  int64_t start_ns = 0, end_ns = 0;             // the process's span (utilization buckets)
  const std::vector<uint32_t>* thread_map = nullptr;  // stream thread index -> profile thread index
  std::function<uint32_t(uint64_t)> stack_of;   // stream stack id -> profile stack index (kNone: lost)
  std::function<uint32_t(const std::string&)> intern;
  // (profile thread, profile stack) -> metric values; GPU columns start at `first`.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>>* values = nullptr;
  uint32_t first = 0, metric_count = 0;
  bool metrics = false;                          // the profile has the GPU columns
};

// Busy union of [start, end) intervals in buckets of width bucket_ns from `from`: permille busy.
std::vector<profile::GpuPoint> utilization(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t from,
                                           int64_t to, int64_t bucket_ns);

profile::ProcessGpu build_gpu(const GpuTracker& g, const GpuBuildContext& ctx);

}  // namespace mlprof::collector
