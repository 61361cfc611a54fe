#include "preload/threads.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

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
  for (uint32_t i = 0; i < kMaxThreads; ++i) new (&slots_[i]) ThreadSlot();
  return true;
}

bool ThreadRegistry::start_timer(ThreadSlot* s, int signo, int64_t period_ns) {
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = signo;
  sev._sigev_un._tid = static_cast<pid_t>(s->tid);
  // The calling thread's CPU clock: the timer advances only while this thread runs, so samples
  // fall on threads in proportion to the CPU they use.
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &s->timer) != 0) return false;
  struct itimerspec its;
  its.it_interval.tv_sec = period_ns / 1000000000;
  its.it_interval.tv_nsec = period_ns % 1000000000;
  its.it_value = its.it_interval;
  if (timer_settime(s->timer, 0, &its, nullptr) != 0) {
    timer_delete(s->timer);
    return false;
  }
  s->has_timer = true;
  return true;
}

ThreadSlot* ThreadRegistry::register_current(int signo, int64_t period_ns, int64_t now_ns) {
  if (!slots_ || t_slot) return t_slot;
  int saved_errno = errno;
  ThreadSlot* s = nullptr;
  for (uint32_t i = 0; i < kMaxThreads; ++i) {
    uint32_t expected = kSlotFree;
    if (slots_[i].state.compare_exchange_strong(expected, kSlotClaimed, std::memory_order_acq_rel)) {
      s = &slots_[i];
      uint32_t hw = high_water_.load(std::memory_order_relaxed);
      while (hw < i + 1 && !high_water_.compare_exchange_weak(hw, i + 1, std::memory_order_release)) {}
      break;
    }
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
  s->bounds = current_stack_bounds();
  s->start_ns = now_ns;
  s->end_ns.store(0, std::memory_order_relaxed);
  s->end_name[0] = 0;
  s->samples = 0; s->dropped = 0; s->unwind_stopped = 0; s->leaf_only = 0; s->ticks = 0;
  s->announced = false;
  s->sent_name[0] = 0;
  s->has_timer = false;
  s->state.store(kSlotActive, std::memory_order_release);
  t_slot = s;
  if (!start_timer(s, signo, period_ns)) timer_failures.fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
  return s;
}

void ThreadRegistry::retire_current(int64_t now_ns) {
  ThreadSlot* s = t_slot;
  if (!s) return;
  int saved_errno = errno;
  t_slot = nullptr;  // a signal still in flight now finds no slot and is dropped
  if (s->has_timer) {
    timer_delete(s->timer);
    s->has_timer = false;
  }
  prctl(PR_GET_NAME, s->end_name, 0, 0, 0);
  s->end_ns.store(now_ns, std::memory_order_relaxed);
  s->state.store(kSlotRetired, std::memory_order_release);
  errno = saved_errno;
}

void ThreadRegistry::release(ThreadSlot* s) {
  if (s->ring_mem) munmap(s->ring_mem, kRingBytes);
  s->ring_mem = nullptr;
  s->ring.init(nullptr, 0);
  s->state.store(kSlotFree, std::memory_order_release);
}

void ThreadRegistry::stop_all_timers() {
  uint32_t hw = high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = &slots_[i];
    if (s->state.load(std::memory_order_acquire) == kSlotActive && s->has_timer) {
      // timer ids are process-wide: any thread may delete another's timer.
      timer_delete(s->timer);
      s->has_timer = false;
    }
  }
}

void ThreadRegistry::reset_after_fork(int signo, int64_t period_ns, int64_t now_ns) {
  ThreadSlot* mine = t_slot;
  uint32_t hw = high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = &slots_[i];
    if (s == mine) continue;
    if (s->state.load(std::memory_order_relaxed) != kSlotFree) release(s);  // POSIX timers are not inherited
  }
  if (!mine) return;
  // Keep the slot and ring memory, but start afresh: new tid, empty ring, new timer, new counters.
  t_slot = nullptr;
  release(mine);
  register_current(signo, period_ns, now_ns);
}

}  // namespace mlprof::preload
