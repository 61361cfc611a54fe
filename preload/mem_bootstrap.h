// Memory profiling: the bootstrap arena. The allocation hooks find the real allocator with
// dlsym(RTLD_NEXT), and dlsym itself may call malloc/calloc: those requests (made while the
// calling thread is resolving) are served from this static arena by bumping a pointer. Its blocks
// carry a 16-byte header with their size (the real allocator's blocks never do), are never
// reused, and must never reach the real allocator: free ignores them, realloc copies them out,
// malloc_usable_size reads the header. A few hundred bytes are used in practice.
// Thread-safe (one atomic bump); not signal context.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mlprof::preload::mem {

class BootstrapArena {
 public:
  static constexpr size_t kSize = 256 * 1024;
  // size bytes aligned to align (a power of two, >= 16 assumed; smaller is rounded up); nullptr
  // when the arena is exhausted or align is not a power of two. The memory is zeroed (.bss,
  // never reused).
  void* alloc(size_t size, size_t align = 16);
  bool contains(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(buf_);
    return a - b < kSize;  // one compare: a < b wraps around to a huge value
  }
  // The size requested for a block of this arena.
  size_t usable_size(const void* p) const;
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  // Both initialized at compile time (zero-filled .bss): the hooks use the arena before any
  // constructor of the preload runs, and a dynamic initializer would reset it afterwards.
  alignas(4096) unsigned char buf_[kSize] = {};
  std::atomic<size_t> used_{0};
};

}  // namespace mlprof::preload::mem
