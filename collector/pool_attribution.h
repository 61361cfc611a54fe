// Thread-pool workers' CPU charged to the stack that started their work.
//
// The workers of OpenMP, OpenBLAS, PyTorch's intra-op pool, TBB and MKL (profile::
// is_thread_pool_module) run functions that another thread handed them, on stacks that start at the
// pool's own thread routine: no Python frame, no caller's line. The thread that started the work runs
// its share of the same function under the call that started it (GOMP_parallel under a ctypes call
// under a Python line). So a worker's sample is matched to that thread's stacks by the first of its
// functions, above the pool's frames, that the other thread's samples also run, and takes the other
// thread's callers of that function, nearest in time, below a marker frame
// (profile::kPoolWorkersFrameName):
//
//   worker:    burn <- omp_fn.0 <- [libgomp] <- start_thread
//   launcher:  burn <- omp_fn.0 <- GOMP_parallel <- omp_burn <- ffi_call <- ... <- line 12 <- <module>
//   charged:   burn <- omp_fn.0 <- [thread-pool workers] <- GOMP_parallel <- omp_burn <- ... <- line 12
//
// A pool thread's samples whose native stack the unwinder cut short (an assembly kernel without
// unwind information, as OpenBLAS's are) are matched the same way from the frames they have, to
// launchers whose stacks have Python frames (cut short too, their Python frames still give the
// callers). A pool thread's samples are never launchers.
//
// The sample stays on its own thread (the Threads table, the timeline); its CPU class (native,
// system) is its own. Workers whose functions no other thread runs, threads that are not a pool's,
// wait samples (wall mode) and memory samples keep their own stacks.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "profile/model.h"

namespace mlprof::collector {

// One CPU sample of one process, by profile stack. `stack` is replaced by the charged stack.
struct PoolSample {
  uint32_t stack = 0;
  int64_t t_ns = 0;
  bool eligible = true;  // false: never matched nor used as a launcher (an off-CPU wait sample)
  uint32_t thread = 0;   // the thread it was taken on (any numbering, one per thread)
};

struct PoolCounts {
  uint64_t worker_samples = 0;  // samples on a pool worker's stack, but for its waiting (below)
  uint64_t charged = 0;         // of those, charged to a launcher's stack
  // Samples of a pool's thread in nothing but the pool runtime's own code (and the C runtime's)
  // that no launcher ran: the pool waiting for work, spinning (libgomp's GOMP_SPINCOUNT spin,
  // pthreadpool's, OpenBLAS's sched_yield loop). Not charged to any line.
  uint64_t waiting = 0;
};

// Interns a stack (frames leaf first) in the profile being built and returns its index.
using InternStack = std::function<uint32_t(std::vector<uint32_t> frames, bool truncated)>;

// The module-relative start of an unnamed frame's function (a stripped library's static function,
// found in its unwind table), or kNoFunctionStart.
inline constexpr uint64_t kNoFunctionStart = UINT64_MAX;
using UnnamedStart = std::function<uint64_t(uint32_t frame)>;

// Interns the marker frame (profile::kPoolWorkersFrameName) and returns its index; called only when
// a sample is charged.
using InternMarker = std::function<uint32_t()>;

// `p` holds the frames, stacks and strings the samples refer to. Samples of one process only (a
// pool never runs another process's work).
PoolCounts charge_pool_workers(const profile::Profile& p, std::vector<PoolSample>& samples,
                               const UnnamedStart& unnamed_start, const InternMarker& marker,
                               const InternStack& intern);

}  // namespace mlprof::collector
