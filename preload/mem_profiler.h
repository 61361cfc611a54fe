// Memory profiling in the preload: what the allocation hooks (memory_hooks.cpp, mem_python.cpp)
// call, and the switches the rest of the preload turns.
//
// The hooks' fast paths are the inline functions below: one thread-local countdown per
// allocation, one filter load per free. Everything else (the Poisson decision, the stack, the
// live-pointer table, the event ring) is in the out-of-line slow paths, which take the guard
// (mem_thread.h) and preserve errno.
//
// Lifecycle: before the constructor has decided, and after the stream ended (exit, exec,
// detach), the hooks only forward: `recording` is false. When the constructor turns memory
// profiling off for good (MLPROF_MEMORY=0, or no profiling at all), the countdowns are parked so
// the fast path never again calls out; after the stream ended they call out once per 64 MiB.
// Not signal context, except the copy entries' path to skip_due under the guard (the sampling
// handler's own copies), which is signal-safe.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/wire_format.h"
#include "preload/mem_poisson.h"
#include "preload/mem_table.h"
#include "preload/mem_thread.h"

namespace mlprof::preload::mem {

enum class Mode : uint8_t { kUndecided = 0, kOn = 1, kOff = 2 };

struct State {
  std::atomic<bool> recording{false};  // hooks record events (the writer's stream is open)
  std::atomic<Mode> mode{Mode::kUndecided};
  uint64_t interval = 0;        // MLPROF_MEM_INTERVAL (1 = exact mode)
  uint64_t copy_interval = 0;   // MLPROF_COPY_INTERVAL (0 = copies not sampled)
  std::atomic<uint64_t> dropped{0};     // wire::Counter::kMemDropped
  std::atomic<uint64_t> table_full{0};  // wire::Counter::kMemTableFull
  std::atomic<uint64_t> next_id_block{1};
  std::atomic<bool> python_hooked{false};  // CPython's MEM and OBJ domains are wrapped
  LiveTable table;
};
extern State g_mem;

// How long a producer waits for ring space: exact mode for every event (up to the transport's own
// 2 s give-up), sampled mode for FREE records only, briefly (a lost free would become a false
// leak; 50 writer cycles is ample unless the writer is stuck).
inline constexpr int64_t kRingWaitNs = 2'000'000'000;
inline constexpr int64_t kFreeWaitSampledNs = 500'000'000;
// Sampled mode, ALLOC and COPY: a short wait, so that a writer delayed by a busy machine does not
// bias the estimates (every lost sample is lost weight); past it the sample is dropped and counted.
inline constexpr int64_t kSampleWaitSampledNs = 20'000'000;
// A parked countdown: 2^62 bytes before the next slow path (memory profiling off for good).
inline constexpr int64_t kParked = int64_t{1} << 62;
// An idle one (the stream ended, it may restart): one slow path per 64 MiB allocated.
inline constexpr int64_t kIdleBytes = int64_t{64} << 20;

// Constructor: sets up the table and the fallback ring for these intervals. false when memory
// cannot be mapped (memory profiling then stays off).
bool init(uint64_t interval, uint64_t copy_interval);
// Constructor, first thing, whatever is profiled (defined by memory_hooks.cpp, in the preload
// module only): notes what the interposed functions need to know about the real allocator: glibc's
// (the fast entries may forward directly, memory_hooks.h), or a malloc replacement's code range.
void hooks_init();
// Whether this preload interposes the allocation functions (false in libmlprof_preload_cpu.so,
// preload/no_alloc_hooks.cpp: memory profiling cannot be turned on there).
bool alloc_hooks_present();
// Constructor, when memory profiling is on: allocations made by the preload's own code (its static
// libstdc++'s exception pool) are not recorded. Not called by tests linking the core directly.
void exclude_own_allocations();
// Constructor, at its end: unless recording was turned on, memory profiling is off for good in
// this process image (the hooks' countdowns get parked).
void settle_off();
inline bool exact() { return g_mem.interval == 1; }
inline bool enabled() { return g_mem.mode.load(std::memory_order_relaxed) == Mode::kOn; }
// Hooks record from now on / only forward from now on (stream open / ended).
void set_recording(bool on);
uint64_t wire_flags();  // wire::MemFlags for MEM_CONFIG

// fork: called by entry.cpp's atfork handlers, which hold the guard from prepare to parent/child.
// prepare takes the fallback lock and every table stripe; the child starts with an empty table.
void fork_prepare();
void fork_parent();
void fork_child();

// Slow paths (out of line; guard taken, errno preserved). `caller` is the hook's return
// address: the leaf of the recorded stack.
void sampled_alloc(void* p, uint64_t size, wire::AllocKind kind, uint64_t caller);
void tracked_free(void* p);
uint64_t tracked_take(void* p);
void tracked_settle(void* p, uint64_t id, bool released);
void sampled_copy(uint64_t size, uint64_t caller);

// ---- the hooks' fast paths --------------------------------------------------------------------

// After a successful allocation of `size` bytes at p.
inline void after_alloc(void* p, uint64_t size, wire::AllocKind kind, uint64_t caller) {
  ThreadState& t = t_mem;
  if (p && t.guard == 0 && (t.countdown -= counted(size)) <= 0) sampled_alloc(p, size, kind, caller);
}
// The allocation entries' test (memory_entry.cpp) and the slow paths': true when an allocation of
// `bytes` may be forwarded without recording: the thread is inside the profiler (guard) or its
// countdown is not due yet. Otherwise the countdown has been charged: the slow path is then
// called with counted = true. The guard is tested first: inside the profiler (a Python wrapper's
// guarded call into pymalloc, which mallocs every block past 512 bytes) a charge would cost more
// than the test saves elsewhere.
inline bool not_due(int64_t* countdown, uint64_t bytes) {
  return t_mem.guard != 0 || (*countdown -= counted(bytes)) > 0;
}
// The CPython wrappers' fast paths (never called under the guard: mem_python.cpp) charge without
// the test. Should one come due under the guard all the same, sampled_alloc finds the guard and
// draws a new countdown without a sample (skip_due).
inline bool charge_not_due(int64_t* countdown, uint64_t bytes) { return (*countdown -= counted(bytes)) > 0; }
// A copy of n bytes (memcpy, memmove): n is the size of memory that exists, far below 2^62, so it
// needs no clamp, and there is no guard test: copies inside the profiler are rare (the writer
// thread's; allocators copy with their own code), so they charge the countdown too, and when one
// of them makes it due, sampled_copy finds the guard and draws a new countdown without a sample
// (skip_due). The countdown is memoryless (exponential): sample points that fall on the
// profiler's own bytes, dropped, leave every program byte's chance of being sampled as it was.
// 7 instructions fewer than with the clamp and the test, on the most frequent hooked call.
inline bool copy_not_due(uint64_t n) { return (t_mem.copy_countdown -= static_cast<int64_t>(n)) > 0; }
// A slow path after its real allocation: `counted` (the entry already charged the countdown and
// found it due) samples p when the allocation succeeded; otherwise the whole after_alloc.
inline void after_alloc_counted(void* p, uint64_t size, wire::AllocKind kind, uint64_t caller, bool counted) {
  if (counted) {
    if (p) sampled_alloc(p, size, kind, caller);
  } else {
    after_alloc(p, size, kind, caller);
  }
}
// Before p is released (free, realloc, munmap, mremap, Python free).
inline void before_free(void* p) {
  if (g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(p)) && t_mem.guard == 0) tracked_free(p);
}
// Releases that can fail (realloc, munmap, mremap): the sampled block (if p is one) leaves the
// table before the real call, as for free, but its FREE is sent only once the call succeeded;
// when it failed the block is still the program's and goes back into the table.
//   uint64_t id = take_before_release(p);  ...real call...  settle_release(p, id, ok);
inline uint64_t take_before_release(void* p) {
  if (g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(p)) && t_mem.guard == 0) return tracked_take(p);
  return 0;
}
inline void settle_release(void* p, uint64_t id, bool released) {
  if (id) tracked_settle(p, id, released);
}
// Before a memcpy/memmove of n bytes.
inline void before_copy(uint64_t n, uint64_t caller) {
  ThreadState& t = t_mem;
  if (t.guard == 0 && (t.copy_countdown -= counted(n)) <= 0) sampled_copy(n, caller);
}

}  // namespace mlprof::preload::mem
