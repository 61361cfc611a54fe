#include "preload/mem_profiler.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "preload/mem_events.h"
#include "preload/python.h"
#include "preload/sampler.h"
#include "preload/threads.h"
#include "preload/unwinder.h"

namespace mlprof::preload::mem {

__thread ThreadState t_mem __attribute__((tls_model("initial-exec"))) = {};
State g_mem;

namespace {

constexpr uint64_t kIdBlock = 256;

uint32_t current_tid() {
  ThreadState& t = t_mem;
  if (ThreadSlot* s = t_slot) return s->tid;
  if (t.tid == 0) t.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t.tid;
}

uint64_t next_alloc_id() {
  ThreadState& t = t_mem;
  if (t.next_id == t.end_id) {
    t.next_id = g_mem.next_id_block.fetch_add(kIdBlock, std::memory_order_relaxed);
    t.end_id = t.next_id + kIdBlock;
  }
  return t.next_id++;
}

void ensure_seeded() {
  ThreadState& t = t_mem;
  if (t.rng == 0) t.rng = fresh_seed(current_tid());
}

uint32_t ring_bytes() { return exact() ? kThreadRingBytesExact : kThreadRingBytes; }

// The CFI tables are built by the writer thread as its first act, off the program's start-up
// path. A stack captured before then stops at the first frame: for a CPU sample that is a
// flagged sample among many, but an early allocation may be a leak that lives (and is reported)
// for the whole run. So the first sampled events wait for the tables, at most kTablesWaitNs
// once per process (a writer that cannot get on, e.g. behind a loader lock this thread holds
// while a dlopen'd constructor allocates, costs that once, then stacks are short instead).
constexpr int64_t kTablesWaitNs = 500'000'000;
std::atomic<bool> g_tables_wait_over{false};

void wait_for_tables() {
  if (g_tables_wait_over.load(std::memory_order_relaxed)) return;
  if (cfi_ready()) {
    g_tables_wait_over.store(true, std::memory_order_relaxed);
    return;
  }
  const int64_t deadline = clock_ns() + kTablesWaitNs;
  while (!cfi_ready() && g_mem.recording.load(std::memory_order_relaxed) && clock_ns() < deadline) {
    struct timespec ts = {0, 1000000};
    syscall(SYS_nanosleep, &ts, nullptr);
  }
  g_tables_wait_over.store(true, std::memory_order_relaxed);
}

// The stack of the hook's caller (leaf first) and its Python frames, written after the event
// header. The walk starts at the hook's caller (unwind_cfi_caller: the preload's own frames are
// stepped over by frame pointer); if that finds no frame returning into `caller`, the unwinder
// starts here and walks through the preload's own frames, and everything up to the frame that
// returns into `caller` is cut off. pcs[0] is then caller - 1: inside the call instruction, so
// the collector's lookup of frame 0 lands on the calling line. `py_ctx`: how the Python frames
// are read (WalkContext::kPythonAllocator for the CPython allocator wrappers' samples only).
void capture_stack(RawMemEvent* ev, uint64_t caller, bool* new_code, python::WalkContext py_ctx) {
  auto* pcs = reinterpret_cast<uint64_t*>(ev + 1);
  uint8_t flags = 0;
  ThreadSlot* slot = t_slot;
  int n = 0;
  if (slot && slot->bounds.hi > slot->bounds.lo) {
    const UnwindResult r = unwind_cfi_caller(slot->bounds, caller, pcs, kMaxFrames, slot->memo);
    n = r.nframes;
    flags = r.flags;
  }
  if (n == 0)
    n = unwind_here_after(slot ? &slot->bounds : nullptr, pcs, kMaxFrames,
                          [caller](uint64_t pc) { return pc != caller; }, &flags);
  if (n == 0) n = 1;  // no stack bounds, or our own frames could not be unwound: the caller only
  pcs[0] = caller - 1;
  const int npy = python_frames(reinterpret_cast<python::RawPyFrame*>(pcs + n), &flags, new_code, py_ctx,
                                slot ? &slot->bounds : nullptr);
  ev->nframes = static_cast<uint16_t>(n);
  ev->npy = static_cast<uint8_t>(npy);
  ev->flags = flags;
}

// pymalloc's own bookkeeping, reached while a CPython wrapper's fast path runs it without the
// guard: the `arenas` array's realloc before a new arena and the radix tree's calloc after it
// (the arena's mmap itself runs under the guard: mem_python.cpp). These blocks live until exit,
// are not the program's objects (those are counted by the wrapper), and would otherwise show as
// an unfreed-at-exit candidate at whichever line needed the arena. The same for the realloc fast
// path's block that pymalloc does not own (libc's realloc: the wrapper already counted it) and
// pymalloc's memcpy when it moves a block (the allocator's own copy, as under the guard). The
// stack of such a call passes through the frame that returns to the wrapper's call site, or the
// hook's caller is that site itself (CPython reaches libc's realloc through tail calls, and the
// wrapper's own call to pymalloc is one): a frame returning there is an allocator call still in
// progress, and only the fast path runs one without the guard.
bool in_unguarded_pymalloc(const RawMemEvent* ev, uint64_t caller) {
  const uint64_t ra = t_mem.py_fast_ra;
  if (!ra) return false;
  if (caller == ra) return true;
  const auto* pcs = reinterpret_cast<const uint64_t*>(ev + 1);
  for (uint16_t i = 1; i < ev->nframes; ++i)
    if (pcs[i] == ra) return true;
  return false;
}

uint32_t event_len(const RawMemEvent* ev) {
  return static_cast<uint32_t>(sizeof(RawMemEvent) + ev->nframes * sizeof(uint64_t) +
                               ev->npy * sizeof(python::RawPyFrame));
}

void emit_free(uint64_t id) {
  EventSlot es;
  auto* ev = reinterpret_cast<RawMemEvent*>(
      es.reserve(sizeof(RawMemEvent), ring_bytes(), exact() ? kRingWaitNs : kFreeWaitSampledNs, g_mem.recording));
  if (!ev) {
    g_mem.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  memset(ev, 0, sizeof *ev);
  ev->t_ns = clock_ns();
  ev->alloc_id = id;
  ev->tid = current_tid();
  ev->kind = static_cast<uint8_t>(EventKind::kFree);
  es.commit(sizeof(RawMemEvent));
}

// The preload's own address range: its static libstdc++ allocates too (the exception emergency
// pool, at its static initialization), and those blocks are not the program's.
uintptr_t g_self_lo = 0, g_self_hi = 0;

int find_self(dl_phdr_info* info, size_t, void* data) {
  const uintptr_t probe = *static_cast<uintptr_t*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (probe < lo || probe >= hi) continue;
    // The whole module: from its lowest to its highest PT_LOAD.
    g_self_lo = UINTPTR_MAX;
    for (int j = 0; j < info->dlpi_phnum; ++j) {
      const ElfW(Phdr)& q = info->dlpi_phdr[j];
      if (q.p_type != PT_LOAD) continue;
      uintptr_t a = info->dlpi_addr + q.p_vaddr, b = a + q.p_memsz;
      if (a < g_self_lo) g_self_lo = a;
      if (b > g_self_hi) g_self_hi = b;
    }
    return 1;
  }
  return 0;
}

bool from_self(uint64_t caller) { return caller >= g_self_lo && caller < g_self_hi; }

void record_alloc(void* p, uint64_t size, uint64_t weight, wire::AllocKind kind, uint64_t caller) {
  if (from_self(caller)) return;
  wait_for_tables();
  const int64_t t = clock_ns();
  EventSlot es;
  auto* ev = reinterpret_cast<RawMemEvent*>(es.reserve(kMaxMemEvent, ring_bytes(), exact() ? kRingWaitNs : kSampleWaitSampledNs, g_mem.recording));
  if (!ev) {
    g_mem.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  memset(ev, 0, sizeof *ev);
  bool new_code = false;
  // A kPython allocation is a CPython allocator call (mem_python.cpp's wrappers): the calling
  // thread's frames are read directly there (python.h, WalkContext::kPythonAllocator), ~3
  // process_vm_readv calls fewer per sample. Every other hook reads them fault-tolerantly.
  capture_stack(ev, caller, &new_code,
                kind == wire::AllocKind::kPython ? python::WalkContext::kPythonAllocator : python::WalkContext::kHook);
  if (kind != wire::AllocKind::kPython && in_unguarded_pymalloc(ev, caller)) {
    es.abandon();
    return;
  }
  const uint64_t id = next_alloc_id();
  uint64_t replaced = 0;
  if (!g_mem.table.insert(reinterpret_cast<uint64_t>(p), id, &replaced)) {
    es.abandon();
    g_mem.table_full.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ev->t_ns = t;
  ev->alloc_id = id;
  ev->size = size;
  ev->weight = weight;
  ev->tid = current_tid();
  ev->kind = static_cast<uint8_t>(EventKind::kAlloc);
  ev->alloc_kind = static_cast<uint8_t>(kind);
  es.commit(event_len(ev));
  if (new_code) wake_writer();
  // The address was still recorded for an allocation whose release we did not see (it happened
  // under the guard): that one is gone.
  if (replaced) emit_free(replaced);
}

void record_copy(uint64_t size, uint64_t weight, uint64_t caller) {
  wait_for_tables();
  const int64_t t = clock_ns();
  EventSlot es;
  auto* ev = reinterpret_cast<RawMemEvent*>(es.reserve(kMaxMemEvent, ring_bytes(), exact() ? 0 : kSampleWaitSampledNs, g_mem.recording));
  if (!ev) {
    g_mem.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  memset(ev, 0, sizeof *ev);
  bool new_code = false;
  capture_stack(ev, caller, &new_code, python::WalkContext::kHook);
  if (in_unguarded_pymalloc(ev, caller)) {
    es.abandon();
    return;
  }
  ev->t_ns = t;
  ev->size = size;
  ev->weight = weight;
  ev->tid = current_tid();
  ev->kind = static_cast<uint8_t>(EventKind::kCopy);
  es.commit(event_len(ev));
  if (new_code) wake_writer();
}

}  // namespace

bool init(uint64_t interval, uint64_t copy_interval) {
  Guard guard;
  g_mem.interval = interval ? interval : 1;
  g_mem.copy_interval = copy_interval;
  if (!g_mem.table.init() || !g_fallback.init(kFallbackRingBytes)) return false;
  g_mem.mode.store(Mode::kOn, std::memory_order_release);
  return true;
}

void exclude_own_allocations() {
  uintptr_t probe = reinterpret_cast<uintptr_t>(&find_self);
  dl_iterate_phdr(find_self, &probe);
}

void settle_off() {
  if (!g_mem.recording.load(std::memory_order_acquire)) g_mem.mode.store(Mode::kOff, std::memory_order_release);
}

void set_recording(bool on) { g_mem.recording.store(on && enabled(), std::memory_order_release); }

uint64_t wire_flags() {
  uint64_t f = 0;
  if (exact()) f |= wire::kMemExact;
  if (g_mem.python_hooked.load(std::memory_order_acquire)) f |= wire::kMemPythonAllocator;
  return f;
}

void fork_prepare() {
  if (!enabled()) return;
  g_fallback.lock();  // before the stripes: a fallback producer takes a stripe lock inside it
  g_mem.table.lock_all();
}

void fork_parent() {
  if (enabled()) {
    g_mem.table.unlock_all();
    g_fallback.unlock();
  }
}

void fork_child() {
  if (enabled()) {
    g_mem.table.reset_in_child();
    g_fallback.reset_in_child();
    g_mem.dropped.store(0, std::memory_order_relaxed);
    g_mem.table_full.store(0, std::memory_order_relaxed);
  }
  t_mem.tid = 0;  // a new thread id
  t_mem.ring_stuck = false;
}

// A countdown reached zero while nothing is recorded. Memory profiling off for good: parked for
// ever. Stream ended (exit, exec, detach; a failed exec restarts it): parked for kIdleBytes, and
// marked undrawn, so that after a restart the next slow path draws a fresh countdown (no biased
// sample). Before the constructor decided: the slow path is simply taken again next time, so
// that sampling starts with the first allocation after it.
static void park(int64_t* countdown, bool* seeded) {
  const Mode mode = g_mem.mode.load(std::memory_order_relaxed);
  if (mode == Mode::kOff) {
    *countdown = kParked;
  } else if (mode == Mode::kOn) {
    *countdown = exact() ? 0 : kIdleBytes;  // exact mode must not miss a byte after a restart
    *seeded = false;
  }
}

// A countdown made due by an allocation or copy inside the profiler (the guard held: the copy
// entries and the CPython wrappers' fast paths charge without testing it): no sample, a new
// countdown, whether or not events are recorded yet. Not park()'s 64 MiB while nothing is
// recorded: the preload's constructor runs under the guard before recording starts, and its
// thread would then sample nothing of the program's first 64 MiB. Before the constructor has set
// the intervals (mode not kOn yet, interval 0), left as it is: the next call comes back here, as
// park() leaves it, and the first one recorded draws afresh. Memory profiling off for good, or
// copies not sampled (their interval 0 once on): parked. The interval is read after the mode
// (acquire: init() sets the intervals before kOn), so a thread racing with init() never parks
// for good on an interval it read too early.
// signal-safe (the sampling handler's own copies come here): no call but gettid (the seed).
static void skip_due(int64_t* countdown, bool* seeded, bool copy) {
  const Mode mode = g_mem.mode.load(std::memory_order_acquire);
  const uint64_t interval = copy ? g_mem.copy_interval : g_mem.interval;
  if (mode == Mode::kOff || (mode == Mode::kOn && interval == 0)) {
    *countdown = kParked;
    return;
  }
  if (interval == 0) return;
  ensure_seeded();
  *seeded = true;
  *countdown = draw_countdown(&t_mem.rng, interval);
}

void sampled_alloc(void* p, uint64_t size, wire::AllocKind kind, uint64_t caller) {
  ThreadState& t = t_mem;
  if (t.guard != 0) return skip_due(&t.countdown, &t.seeded, false);
  Guard guard;
  const int saved = errno;
  if (!g_mem.recording.load(std::memory_order_relaxed)) {
    park(&t.countdown, &t.seeded);
  } else {
    ensure_seeded();
    uint64_t weight = 0;
    if (decide(&t.countdown, &t.seeded, &t.rng, size, g_mem.interval, &weight))
      record_alloc(p, size, weight, kind, caller);
  }
  errno = saved;
}

void tracked_free(void* p) {
  Guard guard;
  const int saved = errno;
  const uint64_t id = g_mem.table.remove(reinterpret_cast<uint64_t>(p));
  if (id && g_mem.recording.load(std::memory_order_relaxed)) emit_free(id);
  errno = saved;
}

uint64_t tracked_take(void* p) {
  Guard guard;
  return g_mem.table.remove(reinterpret_cast<uint64_t>(p));  // takes no errno-setting call
}

void tracked_settle(void* p, uint64_t id, bool released) {
  Guard guard;
  const int saved = errno;
  uint64_t replaced = 0;
  // Back into the table when the release failed; if that cannot be done (table full), the block
  // is reported freed after all: an undercount is better than a leak that never happened.
  if (released || !g_mem.table.insert(reinterpret_cast<uint64_t>(p), id, &replaced)) {
    if (g_mem.recording.load(std::memory_order_relaxed)) emit_free(id);
  }
  errno = saved;
}

void sampled_copy(uint64_t size, uint64_t caller) {
  ThreadState& t = t_mem;
  if (t.guard != 0) return skip_due(&t.copy_countdown, &t.copy_seeded, true);
  Guard guard;
  const int saved = errno;
  if (!g_mem.recording.load(std::memory_order_relaxed)) {
    park(&t.copy_countdown, &t.copy_seeded);
  } else if (g_mem.copy_interval == 0) {
    t.copy_countdown = kParked;
  } else {
    ensure_seeded();
    uint64_t weight = 0;
    if (decide(&t.copy_countdown, &t.copy_seeded, &t.rng, size, g_mem.copy_interval, &weight))
      record_copy(size, weight, caller);
  }
  errno = saved;
}

}  // namespace mlprof::preload::mem
