// The exported malloc, calloc, realloc, free, memcpy, memmove, __memcpy_chk and __memmove_chk:
// their fast paths (preload MODULE only; see memory_hooks.h for the split).
//
// Built with -fomit-frame-pointer (preload/CMakeLists.txt): each entry is a few loads, one
// subtraction on the thread's countdown (or one bitmap load for a free) and a tail jump, to the
// real function when nothing is to be recorded and to the *_slow function otherwise, so the
// entry never has a frame of its own. Measured with perf on 2 threads doing nothing but small
// allocations (bench/mem_overhead.sh, churn_small): with memory profiling off the preload was 14%
// of the process's CPU as framed hooks that called the real function, ~7% as these entries (~11%
// with memory profiling on).
//
// Fast forwarding needs: the real function resolved, glibc's allocator (g_plain_glibc), and for
// allocations the thread inside the profiler (guard) or the countdown not yet due; for copies the
// countdown not yet due (copy_not_due: inside the profiler too, where the slow path skips the
// sample); for frees,
// a pointer the live table's filter has certainly never seen and not a bootstrap block.
// Not signal context (see mem_thread.h for allocations made in signal handlers), except the copy
// entries under the guard (the sampling handler's copies): they charge the countdown and at worst
// reach mem_profiler.cpp's skip_due, which is signal-safe.
#include <cstddef>
#include <cstdint>

#include "preload/export.h"
#include "preload/mem_profiler.h"
#include "preload/memory_hooks.h"

namespace hooks = mlprof::preload::hooks;
namespace mem = mlprof::preload::mem;


namespace {

template <typename Fn>
inline Fn loaded(Fn* slot) {
  return __atomic_load_n(slot, __ATOMIC_ACQUIRE);  // a plain load on x86-64
}

}  // namespace

MLPROF_EXPORT void* malloc(size_t size) {
  auto real = loaded(&hooks::g_real.malloc);
  if (__builtin_expect(real != nullptr && hooks::g_plain_glibc, 1)) {
    if (__builtin_expect(mem::not_due(&mem::t_mem.countdown, size), 1)) return real(size);
    return hooks::malloc_slow(size, MLPROF_CALLER, true);
  }
  return hooks::malloc_slow(size, MLPROF_CALLER, false);
}

MLPROF_EXPORT void* calloc(size_t n, size_t size) {
  auto real = loaded(&hooks::g_real.calloc);
  size_t bytes;
  if (__builtin_expect(real != nullptr && hooks::g_plain_glibc && !__builtin_mul_overflow(n, size, &bytes), 1)) {
    if (__builtin_expect(mem::not_due(&mem::t_mem.countdown, bytes), 1)) return real(n, size);
    return hooks::calloc_slow(n, size, MLPROF_CALLER, true);
  }
  return hooks::calloc_slow(n, size, MLPROF_CALLER, false);
}

MLPROF_EXPORT void free(void* p) {
  auto real = loaded(&hooks::g_real.free);
  if (__builtin_expect(real != nullptr && !hooks::g_boot.contains(p) &&
                           !mem::g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(p)), 1))
    return real(p);  // free(NULL) included
  return hooks::free_slow(p);
}

MLPROF_EXPORT void* realloc(void* p, size_t size) {
  auto real = loaded(&hooks::g_real.realloc);
  if (__builtin_expect(real != nullptr && hooks::g_plain_glibc && !hooks::g_boot.contains(p) &&
                           !mem::g_mem.table.maybe_contains(reinterpret_cast<uint64_t>(p)), 1)) {
    if (__builtin_expect(mem::not_due(&mem::t_mem.countdown, size), 1)) return real(p, size);
    return hooks::realloc_slow(p, size, MLPROF_CALLER, true);
  }
  return hooks::realloc_slow(p, size, MLPROF_CALLER, false);
}

MLPROF_EXPORT void* memcpy(void* dst, const void* src, size_t n) {
  auto real = loaded(&hooks::g_real.memcpy);
  if (__builtin_expect(real != nullptr, 1)) {
    if (__builtin_expect(mem::copy_not_due(n), 1)) return real(dst, src, n);
    return hooks::memcpy_slow(dst, src, n, MLPROF_CALLER, true);
  }
  return hooks::memcpy_slow(dst, src, n, MLPROF_CALLER, false);
}

MLPROF_EXPORT void* memmove(void* dst, const void* src, size_t n) {
  auto real = loaded(&hooks::g_real.memmove);
  if (__builtin_expect(real != nullptr, 1)) {
    if (__builtin_expect(mem::copy_not_due(n), 1)) return real(dst, src, n);
    return hooks::memmove_slow(dst, src, n, MLPROF_CALLER, true);
  }
  return hooks::memmove_slow(dst, src, n, MLPROF_CALLER, false);
}

MLPROF_EXPORT void* __memcpy_chk(void* dst, const void* src, size_t n, size_t dst_len) {
  auto real = loaded(&hooks::g_real.memcpy_chk);
  if (__builtin_expect(real != nullptr, 1)) {
    if (__builtin_expect(mem::copy_not_due(n), 1)) return real(dst, src, n, dst_len);
    return hooks::memcpy_chk_slow(dst, src, n, dst_len, MLPROF_CALLER, true);
  }
  return hooks::memcpy_chk_slow(dst, src, n, dst_len, MLPROF_CALLER, false);
}

MLPROF_EXPORT void* __memmove_chk(void* dst, const void* src, size_t n, size_t dst_len) {
  auto real = loaded(&hooks::g_real.memmove_chk);
  if (__builtin_expect(real != nullptr, 1)) {
    if (__builtin_expect(mem::copy_not_due(n), 1)) return real(dst, src, n, dst_len);
    return hooks::memmove_chk_slow(dst, src, n, dst_len, MLPROF_CALLER, true);
  }
  return hooks::memmove_chk_slow(dst, src, n, dst_len, MLPROF_CALLER, false);
}
