#include "preload/mem_python.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>

#include "preload/mem_profiler.h"

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

PyMemAllocatorEx g_orig[3];  // written before the wrappers are installed, never again
bool g_gave_up = false;      // the API is missing: never try again

inline uint64_t ra() { return reinterpret_cast<uint64_t>(__builtin_return_address(0)); }

template <int D>
void* py_malloc(void*, size_t size) {
  ++t_mem.guard;
  void* p = g_orig[D].malloc(g_orig[D].ctx, size);
  --t_mem.guard;
  after_alloc(p, size, wire::AllocKind::kPython, ra());
  return p;
}

template <int D>
void* py_calloc(void*, size_t nelem, size_t elsize) {
  ++t_mem.guard;
  void* p = g_orig[D].calloc(g_orig[D].ctx, nelem, elsize);
  --t_mem.guard;
  after_alloc(p, static_cast<uint64_t>(nelem) * elsize, wire::AllocKind::kPython, ra());
  return p;
}

template <int D>
void* py_realloc(void*, void* ptr, size_t size) {
  if (ptr) before_free(ptr);
  ++t_mem.guard;
  void* p = g_orig[D].realloc(g_orig[D].ctx, ptr, size);
  --t_mem.guard;
  after_alloc(p, size, wire::AllocKind::kPython, ra());
  return p;
}

template <int D>
void py_free(void*, void* ptr) {
  if (ptr) before_free(ptr);
  g_orig[D].free(g_orig[D].ctx, ptr);  // no guard: a release samples nothing (tail call)
}

template <int D>
bool wrap(GetAllocatorFn get, SetAllocatorFn set) {
  PyMemAllocatorEx cur{};
  get(D, &cur);
  if (!cur.malloc || !cur.calloc || !cur.realloc || !cur.free) return false;
  if (cur.malloc == &py_malloc<D>) return true;  // already ours
  g_orig[D] = cur;
  std::atomic_thread_fence(std::memory_order_release);
  PyMemAllocatorEx mine{cur.ctx, &py_malloc<D>, &py_calloc<D>, &py_realloc<D>, &py_free<D>};
  set(D, &mine);
  return true;
}

}  // namespace

bool python_try_hook() {
  if (g_mem.python_hooked.load(std::memory_order_acquire)) return true;
  if (g_gave_up || !enabled()) return false;
  auto is_init = reinterpret_cast<IsInitializedFn>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  auto get = reinterpret_cast<GetAllocatorFn>(dlsym(RTLD_DEFAULT, "PyMem_GetAllocator"));
  auto set = reinterpret_cast<SetAllocatorFn>(dlsym(RTLD_DEFAULT, "PyMem_SetAllocator"));
  if (!is_init || !get || !set) {
    g_gave_up = true;  // e.g. a libpython loaded RTLD_LOCAL: its objects are seen as malloc blocks
    return false;
  }
  if (!is_init()) return false;  // start-up may still set the allocators up: try next cycle
  const bool ok = wrap<kMem>(get, set) && wrap<kObj>(get, set);
  if (!ok) g_gave_up = true;
  g_mem.python_hooked.store(ok, std::memory_order_release);
  return ok;
}

}  // namespace mlprof::preload::mem
