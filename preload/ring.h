// A single-producer single-consumer byte ring: the signal handler of one thread produces sample
// records, the writer thread consumes them.
//
// SIGNAL CONTEXT: the producer side (reserve/commit) runs inside the sampling signal handler.
// Allowed: atomics, plain loads/stores into the preallocated buffer. Forbidden: malloc, locks,
// syscalls, errno changes. The buffer is mmap'd by the owner outside signal context.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlprof::preload {

class Ring {
 public:
  // capacity must be a power of two; buf is owned by the caller.
  void init(uint8_t* buf, uint32_t capacity) {
    buf_ = buf;
    cap_ = capacity;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }
  bool valid() const { return buf_ != nullptr; }

  // Producer: returns a pointer to `len` contiguous bytes, or nullptr if the ring is too full.
  // At most one reservation is outstanding.  // signal-safe
  uint8_t* reserve(uint32_t len) {
    if (len > cap_) return nullptr;  // also keeps align() below from wrapping around
    const uint32_t need = align(len + kHeader);
    uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    uint32_t pos = static_cast<uint32_t>(head & (cap_ - 1));
    uint32_t contiguous = cap_ - pos;
    uint64_t extra = 0;
    if (contiguous < need) extra = contiguous;  // skip the end of the buffer with a pad record
    if (head + extra + need - tail > cap_) return nullptr;
    if (extra) {
      if (contiguous >= kHeader) write_len(pos, kPad);
      head += extra;
      pos = 0;
    }
    pending_head_ = head;
    return buf_ + pos + kHeader;
  }

  // Producer: publishes the reserved record with its final length (<= reserved).  // signal-safe
  void commit(uint32_t len) {
    uint32_t pos = static_cast<uint32_t>(pending_head_ & (cap_ - 1));
    write_len(pos, len);
    head_.store(pending_head_ + align(len + kHeader), std::memory_order_release);
  }

  // Producer: commit(), and whether this record took the ring to half full or past it, so that the
  // producer can wake the consumer before the ring fills.  // signal-safe
  bool commit_past_half(uint32_t len) {
    const uint64_t start = head_.load(std::memory_order_relaxed);  // before this record and its pad
    commit(len);
    const uint64_t tail = tail_.load(std::memory_order_acquire);  // a later drain only lowers the fill
    const uint64_t half = cap_ / 2;
    return start - tail < half && head_.load(std::memory_order_relaxed) - tail >= half;
  }

  // Consumer: the fraction of the ring holding records not drained yet (0..1).
  double fill() const {
    if (cap_ == 0) return 0;
    const uint64_t used = head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_relaxed);
    return static_cast<double>(used) / cap_;
  }

  // Consumer: calls fn(const uint8_t* data, uint32_t len) for every published record.
  template <typename Fn>
  size_t drain(Fn&& fn) {
    uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    size_t n = 0;
    while (tail < head) {
      uint32_t pos = static_cast<uint32_t>(tail & (cap_ - 1));
      uint32_t contiguous = cap_ - pos;
      uint32_t len = contiguous >= kHeader ? read_len(pos) : kPad;
      if (len == kPad) {
        tail += contiguous;
        continue;
      }
      fn(buf_ + pos + kHeader, len);
      ++n;
      tail += align(len + kHeader);
    }
    tail_.store(tail, std::memory_order_release);
    return n;
  }

 private:
  static constexpr uint32_t kHeader = 8;
  static constexpr uint32_t kPad = 0xffffffffu;
  static uint32_t align(uint32_t n) { return (n + 7u) & ~7u; }
  void write_len(uint32_t pos, uint32_t len) { memcpy(buf_ + pos, &len, sizeof len); }
  uint32_t read_len(uint32_t pos) const {
    uint32_t len;
    memcpy(&len, buf_ + pos, sizeof len);
    return len;
  }

  uint8_t* buf_ = nullptr;
  uint32_t cap_ = 0;
  uint64_t pending_head_ = 0;
  std::atomic<uint64_t> head_{0};  // written by the producer
  std::atomic<uint64_t> tail_{0};  // written by the consumer
};

}  // namespace mlprof::preload
