#include "preload/mem_events.h"

#include "common/clock.h"
#include "preload/mem_thread.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace mlprof::preload::mem {

FallbackRing g_fallback;

namespace {

uint8_t* sys_map(size_t bytes) {
  long r = syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<uint8_t*>(r);
}

void nap() {  // a fraction of the writer's 10 ms cycle
  struct timespec ts = {0, 200 * 1000};
  syscall(SYS_nanosleep, &ts, nullptr);
}

}  // namespace

bool FallbackRing::init(uint32_t bytes) {
  if (mem_) return true;
  mem_ = sys_map(bytes);
  if (!mem_) return false;
  bytes_ = bytes;
  ring_.init(mem_, bytes);
  return true;
}

void FallbackRing::lock() {
  for (int spins = 0;; ++spins) {
    if (lock_.load(std::memory_order_relaxed) == 0 && lock_.exchange(1, std::memory_order_acquire) == 0) return;
    if (spins < 64)
      __builtin_ia32_pause();
    else
      syscall(SYS_sched_yield);
  }
}

void FallbackRing::reset_in_child() {
  if (mem_) ring_.init(mem_, bytes_);
  lock_.store(0, std::memory_order_relaxed);
}

bool map_thread_ring(ThreadSlot* slot, uint32_t bytes) {
  uint8_t* mem = sys_map(bytes + ThreadSlot::kMemoMapBytes);  // the ring, then the stack memo
  if (!mem) return false;
  slot->mem_ring_mem = mem;
  slot->mem_ring_bytes = bytes;
  slot->memo = reinterpret_cast<UnwindMemo*>(mem + bytes);  // zeroed: empty
  slot->mem_ring.init(mem, bytes);
  slot->mem_ring_ready.store(true, std::memory_order_release);  // the writer may drain it now
  return true;
}

uint8_t* EventSlot::reserve(uint32_t len, uint32_t ring_bytes, int64_t wait_ns, const std::atomic<bool>& keep_waiting) {
  ThreadSlot* slot = t_slot;
  if (slot && !slot->mem_ring_ready.load(std::memory_order_relaxed)) map_thread_ring(slot, ring_bytes);
  if (slot && slot->mem_ring_ready.load(std::memory_order_relaxed)) {
    ring_ = &slot->mem_ring;
    fallback_ = false;
  } else {
    if (!g_fallback.valid()) return nullptr;
    ring_ = &g_fallback.ring();
    fallback_ = true;
    g_fallback.lock();
  }
  uint8_t* p = ring_->reserve(len);
  ThreadState& t = t_mem;
  if (p || wait_ns <= 0 || t.ring_stuck) {
    if (p) {
      t.ring_stuck = false;
    } else {
      if (fallback_) g_fallback.unlock();
      wake_writer();  // dropped without a wait: the next events find room sooner
    }
    return p;
  }
  const int64_t deadline = clock_ns() + wait_ns;
  bool woken = false;
  while (!p) {
    if (fallback_) g_fallback.unlock();
    // Full: the writer may be in an idle cycle (up to 80 ms) that a burst of events outran.
    if (!woken) {
      wake_writer();
      woken = true;
    }
    if (!keep_waiting.load(std::memory_order_relaxed)) return nullptr;
    if (clock_ns() >= deadline) {
      t.ring_stuck = true;  // the writer is stuck (a collector that stopped reading): no more waits
      return nullptr;       // until an event gets in again
    }
    nap();
    if (fallback_) g_fallback.lock();
    p = ring_->reserve(len);
  }
  return p;
}

void EventSlot::commit(uint32_t len) {
  const bool past_half = ring_->commit_past_half(len);
  if (fallback_) g_fallback.unlock();
  // A burst (a fine --mem-interval, exact mode) can fill a ring within one of the writer's idle
  // cycles: it is woken at half full, before this thread has to wait or drop (kMemDropped).
  if (past_half) wake_writer();
}

void EventSlot::abandon() {
  if (fallback_) g_fallback.unlock();
}

}  // namespace mlprof::preload::mem
