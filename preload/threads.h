// Per-thread sampling state: one slot per live thread, each with its own sample ring and CPU-time
// timer. Slots live in one mmap'd array so the signal handler reaches its slot through a single
// initial-exec thread-local pointer without allocating.
#pragma once
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "preload/owned_fd.h"
#include "preload/ring.h"
#include "preload/thread_timer.h"
#include "preload/unwinder.h"

namespace mlprof::preload {

enum SlotState : uint32_t { kSlotFree = 0, kSlotClaimed = 1, kSlotActive = 2, kSlotRetired = 3 };

// Wall mode, per thread, writer side only (preload/wall_sampler.cpp).
struct WallThreadState {
  int fd = -1;               // /proc/self/task/TID/syscall, kept open (closed by release())
  int sched_fd = -1;         // /proc/self/task/TID/schedstat, likewise
  FdId fd_id, sched_id;      // what they name (preload/owned_fd.h): closed only while they still do
  int64_t accounted_ns = 0;  // wall time up to which this thread's ticks are accounted
  uint64_t pc = 0, sp = 0;   // where it was blocked at its previous tick (0: not blocked)
  int64_t cpu_ns = -1;       // its CPU time at counters_ns
  int64_t delay_ns = -1;     // its run-queue delay then (schedstat; -1: unknown)
  int64_t counters_ns = 0;   // the tick that read cpu_ns and delay_ns (its previous tick that read
                             // /proc, or the start of the wait it was last seen in)
  int64_t block_start_ns = 0;   // the tick that read that blocked stack
  uint64_t emitted = 0;         // periods sent for that wait by the ticks after block_start_ns
  uint32_t pending = 0;         // periods of reused ticks held back, not yet sent (WallSampler::hold)
  uint64_t stack_id = 0;     // the stack sent for it then
  uint64_t stack_gen = 0;    // the writer's stack-id generation that id belongs to
  int64_t carry_ns = 0;      // off-CPU time not yet counted (WallSampler::tick): waits that ended
                             // between ticks, and what was left of a period; at most
                             // WallSampler's hold (100 ms' worth of periods, at least two)
};

struct ThreadSlot {
  std::atomic<uint32_t> state{kSlotFree};
  uint32_t tid = 0;
  pthread_t pthread{};  // pthread_self() of the thread (CPython's thread_id)
  Ring ring;
  uint8_t* ring_mem = nullptr;
  ThreadTimer timer;
  StackBounds bounds;
  int64_t start_ns = 0;
  std::atomic<int64_t> end_ns{0};
  char end_name[16] = {};  // the thread's name as it ended (set before retiring)

  // Written by this thread's signal handler only; read by the writer.
  std::atomic<uint64_t> samples{0}, dropped{0}, unwind_stopped{0}, leaf_only{0}, ticks{0};

  // Memory events (preload/mem_events.h): produced by this thread in normal context, consumed by
  // the writer. Mapped by the thread on its first event (mem_ring_ready, release), unmapped by
  // release().
  Ring mem_ring;
  uint8_t* mem_ring_mem = nullptr;
  uint32_t mem_ring_bytes = 0;
  // The thread's stack memo for its hook unwinds (unwinder.h), in the same mapping, after the ring
  // (kMemoMapBytes); nullptr until then.
  UnwindMemo* memo = nullptr;
  static constexpr uint32_t kMemoMapBytes = (sizeof(UnwindMemo) + 4095) & ~4095u;
  std::atomic<bool> mem_ring_ready{false};

  // Writer-side bookkeeping.
  bool announced = false;
  char sent_name[16] = {};
  WallThreadState wall;
};

// Set on the thread itself; read by the signal handler.
extern __thread ThreadSlot* t_slot __attribute__((tls_model("initial-exec")));
// Non-zero while this thread is inside the dynamic loader (dlopen/dlclose hooks): unwinding then
// would walk structures the loader is changing, so the handler records the leaf pc only.
extern __thread int t_in_loader __attribute__((tls_model("initial-exec")));

class ThreadRegistry {
 public:
  static constexpr uint32_t kMaxThreads = 8192;
  static constexpr uint32_t kRingBytes = 64 * 1024;
  static constexpr uint32_t kSlotChunk = 64;  // slots constructed at a time (grow())

  bool init();  // maps the slot array; false when mmap fails
  // Registers the calling thread: claims a slot, maps its ring, records its stack bounds and
  // starts its CPU-time timer. Returns nullptr when out of slots or memory (thread runs unprofiled).
  ThreadSlot* register_current(int signo, int64_t period_ns, int64_t now_ns);
  // Which clock new threads try first (MLPROF_TIMER). `adaptive` (MLPROF_TIMER=auto with POSIX
  // timers): after kShortThreadsToSwitch threads ended within two periods of CPU, new threads get
  // perf task-clock events instead (see retire_current).
  void set_timer_source(TimerSource s, bool adaptive) {
    source_.store(s, std::memory_order_relaxed);
    adaptive_.store(adaptive && s == TimerSource::kThreadCpuTimer, std::memory_order_relaxed);
  }
  static constexpr uint64_t kShortThreadsToSwitch = 32;  // more than a library's start-up helpers
  // The calling thread is ending: stop its timer and hand the slot to the writer for a last drain.
  void retire_current(int64_t now_ns);
  // Writer: after the last drain of a retired slot, unmap its ring and free it.
  void release(ThreadSlot* slot);
  // Stops every thread's timer (exit, detach). Signals already queued are dropped by the handler.
  void stop_all_timers();
  // Gives the calling thread a new clock (after a failed exec stopped them all).
  void restart_current_timer(int signo, int64_t period_ns);
  // In a fork child: only the forking thread survives. Frees every other slot without touching
  // their (inherited, never again written) rings, and re-arms the current thread's timer.
  void reset_after_fork(int signo, int64_t period_ns, int64_t now_ns);

  ThreadSlot* slot(uint32_t i) { return &slots_[i]; }
  uint32_t high_water() const { return high_water_.load(std::memory_order_acquire); }
  std::atomic<uint64_t> no_slot{0};       // threads that could not get a slot
  std::atomic<uint64_t> timer_failures{0};
  std::atomic<uint64_t> perf_threads{0}, posix_timer_threads{0};  // which clock threads got
  std::atomic<uint64_t> short_threads{0};  // threads that ended within two periods of CPU time

 private:
  bool grow(uint32_t seen);  // constructs the next kSlotChunk slots; false when none are left
  ThreadSlot* slots_ = nullptr;
  std::atomic<uint32_t> constructed_{0};  // slots [0, constructed_) are constructed
  std::atomic<bool> growing_{false};      // grow()'s lock
  std::atomic<TimerSource> source_{TimerSource::kThreadCpuTimer};  // as Config::timer at the default rate; entry.cpp sets it
  std::atomic<bool> adaptive_{false};
  std::atomic<int> live_perf_{0};  // threads holding a perf event's descriptor now
  static int perf_fd_cap();
  void stop_timer(ThreadSlot* s);
  std::atomic<uint32_t> high_water_{0};
};

}  // namespace mlprof::preload
