// The interposed allocation and copy functions, split in two (preload MODULE only):
//
//   memory_entry.cpp  the exported malloc, calloc, realloc, free, memcpy, memmove,
//                     __memcpy_chk, __memmove_chk: built WITHOUT frame pointers, so that when
//                     nothing is to be recorded (almost always) they are a few instructions and
//                     a tail jump into the real function, with no frame of their own;
//   memory_hooks.cpp  everything else: resolution of the real functions, the bootstrap arena, the
//                     rarer hooks (memalign, mmap, ...), and the *_slow functions below, which the
//                     entries jump to (also as tail calls) when they cannot just forward.
//
// The fast path forwards only when the real allocator is glibc's (hooks_init checked it): glibc
// calls nothing of ours from inside malloc, so no reentrancy guard is needed around it. With a
// preloaded tcmalloc or jemalloc every allocation takes the slow path, which holds the guard
// around the real call as before.
// Not signal context (programs do allocate in their own signal handlers: see mem_thread.h).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "preload/mem_bootstrap.h"

#pragma GCC visibility push(hidden)  // one module: no GOT loads for these
namespace mlprof::preload::hooks {

struct Real {
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void (*free)(void*);
  void* (*memalign)(size_t, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void*);
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
  void* (*mremap)(void*, size_t, size_t, int, ...);
  void* (*memcpy)(void*, const void*, size_t);
  void* (*memmove)(void*, const void*, size_t);
  void* (*memcpy_chk)(void*, const void*, size_t, size_t);
  void* (*memmove_chk)(void*, const void*, size_t, size_t);
};

extern Real g_real;  // published field by field only after every lookup finished (nullptr before)
extern mem::BootstrapArena g_boot;
extern bool g_plain_glibc;  // the real malloc is glibc's: the entries may forward directly

// The slow paths. `caller` is the entry's return address; `counted`: the entry already
// subtracted this allocation (or copy) from the thread's countdown and found it due, so the
// slow path forwards and records it; otherwise it does the whole hook (resolution, bootstrap,
// guard, countdown). noinline, with frame pointers (the memory unwinder steps over them).
void* malloc_slow(size_t size, uint64_t caller, bool counted);
void* calloc_slow(size_t n, size_t size, uint64_t caller, bool counted);
void* realloc_slow(void* p, size_t size, uint64_t caller, bool counted);
void free_slow(void* p);
void* memcpy_slow(void* dst, const void* src, size_t n, uint64_t caller, bool counted);
void* memmove_slow(void* dst, const void* src, size_t n, uint64_t caller, bool counted);
void* memcpy_chk_slow(void* dst, const void* src, size_t n, size_t dst_len, uint64_t caller, bool counted);
void* memmove_chk_slow(void* dst, const void* src, size_t n, size_t dst_len, uint64_t caller, bool counted);

}  // namespace mlprof::preload::hooks
#pragma GCC visibility pop
