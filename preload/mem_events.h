// Memory profiling: the events the hooks hand to the writer thread, and the rings they go through.
//
// Every registered thread has, besides its signal handler's sample ring, a second SPSC ring for
// memory events (ThreadSlot::mem_ring), produced by the thread itself in normal context: never
// by the signal handler, which could interrupt a half-written reservation. It is mapped when the
// thread records its first event (most threads of a big program never do), and unmapped by the
// writer with the rest of the slot. Threads without a slot (never registered, or after
// retire_current during their TLS destructors) share one fallback ring whose producer side is
// serialised by a spinlock (taken across fork, so a child never inherits it held).
//
// A producer whose event takes its ring to half full wakes the writer (which may be in an idle
// cycle of up to 80 ms). When a ring is full the producer wakes it too and waits for its drain
// (short sleeps, bounded by the given wait) or, without a wait, drops the event and counts it
// (kMemDropped). A thread
// whose wait timed out does not wait again until one of its events got in: a writer stuck
// behind a collector that stopped reading holds each thread up once, not once per event.
// Nothing is locked while waiting (the fallback lock is released during the sleeps).
// Not signal context.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/python.h"
#include "preload/ring.h"
#include "preload/sampler.h"
#include "preload/threads.h"

namespace mlprof::preload::mem {

enum class EventKind : uint8_t { kAlloc = 1, kFree = 2, kCopy = 3 };

// One event as it sits in a ring (in-memory only, never on the wire).
struct RawMemEvent {
  int64_t t_ns;         // CLOCK_MONOTONIC
  uint64_t alloc_id;    // alloc, free
  uint64_t size;        // alloc, copy: bytes of the call
  uint64_t weight;      // alloc, copy: estimated bytes the sample stands for
  uint32_t tid;
  uint8_t kind;         // EventKind
  uint8_t alloc_kind;   // wire::AllocKind
  uint8_t flags;        // wire::StackFlags (alloc, copy)
  uint8_t npy;          // Python frames
  uint16_t nframes;     // native frames
  uint16_t reserved[3];
  // alloc and copy: followed by nframes uint64_t pcs (leaf first), then npy python::RawPyFrame
};
static_assert(sizeof(RawMemEvent) == 48);

inline constexpr uint32_t kMaxMemEvent =
    sizeof(RawMemEvent) + kMaxFrames * sizeof(uint64_t) + kMaxPyFrames * sizeof(python::RawPyFrame);

// Ring sizes: a sampled-mode thread sends a few records per writer cycle; exact mode sends one
// per allocation and free.
inline constexpr uint32_t kThreadRingBytes = 256 * 1024;
inline constexpr uint32_t kThreadRingBytesExact = 1024 * 1024;
inline constexpr uint32_t kFallbackRingBytes = 512 * 1024;

// The ring shared by threads without a slot.
class FallbackRing {
 public:
  bool init(uint32_t bytes);  // maps it; false when mmap fails (their events are then dropped)
  Ring& ring() { return ring_; }
  bool valid() const { return ring_.valid(); }
  void lock();
  void unlock() { lock_.store(0, std::memory_order_release); }
  // fork child: the lock may have been taken by prepare; the events are the parent's.
  void reset_in_child();

 private:
  Ring ring_;
  uint8_t* mem_ = nullptr;
  uint32_t bytes_ = 0;
  std::atomic<uint32_t> lock_{0};
};
extern FallbackRing g_fallback;

// A reservation for one event in the calling thread's ring (or the fallback ring, whose lock is
// then held until commit/abandon).
class EventSlot {
 public:
  // Reserves len bytes (<= kMaxMemEvent). Maps the thread's ring on its first use (ring_bytes).
  // When the ring is full, waits up to wait_ns for the writer to drain it while `keep_waiting`
  // stays true; nullptr when there is no room (the caller counts the drop).
  uint8_t* reserve(uint32_t len, uint32_t ring_bytes, int64_t wait_ns, const std::atomic<bool>& keep_waiting);
  void commit(uint32_t len);
  void abandon();  // reserved but not committed: nothing is published

 private:
  Ring* ring_ = nullptr;
  bool fallback_ = false;
};

// Maps slot's memory ring (the calling thread's own slot). false when mmap fails.
bool map_thread_ring(ThreadSlot* slot, uint32_t bytes);

}  // namespace mlprof::preload::mem
