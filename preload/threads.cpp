#include "preload/threads.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "preload/mem_thread.h"

namespace mlprof::preload {

__thread ThreadSlot* t_slot __attribute__((tls_model("initial-exec"))) = nullptr;
__thread int t_in_loader __attribute__((tls_model("initial-exec"))) = 0;

namespace {

StackBounds current_stack_bounds() {
  StackBounds b;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      b.lo = reinterpret_cast<uintptr_t>(addr);
      b.hi = b.lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  return b;
}

}  // namespace

bool ThreadRegistry::init() {
  size_t bytes = sizeof(ThreadSlot) * kMaxThreads;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  slots_ = static_cast<ThreadSlot*>(p);
  return grow(0);
}

// Slots are constructed kSlotChunk at a time, as threads need them: constructing all 8192 up front
// (2.6 MB, every page written) cost each process start ~650 page faults, ~10 ms on this project's
// VM (/bin/true under the preload: 17 ms against 6 ms). `seen` is the count the caller found
// full; another thread may have grown it meanwhile. Not signal context (thread start, fork child).
bool ThreadRegistry::grow(uint32_t seen) {
  while (growing_.exchange(true, std::memory_order_acquire)) sched_yield();
  const uint32_t n = constructed_.load(std::memory_order_relaxed);
  if (n == seen && n < kMaxThreads) {
    const uint32_t end = n + kSlotChunk < kMaxThreads ? n + kSlotChunk : kMaxThreads;
    for (uint32_t i = n; i < end; ++i) new (&slots_[i]) ThreadSlot();
    constructed_.store(end, std::memory_order_release);
  }
  const bool more = constructed_.load(std::memory_order_relaxed) > seen;
  growing_.store(false, std::memory_order_release);
  return more;
}

ThreadSlot* ThreadRegistry::register_current(int signo, int64_t period_ns, int64_t now_ns) {
  if (!slots_ || t_slot) return t_slot;
  mem::Guard guard;  // its mmaps and pthread_getattr_np's allocations are the preload's own
  int saved_errno = errno;
  ThreadSlot* s = nullptr;
  for (uint32_t n = constructed_.load(std::memory_order_acquire);; n = constructed_.load(std::memory_order_acquire)) {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t expected = kSlotFree;
      if (slots_[i].state.compare_exchange_strong(expected, kSlotClaimed, std::memory_order_acq_rel)) {
        s = &slots_[i];
        uint32_t hw = high_water_.load(std::memory_order_relaxed);
        while (hw < i + 1 && !high_water_.compare_exchange_weak(hw, i + 1, std::memory_order_release)) {}
        break;
      }
    }
    if (s || !grow(n)) break;
  }
  if (!s) {
    no_slot.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return nullptr;
  }
  void* mem = mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    s->state.store(kSlotFree, std::memory_order_release);
    no_slot.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return nullptr;
  }
  s->ring_mem = static_cast<uint8_t*>(mem);
  s->ring.init(s->ring_mem, kRingBytes);
  s->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  s->pthread = pthread_self();
  s->bounds = current_stack_bounds();
  s->start_ns = now_ns;
  s->end_ns.store(0, std::memory_order_relaxed);
  s->end_name[0] = 0;
  s->samples = 0; s->dropped = 0; s->unwind_stopped = 0; s->leaf_only = 0; s->ticks = 0;
  s->announced = false;
  s->sent_name[0] = 0;
  s->wall = WallThreadState{};  // release() closed the previous thread's descriptor
  s->wall.accounted_ns = now_ns;
  s->timer = ThreadTimer{};
  // The timer must exist before the slot is visible to the handler (it reads the perf fd).
  TimerSource want = source_.load(std::memory_order_relaxed);
  if (want == TimerSource::kPerfTaskClock && live_perf_.load(std::memory_order_relaxed) >= perf_fd_cap())
    want = TimerSource::kThreadCpuTimer;  // the program's descriptors come first
  if (!timer_start(s->timer, want, s->tid, signo, period_ns)) {
    timer_failures.fetch_add(1, std::memory_order_relaxed);
  } else if (s->timer.source == TimerSource::kPerfTaskClock) {
    perf_threads.fetch_add(1, std::memory_order_relaxed);
    live_perf_.fetch_add(1, std::memory_order_relaxed);
  } else {
    posix_timer_threads.fetch_add(1, std::memory_order_relaxed);
    // The switch to perf events (retire_current) found them not allowed here: stay with POSIX
    // timers rather than try perf_event_open again for every new thread.
    if (want == TimerSource::kPerfTaskClock && adaptive_.exchange(false, std::memory_order_relaxed))
      source_.store(TimerSource::kThreadCpuTimer, std::memory_order_relaxed);
  }
  s->state.store(kSlotActive, std::memory_order_release);
  t_slot = s;
  if (s->timer.armed && !timer_enable(s->timer)) {
    timer_failures.fetch_add(1, std::memory_order_relaxed);
    if (s->timer.source == TimerSource::kPerfTaskClock) live_perf_.fetch_sub(1, std::memory_order_relaxed);
  }
  errno = saved_errno;
  return s;
}

void ThreadRegistry::retire_current(int64_t now_ns) {
  ThreadSlot* s = t_slot;
  if (!s) return;
  int saved_errno = errno;
  t_slot = nullptr;  // a signal still in flight now finds no slot and is dropped
  // A thread that used less than two periods of CPU: a POSIX CPU-time timer is checked only at
  // the scheduler's tick, so such threads (a thread-per-request server's) are mostly missed even
  // with a random first expiry: measured ~28% of their CPU at 100 Hz with CONFIG_HZ=250
  // (tests/fixtures/short_threads.cpp). After a few of them, new threads get perf task-clock
  // events (hrtimer-precise: their first period, uniform in [1, period], makes them unbiased);
  // long-lived threads keep the timer they have.
  struct timespec cpu;
  if (s->timer.armed && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0 &&
      cpu.tv_sec * 1000000000ll + cpu.tv_nsec < 2 * s->timer.period_ns) {
    const uint64_t n = short_threads.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n == kShortThreadsToSwitch && adaptive_.load(std::memory_order_relaxed))
      source_.store(TimerSource::kPerfTaskClock, std::memory_order_relaxed);
  }
  stop_timer(s);
  prctl(PR_GET_NAME, s->end_name, 0, 0, 0);
  s->end_ns.store(now_ns, std::memory_order_relaxed);
  s->state.store(kSlotRetired, std::memory_order_release);
  errno = saved_errno;
}

void ThreadRegistry::release(ThreadSlot* s) {
  if (s->wall.fd >= 0) fd_close_if(s->wall.fd, s->wall.fd_id);  // in a fork child: the parent's thread's files
  if (s->wall.sched_fd >= 0) fd_close_if(s->wall.sched_fd, s->wall.sched_id);
  s->wall.fd = s->wall.sched_fd = -1;
  if (s->ring_mem) munmap(s->ring_mem, kRingBytes);
  s->ring_mem = nullptr;
  s->ring.init(nullptr, 0);
  s->mem_ring_ready.store(false, std::memory_order_relaxed);
  if (s->mem_ring_mem) munmap(s->mem_ring_mem, s->mem_ring_bytes + ThreadSlot::kMemoMapBytes);
  s->mem_ring_mem = nullptr;
  s->memo = nullptr;
  s->mem_ring_bytes = 0;
  s->mem_ring.init(nullptr, 0);
  s->state.store(kSlotFree, std::memory_order_release);
}

// Each perf-sampled thread holds a file descriptor while it lives. A thread-per-connection server
// already holds a socket per thread: perf events for all its threads could double its descriptors
// and make its own accept() or open() fail at RLIMIT_NOFILE (1024 by default). So at most 1/16 of
// the soft limit (at least 16; 4096 when unlimited) is used for perf events; threads beyond that
// get POSIX timers.
int ThreadRegistry::perf_fd_cap() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 16;
  if (rl.rlim_cur == RLIM_INFINITY) return 4096;
  const rlim_t cap = rl.rlim_cur / 16;
  return cap < 16 ? 16 : cap > 4096 ? 4096 : static_cast<int>(cap);
}

void ThreadRegistry::stop_timer(ThreadSlot* s) {
  if (s->timer.armed && s->timer.source == TimerSource::kPerfTaskClock) live_perf_.fetch_sub(1, std::memory_order_relaxed);
  timer_stop(s->timer);
}

void ThreadRegistry::stop_all_timers() {
  uint32_t hw = high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = &slots_[i];
    // Timer ids and perf fds are process-wide: any thread may stop another thread's timer.
    if (s->state.load(std::memory_order_acquire) == kSlotActive) stop_timer(s);
  }
}

void ThreadRegistry::restart_current_timer(int signo, int64_t period_ns) {
  ThreadSlot* s = t_slot;
  if (!s) return;
  int saved_errno = errno;
  stop_timer(s);
  if (!timer_start(s->timer, source_.load(std::memory_order_relaxed), s->tid, signo, period_ns) || !timer_enable(s->timer))
    timer_failures.fetch_add(1, std::memory_order_relaxed);
  else if (s->timer.source == TimerSource::kPerfTaskClock)
    live_perf_.fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
}

void ThreadRegistry::reset_after_fork(int signo, int64_t period_ns, int64_t now_ns) {
  growing_.store(false, std::memory_order_relaxed);  // a thread of the parent may have held it
  ThreadSlot* mine = t_slot;
  uint32_t hw = high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = &slots_[i];
    if (s->state.load(std::memory_order_relaxed) == kSlotFree) continue;
    timer_forget_inherited(s->timer);  // perf fds are inherited (still watching the parent's threads)
    if (s != mine) release(s);
  }
  live_perf_.store(0, std::memory_order_relaxed);  // the child's threads have no events yet
  if (!mine) return;
  // Keep the slot and ring memory, but start afresh: new tid, empty ring, new timer, new counters.
  t_slot = nullptr;
  release(mine);
  register_current(signo, period_ns, now_ns);
}

}  // namespace mlprof::preload
