#include "preload/thread_timer.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace mlprof::preload {
namespace {

// The first expiry of a thread's clock: uniform in [1, period] ns. With a fixed first expiry a
// thread that uses less than one period of CPU in its life is never sampled (a thread-per-request
// server's handlers all vanish from the profile); with a uniform phase each thread is sampled
// with probability (its CPU) / period, so a sample's weight of one period is unbiased whatever
// the thread's length.
int64_t first_expiry_ns(uint32_t tid, int64_t period_ns) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t x = (static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec)) ^
               (static_cast<uint64_t>(tid) << 32);
  x += 0x9e3779b97f4a7c15ull;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return 1 + static_cast<int64_t>(x % static_cast<uint64_t>(period_ns));
}

bool start_perf(ThreadTimer& t, uint32_t tid, int signo, int64_t period_ns) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = static_cast<uint64_t>(first_expiry_ns(tid, period_ns));  // the handler sets period_ns after it
  a.disabled = 1;
  a.exclude_hv = 1;
  a.wakeup_events = 1;
  // Kernel time counts as the thread's CPU time too; where that is not permitted
  // (perf_event_paranoid >= 2 on some kernels) count user time only.
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0 && (errno == EACCES || errno == EPERM)) {
    a.exclude_kernel = 1;
    fd = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
  }
  if (fd < 0) return false;
  // Moved before O_ASYNC is set: the overflow signal's si_fd is the number it was set on.
  fd = fd_move_high(fd);
  struct f_owner_ex owner = {F_OWNER_TID, static_cast<pid_t>(tid)};
  if (!perf_fd_identity(fd, &t.perf_id) || fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, signo) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC | O_NONBLOCK) != 0 || ioctl(fd, PERF_EVENT_IOC_RESET, 0) != 0) {
    close(fd);
    return false;
  }
  t.perf_fd = fd;
  t.period_ns = period_ns;
  t.first_period = true;
  t.source = TimerSource::kPerfTaskClock;
  t.armed = true;  // created; counting starts in timer_enable
  return true;
}

bool start_posix(ThreadTimer& t, uint32_t tid, int signo, int64_t period_ns) {
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = signo;
  sev._sigev_un._tid = static_cast<pid_t>(tid);
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &t.timer) != 0) return false;
  t.first_ns = first_expiry_ns(tid, period_ns);
  t.period_ns = period_ns;
  t.source = TimerSource::kThreadCpuTimer;
  t.armed = true;
  return true;
}

}  // namespace

bool timer_start(ThreadTimer& t, TimerSource preferred, uint32_t tid, int signo, int64_t period_ns) {
  t = ThreadTimer{};
  if (preferred == TimerSource::kPerfTaskClock) {
    return start_perf(t, tid, signo, period_ns) || start_posix(t, tid, signo, period_ns);
  }
  return start_posix(t, tid, signo, period_ns) || start_perf(t, tid, signo, period_ns);
}

bool timer_enable(ThreadTimer& t) {
  if (!t.armed) return false;
  if (t.source == TimerSource::kPerfTaskClock) {
    if (ioctl(t.perf_fd, PERF_EVENT_IOC_REFRESH, 1) == 0) return true;
  } else {
    struct itimerspec its;
    its.it_interval.tv_sec = t.period_ns / 1000000000;
    its.it_interval.tv_nsec = t.period_ns % 1000000000;
    its.it_value.tv_sec = t.first_ns / 1000000000;
    its.it_value.tv_nsec = t.first_ns % 1000000000;
    if (timer_settime(t.timer, 0, &its, nullptr) == 0) return true;
  }
  timer_stop(t);
  return false;
}

void timer_stop(ThreadTimer& t) {
  if (!t.armed) return;
  t.armed = false;
  if (t.source == TimerSource::kPerfTaskClock) {
    // The thread's handler (another thread may be stopping its timer: stop_all_timers) must not
    // find the number once it is being closed: it is taken out of the timer first.
    const int fd = t.perf_fd;
    t.perf_fd = -1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // A number the program closed (and perhaps opened its own file at) is left alone: the event
    // went with the close.
    if (fd_still(fd, t.perf_id)) {
      ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
      close(fd);
    }
  } else {
    timer_delete(t.timer);
  }
}

void timer_forget_inherited(ThreadTimer& t) {
  if (t.armed && t.source == TimerSource::kPerfTaskClock) fd_close_if(t.perf_fd, t.perf_id);
  t = ThreadTimer{};
}

// signal-safe
uint32_t timer_on_signal(ThreadTimer& t, const siginfo_t* si) {
  if (t.source == TimerSource::kPerfTaskClock) {
    if (si == nullptr || si->si_fd != t.perf_fd || t.perf_fd < 0) return 0;
    if (t.first_period) {  // the random first period is over: the steady one from here
      uint64_t period = static_cast<uint64_t>(t.period_ns);
      ioctl(t.perf_fd, PERF_EVENT_IOC_PERIOD, &period);
      t.first_period = false;
    }
    // The event disabled itself after one overflow: count from here again. A sample therefore
    // never stands for more than one period (no overruns), and the handler's own time is not counted.
    ioctl(t.perf_fd, PERF_EVENT_IOC_REFRESH, 1);
    return 1;
  }
  // Only this thread's own timer: a signal of the same number sent by kill/tgkill/sigqueue, or
  // by another timer, is not a tick (si_timerid is the timer_t that timer_create returned).
  if (si == nullptr || si->si_code != SI_TIMER || si->si_timerid != static_cast<int>(reinterpret_cast<intptr_t>(t.timer)))
    return 0;
  return 1 + (si->si_overrun > 0 ? static_cast<uint32_t>(si->si_overrun) : 0);
}

}  // namespace mlprof::preload
