// preload/ring.h: the single-producer single-consumer byte ring between a thread's sampling
// signal handler and the writer thread. Order and lengths, wrap-around with pad records, the
// full ring, and a real producer thread against a real consumer thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "preload/ring.h"

namespace mlprof::preload {
namespace {

// The ring's storage, 8-byte aligned like the mmap'd buffers it gets in the preload.
struct Buffer {
  explicit Buffer(uint32_t cap) : words(cap / 8 + 1, 0xdeadbeefdeadbeefull) {}
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
  std::vector<uint64_t> words;
};

struct Rec {
  std::vector<uint8_t> bytes;
};

uint8_t pattern(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + 1); }

bool put(Ring& r, uint64_t seq, uint32_t len, uint32_t reserve_len = 0) {
  uint8_t* p = r.reserve(reserve_len ? reserve_len : len);
  if (!p) return false;
  for (uint32_t i = 0; i < len; ++i) p[i] = pattern(seq, i);
  r.commit(len);
  return true;
}

std::vector<Rec> drain_all(Ring& r) {
  std::vector<Rec> out;
  r.drain([&](const uint8_t* data, uint32_t len) { out.push_back({std::vector<uint8_t>(data, data + len)}); });
  return out;
}

void expect_record(const Rec& rec, uint64_t seq, uint32_t len) {
  ASSERT_EQ(rec.bytes.size(), len) << "record " << seq;
  for (uint32_t i = 0; i < len; ++i) ASSERT_EQ(rec.bytes[i], pattern(seq, i)) << "record " << seq << " byte " << i;
}

TEST(Ring, RecordsComeOutInOrderWithTheirLengths) {
  Buffer buf(4096);
  Ring r;
  EXPECT_FALSE(r.valid());
  r.init(buf.data(), 4096);
  EXPECT_TRUE(r.valid());
  EXPECT_TRUE(drain_all(r).empty());
  // Lengths 0..40 cover every alignment remainder; 41 * (48 max) < 4096 fits without wrapping.
  for (uint32_t len = 0; len <= 40; ++len) ASSERT_TRUE(put(r, len, len));
  auto recs = drain_all(r);
  ASSERT_EQ(recs.size(), 41u);
  for (uint32_t len = 0; len <= 40; ++len) expect_record(recs[len], len, len);
  EXPECT_TRUE(drain_all(r).empty()) << "drained records do not come back";
}

TEST(Ring, CommitMayShortenTheReservation) {
  Buffer buf(1024);
  Ring r;
  r.init(buf.data(), 1024);
  // Reserve the most a sample may need, commit what the unwinder produced.
  ASSERT_TRUE(put(r, 1, 24, 512));
  ASSERT_TRUE(put(r, 2, 100, 512));
  ASSERT_TRUE(put(r, 3, 0, 64));
  // Only the committed lengths were used (32 + 112 + 8 bytes): the other 872 hold one more record.
  ASSERT_TRUE(put(r, 4, 1024 - 152 - 8));
  EXPECT_EQ(r.reserve(0), nullptr);
  auto recs = drain_all(r);
  ASSERT_EQ(recs.size(), 4u);
  expect_record(recs[0], 1, 24);
  expect_record(recs[1], 2, 100);
  expect_record(recs[2], 3, 0);
  expect_record(recs[3], 4, 1024 - 152 - 8);
}

TEST(Ring, FullRingRefusesUntilDrained) {
  constexpr uint32_t kCap = 256;
  Buffer buf(kCap);
  Ring r;
  r.init(buf.data(), kCap);
  EXPECT_EQ(r.reserve(kCap - 7), nullptr) << "a record needs 8 header bytes";
  EXPECT_EQ(r.reserve(kCap), nullptr);
  EXPECT_EQ(r.reserve(1u << 20), nullptr);
  // Two records of 100 bytes take 2 x 112 of 256.
  ASSERT_TRUE(put(r, 1, 100));
  ASSERT_TRUE(put(r, 2, 100));
  EXPECT_EQ(r.reserve(100), nullptr) << "32 bytes left";
  EXPECT_EQ(r.reserve(25), nullptr) << "needs 40 bytes";
  ASSERT_TRUE(put(r, 3, 24)) << "exactly the 32 bytes left";
  EXPECT_EQ(r.reserve(0), nullptr) << "completely full";
  auto recs = drain_all(r);
  ASSERT_EQ(recs.size(), 3u);
  expect_record(recs[0], 1, 100);
  expect_record(recs[1], 2, 100);
  expect_record(recs[2], 3, 24);
  // After the drain the whole ring is free again: one record of the maximum size fits.
  ASSERT_TRUE(put(r, 4, kCap - 8));
  EXPECT_EQ(r.reserve(0), nullptr);
  recs = drain_all(r);
  ASSERT_EQ(recs.size(), 1u);
  expect_record(recs[0], 4, kCap - 8);
}

TEST(Ring, PadRecordSkipsTheEndOfTheBuffer) {
  constexpr uint32_t kCap = 256;
  Buffer buf(kCap);
  Ring r;
  r.init(buf.data(), kCap);
  ASSERT_TRUE(put(r, 1, 100));  // [0, 112)
  ASSERT_TRUE(put(r, 2, 100));  // [112, 224)
  ASSERT_EQ(drain_all(r).size(), 2u);
  // 32 bytes remain before the end: a 100-byte record goes to offset 0 behind a pad record.
  uint8_t* p = r.reserve(100);
  ASSERT_EQ(p, buf.data() + 8);
  memset(p, 0xab, 100);
  r.commit(100);
  // The pad consumed [224, 256); [112, 224) is free: another 100-byte record fits, a third not.
  ASSERT_TRUE(put(r, 5, 100));
  EXPECT_EQ(r.reserve(100), nullptr);
  auto recs = drain_all(r);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].bytes, std::vector<uint8_t>(100, 0xab));
  expect_record(recs[1], 5, 100);
  // A wrap is refused when the pad and the record together do not fit behind the consumer.
  Buffer buf2(kCap);
  Ring r2;
  r2.init(buf2.data(), kCap);
  ASSERT_TRUE(put(r2, 1, 200));  // [0, 208)
  ASSERT_EQ(drain_all(r2).size(), 1u);
  ASSERT_TRUE(put(r2, 2, 16));   // [208, 232)
  EXPECT_EQ(r2.reserve(208), nullptr) << "pad 24 + 216 > 256 - 24 in use";
  ASSERT_TRUE(put(r2, 3, 160)) << "pad 24 + 168 fits";
  recs = drain_all(r2);
  ASSERT_EQ(recs.size(), 2u);
  expect_record(recs[0], 2, 16);
  expect_record(recs[1], 3, 160);
}

TEST(Ring, WrapsAroundManyTimesWithRandomSizes) {
  for (uint32_t cap : {64u, 256u, 1024u, 4096u}) {
    SCOPED_TRACE(cap);
    Buffer buf(cap);
    Ring r;
    r.init(buf.data(), cap);
    std::mt19937_64 rng(cap);
    std::vector<uint32_t> lens;  // every record written, by sequence number
    uint64_t next_out = 0, bytes_through = 0;
    size_t refusals = 0;
    while (bytes_through < 200ull * cap) {
      // Fill until refused (or a random stop), then drain all or nothing.
      for (int i = 0; i < 40; ++i) {
        uint32_t len = static_cast<uint32_t>(rng() % (cap / 2));
        uint64_t seq = lens.size();
        if (!put(r, seq, len)) {
          ++refusals;
          break;
        }
        lens.push_back(len);
        bytes_through += len + 8;
        if (rng() % 4 == 0) break;
      }
      if (rng() % 3 == 0) continue;
      r.drain([&](const uint8_t* data, uint32_t len) {
        ASSERT_LT(next_out, lens.size());
        ASSERT_EQ(len, lens[next_out]) << "record " << next_out;
        for (uint32_t i = 0; i < len; ++i) ASSERT_EQ(data[i], pattern(next_out, i)) << "record " << next_out;
        ++next_out;
      });
      ASSERT_EQ(next_out, lens.size()) << "a drain returns everything committed";
    }
    auto rest = drain_all(r);
    for (auto& rec : rest) {
      expect_record(rec, next_out, lens[next_out]);
      ++next_out;
    }
    EXPECT_EQ(next_out, lens.size());
    EXPECT_GT(refusals, 0u) << "the ring filled up at times";
    EXPECT_GT(lens.size(), 200u);
  }
}

// The preload's use: the handler (producer) never waits, the writer (consumer) drains
// concurrently. With a producer that retries, nothing may be lost; with one that drops (as the
// signal handler does), what arrives must be in order and intact.
void run_concurrent(bool drop_when_full, uint64_t n) {
  constexpr uint32_t kCap = 64 * 1024;  // ThreadRegistry::kRingBytes
  Buffer buf(kCap);
  Ring r;
  r.init(buf.data(), kCap);
  std::atomic<bool> done{false};
  uint64_t dropped = 0;
  std::thread producer([&] {
    std::mt19937 rng(42);
    for (uint64_t seq = 0; seq < n; ++seq) {
      uint32_t len = 12 + rng() % 200;  // 12..211: sequence number, length, payload
      for (;;) {
        uint8_t* p = r.reserve(len + 8);
        if (p) {
          memcpy(p, &seq, 8);
          memcpy(p + 8, &len, 4);
          for (uint32_t i = 12; i < len; ++i) p[i] = pattern(seq, i);
          r.commit(len);  // shorter than reserved, as the sampler does
          break;
        }
        if (drop_when_full) {
          ++dropped;
          break;
        }
        // Sleep rather than yield: on a loaded or single-CPU machine yield may not run the consumer.
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    done.store(true, std::memory_order_release);
  });
  uint64_t received = 0, next = 0, bad = 0;
  auto check = [&](const uint8_t* data, uint32_t len) {
    uint64_t seq;
    uint32_t want;
    memcpy(&seq, data, 8);
    memcpy(&want, data + 8, 4);
    bool ok = len == want && (drop_when_full ? seq >= next : seq == next);
    for (uint32_t i = 12; ok && i < len; ++i) ok = data[i] == pattern(seq, i);
    if (!ok && bad++ < 5) ADD_FAILURE() << "record " << seq << " (expected " << next << ") len " << len << " vs " << want;
    next = seq + 1;
    ++received;
  };
  while (!done.load(std::memory_order_acquire)) {
    if (r.drain(check) == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  r.drain(check);
  producer.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(received + dropped, n);
  if (!drop_when_full) {
    EXPECT_EQ(received, n);
  }
  EXPECT_GT(received, 0u);
}

TEST(Ring, ConcurrentProducerAndConsumerLoseNothing) { run_concurrent(false, 1'000'000); }

TEST(Ring, ConcurrentProducerThatDropsKeepsOrder) { run_concurrent(true, 1'000'000); }

}  // namespace
}  // namespace mlprof::preload
