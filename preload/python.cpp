// Reading CPython's frames from inside the profiled process (see python.h, docs/python.md).
//
// PARTLY SIGNAL CONTEXT. walk() and everything marked `// signal-safe` run inside the sampling
// signal handler, on whatever thread was interrupted, at any instruction, possibly while that
// thread is inside the interpreter changing the very frames we read.
//   Allowed there: loads/stores to our own statics and the caller's buffer, relaxed/acquire
//     atomics, raw syscalls (getpid, process_vm_readv), and two libpython functions resolved and
//     PLT-bound by detect(): Py_IsInitialized (a load) and PyGILState_GetThisThreadState
//     (pthread_getspecific on the gilstate TSS key; glibc's takes no lock).
//   Forbidden there: malloc/new/std::string, locks, stdio, dlsym, exceptions, errno changes
//     (saved and restored), and ANY direct dereference of interpreter memory: every byte of
//     CPython's state is copied with process_vm_readv on our own pid, which fails with EFAULT on a
//     bad address instead of faulting. Frames, code objects and thread states can be freed or
//     half-written when the signal lands, so every value read is validated before it is used.
// detect() and read_code() are NOT signal-safe (writer thread / start-up).
#include "preload/python.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload/python_layouts.h"

namespace mlprof::preload::python {
namespace {

using IsInitializedFn = int (*)();
using GetThisThreadStateFn = void* (*)();
using GetVersionFn = const char* (*)();

// Where the interpreters' thread-state lists are (walk_thread(), wall mode), byte offsets verified
// with offsetof() like python_layouts.h (docs/python.md, "Offsets"); 3.13 takes them from
// _Py_DebugOffsets when present.
struct ThreadList {
  int32_t rt_interp_head = 0;     // _PyRuntime.interpreters.head
  int32_t interp_next = 0;        // PyInterpreterState.next
  int32_t interp_threads = 0;     // PyInterpreterState.tstate_head (<= 3.10) / threads.head
  int32_t ts_next = 8;            // PyThreadState.next
  int32_t ts_thread_id = 0;       // PyThreadState.thread_id (pthread_self())
  int32_t ts_native_id = kNone;   // PyThreadState.native_thread_id (3.11+: the kernel tid)
};
constexpr ThreadList kThreadLists[] = {
    {32, 0, 8, 8, 176, kNone},     // 3.8
    {32, 0, 8, 8, 176, kNone},     // 3.9
    {32, 0, 8, 8, 176, kNone},     // 3.10
    {40, 0, 16, 8, 152, 160},      // 3.11
    {40, 0, 72, 8, 136, 144},      // 3.12
    {632, 7264, 7344, 8, 152, 160},  // 3.13
};

// Everything walk() needs, written once by detect() before g_ready is released.
struct State {
  Layout layout;
  IsInitializedFn is_initialized = nullptr;
  GetThisThreadStateFn this_thread_state = nullptr;
  uint64_t runtime = 0;        // &_PyRuntime
  uint64_t runtime_size = 0;   // its st_size (0 if unknown): the 3.12+ main interpreter lies inside
  uint64_t code_type = 0;      // &PyCode_Type
  uint64_t unicode_type = 0;   // &PyUnicode_Type (0: not checked)
  uint64_t bytes_type = 0;     // &PyBytes_Type (0: not checked)
  uint64_t gil_tstate_current = 0;  // &_PyRuntime.gilstate.tstate_current (<= 3.11), else 0
  ThreadList threads;          // walk_thread(): the interpreters' thread lists
};

State g_state;
std::atomic<bool> g_ready{false};
// 3.12+: the main interpreter's GIL (interp->ceval.gil never changes once set; the main
// interpreter lives inside _PyRuntime, so its address is stable too). Set once, by any thread.
std::atomic<uint64_t> g_main_interp{0}, g_main_gil{0};

// Never destroyed: the preload's exit handler (its last writer cycle, which may call detect() when
// a library was loaded since the previous cycle) runs after the loader has run the preload's
// static destructors (the handler was registered by the preload's constructor, before libc
// registered the loader's fini). Constant-initialized, so usable before any dynamic initializer.
union InterpreterBox {
  Interpreter v;
  constexpr InterpreterBox() : v() {}
  ~InterpreterBox() {}
};
constinit InterpreterBox g_interp_box;
Interpreter& g_interp = g_interp_box.v;
pthread_mutex_t g_detect_lock = PTHREAD_MUTEX_INITIALIZER;

struct Span {
  uint64_t addr;
  void* dst;
  size_t len;
};

// The `pid` of a walk inside CPython's allocator (WalkContext::kPythonAllocator): every address it
// reads is live memory of the calling thread's own, consistent interpreter state, copied with
// plain loads (see walk() in python.h). Never a real pid: a process is never pid 0.
constexpr pid_t kDirectReads = 0;

// The calling thread's own stack above the walk, [lo, hi): set by walk() for a hook's walk (kHook,
// kOwnCall) when its caller knows the thread's stack top, empty otherwise (a signal handler's walk
// empties it until it returns). That memory holds the frames of the walk's callers, live until it
// returns: a span inside it is copied, not read with process_vm_readv. 3.11/3.12 keep the
// _PyCFrame, and 3.12+ its C-stack entry frames, in the eval loop's C frame: on this stack.
struct OwnStack {
  uint64_t lo = 0, hi = 0;
  bool holds(const Span& sp) const { return lo != 0 && sp.addr >= lo && sp.addr < hi && sp.len <= hi - sp.addr; }
};
__thread OwnStack t_own_stack __attribute__((tls_model("initial-exec")));

// signal-safe. Copies the spans in order with one process_vm_readv; returns how many leading
// spans were copied completely (the kernel stops at the first bad address and never splits an
// element). Does not preserve errno: the callers' entry points do. n <= kMax. With kDirectReads
// the spans are copied directly (not fault-tolerant: see kDirectReads); so are spans on the
// thread's own stack above the walk (t_own_stack), whatever the pid.
template <int kMax = 6>
int read_spans(pid_t pid, const Span* spans, int n) {
  if (pid == kDirectReads) {
    for (int i = 0; i < n; ++i) memcpy(spans[i].dst, reinterpret_cast<const void*>(spans[i].addr), spans[i].len);
    return n;
  }
  const OwnStack own = t_own_stack;
  struct iovec local[kMax], remote[kMax];
  int idx[kMax];  // the span of each iovec
  int m = 0;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (own.holds(spans[i])) {
      memcpy(spans[i].dst, reinterpret_cast<const void*>(spans[i].addr), spans[i].len);
      continue;
    }
    local[m].iov_base = spans[i].dst;
    local[m].iov_len = spans[i].len;
    remote[m].iov_base = reinterpret_cast<void*>(spans[i].addr);
    remote[m].iov_len = spans[i].len;
    idx[m++] = i;
    total += spans[i].len;
  }
  if (m == 0) return n;
  long got = syscall(SYS_process_vm_readv, pid, local, static_cast<unsigned long>(m), remote,
                     static_cast<unsigned long>(m), 0UL);
  if (got < 0) return idx[0];
  if (static_cast<size_t>(got) == total) return n;
  size_t acc = 0;
  for (int k = 0; k < m; ++k) {
    acc += local[k].iov_len;
    if (acc > static_cast<size_t>(got)) return idx[k];  // the spans before it were all copied
  }
  return n;
}

// signal-safe
bool read_one(pid_t pid, uint64_t addr, void* dst, size_t len) {
  Span s{addr, dst, len};
  return read_spans(pid, &s, 1) == 1;
}

// Our pid for process_vm_readv. A getpid syscall costs ~260 ns here, so it is cached and
// refreshed in the child by a pthread_atfork handler (registered by detect()). A child made by a
// raw clone() without CLONE_VM (no atfork handlers) would read its parent: not supported. vfork /
// posix_spawn children share the parent's memory, so reading the parent is still right there.
std::atomic<pid_t> g_pid{0};

// signal-safe
pid_t own_pid() {
  pid_t p = g_pid.load(std::memory_order_relaxed);
  return p != 0 ? p : static_cast<pid_t>(syscall(SYS_getpid));
}

void refresh_pid_in_child() { g_pid.store(static_cast<pid_t>(syscall(SYS_getpid)), std::memory_order_relaxed); }

// Code objects already validated (ob_type == &PyCode_Type), with what walk() needs of them, so a
// walk reads each code object once per process instead of once per frame. Written from signal
// handlers on any thread: an entry is (tag = addr ^ val, val); a torn or raced entry fails the tag
// check and reads as a miss. A code object freed and its address reused is not noticed (its
// frames are gone by then; read_code() re-validates before anything is shipped), except while
// code frees are tracked (track_code_frees): then the freed object's entry is dropped first.
constexpr uint32_t kCodeCacheBits = 10;
struct CodeCacheEntry {
  std::atomic<uint64_t> tag{0}, val{0};
  std::atomic<uint32_t> fp{0};  // the fingerprint last sampled at this address (0: none yet)
  // The fingerprint read with the header by a hook walk while code frees were tracked, and that
  // tracking's epoch (bits 24-31); 0: none. Part of the tag.
  std::atomic<uint32_t> tracked_fp{0};
};
CodeCacheEntry g_code_cache[1u << kCodeCacheBits];
constexpr uint64_t kCodeValid = 1ULL << 63;

uint64_t tag_of(uint64_t addr, uint64_t val, uint32_t tracked_fp) {  // signal-safe
  return addr ^ val ^ (static_cast<uint64_t>(tracked_fp) * 0x9E3779B97F4A7C15ULL);
}

uint32_t code_slot(uint64_t addr) {  // signal-safe
  return static_cast<uint32_t>(((addr >> 4) * 0x9E3779B97F4A7C15ULL) >> (64 - kCodeCacheBits));
}

// signal-safe. val = kCodeValid | firsttraceable << 32 | code_units. *tracked_fp (when given)
// gets the entry's tracked fingerprint.
bool code_cache_get(uint64_t addr, uint64_t* val, uint32_t* tracked_fp = nullptr) {
  CodeCacheEntry& e = g_code_cache[code_slot(addr)];
  const uint64_t v = e.val.load(std::memory_order_relaxed);
  const uint32_t tf = e.tracked_fp.load(std::memory_order_relaxed);
  const uint64_t t = e.tag.load(std::memory_order_relaxed);
  if ((v & kCodeValid) == 0 || t != tag_of(addr, v, tf)) return false;
  *val = v;
  if (tracked_fp) *tracked_fp = tf;
  return true;
}

void code_cache_put(uint64_t addr, uint64_t val, uint32_t tracked_fp = 0) {  // signal-safe
  CodeCacheEntry& e = g_code_cache[code_slot(addr)];
  e.fp.store(0, std::memory_order_relaxed);
  e.val.store(val, std::memory_order_relaxed);
  e.tracked_fp.store(tracked_fp, std::memory_order_relaxed);
  e.tag.store(tag_of(addr, val, tracked_fp), std::memory_order_relaxed);
}

// The tracking epoch in a tracked fingerprint (bits 24-31), from g_code_track (never 0 when on).
uint32_t epoch_bits(uint32_t track) { return (track & 0xffu) << 24; }  // signal-safe

}  // namespace

std::atomic<uint32_t> g_code_track{0};
uint64_t g_code_type_addr = 0;

namespace {
void set_code_track(uint32_t epoch) {
  g_code_track.store(epoch, epoch ? std::memory_order_release : std::memory_order_relaxed);
}

// PyCode_Type.tp_dealloc (offset 48 in every PyTypeObject of 3.8-3.13: the var-object header,
// tp_name, tp_basicsize, tp_itemsize), as it was before mlprof's; null until installed.
constexpr uint64_t kTpDeallocOffset = 48;
using DeallocFn = void (*)(void*);
std::atomic<DeallocFn> g_code_dealloc_orig{nullptr};

uint64_t* code_dealloc_slot() { return reinterpret_cast<uint64_t*>(g_code_type_addr + kTpDeallocOffset); }

// Every code object's deallocation (a code object is freed nowhere else): its cache entry goes
// before its memory does. On the thread dropping the last reference, with the GIL (or, at
// finalization, the only thread left); not signal context.
void code_dealloc(void* op) {
  forget_code(reinterpret_cast<uintptr_t>(op));
  g_code_dealloc_orig.load(std::memory_order_acquire)(op);
}

// Replaces PyCode_Type.tp_dealloc with code_dealloc, once; true when it is (now or before).
// The type object is the interpreter's static, writable one (PyType_Ready writes it); the
// pointer is stored in one aligned word, so a thread reading it sees the old or the new one, and
// both free the object. Never undone: code_dealloc forwards for the process's whole life.
bool install_code_dealloc() {
  if (g_code_dealloc_orig.load(std::memory_order_relaxed)) return true;
  uint64_t* slot = code_dealloc_slot();
  const uint64_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  // The current one must be code in the interpreter's own object (not a torn or foreign value).
  Dl_info in_type{}, in_fn{};
  if (cur == 0 || !dladdr(reinterpret_cast<void*>(g_code_type_addr), &in_type) ||
      !dladdr(reinterpret_cast<void*>(cur), &in_fn) || in_type.dli_fbase != in_fn.dli_fbase)
    return false;
  g_code_dealloc_orig.store(reinterpret_cast<DeallocFn>(cur), std::memory_order_release);
  __atomic_store_n(slot, reinterpret_cast<uint64_t>(&code_dealloc), __ATOMIC_RELEASE);
  return true;
}
}  // namespace

void track_code_frees() {
  if (g_code_track.load(std::memory_order_relaxed) != 0 || !g_ready.load(std::memory_order_acquire)) return;
  if (!install_code_dealloc()) return;
  // The epoch starts after the hook is in place: a fingerprint cached under it belongs to an
  // object whose free will be seen. Tracking starts once, so there is one epoch. (A fork child
  // keeps the hook and the epoch.)
  set_code_track(1);
}

void check_code_frees() {
  if (g_code_track.load(std::memory_order_relaxed) == 0) return;
  if (__atomic_load_n(code_dealloc_slot(), __ATOMIC_ACQUIRE) == reinterpret_cast<uint64_t>(&code_dealloc)) return;
  set_code_track(0);  // another tool's dealloc: frees may bypass code_dealloc; off for good (track_code_frees runs once)
}

void forget_code(uint64_t addr) {
  CodeCacheEntry& e = g_code_cache[code_slot(addr)];
  uint64_t v;
  if (code_cache_get(addr, &v)) e.tag.store(0, std::memory_order_relaxed);
}

namespace {
constexpr uint32_t kNamedBits = 14;  // 16,384 addresses, 128 KiB: a PyTorch import has ~60,000 code
constexpr uint32_t kNamedProbes = 16;  // objects, but a program samples a few thousand of them
constexpr uint64_t kFpMask = 0xffffff;
// A slot holds one address: 39 bits of its hash with bit 63 set (never 0: 0 is an empty slot),
// and in the low 24 bits the fingerprint of the code object the writer last named there. Naming
// another code object at the same address replaces it: the one named before is no longer found.
std::atomic<uint64_t> g_named[1u << kNamedBits];

inline uint64_t named_hash(uint64_t code) { return fmix64(code); }  // signal-safe
inline uint64_t named_tag(uint64_t h) { return (h | (1ULL << 63)) & ~kFpMask; }  // signal-safe
inline std::atomic<uint64_t>& named_slot(uint64_t h, uint32_t i) {  // signal-safe
  return g_named[((h >> (64 - kNamedBits)) + i) & ((1u << kNamedBits) - 1)];
}
}  // namespace

void note_code_named(uint64_t code, uint32_t fp) {
  const uint64_t h = named_hash(code), tag = named_tag(h);
  for (uint32_t i = 0; i < kNamedProbes; ++i) {
    std::atomic<uint64_t>& slot = named_slot(h, i);
    const uint64_t v = slot.load(std::memory_order_relaxed);
    if (v == 0 || (v & ~kFpMask) == tag) {
      slot.store(tag | (fp & kFpMask), std::memory_order_relaxed);
      return;
    }
  }
}

void forget_named_codes() {
  for (auto& slot : g_named) slot.store(0, std::memory_order_relaxed);
}

bool code_was_named(uint64_t code, uint32_t fp) {  // signal-safe
  const uint64_t h = named_hash(code), tag = named_tag(h);
  for (uint32_t i = 0; i < kNamedProbes; ++i) {
    const uint64_t v = named_slot(h, i).load(std::memory_order_relaxed);
    if (v == 0) return false;
    if ((v & ~kFpMask) == tag) return (v & kFpMask) == fp;
  }
  return false;
}

namespace {

// signal-safe. Records fp as the fingerprint last sampled at addr; true when it differs from the
// one recorded before: another code object now lives at a freed one's address (pymalloc reuses
// them at once during imports), which the writer must read while it lives, like a new one.
bool code_cache_fp_changed(uint64_t addr, uint32_t fp) {
  CodeCacheEntry& e = g_code_cache[code_slot(addr)];
  const uint64_t v = e.val.load(std::memory_order_relaxed);
  if ((v & kCodeValid) == 0 ||
      e.tag.load(std::memory_order_relaxed) != tag_of(addr, v, e.tracked_fp.load(std::memory_order_relaxed)))
    return false;
  // Written only when it changed: the entries are shared by every thread's samples, and a store
  // per frame per sample would bounce their cache lines between cores.
  if (e.fp.load(std::memory_order_relaxed) == fp) return false;
  e.fp.store(fp, std::memory_order_relaxed);
  return true;
}

template <typename T>
T load(const uint8_t* buf, int32_t off) {  // signal-safe
  T v;
  memcpy(&v, buf + off, sizeof v);
  return v;
}

constexpr int32_t kFrameReadMax = 80;  // bytes of a frame struct we need (all fields below 80)
constexpr int32_t kTstateReadMax = 80;

int32_t frame_read_len(const Layout& l) {  // signal-safe
  int32_t end = l.fr_instr + 8;
  if (l.fr_back + 8 > end) end = l.fr_back + 8;
  if (l.fr_code + 8 > end) end = l.fr_code + 8;
  if (l.fr_owner + 1 > end) end = l.fr_owner + 1;
  if (l.fr_is_entry + 1 > end) end = l.fr_is_entry + 1;
  return end;
}

// What one frame read says.
struct FrameView {
  uint64_t back = 0, code = 0;
  int64_t instr = 0;  // f_lasti (int) or the instruction pointer
  uint8_t owner = 0, is_entry = 0;
};

FrameView parse_frame(const Layout& l, const uint8_t* b) {  // signal-safe
  FrameView v;
  v.back = load<uint64_t>(b, l.fr_back);
  v.code = load<uint64_t>(b, l.fr_code);
  if (l.interpreter_frames) {
    v.instr = static_cast<int64_t>(load<uint64_t>(b, l.fr_instr));
    v.owner = load<uint8_t>(b, l.fr_owner);
    if (l.fr_is_entry != kNone) v.is_entry = load<uint8_t>(b, l.fr_is_entry);
  } else {
    v.instr = load<int32_t>(b, l.fr_instr);
  }
  return v;
}

// signal-safe. 3.12+: where the interpreter's GIL state lies, or 0 when unknown. One read for
// sub-interpreters; none for the main interpreter once cached.
uint64_t gil_for_interp(pid_t pid, const State& s, uint64_t interp) {
  if (interp == 0 || (interp & 7) != 0) return 0;
  if (g_main_interp.load(std::memory_order_acquire) == interp) return g_main_gil.load(std::memory_order_relaxed);
  uint64_t gil = 0;
  if (!read_one(pid, interp + static_cast<uint64_t>(s.layout.interp_ceval_gil), &gil, sizeof gil)) return 0;
  if (gil == 0 || (gil & 7) != 0) return 0;
  bool is_main = s.runtime_size != 0 && interp >= s.runtime && interp < s.runtime + s.runtime_size;
  if (is_main) {
    uint64_t expected = 0;
    if (g_main_gil.compare_exchange_strong(expected, gil, std::memory_order_relaxed))
      g_main_interp.store(interp, std::memory_order_release);
  }
  return gil;
}

// Which thread is collecting. gc.collecting is the interpreter's flag, not a thread's, and the
// collecting thread lets go of the GIL in the middle of a collection whenever a finalizer does I/O
// or runs Python code past the switch interval: the thread holding the GIL then is not the
// collector (a thread spinning beside a gc.collect() loop whose objects' __del__ sleep was marked
// for all of its time). The collector is the thread that held the GIL when a sample first saw the
// flag set; a sample that sees it clear ends that collection. Samples are much denser than
// collections are long, so the first sighting is nearly always made while the collector still
// holds the GIL (it starts each collection with it, and traversing the heap comes first).
// signal-safe: one word, compare-and-swap.
std::atomic<uint64_t> g_gc_owner{0};  // the collector's tstate; 0: no collection seen running

bool gc_owner_is(uint64_t tstate, bool collecting, bool gil_held) {
  if (!collecting) {
    if (g_gc_owner.load(std::memory_order_relaxed) != 0) g_gc_owner.store(0, std::memory_order_relaxed);
    return false;
  }
  if (!gil_held) return false;
  uint64_t owner = g_gc_owner.load(std::memory_order_relaxed);
  if (owner == 0 && g_gc_owner.compare_exchange_strong(owner, tstate, std::memory_order_relaxed)) return true;
  return owner == tstate;
}

// The frame chain is read through a window: one read copies the frame AND the memory below it
// on the same page (at most kWindow bytes). From 3.11 on, frames live contiguously in the
// thread's data stack, callers below callees, so one read usually yields several frames;
// PyFrameObjects (<= 3.10) are heap objects and mostly cost one read each.
// How much a walk reads at once is its Budget: a signal handler may run on a small altstack
// (8-16 KiB), a hook (memory, GPU callbacks) runs on the thread's own stack and reads more per
// syscall (each process_vm_readv costs ~1-1.5 us, most of a walk's time).
struct SignalBudget {
  static constexpr int32_t kWindow = 2048;
  static constexpr int kPendingFps = 4;  // code fingerprints read together (kFpMax bytes each)
  // Trusts fingerprints cached by hook walks, but caches none: a torn frame may name a freed
  // code object whose header still looks valid.
  static constexpr bool kCacheTrackedFps = false;
  static constexpr bool kGuess = false;  // a handler may interrupt a hook's walk (walk_tstate)
  static constexpr bool kGcFlag = true;  // CPU samples: time in the garbage collector (kFrameInGc)
};
struct HookBudget {
  static constexpr int32_t kWindow = 4096;
  static constexpr int kPendingFps = 16;
  static constexpr bool kCacheTrackedFps = true;  // the thread's own frames, not torn: see g_code_track
  static constexpr bool kGuess = true;  // the calling thread's own walks, syscalls: see WalkGuess
  static constexpr bool kGcFlag = false;
};
// Inside CPython's allocator (WalkContext::kPythonAllocator): the same as a hook walk, read with
// plain copies, so a window needs to hold little more than a frame (a copy, not a syscall, each).
struct PythonAllocatorBudget {
  static constexpr int32_t kWindow = 512;
  static constexpr int kPendingFps = HookBudget::kPendingFps;
  static constexpr bool kCacheTrackedFps = true;
  static constexpr bool kGuess = false;  // plain copies: nothing to save
  static constexpr bool kGcFlag = false;
};
// The writer walking another thread (walk_thread, wall mode): its stack is the writer's own, but
// that thread may wake and change its frames during the walk, so like a signal walk it trusts
// tracked fingerprints and caches none.
struct OtherThreadBudget {
  static constexpr int32_t kWindow = HookBudget::kWindow;
  static constexpr int kPendingFps = HookBudget::kPendingFps;
  static constexpr bool kCacheTrackedFps = false;
  static constexpr bool kGuess = false;  // another thread's frames
  static constexpr bool kGcFlag = true;  // wall mode's samples
};
constexpr uint64_t kPage = 4096;

template <int32_t kWindow>
struct Window {
  uint64_t base = 0;
  uint32_t len = 0;
  uint8_t buf[kWindow];
  bool holds(uint64_t addr, int32_t flen) const {  // signal-safe
    return addr >= base && addr + static_cast<uint64_t>(flen) <= base + len;
  }
  // The span that reads the frame at `addr` and what lies below it on its page.
  Span span_for(uint64_t addr, int32_t flen) {  // signal-safe
    const uint64_t end = addr + static_cast<uint64_t>(flen);
    uint64_t start = end - static_cast<uint64_t>(kWindow);
    const uint64_t page = addr & ~(kPage - 1);
    if (start < page || start > addr) start = page;
    return Span{start, buf, static_cast<size_t>(end - start)};
  }
  void set(const Span& sp) {  // signal-safe
    base = sp.addr;
    len = static_cast<uint32_t>(sp.len);
  }
};

// The bytes of a code object that fingerprint it (identity_hash: co_filename, co_name,
// co_firstlineno), as one range; len 0 when they lie too far apart to read cheaply.
constexpr int32_t kFpMax = 96;
struct FpRange {
  int32_t lo = 0, len = 0;
};
FpRange fp_range(const Layout& l) {  // signal-safe
  int32_t lo = l.co_filename, hi = l.co_filename + 8;
  for (int32_t off : {l.co_name, l.co_firstlineno}) {
    if (off < lo) lo = off;
    if (off + 8 > hi) hi = off + 8;
  }
  return hi - lo <= kFpMax ? FpRange{lo, hi - lo} : FpRange{};
}
uint32_t fp_from(const Layout& l, const FpRange& r, const uint8_t* buf) {  // signal-safe
  return fingerprint24(identity_hash(load<uint64_t>(buf, l.co_filename - r.lo), load<uint64_t>(buf, l.co_name - r.lo),
                                     load<int32_t>(buf, l.co_firstlineno - r.lo)));
}
void set_fp(RawPyFrame& o, uint32_t fp) {  // signal-safe
  o.fp[0] = static_cast<uint8_t>(fp);
  o.fp[1] = static_cast<uint8_t>(fp >> 8);
  o.fp[2] = static_cast<uint8_t>(fp >> 16);
}

// The frame chain from `frame`, innermost first, into out[0..max): at most one read per frame (the
// next frame's window plus, the first time a code object is seen, its header), usually fewer.
// `extras` (nextra <= 2) are read together with the first frame (the GIL state 3.12+, the
// collector's flag); *extras_got: how many of them were read. Returns the count; *failed when a
// read failed or a check did not hold.
// signal-safe
// `win` is the caller's (a hook budget's window is 4 KiB of stack); with `loaded` it already holds
// `frame` (walk_tstate's speculative read) and no extras are read.
template <class Budget>
int walk_frames(pid_t pid, const State& s, uint64_t frame, RawPyFrame* out, int max, const Span* extras, int nextra,
                int* extras_got, bool* failed, bool* new_code, Window<Budget::kWindow>& win, bool loaded = false) {
  constexpr int kMaxSpans = 5 + Budget::kPendingFps;  // code header, firsttraceable, fp, next window, extra, fps
  const Layout& l = s.layout;
  const int32_t flen = frame_read_len(l);
  Span spans[kMaxSpans];
  int nspans = 0;
  int n = 0;
  int got = 0;
  *failed = false;
  if (extras_got) *extras_got = 0;
  if ((frame & 7) != 0) {
    *failed = true;
    return 0;
  }
  if (!loaded) {
    const Span first = win.span_for(frame, flen);
    spans[nspans++] = first;
    for (int i = 0; i < nextra && i < 2; ++i) spans[nspans++] = extras[i];
    got = read_spans<kMaxSpans>(pid, spans, nspans);
    if (got < 1) {
      *failed = true;
      return 0;
    }
    win.set(first);
    if (extras_got) *extras_got = got - 1;
  }

  // Code fingerprints (RawPyFrame::fp) are read together with the reads the walk makes anyway,
  // or two at a time when frames and code come from the window and the cache: pending[] holds
  // the frames whose fingerprint is not read yet (0 stays when a read fails: "not checked").
  const FpRange fpr = fp_range(l);
  struct PendingFp {
    int out_index;  // -1: the current frame, not emitted yet
    uint8_t buf[kFpMax];
  };
  PendingFp pending[Budget::kPendingFps];
  int npending = 0;
  uint32_t current_fp = 0;  // the current frame's, once read
  // Appends the pending fingerprint spans to spans[]; after the read, finish_fps() stores them.
  auto add_fps = [&](uint64_t code_of_current, Span* sp, int* nsp) {
    for (int k = 0; k < npending; ++k) {
      const uint64_t code = pending[k].out_index < 0 ? code_of_current : out[pending[k].out_index].code;
      sp[(*nsp)++] = Span{code + static_cast<uint64_t>(fpr.lo), pending[k].buf, static_cast<size_t>(fpr.len)};
    }
  };
  auto finish_fps = [&](int first_span, int got_spans) {
    for (int k = 0; k < npending; ++k) {
      const uint32_t fp = first_span + k < got_spans ? fp_from(l, fpr, pending[k].buf) : 0;
      if (pending[k].out_index < 0) current_fp = fp;
      else set_fp(out[pending[k].out_index], fp);
    }
    npending = 0;
  };
  // At the end of the walk: the fingerprints still pending, in one read.
  auto flush_fps = [&]() {
    if (npending == 0) return;
    Span sp[Budget::kPendingFps] = {};  // (zeroed: GCC cannot see that only nsp <= npending are read)
    int nsp = 0;
    add_fps(0, sp, &nsp);
    finish_fps(0, read_spans<Budget::kPendingFps>(pid, sp, nsp));
  };

  // While code frees are tracked, fingerprints cached by hook walks are trusted.
  const uint32_t track = g_code_track.load(std::memory_order_relaxed);
  bool emitted_since_shim = false;  // 3.12+: a frame was emitted since the last CSTACK shim
  // Frames visited, emitted or not (shims, incomplete frames): a cycle cannot spin forever.
  const int max_visits = 4 * max + 64;
  for (int visits = 0;; ++visits) {
    if (visits >= max_visits) {
      *failed = true;
      return n;
    }
    const FrameView f = parse_frame(l, win.buf + (frame - win.base));
    const bool shim = l.owner_cstack != kNone && f.owner == static_cast<uint8_t>(l.owner_cstack);
    if ((l.interpreter_frames && f.owner > l.owner_max) || (f.back & 7) != 0) {
      *failed = true;
      return n;
    }
    // What this step must read: the code object's header (first sighting only) and the next
    // frame's window (when it is not in the current one), together.
    uint64_t code_val = 0;
    uint8_t code_hdr[16];  // ob_type and ob_size, read from code + 8
    int32_t firsttraceable = 0;
    uint8_t fp_buf[kFpMax];
    bool fp_known = false;  // tracked: the fingerprint comes from the cache or with the header
    uint32_t current_fp_known = 0;
    nspans = 0;
    if (!shim) {
      if (f.code == 0 || (f.code & 7) != 0) {
        *failed = true;
        return n;
      }
      uint32_t tracked_fp = 0;
      bool hit = code_cache_get(f.code, &code_val, &tracked_fp);
      const bool tracked_hit = track != 0 && hit && tracked_fp != 0 && (tracked_fp & 0xff000000u) == epoch_bits(track);
      if (tracked_hit) {
        // Cached by a hook walk while the object was alive, and not freed since (its free would
        // have dropped the entry): whatever frame names this address names that object.
        current_fp_known = tracked_fp & 0xffffffu;
        fp_known = true;
      } else if (track != 0 && Budget::kCacheTrackedFps) {
        // An entry without this epoch's fingerprint is read again (a signal walk may have cached
        // a freed object's header from a torn frame), with the fingerprint.
        hit = false;
        fp_known = fpr.len != 0;
      }
      if (!hit) {
        spans[nspans++] = Span{f.code + 8, code_hdr, sizeof code_hdr};
        if (l.co_firsttraceable != kNone)
          spans[nspans++] = Span{f.code + static_cast<uint64_t>(l.co_firsttraceable), &firsttraceable, sizeof firsttraceable};
        if (fp_known)
          spans[nspans++] = Span{f.code + static_cast<uint64_t>(fpr.lo), fp_buf, static_cast<size_t>(fpr.len)};
      }
    }
    const int code_spans = nspans;
    const bool need_next = f.back != 0 && !win.holds(f.back, flen);
    Span next_span{};
    if (need_next) {
      next_span = win.span_for(f.back, flen);
      spans[nspans++] = next_span;
    }
    current_fp = 0;
    if (!shim && fpr.len != 0 && !fp_known) pending[npending++].out_index = -1;
    int fp_first = -1;
    if (npending != 0 && (nspans != 0 || npending == Budget::kPendingFps)) {
      fp_first = nspans;
      add_fps(f.code, spans, &nspans);
    }
    got = nspans ? read_spans<kMaxSpans>(pid, spans, nspans) : 0;
    if (fp_first >= 0) finish_fps(fp_first, got);
    if (got < code_spans) {
      *failed = true;
      return n;
    }
    if (code_spans != 0) {
      // Py_SIZE(code) counts code units from 3.11 on; before, the code object is not a
      // PyVarObject (offset 16 holds co_argcount and co_posonlyargcount).
      const int64_t units = l.interpreter_frames ? static_cast<int64_t>(load<uint64_t>(code_hdr, 8)) : 1;
      if (load<uint64_t>(code_hdr, 0) != s.code_type || units < 0 || units > 0x7fffffff || firsttraceable < 0) {
        *failed = true;
        return n;
      }
      code_val = kCodeValid | (static_cast<uint64_t>(firsttraceable) << 32) | static_cast<uint64_t>(units);
      uint32_t tracked_fp = 0;
      if (Budget::kCacheTrackedFps && fp_known) {  // read with the header (above)
        current_fp_known = fp_from(l, fpr, fp_buf);
        tracked_fp = current_fp_known != 0 ? epoch_bits(track) | current_fp_known : 0;
      }
      code_cache_put(f.code, code_val, tracked_fp);
      *new_code = true;
    }
    if (fp_known) current_fp = current_fp_known;

    if (shim) {
      // The frame emitted just before a shim was entered by its own C call of the eval loop.
      if (emitted_since_shim && n > 0) out[n - 1].flags |= kFrameEntry;
      emitted_since_shim = false;
    } else {
      uint32_t offset = kBeforeStart;
      bool incomplete = false;
      if (l.interpreter_frames) {
        const int64_t code_units = static_cast<int64_t>(code_val & 0xffffffffULL);
        const int64_t first_traceable = static_cast<int64_t>((code_val >> 32) & 0x7fffffffULL);
        const int64_t rel = f.instr - static_cast<int64_t>(f.code + static_cast<uint64_t>(l.co_code_adaptive));
        if (code_units <= 0 || rel >= 2 * code_units || (rel & 1) != 0 || rel < -2) {
          *failed = true;
          return n;
        }
        // CPython's _PyFrame_IsIncomplete: a frame that has not reached RESUME yet (it is
        // still copying free variables / making cells) is not shown; generators excepted.
        incomplete = f.owner != 1 && l.co_firsttraceable != kNone && rel < 2 * first_traceable;
        if (rel >= 0) offset = static_cast<uint32_t>(rel);
      } else if (f.instr >= 0) {
        if (f.instr >= (1 << 28)) {
          *failed = true;
          return n;
        }
        offset = static_cast<uint32_t>(l.lasti_in_units ? f.instr * 2 : f.instr);
      }
      // The current frame's fingerprint, if still pending, becomes the emitted frame's (or is
      // dropped with the frame).
      const bool cur_pending = npending > 0 && pending[npending - 1].out_index < 0;
      if (cur_pending) --npending;
      if (n == max && !incomplete) {  // depth cap: the outermost frames are dropped
        flush_fps();
        return n;
      }
      if (!incomplete) {
        RawPyFrame& o = out[n++];
        o.code = f.code;
        o.instr_offset = offset;
        o.flags = 0;
        if (!l.interpreter_frames || (l.fr_is_entry != kNone && f.is_entry)) o.flags |= kFrameEntry;
        set_fp(o, current_fp);
        if (cur_pending) pending[npending++].out_index = n - 1;
        emitted_since_shim = true;
      }
    }
    if (f.back == 0) {
      // The thread's outermost frame is always an entry (3.12+: its shim may be missing).
      if (n > 0) out[n - 1].flags |= kFrameEntry;
      flush_fps();
      return n;
    }
    if (need_next) {
      if (got < nspans) {
        *failed = true;
        return n;
      }
      win.set(next_span);
    }
    frame = f.back;
  }
}

}  // namespace

namespace {

// A hook walk's guess at where the calling thread's frames start: what its previous hook walk
// found (the tstate, on 3.11/3.12 its _PyCFrame, the innermost frame). A thread that launches
// kernels or allocates in a loop starts its walks from the same places every time, so the
// tstate, the cframe and the first frame's window are read together in ONE process_vm_readv
// instead of three dependent ones, and the guess is then checked against what was read
// (tstate->cframe, cframe->current_frame). A wrong guess costs the bytes read for it; the walk
// goes on with its usual reads. Only the thread's own hook walks (Budget::kGuess) use it: the
// thread's frames cannot change while it is inside the walk, so the spans read together are as
// consistent as when read one after the other.
struct WalkGuess {
  uint64_t tstate = 0, cframe = 0, frame = 0;
};
__thread WalkGuess t_guess __attribute__((tls_model("initial-exec")));

// signal-safe. Walks the frames of one thread state: the tstate in one read, the _PyCFrame on
// 3.11/3.12, then the frames (all in one read when Budget::kGuess and the guess holds); 3.12+ the
// GIL state with the first frame, or copied (the main interpreter's). *sample_flags gets
// SampleFlags.
template <class Budget>
int walk_tstate(pid_t pid, const State& s, uint64_t tstate, RawPyFrame* out, int max, uint8_t* sample_flags) {
  const Layout& l = s.layout;
  uint8_t flags = kSampleHasPython;
  const bool has_cframe = l.cframe_current_frame != kNone;
  const int32_t cf_len = has_cframe ? (l.cframe_current_frame > l.cframe_previous ? l.cframe_current_frame : l.cframe_previous) + 8 : 0;
  // 3.12+: the GIL's (last_holder, locked), read together with the first frame.
  uint8_t gil_buf[16] = {};
  const int32_t gil_lo = l.gil_last_holder < l.gil_locked ? l.gil_last_holder : l.gil_locked;
  const int32_t gil_hi = l.gil_last_holder + 8 > l.gil_locked + 4 ? l.gil_last_holder + 8 : l.gil_locked + 4;
  auto gil_span_at = [&](uint64_t gil) {
    return Span{gil + static_cast<uint64_t>(gil_lo), gil_buf, static_cast<size_t>(gil_hi - gil_lo)};
  };
  Window<Budget::kWindow> win;

  // 1. The thread state in one read; with a guess, also the cframe and the first frame's window.
  uint8_t ts[kTstateReadMax];
  uint8_t cf[24];
  uint64_t gil_holder = 0;
  Span spans[3];  // tstate, cframe (guessed), window (guessed)
  int nspans = 0;
  spans[nspans++] = Span{tstate, ts, sizeof ts};
  // <= 3.11: the GIL holder lies inside _PyRuntime (process-lifetime memory): copied.
  if (s.gil_tstate_current != 0) read_one(kDirectReads, s.gil_tstate_current, &gil_holder, sizeof gil_holder);
  const int base_spans = nspans;
  WalkGuess guess;
  Span guess_win{};
  bool guessing = false;
  if constexpr (Budget::kGuess) {
    guess = t_guess;
    guessing = guess.tstate == tstate && guess.frame != 0 && (guess.frame & 7) == 0 &&
               (!has_cframe || (guess.cframe != 0 && (guess.cframe & 7) == 0));
    if (guessing) {
      if (has_cframe) spans[nspans++] = Span{guess.cframe, cf, static_cast<size_t>(cf_len)};
      guess_win = win.span_for(guess.frame, frame_read_len(l));
      spans[nspans++] = guess_win;
    }
  }
  const int got = read_spans(pid, spans, nspans);
  if (got < 1) {
    *sample_flags = flags | kSampleWalkFailed;
    return 0;
  }
  if (s.gil_tstate_current != 0 && gil_holder == tstate) flags |= kSampleGilHeld;
  uint64_t frame = load<uint64_t>(ts, l.ts_frame);
  const uint64_t interp = load<uint64_t>(ts, l.ts_interp);
  // What of the guess holds: the cframe read, the window (the first frame is the guessed one).
  bool have_cf = false, have_win = false;
  if (guessing) {
    int k = base_spans;
    if (has_cframe) have_cf = got > k++ && frame == guess.cframe;
    const uint64_t first = has_cframe ? (have_cf ? load<uint64_t>(cf, l.cframe_current_frame) : 0) : frame;
    have_win = got > k && first == guess.frame;
  }

  // 2. 3.11/3.12: tstate->cframe->current_frame (and cframe->previous, see below).
  uint64_t prev_cframe = 0;
  const uint64_t cframe = has_cframe ? frame : 0;
  if (has_cframe && frame != 0) {
    if (!have_cf && ((frame & 7) != 0 || !read_one(pid, frame, cf, static_cast<size_t>(cf_len)))) {
      *sample_flags = flags | kSampleWalkFailed;
      return 0;
    }
    frame = load<uint64_t>(cf, l.cframe_current_frame);
    prev_cframe = load<uint64_t>(cf, l.cframe_previous);
  }
  if constexpr (Budget::kGuess) t_guess = WalkGuess{tstate, cframe, frame};

  const uint64_t gil = l.interp_ceval_gil != kNone ? gil_for_interp(pid, s, interp) : 0;
  const Span gil_span = gil_span_at(gil);
  bool gil_ok = false;
  // The main interpreter's GIL state lies inside _PyRuntime (process-lifetime memory, which
  // holds_gil reads with plain loads too): copied, not read with the frames.
  const bool gil_static = gil != 0 && gil == g_main_gil.load(std::memory_order_relaxed);
  if (gil_static) gil_ok = read_spans(kDirectReads, &gil_span, 1) == 1;

  // Sampling walks: the collector's flag (gc.collecting: a collection is running in this
  // interpreter), read with the first frame, or copied where it lies inside _PyRuntime (3.8's
  // runtime-wide state; the main interpreter's from 3.12).
  int32_t gc_collecting = 0;
  Span gc_span{};
  bool want_gc = false, gc_static = false, gc_ok = false;
  if constexpr (Budget::kGcFlag) {
    if (l.rt_gc_collecting != kNone) {
      gc_span = Span{s.runtime + static_cast<uint64_t>(l.rt_gc_collecting), &gc_collecting, sizeof gc_collecting};
      want_gc = gc_static = true;
    } else if (l.interp_gc_collecting != kNone && interp != 0 && (interp & 7) == 0) {
      gc_span = Span{interp + static_cast<uint64_t>(l.interp_gc_collecting), &gc_collecting, sizeof gc_collecting};
      want_gc = true;
      gc_static = s.runtime_size != 0 && gc_span.addr >= s.runtime && gc_span.addr + gc_span.len <= s.runtime + s.runtime_size;
    }
    if (gc_static && frame != 0) gc_ok = read_spans(kDirectReads, &gc_span, 1) == 1;
  }

  // 3. The frames.
  int n = 0;
  bool failed = false, new_code = false;
  if (frame != 0) {
    if (have_win) {  // the first frame's window came with the tstate
      win.set(guess_win);
      if (gil != 0 && !gil_static) gil_ok = read_spans(pid, &gil_span, 1) == 1;
      n = walk_frames<Budget>(pid, s, frame, out, max, nullptr, 0, nullptr, &failed, &new_code, win, true);
    } else {
      Span extras[2] = {};  // only the first nextra are read (GCC cannot tell)
      int nextra = 0, gil_at = -1, gc_at = -1;
      if (gil != 0 && !gil_static) gil_at = nextra, extras[nextra++] = gil_span;
      if (want_gc && !gc_static) gc_at = nextra, extras[nextra++] = gc_span;
      int extras_got = 0;
      n = walk_frames<Budget>(pid, s, frame, out, max, extras, nextra, &extras_got, &failed, &new_code, win);
      if (gil_at >= 0) gil_ok = extras_got > gil_at;
      if (gc_at >= 0) gc_ok = extras_got > gc_at;
    }
    // 3.11/3.12 eval-loop entry sets tstate->cframe = &cframe a few instructions before
    // cframe.current_frame (an uninitialized local until then): a walk that fails on its very
    // first frame is retried from the previous cframe, which still holds the caller's frames
    // (the new frame, not started yet, would be skipped as incomplete anyway).
    if (failed && n == 0 && prev_cframe != 0 && (prev_cframe & 7) == 0) {
      uint64_t cur = 0;
      if (read_one(pid, prev_cframe + static_cast<uint64_t>(l.cframe_current_frame), &cur, sizeof cur) && cur != 0)
        n = walk_frames<Budget>(pid, s, cur, out, max, nullptr, 0, nullptr, &failed, &new_code, win);
    }
  } else if (gil != 0 && !gil_static) {
    gil_ok = read_spans(pid, &gil_span, 1) == 1;
  }
  if (gil_ok && load<int32_t>(gil_buf, l.gil_locked - gil_lo) != 0 &&
      load<uint64_t>(gil_buf, l.gil_last_holder - gil_lo) == tstate)
    flags |= kSampleGilHeld;
  if (gc_ok && gc_owner_is(tstate, gc_collecting != 0, (flags & kSampleGilHeld) != 0) && n > 0)
    out[0].flags |= kFrameInGc;
  for (int i = 0; i < n; ++i) {
    const uint32_t fp = frame_fingerprint(out[i]);
    if (fp != 0 && code_cache_fp_changed(out[i].code, fp)) new_code = true;
  }
  // A cache miss is new to the writer only when the writer has not named that code object yet.
  if (new_code) {
    new_code = false;
    for (int i = 0; i < n && !new_code; ++i) {
      const uint32_t fp = frame_fingerprint(out[i]);
      new_code = fp == 0 || !code_was_named(out[i].code, fp);
    }
  }
  if (failed) flags |= kSampleWalkFailed;
  if (new_code) flags |= kSampleNewCode;
  *sample_flags = flags;
  return n;
}

// Whether the calling thread is the interpreter's main thread: _PyRuntime.main_thread, the ident of
// the thread that initialised the runtime (CPython resets it in a fork child), a plain load of
// process-lifetime memory. A wrong offset reads a word that is not this thread's pthread_t: no.
bool on_python_main_thread(const State& s) {
  if (s.layout.rt_main_thread == kNone) return false;
  const uint64_t main = *reinterpret_cast<const volatile uint64_t*>(s.runtime + static_cast<uint64_t>(s.layout.rt_main_thread));
  return main != 0 && main == static_cast<uint64_t>(pthread_self());
}

// Whether the calling thread, whose thread state is tstate, holds the GIL: plain loads of
// process-lifetime memory only (<= 3.11 _PyRuntime.gilstate.tstate_current; 3.12+ the main
// interpreter's GIL, once a walk found it: inside _PyRuntime). Only this thread can release a GIL
// it holds, so a yes cannot go stale during the walk. A subinterpreter's own GIL: no (the caller
// then reads fault-tolerantly).
bool holds_gil(const State& s, uint64_t tstate) {
  if (s.gil_tstate_current != 0)
    return *reinterpret_cast<const volatile uint64_t*>(s.gil_tstate_current) == tstate;
  const Layout& l = s.layout;
  const uint64_t gil = g_main_gil.load(std::memory_order_relaxed);
  if (gil == 0 || l.gil_locked == kNone || l.gil_last_holder == kNone) return false;
  return *reinterpret_cast<const volatile int32_t*>(gil + static_cast<uint64_t>(l.gil_locked)) != 0 &&
         *reinterpret_cast<const volatile uint64_t*>(gil + static_cast<uint64_t>(l.gil_last_holder)) == tstate;
}

}  // namespace

// signal-safe
int walk(RawPyFrame* out, int max, uint8_t* sample_flags, WalkContext ctx, uint64_t own_stack_lo, uint64_t own_stack_hi) {
  *sample_flags = 0;
  if (!g_ready.load(std::memory_order_acquire) || max <= 0) return 0;
  const State& s = g_state;
  const int saved_errno = errno;
  if (!s.is_initialized()) {
    errno = saved_errno;
    return 0;
  }
  const uint64_t tstate = reinterpret_cast<uint64_t>(s.this_thread_state());
  if (tstate == 0) {
    errno = saved_errno;
    return 0;
  }
  // A signal handler's walk may interrupt a hook's: it puts the hook's t_own_stack back when done.
  // A hook's walk must run on the stack the bounds describe (not on a fiber's stack elsewhere):
  // then all of [here, hi) is mapped. A signal handler's caller passes the interrupted code's
  // live stack (its stack pointer up to the top), whatever stack the handler runs on.
  const OwnStack saved_own = t_own_stack;
  const uint64_t here = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  if (ctx == WalkContext::kSignal)
    t_own_stack = own_stack_lo < own_stack_hi ? OwnStack{own_stack_lo, own_stack_hi} : OwnStack{};
  else
    t_own_stack = here >= own_stack_lo && here < own_stack_hi ? OwnStack{here, own_stack_hi} : OwnStack{};
  int n;
  switch (ctx) {
    case WalkContext::kPythonAllocator:
      n = walk_tstate<PythonAllocatorBudget>(kDirectReads, s, tstate, out, max, sample_flags);
      break;
    case WalkContext::kHook:
    case WalkContext::kOwnCall: {
      // Plain copies when the thread holds the GIL: the state in which CPython's tracemalloc reads
      // the same frames with plain loads from its raw-domain hook (PyMem_RawMalloc, which pymalloc
      // and CPython's internals use; it takes the GIL there, a no-op for its holder), and that of
      // any extension code holding the GIL, which may call malloc at will (python.h).
      // A call from C code (kOwnCall, GPU callbacks) also on the interpreter's main thread (the one
      // that initialised it) without the GIL: interpreter shutdown frees the states (and data
      // stacks) of the threads it did not join, daemon threads and threads started from C, which
      // may still be inside a library call with the GIL released; it runs on the main thread, whose
      // own state it never frees while that thread can still be inside a call (a walk after
      // shutdown began stops at the is_initialized check above). An embedding program that starts
      // Python on a worker thread makes that worker the main thread, not the process's first thread.
      const bool direct = holds_gil(s, tstate) || (ctx == WalkContext::kOwnCall && on_python_main_thread(s));
      n = direct ? walk_tstate<PythonAllocatorBudget>(kDirectReads, s, tstate, out, max, sample_flags)
                 : walk_tstate<HookBudget>(own_pid(), s, tstate, out, max, sample_flags);
      break;
    }
    default:
      n = walk_tstate<SignalBudget>(own_pid(), s, tstate, out, max, sample_flags);
      break;
  }
  t_own_stack = saved_own;
  errno = saved_errno;
  return n;
}

// Not signal context (the writer thread). Finds the thread state of another thread through the
// interpreters' thread lists, with the same fault-tolerant reads (the lists change as threads
// come and go: a torn list ends the search or the walk, never a fault).
int walk_thread(uint64_t pthread_id, uint32_t tid, RawPyFrame* out, int max, uint8_t* sample_flags) {
  *sample_flags = 0;
  t_own_stack = OwnStack{};  // another thread's frames: nothing is on this stack
  if (!g_ready.load(std::memory_order_acquire) || max <= 0) return 0;
  const State& s = g_state;
  const ThreadList& tl = s.threads;
  if (!s.is_initialized()) return 0;
  const pid_t pid = own_pid();
  uint64_t interp = 0;
  if (!read_one(pid, s.runtime + static_cast<uint64_t>(tl.rt_interp_head), &interp, sizeof interp)) return 0;
  int32_t ts_len = tl.ts_next + 8;
  if (tl.ts_thread_id + 8 > ts_len) ts_len = tl.ts_thread_id + 8;
  if (tl.ts_native_id != kNone && tl.ts_native_id + 8 > ts_len) ts_len = tl.ts_native_id + 8;
  uint8_t ts[256];
  if (ts_len > static_cast<int32_t>(sizeof ts)) return 0;
  int budget = 100000;  // list entries visited at most: a cycle in a torn list cannot spin
  for (int ni = 0; interp != 0 && (interp & 7) == 0 && ni < 256; ++ni) {
    uint64_t tstate = 0, next_interp = 0;
    const Span sp[2] = {{interp + static_cast<uint64_t>(tl.interp_threads), &tstate, sizeof tstate},
                        {interp + static_cast<uint64_t>(tl.interp_next), &next_interp, sizeof next_interp}};
    if (read_spans(pid, sp, 2) < 2) return 0;
    while (tstate != 0 && (tstate & 7) == 0 && --budget > 0) {
      if (!read_one(pid, tstate, ts, static_cast<size_t>(ts_len))) return 0;
      const bool match = tl.ts_native_id != kNone ? load<uint64_t>(ts, tl.ts_native_id) == tid ||
                                                        load<uint64_t>(ts, tl.ts_thread_id) == pthread_id
                                                  : load<uint64_t>(ts, tl.ts_thread_id) == pthread_id;
      if (match) return walk_tstate<OtherThreadBudget>(pid, s, tstate, out, max, sample_flags);
      tstate = load<uint64_t>(ts, tl.ts_next);
    }
    interp = next_interp;
  }
  return 0;  // no thread state: the thread never ran Python (or not any more)
}

// ---------------------------------------------------------------------------------------------
// Not signal context from here on.

namespace {

struct Symbols {
  void* is_initialized = nullptr;
  void* this_thread_state = nullptr;
  void* runtime = nullptr;
  void* code_type = nullptr;
  void* unicode_type = nullptr;
  void* bytes_type = nullptr;
  void* version = nullptr;      // Py_Version (3.11+)
  void* get_version = nullptr;  // Py_GetVersion
  bool debug = false;
};

void lookup(void* handle, Symbols* s) {
  s->is_initialized = dlsym(handle, "Py_IsInitialized");
  if (s->is_initialized == nullptr) return;
  s->this_thread_state = dlsym(handle, "PyGILState_GetThisThreadState");
  s->runtime = dlsym(handle, "_PyRuntime");
  s->code_type = dlsym(handle, "PyCode_Type");
  s->unicode_type = dlsym(handle, "PyUnicode_Type");
  s->bytes_type = dlsym(handle, "PyBytes_Type");
  s->version = dlsym(handle, "Py_Version");
  s->get_version = dlsym(handle, "Py_GetVersion");
  // Py_REF_DEBUG (implied by Py_DEBUG) exports _Py_NegativeRefcount in 3.8–3.13; Py_TRACE_REFS
  // (which adds two pointers to every PyObject) exports _Py_PrintReferences.
  s->debug = dlsym(handle, "_Py_NegativeRefcount") != nullptr || dlsym(handle, "_Py_PrintReferences") != nullptr;
}

// A libpython loaded with RTLD_LOCAL is invisible to RTLD_DEFAULT: find it by name.
int find_libpython(struct dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libpython3", 10) != 0) return 0;
  snprintf(static_cast<char*>(data), PATH_MAX, "%s", name);
  return 1;
}

// "3.11.7 (main, ...)" / "3.13.0rc1+" -> PY_VERSION_HEX.
uint32_t parse_version(const char* v) {
  unsigned major = 0, minor = 0, micro = 0;
  int used = 0;
  if (v == nullptr || sscanf(v, "%u.%u.%u%n", &major, &minor, &micro, &used) < 3) return 0;
  unsigned level = 0xf, serial = 0;
  const char* p = v + used;
  if (p[0] == 'a') level = 0xa, serial = static_cast<unsigned>(atoi(p + 1));
  else if (p[0] == 'b') level = 0xb, serial = static_cast<unsigned>(atoi(p + 1));
  else if (p[0] == 'r' && p[1] == 'c') level = 0xc, serial = static_cast<unsigned>(atoi(p + 2));
  return (major << 24) | (minor << 16) | (micro << 8) | (level << 4) | (serial & 0xf);
}

std::string version_text(uint32_t hex) {
  char buf[32];
  snprintf(buf, sizeof buf, "%u.%u.%u", hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
  return buf;
}

// 3.13's _Py_DebugOffsets, as laid out in 3.13.x (Include/internal/pycore_runtime.h).
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version, free_threaded;
  struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
  } interpreter_state;
  struct { uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status; } thread_state;
  struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct { uint64_t size, ob_type; } pyobject;
  struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
  struct { uint64_t size, ob_item, ob_size; } tuple_object;
  struct { uint64_t size, ob_item, ob_size; } list_object;
  struct { uint64_t size, ma_keys, ma_values; } dict_object;
  struct { uint64_t size, ob_fval; } float_object;
  struct { uint64_t size, lv_tag, ob_digit; } long_object;
  struct { uint64_t size, ob_size, ob_sval; } bytes_object;
  struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
  struct { uint64_t size, collecting; } gc;
};

// Applies 3.13's debug offsets over the 3.13 table. Returns "" or why they cannot be used.
const char* apply_debug_offsets(const DebugOffsets313& d, uint32_t version_hex, Layout* l, bool* used) {
  *used = false;
  if (memcmp(d.cookie, "xdebugpy", 8) != 0) return "";  // absent: keep the table
  if ((d.version >> 16) != (version_hex >> 16)) return "its _Py_DebugOffsets is for another version";
  if (d.free_threaded) return "free-threaded";
  auto fits = [](uint64_t v) { return v < 65536; };
  const uint64_t all[] = {d.thread_state.interp, d.thread_state.current_frame, d.interpreter_state.ceval_gil,
                          d.interpreter_state.gil_runtime_state, d.interpreter_state.gil_runtime_state_locked,
                          d.interpreter_state.gil_runtime_state_holder, d.interpreter_frame.previous,
                          d.interpreter_frame.executable, d.interpreter_frame.instr_ptr, d.interpreter_frame.owner,
                          d.code_object.filename, d.code_object.name, d.code_object.qualname, d.code_object.linetable,
                          d.code_object.firstlineno, d.code_object.co_code_adaptive, d.pyobject.ob_type,
                          d.bytes_object.ob_size, d.bytes_object.ob_sval, d.unicode_object.state,
                          d.unicode_object.length, d.unicode_object.asciiobject_size};
  for (uint64_t v : all)
    if (!fits(v)) return "its _Py_DebugOffsets look corrupt";
  if (d.interpreter_frame.previous + 8 > kFrameReadMax || d.interpreter_frame.executable + 8 > kFrameReadMax ||
      d.interpreter_frame.instr_ptr + 8 > kFrameReadMax || d.interpreter_frame.owner + 1 > kFrameReadMax ||
      d.thread_state.current_frame + 8 > kTstateReadMax || d.thread_state.interp + 8 > kTstateReadMax)
    return "its frame layout differs from what mlprof reads";
  if (d.interpreter_state.gil_runtime_state_locked < d.interpreter_state.gil_runtime_state ||
      d.interpreter_state.gil_runtime_state_holder < d.interpreter_state.gil_runtime_state)
    return "its _Py_DebugOffsets look corrupt";
  {  // walk() reads last_holder and locked with one 16-byte read
    const int64_t holder = static_cast<int64_t>(d.interpreter_state.gil_runtime_state_holder);
    const int64_t locked = static_cast<int64_t>(d.interpreter_state.gil_runtime_state_locked);
    const int64_t lo = holder < locked ? holder : locked;
    const int64_t hi = holder + 8 > locked + 4 ? holder + 8 : locked + 4;
    if (hi - lo > 16) return "its GIL layout differs from what mlprof reads";
  }
  const int32_t code_adaptive_table = l->co_code_adaptive;
  l->ts_interp = static_cast<int32_t>(d.thread_state.interp);
  l->ts_frame = static_cast<int32_t>(d.thread_state.current_frame);
  l->interp_ceval_gil = static_cast<int32_t>(d.interpreter_state.ceval_gil);
  l->gil_locked = static_cast<int32_t>(d.interpreter_state.gil_runtime_state_locked - d.interpreter_state.gil_runtime_state);
  l->gil_last_holder = static_cast<int32_t>(d.interpreter_state.gil_runtime_state_holder - d.interpreter_state.gil_runtime_state);
  // The collector's flag: gc.collecting inside the interpreter's gc state (kept from the table when
  // the published offsets do not fit inside the interpreter state).
  if (d.gc.collecting + 4 <= d.gc.size && d.interpreter_state.gc + d.gc.size <= d.interpreter_state.size &&
      d.interpreter_state.gc + d.gc.collecting < 0x7fffffff)
    l->interp_gc_collecting = static_cast<int32_t>(d.interpreter_state.gc + d.gc.collecting);
  l->fr_back = static_cast<int32_t>(d.interpreter_frame.previous);
  l->fr_code = static_cast<int32_t>(d.interpreter_frame.executable);
  l->fr_instr = static_cast<int32_t>(d.interpreter_frame.instr_ptr);
  l->fr_owner = static_cast<int32_t>(d.interpreter_frame.owner);
  l->co_filename = static_cast<int32_t>(d.code_object.filename);
  l->co_name = static_cast<int32_t>(d.code_object.name);
  l->co_qualname = static_cast<int32_t>(d.code_object.qualname);
  l->co_linetable = static_cast<int32_t>(d.code_object.linetable);
  l->co_firstlineno = static_cast<int32_t>(d.code_object.firstlineno);
  l->co_code_adaptive = static_cast<int32_t>(d.code_object.co_code_adaptive);
  // _co_firsttraceable is not published: trust the table only where the layout is the table's.
  if (l->co_code_adaptive != code_adaptive_table) l->co_firsttraceable = kNone;
  l->ob_type = static_cast<int32_t>(d.pyobject.ob_type);
  l->bytes_sval = static_cast<int32_t>(d.bytes_object.ob_sval);
  l->str_state = static_cast<int32_t>(d.unicode_object.state);
  l->str_length = static_cast<int32_t>(d.unicode_object.length);
  l->str_ascii_data = static_cast<int32_t>(d.unicode_object.asciiobject_size);
  // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (3.12+).
  l->str_compact_data = l->str_ascii_data + 16;
  if (l->ob_type != 8 || d.bytes_object.ob_size != 16) return "its object header differs from what mlprof reads";
  *used = true;
  return "";
}

void unsupported(const std::string& why) {
  g_interp.supported = false;
  g_interp.description = why + ": Python frames are not shown, native profiling goes on";
}

}  // namespace

const Interpreter& detect() {
  pthread_mutex_lock(&g_detect_lock);
  if (g_interp.present) {  // found once: the answer cannot change
    pthread_mutex_unlock(&g_detect_lock);
    return g_interp;
  }
  Symbols sym;
  lookup(RTLD_DEFAULT, &sym);
  if (sym.is_initialized == nullptr) {
    char path[PATH_MAX] = {};
    if (dl_iterate_phdr(find_libpython, path) != 0) {
      if (void* h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD)) lookup(h, &sym);  // reference kept: pins it
    }
  }
  if (sym.is_initialized == nullptr) {
    g_interp.description = "no CPython in the process";
    pthread_mutex_unlock(&g_detect_lock);
    return g_interp;
  }
  g_interp.present = true;
  // Pin the library that holds the interpreter: walk() calls into it from signal handlers.
  Dl_info info;
  if (dladdr(sym.is_initialized, &info) != 0 && info.dli_fname != nullptr) dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);

  uint32_t hex = 0;
  if (sym.version != nullptr) hex = static_cast<uint32_t>(*static_cast<const unsigned long*>(sym.version));
  else if (sym.get_version != nullptr) hex = parse_version(reinterpret_cast<GetVersionFn>(sym.get_version)());
  g_interp.version_hex = hex;
  const std::string ver = "CPython " + version_text(hex);
  g_interp.description = ver;
  const uint32_t major = hex >> 24, minor = (hex >> 16) & 0xff;

  State st;
  if (hex == 0) {
    unsupported("CPython of unknown version");
  } else if (major != 3 || minor < 8) {
    unsupported(ver + " is too old (mlprof reads 3.8 to 3.13)");
  } else if (minor > 13) {
    unsupported(ver + " is not supported yet");
  } else if (sym.debug) {
    unsupported(ver + " is a debug build (Py_DEBUG), whose object layout mlprof does not read");
  } else if (sym.this_thread_state == nullptr || sym.runtime == nullptr || sym.code_type == nullptr) {
    unsupported(ver + " does not export PyGILState_GetThisThreadState, _PyRuntime or PyCode_Type");
  } else {
    static constexpr const Layout* kTables[] = {&kLayout38, &kLayout39, &kLayout310, &kLayout311, &kLayout312, &kLayout313};
    st.layout = *kTables[minor - 8];
    st.threads = kThreadLists[minor - 8];
    st.is_initialized = reinterpret_cast<IsInitializedFn>(sym.is_initialized);
    st.this_thread_state = reinterpret_cast<GetThisThreadStateFn>(sym.this_thread_state);
    st.runtime = reinterpret_cast<uint64_t>(sym.runtime);
    st.code_type = reinterpret_cast<uint64_t>(sym.code_type);
    st.unicode_type = reinterpret_cast<uint64_t>(sym.unicode_type);
    st.bytes_type = reinterpret_cast<uint64_t>(sym.bytes_type);
    if (st.layout.rt_gil_tstate_current != kNone) st.gil_tstate_current = st.runtime + static_cast<uint64_t>(st.layout.rt_gil_tstate_current);
    ElfW(Sym)* esym = nullptr;
    Dl_info rinfo;
    if (dladdr1(sym.runtime, &rinfo, reinterpret_cast<void**>(&esym), RTLD_DL_SYMENT) != 0 && esym != nullptr)
      st.runtime_size = esym->st_size;

    // The fault-tolerant read must work here (seccomp may forbid process_vm_readv); this call
    // also binds what walk() uses.
    std::string why;
    DebugOffsets313 dbg;
    memset(&dbg, 0, sizeof dbg);
    if (!read_one(own_pid(), st.runtime, &dbg, minor >= 13 ? sizeof dbg : 8)) {
      why = ver + ": reading its memory failed (process_vm_readv is not permitted here)";
    } else if (minor >= 13) {
      bool used = false;
      const std::string bad = apply_debug_offsets(dbg, hex, &st.layout, &used);
      const uint64_t list_offsets[] = {dbg.runtime_state.interpreters_head, dbg.interpreter_state.next,
                                       dbg.interpreter_state.threads_head, dbg.thread_state.next,
                                       dbg.thread_state.thread_id, dbg.thread_state.native_thread_id};
      bool list_ok = true;
      for (uint64_t v : list_offsets) list_ok = list_ok && v < 65536;
      list_ok = list_ok && dbg.thread_state.next < 248 && dbg.thread_state.thread_id < 248 &&
                dbg.thread_state.native_thread_id < 248;
      if (used && list_ok) {
        st.threads.rt_interp_head = static_cast<int32_t>(dbg.runtime_state.interpreters_head);
        st.threads.interp_next = static_cast<int32_t>(dbg.interpreter_state.next);
        st.threads.interp_threads = static_cast<int32_t>(dbg.interpreter_state.threads_head);
        st.threads.ts_next = static_cast<int32_t>(dbg.thread_state.next);
        st.threads.ts_thread_id = static_cast<int32_t>(dbg.thread_state.thread_id);
        st.threads.ts_native_id = static_cast<int32_t>(dbg.thread_state.native_thread_id);
      }
      if (bad == "free-threaded") why = "free-threaded " + ver + " (no GIL) is not supported";
      else if (!bad.empty()) why = ver + ": " + bad;
      g_interp.description = ver + (used ? " (layout from _Py_DebugOffsets)" : " (built-in layout)");
    }
    if (!why.empty()) {
      unsupported(why);
    } else {
      // Bind PLT entries (ours and libpython's) before any signal handler needs them. Both are
      // safe before Py_Initialize: <= 3.11 returns NULL while gilstate is unset; 3.12+ reads
      // pthread_getspecific of a not-yet-created key (a plain, lock-free load; result unused).
      (void)st.is_initialized();
      (void)st.this_thread_state();
      g_state = st;
      refresh_pid_in_child();  // the current pid
      pthread_atfork(nullptr, nullptr, refresh_pid_in_child);
      g_interp.supported = true;
      g_code_type_addr = st.code_type;
      g_ready.store(true, std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_detect_lock);
  return g_interp;
}

namespace {

constexpr uint64_t kMaxStringChars = 1 << 16;
constexpr uint64_t kMaxTableBytes = 1 << 22;

void append_utf8(std::string* s, uint32_t c) {
  if (c < 0x80) {
    s->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    s->push_back(static_cast<char>(0xc0 | (c >> 6)));
    s->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    s->push_back(static_cast<char>(0xe0 | (c >> 12)));
    s->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    s->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    s->push_back(static_cast<char>(0xf0 | (c >> 18)));
    s->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    s->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    s->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

// A str object: compact ASCII or compact UCS1/2/4 (code objects' strings are always compact).
bool read_str(pid_t pid, const State& st, uint64_t addr, std::string* out) {
  const Layout& l = st.layout;
  if (addr == 0 || (addr & 7) != 0) return false;
  uint8_t hdr[40];
  if (!read_one(pid, addr, hdr, sizeof hdr)) return false;
  if (st.unicode_type != 0 && load<uint64_t>(hdr, l.ob_type) != st.unicode_type) return false;
  const int64_t length = load<int64_t>(hdr, l.str_length);
  const uint32_t state = load<uint32_t>(hdr, l.str_state);
  const uint32_t kind = (state >> 2) & 7;
  const bool compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || length < 0 || static_cast<uint64_t>(length) > kMaxStringChars) return false;
  if (kind != 1 && kind != 2 && kind != 4) return false;
  if (ascii && kind != 1) return false;
  const uint64_t data = addr + static_cast<uint64_t>(ascii ? l.str_ascii_data : l.str_compact_data);
  std::string raw(static_cast<size_t>(length) * kind, '\0');
  if (length > 0 && !read_one(pid, data, raw.data(), raw.size())) return false;
  out->clear();
  if (ascii) {
    *out = std::move(raw);
    return true;
  }
  out->reserve(raw.size());
  for (int64_t i = 0; i < length; ++i) {
    uint32_t c = 0;
    if (kind == 1) c = static_cast<uint8_t>(raw[static_cast<size_t>(i)]);
    else if (kind == 2) { uint16_t u; memcpy(&u, raw.data() + i * 2, 2); c = u; }
    else memcpy(&c, raw.data() + i * 4, 4);
    if (c > 0x10ffff) return false;
    append_utf8(out, c);
  }
  return true;
}

bool read_bytes(pid_t pid, const State& st, uint64_t addr, std::string* out) {
  const Layout& l = st.layout;
  if (addr == 0 || (addr & 7) != 0) return false;
  uint8_t hdr[24];
  if (!read_one(pid, addr, hdr, sizeof hdr)) return false;
  if (st.bytes_type != 0 && load<uint64_t>(hdr, l.ob_type) != st.bytes_type) return false;
  const int64_t size = load<int64_t>(hdr, l.ob_size);
  if (size < 0 || static_cast<uint64_t>(size) > kMaxTableBytes) return false;
  out->assign(static_cast<size_t>(size), '\0');
  return size == 0 || read_one(pid, addr + static_cast<uint64_t>(l.bytes_sval), out->data(), out->size());
}

}  // namespace

bool read_code(uint64_t code, CodeInfo* out) {
  if (!g_ready.load(std::memory_order_acquire) || code == 0 || (code & 7) != 0) return false;
  const State& st = g_state;
  const Layout& l = st.layout;
  const pid_t pid = own_pid();
  uint8_t hdr[256];
  int32_t end = 0;
  for (int32_t off : {l.ob_type, l.co_filename, l.co_name, l.co_qualname, l.co_firstlineno, l.co_linetable})
    if (off + 8 > end) end = off + 8;
  if (end > static_cast<int32_t>(sizeof hdr) || !read_one(pid, code, hdr, static_cast<size_t>(end))) return false;
  if (load<uint64_t>(hdr, l.ob_type) != st.code_type) return false;
  CodeInfo info;
  const int32_t first = load<int32_t>(hdr, l.co_firstlineno);
  info.firstlineno = first > 0 ? static_cast<uint32_t>(first) : 0;
  if (!read_str(pid, st, load<uint64_t>(hdr, l.co_filename), &info.filename)) return false;
  const int32_t qual = l.co_qualname != kNone ? l.co_qualname : l.co_name;
  if (!read_str(pid, st, load<uint64_t>(hdr, qual), &info.qualname)) return false;
  if (!read_bytes(pid, st, load<uint64_t>(hdr, l.co_linetable), &info.linetable)) return false;
  info.format = l.minor <= 9 ? TableFormat::kLnotab : l.minor == 10 ? TableFormat::kLinetable310 : TableFormat::kLocations311;
  *out = std::move(info);
  return true;
}

uint64_t code_identity(uint64_t code) {
  if (!g_ready.load(std::memory_order_acquire) || code == 0 || (code & 7) != 0) return 0;
  const State& st = g_state;
  const Layout& l = st.layout;
  uint8_t hdr[256];
  int32_t end = 0;
  for (int32_t off : {l.ob_type, l.co_filename, l.co_name, l.co_firstlineno})
    if (off + 8 > end) end = off + 8;
  if (end > static_cast<int32_t>(sizeof hdr) || !read_one(own_pid(), code, hdr, static_cast<size_t>(end))) return 0;
  if (load<uint64_t>(hdr, l.ob_type) != st.code_type) return 0;
  return identity_hash(load<uint64_t>(hdr, l.co_filename), load<uint64_t>(hdr, l.co_name),
                       load<int32_t>(hdr, l.co_firstlineno));
}

}  // namespace mlprof::preload::python
