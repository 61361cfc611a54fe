// C++ operator new/delete, for libmlprof_preload_new.so only: the preload variant mlprof-run uses
// when a library in the user's LD_PRELOAD defines operator new itself (tcmalloc, jemalloc). Such
// an allocator's operator new never calls malloc, so without these hooks every C++ allocation
// would be invisible. With plain glibc, libstdc++'s operator new calls malloc, which the malloc
// hooks already see: the default preload exports no operator new at all, and the program's C++
// allocations bind exactly where they would without mlprof.
//
// Each operator forwards to the next definition (dlsym(RTLD_NEXT): the preloaded allocator's, which
// sits in the global scope after this library) and samples the block like malloc does
// (AllocKind::kMalloc). Deletes report a sampled block's free before forwarding. No guard is held
// around the real call: such an allocator's operator new does not call malloc, and the mappings it
// makes for its arenas come from its own code range, which the mmap hook does not count
// (hooks_init). An operator with no next definition falls back to the malloc family with operator
// new's contract: the new-handler loop, then std::bad_alloc (or nullptr for the nothrow forms).
//
// No exceptions here (like the rest of the preload): a std::bad_alloc thrown by the real operator
// passes through these frames, which have no cleanup to run. (With cleanups it would not work: the
// program's unwinder, libgcc_s, would call this library's static copy of the C++ personality,
// whose _Unwind_SetGR belongs to the static libgcc and aborts.) For the same reason the fallback
// throws with the program's own libstdc++ (std::__throw_bad_alloc, looked up with dlsym).
// Not signal context.
#include <dlfcn.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "preload/export.h"
#include "preload/mem_profiler.h"

namespace mem = mlprof::preload::mem;
using mlprof::wire::AllocKind;

#define MLPROF_NEW_EXPORT __attribute__((visibility("default")))

namespace {

template <typename Fn>
Fn next(Fn* slot, const char* name) {
  Fn f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (__builtin_expect(f != nullptr, 1)) return f;
  f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));  // the same answer every time: a race is harmless
  if (f) __atomic_store_n(slot, f, __ATOMIC_RELEASE);
  return f;
}

// operator new's contract on top of the malloc family, for an operator with no next definition.
void* fallback_new(std::size_t size, std::size_t align, bool nothrow) {
  if (size == 0) size = 1;
  for (;;) {
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) {
      p = malloc(size);
    } else if (posix_memalign(&p, align, size) != 0) {
      p = nullptr;
    }
    if (p) return p;
    std::new_handler h = std::get_new_handler();
    if (h) {
      h();
      continue;
    }
    if (nothrow) return nullptr;
    // The program's libstdc++ throws it (its unwinder and its type info): a program that can catch
    // std::bad_alloc has one. Without any, nothing could catch it: abort, as an uncaught throw would.
    using ThrowFn = void (*)();
    if (auto t = reinterpret_cast<ThrowFn>(dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv"))) t();
    abort();
  }
}

using NewFn = void* (*)(std::size_t);
using NewAlignFn = void* (*)(std::size_t, std::align_val_t);
using NewNothrowFn = void* (*)(std::size_t, const std::nothrow_t&);
using NewAlignNothrowFn = void* (*)(std::size_t, std::align_val_t, const std::nothrow_t&);
using DeleteFn = void (*)(void*);
using DeleteSizedFn = void (*)(void*, std::size_t);
using DeleteAlignFn = void (*)(void*, std::align_val_t);
using DeleteSizedAlignFn = void (*)(void*, std::size_t, std::align_val_t);
using DeleteNothrowFn = void (*)(void*, const std::nothrow_t&);
using DeleteAlignNothrowFn = void (*)(void*, std::align_val_t, const std::nothrow_t&);

struct NextOps {
  NewFn nw, na;
  NewAlignFn nw_al, na_al;
  NewNothrowFn nw_nt, na_nt;
  NewAlignNothrowFn nw_al_nt, na_al_nt;
  DeleteFn dl, da;
  DeleteSizedFn dl_sz, da_sz;
  DeleteAlignFn dl_al, da_al;
  DeleteSizedAlignFn dl_sz_al, da_sz_al;
  DeleteNothrowFn dl_nt, da_nt;
  DeleteAlignNothrowFn dl_al_nt, da_al_nt;
} g_next;

// One operator new: the next definition (or the fallback, with its alignment and nothrow-ness),
// then the sample. `caller` is the operator's own return address.
template <typename Fn, typename... Args>
inline void* allocate(Fn* slot, const char* name, uint64_t caller, std::size_t size, std::size_t align, bool nothrow,
                      const Args&... args) {
  Fn f = next(slot, name);
  void* p = f ? f(size, args...) : fallback_new(size, align, nothrow);
  mem::after_alloc(p, size, AllocKind::kMalloc, caller);
  return p;
}

template <typename Fn, typename... Args>
inline void release(Fn f, void* p, Args... args) {
  if (p) mem::before_free(p);
  if (f) {
    f(p, args...);
  } else {
    free(p);  // the fallback's blocks come from the malloc family
  }
}

}  // namespace

// ---- new ---------------------------------------------------------------------------------------

MLPROF_NEW_EXPORT void* operator new(std::size_t size) {
  return allocate(&g_next.nw, "_Znwm", MLPROF_CALLER, size, 0, false);
}
MLPROF_NEW_EXPORT void* operator new[](std::size_t size) {
  return allocate(&g_next.na, "_Znam", MLPROF_CALLER, size, 0, false);
}
MLPROF_NEW_EXPORT void* operator new(std::size_t size, std::align_val_t al) {
  return allocate(&g_next.nw_al, "_ZnwmSt11align_val_t", MLPROF_CALLER, size, static_cast<std::size_t>(al), false, al);
}
MLPROF_NEW_EXPORT void* operator new[](std::size_t size, std::align_val_t al) {
  return allocate(&g_next.na_al, "_ZnamSt11align_val_t", MLPROF_CALLER, size, static_cast<std::size_t>(al), false, al);
}
MLPROF_NEW_EXPORT void* operator new(std::size_t size, const std::nothrow_t& nt) noexcept {
  return allocate(&g_next.nw_nt, "_ZnwmRKSt9nothrow_t", MLPROF_CALLER, size, 0, true, nt);
}
MLPROF_NEW_EXPORT void* operator new[](std::size_t size, const std::nothrow_t& nt) noexcept {
  return allocate(&g_next.na_nt, "_ZnamRKSt9nothrow_t", MLPROF_CALLER, size, 0, true, nt);
}
MLPROF_NEW_EXPORT void* operator new(std::size_t size, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  return allocate(&g_next.nw_al_nt, "_ZnwmSt11align_val_tRKSt9nothrow_t", MLPROF_CALLER, size,
                  static_cast<std::size_t>(al), true, al, nt);
}
MLPROF_NEW_EXPORT void* operator new[](std::size_t size, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  return allocate(&g_next.na_al_nt, "_ZnamSt11align_val_tRKSt9nothrow_t", MLPROF_CALLER, size,
                  static_cast<std::size_t>(al), true, al, nt);
}

// ---- delete ------------------------------------------------------------------------------------

MLPROF_NEW_EXPORT void operator delete(void* p) noexcept { release(next(&g_next.dl, "_ZdlPv"), p); }
MLPROF_NEW_EXPORT void operator delete[](void* p) noexcept { release(next(&g_next.da, "_ZdaPv"), p); }
MLPROF_NEW_EXPORT void operator delete(void* p, std::size_t n) noexcept {
  release(next(&g_next.dl_sz, "_ZdlPvm"), p, n);
}
MLPROF_NEW_EXPORT void operator delete[](void* p, std::size_t n) noexcept {
  release(next(&g_next.da_sz, "_ZdaPvm"), p, n);
}
MLPROF_NEW_EXPORT void operator delete(void* p, std::align_val_t al) noexcept {
  release(next(&g_next.dl_al, "_ZdlPvSt11align_val_t"), p, al);
}
MLPROF_NEW_EXPORT void operator delete[](void* p, std::align_val_t al) noexcept {
  release(next(&g_next.da_al, "_ZdaPvSt11align_val_t"), p, al);
}
MLPROF_NEW_EXPORT void operator delete(void* p, std::size_t n, std::align_val_t al) noexcept {
  release(next(&g_next.dl_sz_al, "_ZdlPvmSt11align_val_t"), p, n, al);
}
MLPROF_NEW_EXPORT void operator delete[](void* p, std::size_t n, std::align_val_t al) noexcept {
  release(next(&g_next.da_sz_al, "_ZdaPvmSt11align_val_t"), p, n, al);
}
MLPROF_NEW_EXPORT void operator delete(void* p, const std::nothrow_t& nt) noexcept {
  release(next(&g_next.dl_nt, "_ZdlPvRKSt9nothrow_t"), p, nt);
}
MLPROF_NEW_EXPORT void operator delete[](void* p, const std::nothrow_t& nt) noexcept {
  release(next(&g_next.da_nt, "_ZdaPvRKSt9nothrow_t"), p, nt);
}
MLPROF_NEW_EXPORT void operator delete(void* p, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  release(next(&g_next.dl_al_nt, "_ZdlPvSt11align_val_tRKSt9nothrow_t"), p, al, nt);
}
MLPROF_NEW_EXPORT void operator delete[](void* p, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  release(next(&g_next.da_al_nt, "_ZdaPvSt11align_val_tRKSt9nothrow_t"), p, al, nt);
}
