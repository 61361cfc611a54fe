// SIGNAL CONTEXT. on_sample() runs inside the sampling signal handler on whatever thread the
// kernel interrupted, at any instruction, possibly inside malloc, the loader or a lock.
//
// Allowed here: loads/stores to preallocated memory (the thread's ring and slot), atomics,
//   clock_gettime (vDSO), the unwinder's signal-safe entry points, the memory hooks' guard
//   (mem_thread.h: held for the whole handler, so nothing it calls is sampled).
// Forbidden here: malloc/free/new, locks, stdio, dlsym/dl_iterate_phdr, C++ exceptions,
//   thread_locals with dynamic initialization, anything that may change errno (saved/restored).
// Functions reachable from the handler are marked `// signal-safe`.
#include "preload/sampler.h"

#include <signal.h>
#include <time.h>
#include <ucontext.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/wire_format.h"
#include "preload/mem_thread.h"
#include "preload/thread_timer.h"
#include "preload/threads.h"
#include "preload/unwinder.h"

namespace mlprof::preload {

SamplerState g_sampler;

namespace {

// True when the instruction before pc is `syscall` (0f 05): the thread was interrupted in (or on
// its way back from) the kernel, which is system time. pc is inside mapped code; the two bytes
// before it are on the same page unless pc starts a page, where we do not look.  // signal-safe
bool in_syscall(uint64_t pc) {
  if ((pc & 0xfff) < 2) return false;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(pc - 2);
  return p[0] == 0x0f && p[1] == 0x05;
}

// signal-safe
void on_sample(int /*signo*/, siginfo_t* si, void* ucontext) {
  // Whatever the handler calls (a memcpy the compiler did not inline) is not the program's: under
  // the guard a memory hook only forwards, except that a copy charges its countdown and, when that
  // comes due, draws a new one (mem_profiler.cpp's skip_due, signal-safe).
  mem::Guard guard;
  const int saved_errno = errno;
  ThreadSlot* slot = t_slot;
  if (slot == nullptr) {
    g_sampler.dropped_no_thread.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  if (!g_sampler.sampling.load(std::memory_order_relaxed)) {
    // Not sampling yet (the constructor registers the main thread first) or any more: a perf
    // event must still be re-armed, or this thread would never be sampled again.
    timer_on_signal(slot->timer, si);
    errno = saved_errno;
    return;
  }
  // The ticks this sample stands for (a CPU-time timer's missed ticks add weight); a perf event
  // is re-armed here.
  uint32_t weight = timer_on_signal(slot->timer, si);
  if (weight == 0) {  // our signal number, but not our timer (sent by someone else): ignore
    errno = saved_errno;
    return;
  }
  slot->ticks.fetch_add(weight, std::memory_order_relaxed);

  constexpr uint32_t kMaxRecord =
      sizeof(RawSample) + kMaxFrames * sizeof(uint64_t) + kMaxPyFrames * sizeof(python::RawPyFrame);
  uint8_t* rec = slot->ring.reserve(kMaxRecord);
  if (rec == nullptr) {
    slot->dropped.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  RawSample* hdr = reinterpret_cast<RawSample*>(rec);
  uint64_t* pcs = reinterpret_cast<uint64_t*>(rec + sizeof(RawSample));
  const int64_t t_ns = clock_ns();

  UnwindResult r;
  if (t_in_loader) {
    // Inside dlopen/dlclose the module list is changing under us: record where we are only.
    const ucontext_t* uc = static_cast<const ucontext_t*>(ucontext);
    pcs[0] = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
    r.nframes = 1;
    r.flags = wire::kStackLeafOnly;
    slot->leaf_only.fetch_add(1, std::memory_order_relaxed);
  } else if (g_sampler.unwinder == UnwinderKind::kLibunwind) {
    r = unwind_libunwind(ucontext, pcs, kMaxFrames);
  } else {
    r = unwind_cfi(ucontext, slot->bounds, pcs, kMaxFrames);
  }
  if (r.flags & wire::kStackUnwindStop) slot->unwind_stopped.fetch_add(1, std::memory_order_relaxed);
  if (in_syscall(pcs[0])) r.flags |= wire::kStackInSyscall;

  // The interrupted code's live stack, from its stack pointer to the top, when that lies in the
  // thread's stack: the walk copies what it needs from there (3.11/3.12: the eval loop's _PyCFrame)
  // instead of reading it with a syscall. Empty on another stack (a fiber's, an altstack's).
  const uint64_t sp = static_cast<uint64_t>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RSP]);
  const StackBounds live = sp >= slot->bounds.lo && sp < slot->bounds.hi ? StackBounds{sp, slot->bounds.hi} : StackBounds{};
  bool new_code = false;
  const int npy = python_frames(reinterpret_cast<python::RawPyFrame*>(pcs + r.nframes), &r.flags, &new_code,
                                python::WalkContext::kSignal, &live);

  hdr->t_ns = t_ns;
  hdr->weight = weight;
  hdr->nframes = static_cast<uint16_t>(r.nframes);
  hdr->flags = r.flags;
  hdr->npy = static_cast<uint8_t>(npy);
  slot->ring.commit(static_cast<uint32_t>(sizeof(RawSample) + r.nframes * sizeof(uint64_t) +
                                          npy * sizeof(python::RawPyFrame)));
  slot->samples.fetch_add(1, std::memory_order_relaxed);
  if (new_code) wake_writer();
  errno = saved_errno;
}

}  // namespace

bool install_sample_handler(int signo, const char** why) {
  struct sigaction old;
  if (sigaction(signo, nullptr, &old) != 0) {
    *why = "cannot query the sampling signal's handler";
    return false;
  }
  if ((old.sa_flags & SA_SIGINFO) ? old.sa_sigaction != nullptr
                                  : (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)) {
    *why = "the program already handles the sampling signal; set MLPROF_SIGNAL to a free signal number";
    return false;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sample;
  // SA_RESTART: a sample that lands in a restartable syscall must not make it fail with EINTR.
  // SA_ONSTACK: runtimes such as Go require it of every handler; harmless without an altstack.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(signo, &sa, nullptr) != 0) {
    *why = "cannot install the sampling signal's handler";
    return false;
  }
  return true;
}

bool sample_handler_installed(int signo) {
  struct sigaction cur;
  if (sigaction(signo, nullptr, &cur) != 0) return false;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sample;
}

}  // namespace mlprof::preload
