// Interposed allocation and copy functions (exported by the preload MODULE only, like
// interpose.cpp; tests link the core without them). The most frequent ones (malloc, calloc,
// realloc, free and the copies) enter through memory_entry.cpp's frameless fast paths and come
// here only when something is to be done (memory_hooks.h). Each forwards to the next definition
// (dlsym(RTLD_NEXT): glibc's, or tcmalloc's/jemalloc's when such an allocator is preloaded after
// mlprof) and adds only what memory profiling needs (preload/mem_profiler.h):
//
//   malloc calloc realloc memalign posix_memalign    sampled allocations (AllocKind::kMalloc);
//   aligned_alloc valloc pvalloc                     C++ new reaches them through libstdc++
//   free, realloc                                    frees of sampled blocks
//   malloc_usable_size                               bootstrap blocks answered here
//   mmap mmap64 mremap munmap                        anonymous mappings (AllocKind::kMmap)
//   memcpy memmove __memcpy_chk __memmove_chk        copy volume
//
// Pointers returned are always the real allocator's own: no headers are added.
//
// RESOLUTION. The real functions are looked up on the first call of any hook (the loader and
// libc call malloc long before the preload's constructor). dlsym may itself allocate: while the
// calling thread resolves, allocations come from a static bootstrap arena (mem_bootstrap.h),
// copies are done by `rep movsb`, and mappings by raw system calls.
//
// The hooks run before the constructor and after the stream ended too: mem_profiler.h's fast
// paths then only forward. errno is what the real function left (the slow paths restore it).
// Not signal context, but programs do allocate in their own signal handlers: a handler that
// interrupts a hook's slow path finds the guard set and only forwards (a copy under the guard
// charges its countdown, and a due one is redrawn by mem_profiler.cpp's skip_due, signal-safe).
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "preload/export.h"
#include "preload/mem_bootstrap.h"
#include "preload/mem_profiler.h"
#include "preload/memory_hooks.h"

namespace mem = mlprof::preload::mem;
using mlprof::wire::AllocKind;

namespace mlprof::preload::hooks {
Real g_real;
constinit mem::BootstrapArena g_boot;
bool g_plain_glibc = false;
}  // namespace mlprof::preload::hooks

using mlprof::preload::hooks::g_boot;
using mlprof::preload::hooks::g_plain_glibc;
using mlprof::preload::hooks::g_real;
using mlprof::preload::hooks::Real;

namespace {


bool g_resolved = false;  // every lookup was made once (a missing symbol stays nullptr)
__thread bool t_resolving __attribute__((tls_model("initial-exec"))) = false;

template <typename Fn>
void look(Fn* out, const char* name, const char* fallback = nullptr) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p && fallback) p = dlsym(RTLD_NEXT, fallback);
  *out = reinterpret_cast<Fn>(p);
}

__attribute__((noinline)) void resolve() {
  if (t_resolving) return;
  t_resolving = true;
  const int saved = errno;
  Real r{};
  look(&r.malloc, "malloc", "__libc_malloc");
  look(&r.calloc, "calloc", "__libc_calloc");
  look(&r.realloc, "realloc", "__libc_realloc");
  look(&r.free, "free", "__libc_free");
  look(&r.memalign, "memalign", "__libc_memalign");
  look(&r.posix_memalign, "posix_memalign");
  look(&r.aligned_alloc, "aligned_alloc");
  look(&r.valloc, "valloc", "__libc_valloc");
  look(&r.pvalloc, "pvalloc", "__libc_pvalloc");
  look(&r.malloc_usable_size, "malloc_usable_size");
  look(&r.mmap, "mmap");
  look(&r.munmap, "munmap");
  look(&r.mremap, "mremap");
  look(&r.memcpy, "memcpy");
  look(&r.memmove, "memmove");
  look(&r.memcpy_chk, "__memcpy_chk");
  look(&r.memmove_chk, "__memmove_chk");
  // Everything at once, the allocation functions last (their presence means "resolved"), so a
  // block is never allocated by one allocator and freed through the bootstrap path or the reverse.
  __atomic_store_n(&g_real.memcpy_chk, r.memcpy_chk, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.memmove_chk, r.memmove_chk, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.memcpy, r.memcpy, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.memmove, r.memmove, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.mmap, r.mmap, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.munmap, r.munmap, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.mremap, r.mremap, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.malloc_usable_size, r.malloc_usable_size, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.pvalloc, r.pvalloc, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.valloc, r.valloc, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.aligned_alloc, r.aligned_alloc, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.posix_memalign, r.posix_memalign, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.memalign, r.memalign, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.realloc, r.realloc, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.calloc, r.calloc, __ATOMIC_RELAXED);
  __atomic_store_n(&g_real.free, r.free, __ATOMIC_RELEASE);
  __atomic_store_n(&g_real.malloc, r.malloc, __ATOMIC_RELEASE);
  __atomic_store_n(&g_resolved, true, __ATOMIC_RELEASE);
  errno = saved;
  t_resolving = false;
}

// The function pointer, resolving first when needed; nullptr while this thread is resolving (or
// when the symbol does not exist: the caller's fallback is then used for good).
template <typename Fn>
inline Fn get(Fn* slot) {
  Fn f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (__builtin_expect(f != nullptr, 1)) return f;
  if (!__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE)) resolve();
  return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}


void* boot_alloc(size_t size, size_t align) {
  void* p = g_boot.alloc(size, align);
  if (!p) errno = ENOMEM;
  return p;
}

inline void copy_bytes(void* dst, const void* src, size_t n) {  // no call: memcpy is us
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

void* sys_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

// A malloc replacement preloaded after mlprof (tcmalloc, jemalloc) replaces operator new too, so
// C++ allocations go to it directly, without our malloc hook and its guard: the mappings it makes
// for its arenas on that path would look like the program's. Its code range is found once (the
// constructor, hooks_init) and mappings made from there are not counted.
uintptr_t g_alloc_lo = 0, g_alloc_hi = 0;

struct FindObject {
  uintptr_t addr, lo, hi;
};

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindObject*>(data);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (f->addr < lo || f->addr >= hi) return 0;
  f->lo = lo;
  f->hi = hi;
  return 1;
}

inline bool from_allocator(uint64_t caller) { return caller - g_alloc_lo < g_alloc_hi - g_alloc_lo; }

// The real allocator is called with the guard held: what it does inside (mmap, memcpy through
// the PLT in tcmalloc/jemalloc) is not the program's doing. Releases (free, munmap) are
// tail calls without it: whatever they do inside releases memory, which samples nothing (a
// munmap of an allocator's own arena finds nothing in the table: its mmap was not sampled).
#define MLPROF_FORWARD(expr)   \
  ++mem::t_mem.guard;          \
  auto result_ = (expr);       \
  --mem::t_mem.guard

void* aligned_common(size_t align, size_t size, void* (*real)(size_t, size_t), uint64_t caller) {
  MLPROF_FORWARD(real(align, size));
  mem::after_alloc(result_, size, AllocKind::kMalloc, caller);
  return result_;
}

}  // namespace

namespace mlprof::preload::mem {

bool alloc_hooks_present() { return true; }

void hooks_init() {
  auto m = get(&g_real.malloc);
  void* glibc = dlsym(RTLD_NEXT, "__libc_malloc");
  if (!m) return;
  if (reinterpret_cast<void*>(m) == glibc) {  // glibc's malloc: nothing to exclude, fast entries
    g_plain_glibc = true;
    return;
  }
  FindObject f{reinterpret_cast<uintptr_t>(m), 0, 0};
  if (dl_iterate_phdr(find_object, &f) && f.hi > f.lo) {
    g_alloc_lo = f.lo;
    g_alloc_hi = f.hi;
  }
}

}  // namespace mlprof::preload::mem

// ---- the slow paths of the fast entries (memory_entry.cpp) --------------------------------------

namespace mlprof::preload::hooks {

__attribute__((noinline)) void* malloc_slow(size_t size, uint64_t caller, bool counted) {
  auto real = get(&g_real.malloc);
  if (__builtin_expect(!real, 0)) return boot_alloc(size, 16);
  MLPROF_FORWARD(real(size));
  mem::after_alloc_counted(result_, size, AllocKind::kMalloc, caller, counted);
  return result_;
}

__attribute__((noinline)) void* calloc_slow(size_t n, size_t size, uint64_t caller, bool counted) {
  auto real = get(&g_real.calloc);
  if (__builtin_expect(!real, 0)) {
    if (size && n > SIZE_MAX / size) {
      errno = ENOMEM;
      return nullptr;
    }
    return boot_alloc(n * size, 16);  // .bss, never reused: already zero
  }
  MLPROF_FORWARD(real(n, size));
  mem::after_alloc_counted(result_, static_cast<uint64_t>(n) * size, AllocKind::kMalloc, caller, counted);
  return result_;
}

__attribute__((noinline)) void free_slow(void* p) {
  if (!p || __builtin_expect(g_boot.contains(p), 0)) return;
  auto real = get(&g_real.free);
  if (__builtin_expect(!real, 0)) return;  // only while resolving: leaked, never misfreed
  mem::before_free(p);
  real(p);  // a tail call; no guard needed: releasing memory samples nothing
}

// counted: p is not a sampled block (the entry's filter said so) and the new block is due.
__attribute__((noinline)) void* realloc_slow(void* p, size_t size, uint64_t caller, bool counted) {
  if (__builtin_expect(g_boot.contains(p), 0)) {
    // A bootstrap block moves to a fresh block (from the real allocator once resolved); the
    // bootstrap block itself is never freed.
    if (size == 0) return nullptr;  // realloc(p, 0) frees p
    void* q = malloc(size);
    if (q) {
      const size_t old = g_boot.usable_size(p);
      copy_bytes(q, p, old < size ? old : size);
    }
    return q;
  }
  auto real = get(&g_real.realloc);
  if (__builtin_expect(!real, 0)) {
    // While this thread resolves, only bootstrap blocks exist for it.
    if (!p) return boot_alloc(size, 16);
    errno = ENOMEM;
    return nullptr;
  }
  const uint64_t taken = p ? mem::take_before_release(p) : 0;
  MLPROF_FORWARD(real(p, size));
  // realloc(p, 0) frees p (glibc returns NULL); otherwise NULL means failure and p stays.
  mem::settle_release(p, taken, result_ != nullptr || size == 0);
  if (size) mem::after_alloc_counted(result_, size, AllocKind::kMalloc, caller, counted);
  return result_;
}

}  // namespace mlprof::preload::hooks

MLPROF_EXPORT void* memalign(size_t align, size_t size) {
  auto real = get(&g_real.memalign);
  if (__builtin_expect(!real, 0)) return boot_alloc(size, align);
  return aligned_common(align, size, real, MLPROF_CALLER);
}

MLPROF_EXPORT void* aligned_alloc(size_t align, size_t size) {
  auto real = get(&g_real.aligned_alloc);
  if (__builtin_expect(!real, 0)) return boot_alloc(size, align);
  return aligned_common(align, size, real, MLPROF_CALLER);
}

MLPROF_EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  auto real = get(&g_real.posix_memalign);
  if (__builtin_expect(!real, 0)) {
    if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
    void* p = g_boot.alloc(size, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
  }
  MLPROF_FORWARD(real(out, align, size));
  if (result_ == 0) mem::after_alloc(*out, size, AllocKind::kMalloc, MLPROF_CALLER);
  return result_;
}

MLPROF_EXPORT void* valloc(size_t size) {
  auto real = get(&g_real.valloc);
  if (__builtin_expect(!real, 0)) return boot_alloc(size, 4096);
  MLPROF_FORWARD(real(size));
  mem::after_alloc(result_, size, AllocKind::kMalloc, MLPROF_CALLER);
  return result_;
}

MLPROF_EXPORT void* pvalloc(size_t size) {
  auto real = get(&g_real.pvalloc);
  if (__builtin_expect(!real, 0)) return boot_alloc((size + 4095) & ~size_t{4095}, 4096);
  MLPROF_FORWARD(real(size));
  mem::after_alloc(result_, (size + 4095) & ~size_t{4095}, AllocKind::kMalloc, MLPROF_CALLER);
  return result_;
}

MLPROF_EXPORT size_t malloc_usable_size(void* p) {
  if (!p) return 0;
  if (g_boot.contains(p)) return g_boot.usable_size(p);
  auto real = get(&g_real.malloc_usable_size);
  if (!real) return 0;
  MLPROF_FORWARD(real(p));
  return result_;
}

// ---- mappings ------------------------------------------------------------------------------

MLPROF_EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  auto real = get(&g_real.mmap);
  if (__builtin_expect(!real, 0)) return sys_mmap(addr, len, prot, flags, fd, off);
  // MAP_FIXED replaces whatever was mapped there: a sampled mapping starting there is gone.
  if ((flags & MAP_FIXED) && addr) mem::before_free(addr);
  MLPROF_FORWARD(real(addr, len, prot, flags, fd, off));
  // PROT_NONE reserves address space with no memory behind it (CUDA's driver reserves GiBs at
  // cuInit, JVMs and Go their heaps): not an allocation. What is later mapped into it with
  // MAP_FIXED is; memory opened up with mprotect is not seen (docs/limits.md).
  if (result_ != MAP_FAILED && (flags & MAP_ANONYMOUS) && prot != PROT_NONE && !from_allocator(MLPROF_CALLER))
    mem::after_alloc(result_, len, AllocKind::kMmap, MLPROF_CALLER);
  return result_;
}

// On x86-64 mmap64 is the same function (off_t is 64-bit).
MLPROF_EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

// A sampled mapping is released when the range unmapped starts at its address (a partial unmap
// at its start included: see docs/limits.md).
MLPROF_EXPORT int munmap(void* addr, size_t len) {
  auto real = get(&g_real.munmap);
  if (__builtin_expect(!real, 0)) return static_cast<int>(syscall(SYS_munmap, addr, len));
  // A preloaded allocator's own unmaps are never of sampled mappings (its mmaps are not sampled),
  // and it may call here holding its locks: no table lookup for them (a stripe lock held across
  // fork by fork_prepare must never wait behind an allocator lock).
  if (from_allocator(MLPROF_CALLER)) return real(addr, len);
  const uint64_t taken = mem::take_before_release(addr);
  const int rc = real(addr, len);
  mem::settle_release(addr, taken, rc == 0);  // keeps errno
  return rc;
}

// Like realloc: the old mapping's sample (if any) is released, the result is a new mapping of
// new_size (sampled like any other; anonymous or not cannot be told cheaply, see docs/limits.md).
MLPROF_EXPORT void* mremap(void* old, size_t old_size, size_t new_size, int flags, ...) {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  auto real = get(&g_real.mremap);
  if (__builtin_expect(!real, 0)) {
    long r = syscall(SYS_mremap, old, old_size, new_size, flags, new_addr);
    return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
  }
  const uint64_t taken_old = mem::take_before_release(old);
  const uint64_t taken_new = (flags & MREMAP_FIXED) && new_addr ? mem::take_before_release(new_addr) : 0;
  MLPROF_FORWARD(real(old, old_size, new_size, flags, new_addr));
  mem::settle_release(old, taken_old, result_ != MAP_FAILED);
  mem::settle_release(new_addr, taken_new, result_ != MAP_FAILED);
  if (result_ != MAP_FAILED && !from_allocator(MLPROF_CALLER))
    mem::after_alloc(result_, new_size, AllocKind::kMmap, MLPROF_CALLER);
  return result_;
}

// ---- copies ----------------------------------------------------------------------------------

namespace mlprof::preload::hooks {

// counted: the copy is due (the entry subtracted it); otherwise the whole hook.
inline void copy_sample(size_t n, uint64_t caller, bool counted) {
  if (counted) {
    mem::sampled_copy(n, caller);
  } else {
    mem::before_copy(n, caller);
  }
}

__attribute__((noinline)) void* memcpy_slow(void* dst, const void* src, size_t n, uint64_t caller, bool counted) {
  auto real = get(&g_real.memcpy);
  if (__builtin_expect(!real, 0)) {
    void* d = dst;
    copy_bytes(d, src, n);
    return dst;
  }
  copy_sample(n, caller, counted);
  return real(dst, src, n);
}

__attribute__((noinline)) void* memmove_slow(void* dst, const void* src, size_t n, uint64_t caller, bool counted) {
  auto real = get(&g_real.memmove);
  if (__builtin_expect(!real, 0)) {
    // Overlap-safe without a call: backwards when the destination lies after the source.
    auto* d = static_cast<unsigned char*>(dst);
    auto* s = static_cast<const unsigned char*>(src);
    if (d <= s || d >= s + n) {
      copy_bytes(d, s, n);
    } else {
      for (size_t i = n; i > 0; --i) {
        d[i - 1] = s[i - 1];
        asm volatile("" ::: "memory");  // keeps the loop a loop (not a call to memmove)
      }
    }
    return dst;
  }
  copy_sample(n, caller, counted);
  return real(dst, src, n);
}

__attribute__((noinline)) void* memcpy_chk_slow(void* dst, const void* src, size_t n, size_t dst_len, uint64_t caller,
                                                bool counted) {
  auto real = get(&g_real.memcpy_chk);
  if (__builtin_expect(!real, 0)) return memcpy_slow(dst, src, n, caller, false);
  copy_sample(n, caller, counted);
  return real(dst, src, n, dst_len);  // the real one reports an overflow and aborts, as before
}

__attribute__((noinline)) void* memmove_chk_slow(void* dst, const void* src, size_t n, size_t dst_len, uint64_t caller,
                                                 bool counted) {
  auto real = get(&g_real.memmove_chk);
  if (__builtin_expect(!real, 0)) return memmove_slow(dst, src, n, caller, false);
  copy_sample(n, caller, counted);
  return real(dst, src, n, dst_len);
}

}  // namespace mlprof::preload::hooks
