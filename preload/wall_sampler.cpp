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

int open_syscall_file(uint32_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%u/syscall", tid);
  return open(path, O_RDONLY | O_CLOEXEC);
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

void WallSampler::tick(ThreadSlot* s, int64_t now, bool python, WallSink& sink) {
  WallThreadState& w = s->wall;
  const int64_t elapsed = now - w.accounted_ns;
  if (elapsed < period_ns_) return;  // less than a period since its previous tick
  int64_t periods = elapsed / period_ns_;
  if (periods > UINT32_MAX) periods = UINT32_MAX;
  w.accounted_ns += periods * period_ns_;

  // A thread whose CPU time has not moved since a tick that found it blocked has not run since:
  // it is still blocked where it was, with the same stack. One clock_gettime, no /proc read.
  const int64_t cpu = thread_cpu_ns(s->tid);
  const uint64_t gen = sink.stack_generation();
  uint64_t id = w.stack_id;
  if (cpu < 0 || cpu != w.cpu_ns || w.pc == 0 || id == 0 || w.stack_gen != gen) {
    if (w.fd < 0) {
      w.fd = open_syscall_file(s->tid);
      if (w.fd < 0) return;  // out of descriptors, or the thread is gone: no wait sample this time
    }
    char buf[256];
    ++reads;
    ssize_t n = pread(w.fd, buf, sizeof buf - 1, 0);
    SyscallState st;
    if (n > 0) buf[n] = '\0';
    if (n <= 0 || !parse_syscall_line(buf, &st)) {
      // Not what our file says: the thread is exiting (ESRCH), or the program closed our
      // descriptor and its number now names one of its own files. Forget the number without
      // closing it (that could close the program's file); a later tick opens the file again.
      struct stat sb;
      if (n < 0 && errno == ESRCH) return;  // exiting: the slot retires soon and closes it
      if (fstat(w.fd, &sb) == 0 && major(sb.st_dev) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0) close(w.fd);
      w.fd = -1;
      return;
    }
    w.cpu_ns = cpu;
    if (st.running) {
      w.pc = w.sp = 0;
      return;
    }
    {
      // It ran since its previous tick (or this is its first wait): unwind it where it blocked.
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
      id = sink.wall_stack(pcs, static_cast<uint16_t>(r.nframes), flags, py, static_cast<uint8_t>(npy));
      w.stack_id = id;
      w.stack_gen = gen;
      w.pc = st.pc;
      w.sp = st.sp;
    }
  }
  ++wait_samples;
  sink.wall_sample(s->tid, id, now, static_cast<uint32_t>(periods));
}

}  // namespace mlprof::preload
