// The recommendation rule (docs/serving.md): what to request from a scheduler for this service,
// from the peaks measured under the replayed load.
//   requestedCpu        = peak cores (1 s windows, during the load) x 1.2, rounded up to 0.1 core,
//                         at least 0.1;
//   requestedMemoryInGB = peak RSS of the process tree over the run x 1.2, rounded up to 0.25 GiB,
//                         at least 0.25 GiB.
// 20% headroom covers traffic a little above the replayed rate and run-to-run noise; the steps
// are what Kubernetes-style schedulers accept (CPU in millicores, memory in Mi/Gi).
#pragma once
#include <cstdint>

namespace mlprof::tools {

inline constexpr int64_t kCpuStepMillicores = 100;
inline constexpr int64_t kMemoryStepBytes = int64_t{256} << 20;

struct Recommendation {
  int64_t millicores = 0;
  int64_t memory_bytes = 0;
};

Recommendation recommend(int64_t peak_millicores, int64_t peak_rss_bytes);

}  // namespace mlprof::tools
