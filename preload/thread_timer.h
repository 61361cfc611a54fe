// The per-thread sampling clock. Two sources, both counting the thread's own CPU time; config.cpp
// picks one by rate (MLPROF_TIMER=auto), and each falls back to the other when it cannot start:
//  - POSIX CPU-time timer (rates <= 100 Hz): timer_create(CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID).
//    Driven by the scheduler tick (CONFIG_HZ, e.g. 250/s): above that rate signals are merged and
//    the handler weights a sample by si_overrun. Costs nothing per context switch.
//  - perf task-clock (rates above 100 Hz, or MLPROF_TIMER=perf): perf_event_open(
//    PERF_COUNT_SW_TASK_CLOCK) for the thread, overflow signals routed to it with
//    F_SETOWN_EX/F_SETSIG, re-armed by the handler (PERF_EVENT_IOC_REFRESH). Delivers the requested
//    rate (measured ~990 signals/s at 1 kHz on a 2-core VM), but the kernel switches the event out
//    and in with its thread: ~2 us per context switch on a KVM guest (bench/ctxswitch_cost.sh).
#pragma once
#include <signal.h>
#include <time.h>

#include <cstdint>

#include "preload/owned_fd.h"

namespace mlprof::preload {

enum class TimerSource : uint8_t { kPerfTaskClock = 0, kThreadCpuTimer = 1 };

struct ThreadTimer {
  int perf_fd = -1;  // at a high number; closed only while it still names the event (owned_fd.h)
  FdId perf_id;
  timer_t timer{};
  int64_t period_ns = 0;  // the steady period (CPU ns)
  int64_t first_ns = 0;   // POSIX: the first expiry (perf: in the event's attributes)
  bool armed = false;
  bool first_period = false;  // perf: the event still counts its random first period
  TimerSource source = TimerSource::kThreadCpuTimer;
};

// Creates a timer for the calling thread (tid), not yet counting: timer_enable starts it once the
// thread's slot is visible to the signal handler. (A perf event is re-armed only by the handler,
// so an overflow signal that found no slot would stop that thread's sampling for good, and a
// random first period can be a few microseconds.) Tries `preferred` first, then the other source.
// The first expiry is uniform in [1, period] of the thread's CPU time, later ones every period:
// a thread shorter than a period is sampled with probability (its CPU) / period instead of never.
// Returns false when neither could be started.
bool timer_start(ThreadTimer& t, TimerSource preferred, uint32_t tid, int signo, int64_t period_ns);
// Starts counting. false (and the timer stopped) when the kernel refused.
bool timer_enable(ThreadTimer& t);
// Stops it; any thread may call this (exit, detach).
void timer_stop(ThreadTimer& t);
// In a fork child: the inherited perf fd still refers to the parent's thread; close our copy
// without disabling the parent's event. POSIX timers are not inherited at all.
void timer_forget_inherited(ThreadTimer& t);

// signal-safe. Called by the handler of the timer's own thread: the ticks this signal stands for
// (1 + overruns of a POSIX timer), and re-arming of a perf event. Returns 0 when the signal is
// not this timer's.
uint32_t timer_on_signal(ThreadTimer& t, const siginfo_t* si);

}  // namespace mlprof::preload
