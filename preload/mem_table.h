// Memory profiling: the table of sampled live pointers (ptr -> alloc_id), so that the free of a
// sampled allocation can be reported, while the free of any other pointer costs a few ns.
//
//   - A filter in front: kFilterSize slots indexed by a multiplicative hash of the pointer, each
//     a count of the table's pointers that hash there and one bit (count != 0). free() of a
//     pointer whose bit is 0 was certainly not sampled: one load from an 8 KiB bitmap, no lock.
//     (A byte per slot, 64 KiB, was larger than L1: on an allocation-heavy workload that load
//     missed the cache on most frees.) The counts are touched only by insert/remove.
//   - Behind it, kStripes independent stripes, each a test-and-set spinlock and an
//     open-addressing array (linear probing, backward-shift deletion, load factor <= 1/2) grown
//     by doubling. A pointer's stripe is the top bits of its filter slot, so every slot (and
//     every 64-slot bitmap word) belongs to one stripe and is only written under its lock: count
//     and bit change together, with plain stores. Stripe memory comes from mmap/munmap
//     system calls, never malloc (this code runs inside malloc). Exact mode keeps millions of
//     entries: 2^20 entries take 32 MiB of arrays.
// A stripe that cannot grow (mmap failed, or kMaxStripeSlots reached) refuses the insert: the
// caller counts it (kMemTableFull) and does not report that allocation.
//
// Locks are held only for the few instructions of one insert/remove/lookup (and across fork,
// lock_all/unlock_all): never while waiting for anything else.
// Not signal context (a hook that is interrupted by a signal whose handler allocates finds the
// reentrancy guard set and does not come here).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mlprof::preload::mem {

class LiveTable {
 public:
  static constexpr uint32_t kFilterBits = 16;
  static constexpr uint32_t kFilterSize = 1u << kFilterBits;
  static constexpr uint32_t kStripeBits = 8;
  static constexpr uint32_t kStripes = 1u << kStripeBits;
  static constexpr uint32_t kInitialSlots = 256;          // 4 KiB, one page
  static constexpr uint32_t kMaxStripeSlots = 1u << 24;  // 256 MiB per stripe

  // Maps the filter. false when mmap fails (then every insert fails).
  bool init();
  // Unmaps everything (tests).
  void destroy();

  // Records ptr -> id (id != 0). When ptr is already present (its free was not seen: it happened
  // under the guard) the old id is replaced and returned in *replaced (else 0). false when the
  // stripe could not grow: nothing recorded.
  bool insert(uint64_t ptr, uint64_t id, uint64_t* replaced);
  // Removes ptr; returns its id, or 0 when it was not there.
  uint64_t remove(uint64_t ptr);
  // The id of ptr, or 0 (tests).
  uint64_t lookup(uint64_t ptr);
  // False when ptr is certainly not in the table: the free fast path.
  bool maybe_contains(uint64_t ptr) const {
    const uint32_t i = filter_index(ptr);
    return ((__atomic_load_n(&bits_[i >> 6], __ATOMIC_RELAXED) >> (i & 63)) & 1) != 0;
  }
  size_t size() const;

  // fork: prepare takes every stripe lock, the parent releases them; the child starts empty (the
  // parent's allocations are not the child's to report).
  void lock_all();
  void unlock_all();
  void reset_in_child();

  static uint32_t filter_index(uint64_t ptr) {
    return static_cast<uint32_t>(((ptr >> 6) ^ (ptr >> 22)) & (kFilterSize - 1));
  }

 private:
  struct Entry {
    uint64_t ptr;  // 0: empty
    uint64_t id;
  };
  struct alignas(64) Stripe {
    std::atomic<uint32_t> lock{0};
    uint32_t count = 0;
    uint32_t cap = 0;  // slots, a power of two (0: not mapped yet)
    Entry* slots = nullptr;
  };
  Stripe& stripe_of(uint64_t ptr) { return stripes_[filter_index(ptr) >> (kFilterBits - kStripeBits)]; }
  void lock(Stripe& s);
  void unlock(Stripe& s) { s.lock.store(0, std::memory_order_release); }
  bool grow(Stripe& s);  // caller holds the lock
  // Under the lock of ptr's stripe.
  void filter_add(uint64_t ptr);
  void filter_sub(uint64_t ptr);

  static constexpr size_t kCountBytes = kFilterSize * sizeof(uint32_t);
  // kFilterSize bits, inside the object (g_mem is static: the fast path's load has a link-time
  // address, no pointer to load first). All zero until the first insert.
  alignas(64) uint64_t bits_[kFilterSize / 64] = {};
  uint32_t* counts_ = nullptr;  // kFilterSize counts, mapped by init (nullptr: every insert fails)
  Stripe stripes_[kStripes];
};

}  // namespace mlprof::preload::mem
