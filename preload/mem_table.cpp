#include "preload/mem_table.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "preload/fmix.h"

namespace mlprof::preload::mem {
namespace {

// Raw system calls: inside the preload, mmap and munmap are our own hooks.
void* sys_map(size_t bytes) {
  long r = syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<void*>(r);
}
void sys_unmap(void* p, size_t bytes) { syscall(SYS_munmap, p, bytes); }

}  // namespace

bool LiveTable::init() {
  if (counts_) return true;
  const int saved = errno;
  void* m = sys_map(kCountBytes);
  errno = saved;
  if (!m) return false;
  __atomic_store_n(&counts_, static_cast<uint32_t*>(m), __ATOMIC_RELEASE);
  return true;
}

void LiveTable::destroy() {
  for (Stripe& s : stripes_) {
    if (s.slots) sys_unmap(s.slots, size_t{s.cap} * sizeof(Entry));
    s.slots = nullptr;
    s.cap = s.count = 0;
    s.lock.store(0);
  }
  if (counts_) sys_unmap(counts_, kCountBytes);
  counts_ = nullptr;
  memset(bits_, 0, sizeof bits_);
}

void LiveTable::lock(Stripe& s) {
  for (int spins = 0;; ++spins) {
    if (s.lock.load(std::memory_order_relaxed) == 0 && s.lock.exchange(1, std::memory_order_acquire) == 0) return;
    if (spins < 64) {
      __builtin_ia32_pause();
    } else {
      // Held across a fork (lock_all) or by a preempted thread: let it run.
      syscall(SYS_sched_yield);
    }
  }
}

// The bitmap word is written only under this stripe's lock (stripe_of), so a plain
// read-modify-write suffices; the store is atomic for the lock-free readers.
void LiveTable::filter_add(uint64_t ptr) {
  const uint32_t i = filter_index(ptr);
  if (counts_[i]++ == 0) {
    uint64_t* w = &bits_[i >> 6];
    __atomic_store_n(w, *w | (uint64_t{1} << (i & 63)), __ATOMIC_RELEASE);
  }
}

void LiveTable::filter_sub(uint64_t ptr) {
  const uint32_t i = filter_index(ptr);
  if (counts_[i] != 0 && --counts_[i] == 0) {
    uint64_t* w = &bits_[i >> 6];
    __atomic_store_n(w, *w & ~(uint64_t{1} << (i & 63)), __ATOMIC_RELAXED);
  }
}

bool LiveTable::grow(Stripe& s) {
  const uint32_t ncap = s.cap ? s.cap * 2 : kInitialSlots;
  if (ncap > kMaxStripeSlots) return false;
  auto* n = static_cast<Entry*>(sys_map(size_t{ncap} * sizeof(Entry)));
  if (!n) return false;
  const uint32_t mask = ncap - 1;
  for (uint32_t i = 0; i < s.cap; ++i) {
    const Entry& e = s.slots[i];
    if (!e.ptr) continue;
    uint32_t j = static_cast<uint32_t>(fmix64(e.ptr) >> 8) & mask;
    while (n[j].ptr) j = (j + 1) & mask;
    n[j] = e;
  }
  if (s.slots) sys_unmap(s.slots, size_t{s.cap} * sizeof(Entry));
  s.slots = n;
  s.cap = ncap;
  return true;
}

bool LiveTable::insert(uint64_t ptr, uint64_t id, uint64_t* replaced) {
  *replaced = 0;
  if (!counts_ || ptr == 0) return false;
  const uint64_t h = fmix64(ptr);
  Stripe& s = stripe_of(ptr);
  const int saved = errno;
  lock(s);
  if ((s.count + 1) * 2 > s.cap && !grow(s)) {
    // Full: an existing entry may still be replaced.
    bool found = false;
    if (s.cap) {
      const uint32_t mask = s.cap - 1;
      for (uint32_t j = static_cast<uint32_t>(h >> 8) & mask; s.slots[j].ptr; j = (j + 1) & mask) {
        if (s.slots[j].ptr == ptr) {
          *replaced = s.slots[j].id;
          s.slots[j].id = id;
          found = true;
          break;
        }
      }
    }
    unlock(s);
    errno = saved;
    return found;
  }
  const uint32_t mask = s.cap - 1;
  uint32_t j = static_cast<uint32_t>(h >> 8) & mask;
  for (; s.slots[j].ptr; j = (j + 1) & mask) {
    if (s.slots[j].ptr == ptr) {
      *replaced = s.slots[j].id;
      s.slots[j].id = id;
      unlock(s);
      errno = saved;
      return true;
    }
  }
  s.slots[j].ptr = ptr;
  s.slots[j].id = id;
  ++s.count;
  // The filter counts before the allocation is returned to the program, so any later free of it
  // (which the program orders after the allocation) sees a non-zero counter.
  filter_add(ptr);
  unlock(s);
  errno = saved;
  return true;
}

uint64_t LiveTable::remove(uint64_t ptr) {
  if (!counts_ || ptr == 0) return 0;
  const uint64_t h = fmix64(ptr);
  Stripe& s = stripe_of(ptr);
  lock(s);
  if (!s.cap) {
    unlock(s);
    return 0;
  }
  const uint32_t mask = s.cap - 1;
  uint32_t j = static_cast<uint32_t>(h >> 8) & mask;
  for (; s.slots[j].ptr; j = (j + 1) & mask) {
    if (s.slots[j].ptr != ptr) continue;
    const uint64_t id = s.slots[j].id;
    // Backward-shift deletion: move later entries of the probe run into the hole when their home
    // slot is not between the hole and themselves (cyclically), so no tombstones are needed.
    uint32_t hole = j;
    for (uint32_t k = (j + 1) & mask; s.slots[k].ptr; k = (k + 1) & mask) {
      const uint32_t home = static_cast<uint32_t>(fmix64(s.slots[k].ptr) >> 8) & mask;
      const bool stays = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
      if (stays) continue;
      s.slots[hole] = s.slots[k];
      hole = k;
    }
    s.slots[hole].ptr = 0;
    s.slots[hole].id = 0;
    --s.count;
    filter_sub(ptr);
    unlock(s);
    return id;
  }
  unlock(s);
  return 0;
}

uint64_t LiveTable::lookup(uint64_t ptr) {
  if (!counts_ || ptr == 0) return 0;
  const uint64_t h = fmix64(ptr);
  Stripe& s = stripe_of(ptr);
  lock(s);
  uint64_t id = 0;
  if (s.cap) {
    const uint32_t mask = s.cap - 1;
    for (uint32_t j = static_cast<uint32_t>(h >> 8) & mask; s.slots[j].ptr; j = (j + 1) & mask)
      if (s.slots[j].ptr == ptr) {
        id = s.slots[j].id;
        break;
      }
  }
  unlock(s);
  return id;
}

size_t LiveTable::size() const {
  size_t n = 0;
  for (const Stripe& s : stripes_) n += s.count;
  return n;
}

void LiveTable::lock_all() {
  for (Stripe& s : stripes_) lock(s);
}

void LiveTable::unlock_all() {
  for (Stripe& s : stripes_) unlock(s);
}

void LiveTable::reset_in_child() {
  // The child's memory is a copy: unmapping the arrays frees only the child's copy.
  for (Stripe& s : stripes_) {
    if (s.slots) sys_unmap(s.slots, size_t{s.cap} * sizeof(Entry));
    s.slots = nullptr;
    s.cap = s.count = 0;
    s.lock.store(0, std::memory_order_relaxed);
  }
  if (counts_) memset(counts_, 0, kCountBytes);
  memset(bits_, 0, sizeof bits_);
}

}  // namespace mlprof::preload::mem
