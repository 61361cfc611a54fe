// Wall-clock mode: see wall_sampler.h. Writer thread only.
#include "preload/wall_sampler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/wire_format.h"
#include "preload/sampler.h"
#include "preload/unwinder.h"

namespace mlprof::preload {
namespace {

// One token of the syscall line: a decimal (possibly negative) or 0x-prefixed hex number.
const char* parse_number(const char* p, bool hex, int64_t* out) {
  while (*p == ' ') ++p;
  bool neg = false;
  if (!hex && *p == '-') {
    neg = true;
    ++p;
  }
  if (hex) {
    if (p[0] != '0' || p[1] != 'x') return nullptr;
    p += 2;
  }
  uint64_t v = 0;
  const char* start = p;
  for (;; ++p) {
    int d;
    if (*p >= '0' && *p <= '9') d = *p - '0';
    else if (hex && *p >= 'a' && *p <= 'f') d = *p - 'a' + 10;
    else break;
    v = v * (hex ? 16 : 10) + static_cast<uint64_t>(d);
  }
  if (p == start) return nullptr;
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return p;
}

// The thread's CPU time: the per-thread CPU clock of tid (pthread_getcpuclockid's encoding:
// CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK), readable for any thread of our own process.
int64_t thread_cpu_ns(uint32_t tid) {
  const clockid_t clk = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  struct timespec ts;
  if (clock_gettime(clk, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Reads /proc/self/task/TID/<name> through *fd, opened on first use and kept open. Returns the
// length read (0 or less: nothing). When the text may not be that file's (parse failed), call
// forget_task_file.
ssize_t read_task_file(int* fd, FdId* id, uint32_t tid, const char* name, char* buf, size_t size) {
  if (*fd < 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%u/%s", tid, name);
    *fd = open_owned(path, O_RDONLY, id);
    if (*fd < 0) return -1;  // out of descriptors, or the thread is gone
  } else if (!fd_still(*fd, *id)) {
    // The program closed ours and its number names something else now: forgotten, not read or
    // closed; opened again at the next tick.
    *fd = -1;
    return -1;
  }
  ssize_t n = pread(*fd, buf, size - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  return n;
}

// What was read is not what our file says: the thread is exiting (ESRCH: keep the descriptor,
// the slot retires soon and closes it), or the program closed our descriptor and its number now
// names one of its own files (pread took nothing from it: no file position, no stream's data).
// Forget the number without closing it (that could close the program's file) unless it still
// names our file; a later tick opens the file again.
void forget_task_file(int* fd, const FdId& id, ssize_t n, int err) {
  if (n < 0 && err == ESRCH) return;
  fd_close_if(*fd, id);
  *fd = -1;
}

// The thread's run-queue delay (time runnable but waiting for a core), the second number of
// /proc/self/task/TID/schedstat ("cpu_ns run_delay_ns timeslices"); -1 when unavailable.
int64_t thread_run_delay_ns(WallThreadState& w, uint32_t tid) {
  char buf[96];
  ssize_t n = read_task_file(&w.sched_fd, &w.sched_id, tid, "schedstat", buf, sizeof buf);
  if (w.sched_fd < 0) return -1;
  int64_t cpu, delay;
  const char* p = n > 0 ? parse_number(buf, false, &cpu) : nullptr;
  p = p ? parse_number(p, false, &delay) : nullptr;
  if (!p) {
    forget_task_file(&w.sched_fd, w.sched_id, n, errno);
    return -1;
  }
  return delay;
}

// The thread's off-CPU time (neither on a CPU nor runnable) since its counters were read (at
// w.counters_ns): elapsed time minus the CPU time it used minus its run-queue delay. Signed:
// schedstat adds a wait for a core only once the thread gets one, so a span can give back what
// the one before counted. false when a counter is unknown (first tick, no schedstat) or went back.
bool off_cpu_since_counters(const WallThreadState& w, int64_t now, int64_t cpu, int64_t delay, int64_t* out) {
  if (w.cpu_ns < 0 || cpu < w.cpu_ns || w.delay_ns < 0 || delay < w.delay_ns) return false;
  *out = (now - w.counters_ns) - (cpu - w.cpu_ns) - (delay - w.delay_ns);
  return true;
}

}  // namespace

bool parse_syscall_line(const char* text, SyscallState* out) {
  *out = SyscallState{};
  if (strncmp(text, "running", 7) == 0) {
    out->running = true;
    return true;
  }
  int64_t v[9];
  int n = 0;
  const char* p = parse_number(text, false, &v[n]);
  if (!p) return false;
  ++n;
  while (n < 9) {
    const char* q = parse_number(p, true, &v[n]);
    if (!q) break;
    p = q;
    ++n;
  }
  while (*p == ' ') ++p;
  if (*p != '\n' && *p != '\0') return false;
  // "NR a1..a6 SP PC" (9 numbers) or "-1 SP PC" (3): SP and PC are always the last two.
  if (!((n == 9 && v[0] >= 0) || (n == 3 && v[0] == -1))) return false;
  out->nr = v[0];
  out->sp = static_cast<uint64_t>(v[n - 2]);
  out->pc = static_cast<uint64_t>(v[n - 1]);
  return true;
}

// A sample weighing `periods` wall periods that ended at t (the timeline draws it as
// [t - periods x period, t]).
void WallSampler::send(ThreadSlot* s, uint64_t id, int64_t t, int64_t periods, WallSink& sink) {
  if (periods <= 0) return;
  ++wait_samples;
  sink.wall_sample(s->tid, id, t, static_cast<uint32_t>(periods > UINT32_MAX ? UINT32_MAX : periods));
}

// A reused tick's periods: held back up to hold_periods_ (sent when the wait is settled), the
// older ones sent now, stamped where they ended. Without schedstat nothing could be settled: all
// sent now, as counted.
void WallSampler::hold(ThreadSlot* s, uint64_t id, int64_t now, int64_t periods, WallSink& sink) {
  WallThreadState& w = s->wall;
  int64_t total = static_cast<int64_t>(w.pending) + periods;
  const int64_t keep = w.delay_ns < 0 ? 0 : hold_periods_;
  if (total > keep) {
    send(s, id, now - keep * period_ns_, total - keep, sink);
    w.emitted += static_cast<uint64_t>(total - keep);
    total = keep;
  }
  w.pending = static_cast<uint32_t>(total);
}

void WallSampler::set_carry(WallThreadState& w, int64_t ns) const {
  const int64_t cap = hold_periods_ * period_ns_;
  w.carry_ns = ns < 0 ? 0 : (ns < cap ? ns : cap);
}

// Sends the rest of a wait that ended (the thread woke, or ran and blocked elsewhere) to stack id:
// when `known`, the off-CPU time since its stack was read (`off`) less `reserved_ns` (another
// wait's share of it) and the periods already sent, plus the carry, in whole periods, at most what
// is held plus `extra` (a late tick's periods), the rest carried; otherwise what is held, as
// counted. Stamped where that wait ended.
void WallSampler::settle(ThreadSlot* s, uint64_t id, int64_t now, bool known, int64_t off, int64_t extra,
                         int64_t reserved_ns, WallSink& sink) {
  WallThreadState& w = s->wall;
  const int64_t held = w.pending;
  w.pending = 0;
  int64_t k = held;
  if (known) {
    int64_t owed = off - reserved_ns - static_cast<int64_t>(w.emitted) * period_ns_ + w.carry_ns;
    if (owed < 0) owed = 0;
    k = owed / period_ns_;
    if (k > held + extra) k = held + extra;
    set_carry(w, owed - k * period_ns_);
  }
  const int64_t end = w.block_start_ns + (static_cast<int64_t>(w.emitted) + k) * period_ns_;
  send(s, id, end < now ? end : now, k, sink);
  w.emitted += static_cast<uint64_t>(k);
}

void WallSampler::finish(ThreadSlot* s, int64_t now, WallSink& sink) {
  WallThreadState& w = s->wall;
  if (w.pending == 0) return;
  if (w.pc != 0 && w.stack_id != 0 && w.stack_gen == sink.stack_generation()) {
    send(s, w.stack_id, now, w.pending, sink);
    w.emitted += w.pending;
  }
  w.pending = 0;
}

void WallSampler::tick(ThreadSlot* s, int64_t now, bool python, WallSink& sink) {
  WallThreadState& w = s->wall;
  const int64_t elapsed = now - w.accounted_ns;
  if (elapsed < period_ns_) return;  // less than a period since its previous tick
  int64_t periods = elapsed / period_ns_;
  if (periods > UINT32_MAX) periods = UINT32_MAX;
  w.accounted_ns += periods * period_ns_;

  const int64_t cpu = thread_cpu_ns(s->tid);
  // When the counters are read: `now` is the cycle's, and the writer may have waited for a core
  // since (a running thread's CPU time would then look short of the elapsed time).
  const int64_t read_ns = clock_ns();
  const uint64_t gen = sink.stack_generation();
  const uint64_t id = w.stack_id;
  const bool was_blocked = w.pc != 0 && id != 0 && w.stack_gen == gen;
  if (!was_blocked) w.pending = 0;  // held for a stack id of an older generation: gone with it
  // A thread whose CPU time has not moved since a tick that found it blocked has not run since:
  // it is still blocked where it was, with the same stack (one clock_gettime, no /proc read), or
  // it woke and waits for a core, which its CPU clock cannot tell: these periods are held back.
  if (was_blocked && cpu >= 0 && cpu == w.cpu_ns) {
    hold(s, id, now, periods, sink);
    return;
  }
  // Its run-queue delay (schedstat; -1: unknown), read with the CPU clock and read_ns: a writer
  // that lost its core in between would split one wait for a core across two spans.
  const int64_t delay = thread_run_delay_ns(w, s->tid);
  char buf[256];
  ++reads;
  ssize_t n = read_task_file(&w.fd, &w.fd_id, s->tid, "syscall", buf, sizeof buf);
  if (w.fd < 0) return;  // no wait sample this time (what is held stays held)
  SyscallState st;
  if (n <= 0 || !parse_syscall_line(buf, &st)) {
    forget_task_file(&w.fd, w.fd_id, n, errno);
    return;
  }
  // Its off-CPU time since its counters were read: at its previous tick that read /proc, or, when
  // that tick found it blocked (from_wait), at the start of that wait, for which w.emitted
  // periods were sent since.
  int64_t off = 0;
  const bool known = off_cpu_since_counters(w, read_ns, cpu, delay, &off);
  const bool from_wait = w.pc != 0;
  if (st.running) {
    if (was_blocked) {
      // It woke since a tick that found it blocked: settle that wait, with this tick's periods (a
      // late tick's; those it spent neither on a CPU nor runnable were the rest of that wait).
      settle(s, id, now, known, off, periods, 0, sink);
    } else if (known && !from_wait) {
      // It may have waited since its previous tick and runs again: where is not known, so that
      // time goes with the next wait it is found in (a loop's waits are mostly at one place).
      set_carry(w, w.carry_ns + off);
    }  // (from a wait whose stack ids were voided since, a module unloaded or a new stream: its
       // rest is dropped with them)
    w.cpu_ns = cpu;
    w.delay_ns = delay;
    w.counters_ns = read_ns;
    w.pc = w.sp = 0;
    return;
  }
  // Blocked, and it ran since its previous tick (or this is its first wait). Counted: its off-CPU
  // time since its counters were read, plus the carry, in whole periods (the rest carried on).
  // Not simply this tick's periods: whether a thread is found blocked samples how much of the time
  // it waits only when the ticks fall independently of it, and on a busy machine the writer gets
  // a core most often just when a thread blocks (a compute line's GIL waits read 30% over the
  // line's wall time with two threads busy on two cores). Without the counters (first tick, no
  // schedstat): the periods, as counted.
  int64_t k = periods;
  if (known) {
    int64_t mine = off;
    if (from_wait) {
      // It woke from the wait it was last seen in, ran and blocked here, all since the last tick
      // that found it there (the counters date from that wait's start). This wait's share: this
      // tick's periods less the CPU time and run delay since, within the off-CPU time. That wait
      // gets the rest, less what was sent for it, up to what it holds (settle: beyond, the rest is
      // carried to this one), or, when its stack ids were voided since, the rest is dropped with
      // them.
      const int64_t span = periods * period_ns_ - (cpu - w.cpu_ns) - (delay - w.delay_ns);
      const int64_t off0 = off > 0 ? off : 0;
      mine = span < 0 ? 0 : (span < off0 ? span : off0);
      if (was_blocked) settle(s, id, now, true, off, 0, mine, sink);
    }
    const int64_t total = mine + w.carry_ns > 0 ? mine + w.carry_ns : 0;
    k = total / period_ns_;
    set_carry(w, total - k * period_ns_);
  } else if (was_blocked && w.pending != 0) {
    settle(s, id, now, false, 0, 0, 0, sink);  // what is held, as counted
  }
  ++unwinds;
  uint64_t pcs[kMaxFrames];
  python::RawPyFrame py[kMaxPyFrames];
  UnwindResult r = unwind_cfi_regs(st.pc, st.sp, 0, s->bounds, pcs, kMaxFrames);
  uint8_t flags = static_cast<uint8_t>(r.flags | wire::kStackOffCpuWait);
  int npy = 0;
  if (python) {
    uint8_t pyflags = 0;
    npy = python::walk_thread(static_cast<uint64_t>(s->pthread), s->tid, py, kMaxPyFrames, &pyflags);
    if (pyflags & python::kSampleHasPython) flags |= wire::kStackHasPython;
    if (pyflags & python::kSampleWalkFailed) flags |= wire::kStackPyWalkFailed;
  }
  w.stack_id = sink.wall_stack(pcs, static_cast<uint16_t>(r.nframes), flags, py, static_cast<uint8_t>(npy));
  w.stack_gen = gen;
  w.pc = st.pc;
  w.sp = st.sp;
  w.cpu_ns = cpu;
  w.delay_ns = delay;
  w.counters_ns = read_ns;
  w.block_start_ns = now;
  w.emitted = 0;
  w.pending = 0;
  send(s, w.stack_id, now, k, sink);
}

}  // namespace mlprof::preload
