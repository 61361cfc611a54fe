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

template <int D, int G>
void* py_malloc(void*, size_t size) {
  ++t_mem.guard;
  void* p = g_orig[D][G].malloc(g_orig[D][G].ctx, size);
  --t_mem.guard;
  after_alloc(p, size, wire::AllocKind::kPython, ra());
  return p;
}

template <int D, int G>
void* py_calloc(void*, size_t nelem, size_t elsize) {
  ++t_mem.guard;
  void* p = g_orig[D][G].calloc(g_orig[D][G].ctx, nelem, elsize);
  --t_mem.guard;
  after_alloc(p, static_cast<uint64_t>(nelem) * elsize, wire::AllocKind::kPython, ra());
  return p;
}

// Frees keep the existing behaviour (a FREE before the original call; no failure to undo: a
// failed Python realloc is rare and reported like a successful one).
template <int D, int G>
void* py_realloc(void*, void* ptr, size_t size) {
  if (ptr) before_free(ptr);
  ++t_mem.guard;
  void* p = g_orig[D][G].realloc(g_orig[D][G].ctx, ptr, size);
  --t_mem.guard;
  after_alloc(p, size, wire::AllocKind::kPython, ra());
  return p;
}

template <int D, int G>
__attribute__((noinline)) void py_free_slow(void* ptr) {
  if constexpr (D == kObj) python::note_object_free(ptr);  // a code object: out of the walker's cache
  before_free(ptr);
  g_orig[D][G].free(g_orig[D][G].ctx, ptr);
}

// An outer generation's wrapper holds no guard around a free, so an inner one still in the chain
// finds the block already out of the table: each block is released once. The common case (not a
// sampled block, not a code object while code frees are tracked) is a tail jump.
template <int D, int G>
void py_free(void*, void* ptr) {
  if (ptr) {
    if (__builtin_expect(g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(ptr)), 0))
      return py_free_slow<D, G>(ptr);
    if constexpr (D == kObj) {
      if (__builtin_expect(python::is_tracked_code(ptr), 0)) return py_free_slow<D, G>(ptr);
    }
  }
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

template <int D, int G>
void install(const PyMemAllocatorEx& cur) {
  g_orig[D][G] = cur;
  std::atomic_thread_fence(std::memory_order_release);
  PyMemAllocatorEx mine{cur.ctx, &py_malloc<D, G>, &py_calloc<D, G>, &py_realloc<D, G>, &py_free<D, G>};
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
  const bool ok = wrap<kMem>(0) && wrap<kObj>(0);
  if (!ok) return false;
  g_used = 1;
  python::track_code_frees(true);
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
  // Until it is wrapped again, PyObject_Free may bypass mlprof: code-object frees are not seen.
  if (D == kObj) python::track_code_frees(false);
  if (g_seen_cycles[D] == 0 || memcmp(&g_seen[D], &cur, sizeof cur) != 0) {
    g_seen[D] = cur;
    g_seen_cycles[D] = 1;
    return HookCheck::kHooked;
  }
  if (g_used >= kGenerations) return HookCheck::kLost;
  install_gen<D>(g_used, cur, std::make_index_sequence<kGenerations>{});
  if (D == kObj) python::track_code_frees(true);
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
  if (g_used > kGenerations) return HookCheck::kHooked;  // lost, and kLost was returned once already
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
