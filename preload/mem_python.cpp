#include "preload/mem_python.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>

#include "preload/mem_profiler.h"
#include "preload/python.h"

namespace mlprof::preload::mem {
namespace {

// CPython's PyMemAllocatorEx and PyMemAllocatorDomain (stable since 3.5).
struct PyMemAllocatorEx {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr);
};
enum Domain : int { kRaw = 0, kMem = 1, kObj = 2 };
using GetAllocatorFn = void (*)(int domain, PyMemAllocatorEx* out);
using SetAllocatorFn = void (*)(int domain, PyMemAllocatorEx* in);
using IsInitializedFn = int (*)();
using AllocatorNameFn = const char* (*)();
// PyObjectArenaAllocator (stable since 3.4): where pymalloc gets its arenas (256 KiB-1 MiB mmaps).
struct PyObjectArenaAllocator {
  void* ctx;
  void* (*alloc)(void* ctx, size_t size);
  void (*free)(void* ctx, void* ptr, size_t size);
};
using ArenaAllocatorFn = void (*)(PyObjectArenaAllocator* allocator);
// pymalloc serves requests up to SMALL_REQUEST_THRESHOLD bytes from its pools (512 on 3.8-3.13);
// 0 bytes and larger requests go to the raw domain (malloc).
constexpr uint32_t kPymallocMax = 512;

// Each (re)wrapping installs a fresh generation of wrappers whose saved original is written once,
// before it is installed, and never again: a generation that is still somewhere in the chain (a
// tool wrapped it, then mlprof wrapped that tool) keeps calling what it called before.
constexpr int kGenerations = 8;
PyMemAllocatorEx g_orig[3][kGenerations];
int g_used = 0;           // generations installed so far (writer thread only)
bool g_gave_up = false;   // the API is missing: never try again
GetAllocatorFn g_get = nullptr;
SetAllocatorFn g_set = nullptr;
IsInitializedFn g_is_init = nullptr;

inline uint64_t ra() { return reinterpret_cast<uint64_t>(__builtin_return_address(0)); }

// Requests of 1..g_fast[D][G] bytes skip the guard: the original allocator serves them from its
// pools without calling malloc or mmap itself (a new arena comes from the arena allocator, which
// runs under the guard: wrap_arenas), except for its arena bookkeeping and, in a realloc, a block
// it does not own and its memcpy of a moved block, which record_alloc/record_copy recognise by
// their stacks and drop (t_mem.py_fast_ra). 0 when the original is not known to be
// pymalloc (PYTHONMALLOC=malloc, debug hooks, another tool's wrapper): every call then takes the
// guarded path, or its nested malloc would be counted a second time.
uint32_t g_fast[3][kGenerations];

// Direct frees (the default, when the original is the interpreter's pymalloc): the wrapped
// struct carries pymalloc's own free (install), so an object's free never passes through mlprof.
// A sampled block must then be one pymalloc hands to malloc, so that its free reaches libc's free
// (pymalloc gives a block it does not own to PyMem_RawFree) and mlprof's free hook there: a
// sampled request of 1-512 bytes asks pymalloc for 513, its smallest request it serves from
// malloc (its own counts, sys.getallocatedblocks(), stay right).
// Whether sampled requests of domain D are made at 513 bytes or more (g_bump), in every
// generation, direct or not: once pymalloc is known to be the interpreter's allocator, a later
// generation may wrap another tool that wraps a direct one (tracemalloc started while profiling),
// and a block it samples must not come from pymalloc's pools, which the direct generation's free
// (back in place after tracemalloc.stop()) releases without mlprof seeing it. Only at intervals of
// kDirectMinInterval and more: each sampled small object then costs ~530 bytes of malloc instead
// of its size, under 1% of the small objects' bytes at 64 KiB, ~0.05% at the 1 MiB default,
// while exact mode would take 3-10 times the program's memory. Below it, frees are wrapped.
constexpr uint64_t kDirectMinInterval = 64 * 1024;
bool g_bump[3];

// What to ask the original for a block that will be sampled.
template <int D>
inline size_t sampled_size(size_t size) {
  return g_bump[D] && size - 1 < kPymallocMax ? kPymallocMax + 1 : size;
}

// The countdown for a slow path's allocation that the entry did not charge; true when it is due.
// Under the guard (an outer generation's call) never due.
inline bool due_now(bool counted, uint64_t size) { return counted || !not_due(&t_mem.countdown, size); }

// The slow paths decide first whether the block is sampled, so that a sampled one is asked for
// at its sampled size; the original is called under the guard (its nested malloc, a new arena,
// another tool's wrapper calling an older generation: nothing counted twice).
template <int D, int G>
__attribute__((noinline)) void* py_malloc_slow(size_t size, uint64_t caller, bool counted) {
  const bool due = due_now(counted, size);
  ++t_mem.guard;
  void* p = g_orig[D][G].malloc(g_orig[D][G].ctx, due ? sampled_size<D>(size) : size);
  --t_mem.guard;
  if (due && p) sampled_alloc(p, size, wire::AllocKind::kPython, caller);
  return p;
}

// The fast path's countdown (charge_not_due: no guard test). A generation with a fast path
// (g_fast non-zero) is never called under mlprof's guard anyway: the guard is held around an
// original allocator only by the slow paths (a fast generation's original is pymalloc, which calls
// no allocator domain back) and by an outer generation wrapping another tool that wraps this one,
// and before such a chain is installed every older generation loses its fast path (check_domain).
inline bool fast_not_due(size_t size) { return charge_not_due(&t_mem.countdown, size); }

// The common case is a tail jump to the original: one size compare and the thread's countdown
// (like memory_entry.cpp's malloc), no guard, no frame of its own around the call (this file is
// compiled without frame pointers: preload/CMakeLists.txt).
template <int D, int G>
void* py_malloc(void*, size_t size) {
  if (__builtin_expect(size - 1 < __atomic_load_n(&g_fast[D][G], __ATOMIC_RELAXED), 1)) {
    if (__builtin_expect(fast_not_due(size), 1)) {
      t_mem.py_fast_ra = ra();  // its bookkeeping's malloc samples are dropped (record_alloc)
      return g_orig[D][G].malloc(g_orig[D][G].ctx, size);
    }
    return py_malloc_slow<D, G>(size, ra(), true);
  }
  return py_malloc_slow<D, G>(size, ra(), false);
}

template <int D, int G>
__attribute__((noinline)) void* py_calloc_slow(size_t nelem, size_t elsize, uint64_t caller, bool counted) {
  size_t size;
  const bool due = !__builtin_mul_overflow(nelem, elsize, &size) && due_now(counted, size);
  ++t_mem.guard;
  void* p = due ? g_orig[D][G].calloc(g_orig[D][G].ctx, 1, sampled_size<D>(size))
                : g_orig[D][G].calloc(g_orig[D][G].ctx, nelem, elsize);
  --t_mem.guard;
  if (due && p) sampled_alloc(p, size, wire::AllocKind::kPython, caller);
  return p;
}

template <int D, int G>
void* py_calloc(void*, size_t nelem, size_t elsize) {
  size_t size;
  const bool small = !__builtin_mul_overflow(nelem, elsize, &size) &&
                     size - 1 < __atomic_load_n(&g_fast[D][G], __ATOMIC_RELAXED);
  if (__builtin_expect(small, 1)) {
    if (__builtin_expect(fast_not_due(size), 1)) {
      t_mem.py_fast_ra = ra();
      return g_orig[D][G].calloc(g_orig[D][G].ctx, nelem, elsize);
    }
    return py_calloc_slow<D, G>(nelem, elsize, ra(), true);
  }
  return py_calloc_slow<D, G>(nelem, elsize, ra(), false);
}

// Frees keep the existing behaviour (a FREE before the original call; no failure to undo: a
// failed Python realloc is rare and reported like a successful one). Whatever ptr is (a pool
// block, a sampled one, a false hit of the table's filter), a block to sample is asked for at its
// sampled size.
template <int D, int G>
__attribute__((noinline)) void* py_realloc_slow(void* ptr, size_t size, uint64_t caller, bool counted) {
  if (ptr) before_free(ptr);
  const bool due = due_now(counted, size);
  ++t_mem.guard;
  void* p = g_orig[D][G].realloc(g_orig[D][G].ctx, ptr, due ? sampled_size<D>(size) : size);
  --t_mem.guard;
  if (due && p) sampled_alloc(p, size, wire::AllocKind::kPython, caller);
  return p;
}

// The common case (the block not sampled, the countdown not due) has nothing to record.
// A request of 1-512 bytes to pymalloc (g_fast) is a tail jump, like py_malloc's: pymalloc moves a
// pool block to another pool block (or keeps it), and a NULL one is a malloc. Only a block it does
// not own (one of malloc's, shrunk to pymalloc's sizes: rare) goes on to libc's realloc, whose hook
// charges the countdown a second time: a sample point falling there is dropped with pymalloc's
// bookkeeping (py_fast_ra, record_alloc) and a new countdown drawn, so no byte's chance changes.
// Otherwise the original realloc under the guard, so what it does in malloc (a block past
// pymalloc's sizes) is not counted a second time, whatever the original allocator is. A sampled
// block or a due countdown takes the slow path.
template <int D, int G>
void* py_realloc(void*, void* ptr, size_t size) {
  if (__builtin_expect(!(ptr && g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(ptr))), 1)) {
    if (__builtin_expect(size - 1 < __atomic_load_n(&g_fast[D][G], __ATOMIC_RELAXED), 1)) {
      if (__builtin_expect(fast_not_due(size), 1)) {
        t_mem.py_fast_ra = ra();
        return g_orig[D][G].realloc(g_orig[D][G].ctx, ptr, size);
      }
    } else if (__builtin_expect(not_due(&t_mem.countdown, size), 1)) {
      ++t_mem.guard;
      void* p = g_orig[D][G].realloc(g_orig[D][G].ctx, ptr, size);
      --t_mem.guard;
      return p;
    }
    return py_realloc_slow<D, G>(ptr, size, ra(), true);  // the countdown was charged and is due
  }
  return py_realloc_slow<D, G>(ptr, size, ra(), false);
}

template <int D, int G>
__attribute__((noinline)) void py_free_slow(void* ptr) {
  before_free(ptr);
  g_orig[D][G].free(g_orig[D][G].ctx, ptr);
}

// Installed only when the original is not pymalloc (PYTHONMALLOC=malloc, debug hooks, another
// tool's wrapper): its sampled blocks may be its own, which libc's free never sees. An outer
// generation's wrapper holds no guard around a free, so an inner one still in the chain finds the
// block already out of the table: each block is released once. The common case is a tail jump.
template <int D, int G>
void py_free(void*, void* ptr) {
  if (ptr && __builtin_expect(g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(ptr)), 0))
    return py_free_slow<D, G>(ptr);
  g_orig[D][G].free(g_orig[D][G].ctx, ptr);  // no guard: a release samples nothing (tail call)
}

using MallocFn = void* (*)(void*, size_t);

template <int D, size_t... G>
bool is_ours_impl(MallocFn f, std::index_sequence<G...>) {
  return ((f == &py_malloc<D, G>) || ...);
}
template <int D>
bool is_ours(MallocFn f) {
  return is_ours_impl<D>(f, std::make_index_sequence<kGenerations>{});
}

// The MEM and OBJ allocators as they were when _PyMem_GetCurrentAllocatorName said "pymalloc"
// (CPython's default: pymalloc for both, malloc for RAW); null until then.
PyMemAllocatorEx g_pymalloc[3];
AllocatorNameFn g_name = nullptr;

// The fast path's limit for wrapping `cur` in domain D: pymalloc's own threshold when cur is the
// interpreter's pymalloc, else 0. The arena allocator must be wrapped (g_arenas_wrapped).
bool g_arenas_wrapped = false;
template <int D>
bool is_pymalloc(const PyMemAllocatorEx& cur) {
  return g_pymalloc[D].malloc && memcmp(&cur, &g_pymalloc[D], sizeof cur) == 0;
}
template <int D>
uint32_t fast_limit(const PyMemAllocatorEx& cur) {
  return g_arenas_wrapped && is_pymalloc<D>(cur) ? kPymallocMax : 0;
}

template <int D, int G>
void install(const PyMemAllocatorEx& cur) {
  g_orig[D][G] = cur;
  __atomic_store_n(&g_fast[D][G], fast_limit<D>(cur), __ATOMIC_RELAXED);
  const bool direct_free = g_bump[D] && is_pymalloc<D>(cur);  // pymalloc's own free, unwrapped
  std::atomic_thread_fence(std::memory_order_release);
  PyMemAllocatorEx mine{cur.ctx, &py_malloc<D, G>, &py_calloc<D, G>, &py_realloc<D, G>,
                        direct_free ? cur.free : &py_free<D, G>};
  g_set(D, &mine);
}

template <int D, size_t... G>
void install_gen(int gen, const PyMemAllocatorEx& cur, std::index_sequence<G...>) {
  ((gen == static_cast<int>(G) ? install<D, G>(cur) : void()), ...);
}

// The domain's allocator as it is now; false when it looks half-written (two reads differ) or
// incomplete. The struct is read without the GIL: Python threads may be replacing it.
bool read_allocator(int d, PyMemAllocatorEx* out) {
  PyMemAllocatorEx a{}, b{};
  g_get(d, &a);
  g_get(d, &b);
  if (memcmp(&a, &b, sizeof a) != 0) return false;
  if (!a.malloc || !a.calloc || !a.realloc || !a.free) return false;
  *out = a;
  return true;
}

template <int D>
bool wrap(int gen) {
  PyMemAllocatorEx cur{};
  if (!read_allocator(D, &cur)) return false;
  if (is_ours<D>(cur.malloc)) return true;
  install_gen<D>(gen, cur, std::make_index_sequence<kGenerations>{});
  return true;
}

// Remembers the allocators as pymalloc's when the interpreter says they are (no wrapper, ours or
// another tool's, is installed in any domain: the name is computed from all three). The name is
// asked before and after reading them, so a replacement in between is noticed.
// Only from python_try_hook, while Py_IsInitialized: on 3.12 the function takes the runtime's
// allocator lock, which is freed at the end of finalization (a call at exit crashed). So a
// process where another tool wrapped the allocators first (PYTHONTRACEMALLOC=1) never learns
// pymalloc's, and its wrappers always take the guarded path.
void learn_pymalloc() {
  if (!g_name) return;
  const char* before = g_name();
  if (!before || strcmp(before, "pymalloc") != 0) return;
  PyMemAllocatorEx mem{}, obj{};
  if (!read_allocator(kMem, &mem) || !read_allocator(kObj, &obj)) return;
  const char* after = g_name();
  if (!after || strcmp(after, "pymalloc") != 0) return;
  g_pymalloc[kMem] = mem;
  g_pymalloc[kObj] = obj;
}

// pymalloc's arenas: allocated under the guard, like the guarded wrappers' nested calls, so the
// fast path (which calls pymalloc without the guard) never counts an arena's mmap as the
// program's. The struct passed carries the original ctx and free: a torn read mixes old and new
// only in `alloc`, and both lead to the original.
PyObjectArenaAllocator g_arena_orig;
void* arena_alloc(void*, size_t size) {
  ++t_mem.guard;
  void* p = g_arena_orig.alloc(g_arena_orig.ctx, size);
  --t_mem.guard;
  return p;
}
ArenaAllocatorFn g_get_arena = nullptr, g_set_arena = nullptr;

void wrap_arenas() {
  g_get_arena = reinterpret_cast<ArenaAllocatorFn>(dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator"));
  g_set_arena = reinterpret_cast<ArenaAllocatorFn>(dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator"));
  if (!g_get_arena || !g_set_arena) return;
  PyObjectArenaAllocator cur{};
  g_get_arena(&cur);
  if (!cur.alloc || !cur.free) return;
  g_arena_orig = cur;
  std::atomic_thread_fence(std::memory_order_release);
  PyObjectArenaAllocator mine{cur.ctx, &arena_alloc, cur.free};
  g_set_arena(&mine);
  g_arenas_wrapped = true;
}

// Someone replaced the arena allocator after mlprof wrapped it: arenas are no longer allocated
// under the guard, so every wrapper takes the guarded path from now on.
void check_arenas() {
  if (!g_arenas_wrapped) return;
  PyObjectArenaAllocator cur{};
  g_get_arena(&cur);
  if (cur.alloc == &arena_alloc) return;
  g_arenas_wrapped = false;
  for (auto& d : g_fast)
    for (auto& limit : d) __atomic_store_n(&limit, 0u, __ATOMIC_RELAXED);
}

// Replacements seen by python_check_hook, per domain: the foreign allocator and how many cycles
// in a row it has been there.
PyMemAllocatorEx g_seen[3];
int g_seen_cycles[3];

}  // namespace

bool python_try_hook() {
  if (g_mem.python_hooked.load(std::memory_order_acquire)) return true;
  if (g_gave_up || !enabled()) return false;
  auto is_init = reinterpret_cast<IsInitializedFn>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  g_is_init = is_init;
  g_get = reinterpret_cast<GetAllocatorFn>(dlsym(RTLD_DEFAULT, "PyMem_GetAllocator"));
  g_set = reinterpret_cast<SetAllocatorFn>(dlsym(RTLD_DEFAULT, "PyMem_SetAllocator"));
  if (!is_init || !g_get || !g_set) {
    g_gave_up = true;  // e.g. a libpython loaded RTLD_LOCAL: its objects are seen as malloc blocks
    return false;
  }
  if (!is_init()) return false;  // start-up may still set the allocators up: try next cycle
  PyMemAllocatorEx probe{};
  if (!read_allocator(kMem, &probe) || !read_allocator(kObj, &probe)) return false;  // try next cycle
  g_name = reinterpret_cast<AllocatorNameFn>(dlsym(RTLD_DEFAULT, "_PyMem_GetCurrentAllocatorName"));
  learn_pymalloc();
  for (int d : {kMem, kObj}) g_bump[d] = g_pymalloc[d].malloc && g_mem.interval >= kDirectMinInterval;
  if (!g_arenas_wrapped && g_pymalloc[kObj].malloc) wrap_arenas();
  const bool ok = wrap<kMem>(0) && wrap<kObj>(0);
  if (!ok) return false;
  g_used = 1;
  python::track_code_frees();
  g_mem.python_hooked.store(true, std::memory_order_release);
  return true;
}

template <int D>
HookCheck check_domain() {
  PyMemAllocatorEx cur{};
  if (!read_allocator(D, &cur)) return HookCheck::kHooked;  // being replaced: look next cycle
  if (is_ours<D>(cur.malloc)) {
    g_seen_cycles[D] = 0;
    return HookCheck::kHooked;
  }
  // Someone replaced the allocator: tracemalloc.stop() restoring what it saved before mlprof
  // wrapped it, or another tool wrapping mlprof's wrappers. Wrapping again is right in both
  // cases (in the second, the inner wrappers run under the outer one's guard and sample
  // nothing), once the new allocator has been stable for a cycle.
  if (g_seen_cycles[D] == 0 || memcmp(&g_seen[D], &cur, sizeof cur) != 0) {
    g_seen[D] = cur;
    g_seen_cycles[D] = 1;
    return HookCheck::kHooked;
  }
  if (g_used >= kGenerations) return HookCheck::kLost;
  // The older generations may now be called inside the new one's guarded calls (through the
  // tool that wrapped them): their fast paths, which do not test the guard, go first.
  for (int g = 0; g < g_used; ++g) __atomic_store_n(&g_fast[D][g], 0u, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  install_gen<D>(g_used, cur, std::make_index_sequence<kGenerations>{});
  g_seen_cycles[D] = 0;
  return HookCheck::kRewrapped;
}

HookCheck python_check_hook() {
  if (!g_mem.python_hooked.load(std::memory_order_acquire) || !g_get || !g_set) return HookCheck::kHooked;
  // Not once finalization has begun (it clears the flag first): on 3.12 PyMem_GetAllocator takes
  // the runtime's allocator lock, which the end of finalization frees (a call racing with that
  // would use it freed; at exit it is gone and the call takes no lock, but nothing is left to
  // check then either).
  if (!g_is_init || !g_is_init()) return HookCheck::kHooked;
  python::check_code_frees();
  if (g_used > kGenerations) return HookCheck::kHooked;  // lost, and kLost was returned once already
  check_arenas();
  const HookCheck a = check_domain<kMem>(), b = check_domain<kObj>();
  if (a == HookCheck::kLost || b == HookCheck::kLost) {
    g_used = kGenerations + 1;
    return HookCheck::kLost;
  }
  if (a == HookCheck::kRewrapped || b == HookCheck::kRewrapped) {
    ++g_used;
    return HookCheck::kRewrapped;
  }
  return HookCheck::kHooked;
}

}  // namespace mlprof::preload::mem
