#include "preload/mem_bootstrap.h"

#include <cstring>

namespace mlprof::preload::mem {

void* BootstrapArena::alloc(size_t size, size_t align) {
  if (align < 16) align = 16;
  if ((align & (align - 1)) != 0 || size > kSize || align > kSize / 4) return nullptr;
  size_t used = used_.load(std::memory_order_relaxed);
  for (;;) {
    // The block starts at the first aligned offset that leaves room for the header before it.
    size_t start = (used + 16 + align - 1) & ~(align - 1);
    size_t end = start + ((size + 15) & ~size_t{15});
    if (end > kSize || end < start) return nullptr;
    if (used_.compare_exchange_weak(used, end, std::memory_order_relaxed)) {
      uint64_t header = size;
      memcpy(buf_ + start - 16, &header, sizeof header);
      return buf_ + start;
    }
  }
}

size_t BootstrapArena::usable_size(const void* p) const {
  if (!contains(p)) return 0;
  const auto off = static_cast<size_t>(static_cast<const unsigned char*>(p) - buf_);
  if (off < 16) return 0;
  uint64_t header;
  memcpy(&header, buf_ + off - 16, sizeof header);
  return static_cast<size_t>(header);
}

}  // namespace mlprof::preload::mem
