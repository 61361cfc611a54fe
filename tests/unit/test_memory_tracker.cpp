// The collector's incremental memory accounting (collector/memory_tracker.h) and the decoding of
// the memory records (wire 1.2: MEM_CONFIG, ALLOC, FREE, COPY, MEM_USAGE). Expected values are
// computed by construction or by a brute-force reference over the same events.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <unordered_map>

#include "collector/memory_tracker.h"
#include "collector/stream_decoder.h"
#include "mem_stream.h"

namespace mlprof {
namespace {

using collector::MemoryTracker;
using collector::MemSite;
using testing::MemStream;

// Site values by stack id (summed over threads).
struct SiteSums {
  int64_t alloc = 0, live = 0, peak = 0, copy = 0;
  double count = 0;
};
std::map<uint64_t, SiteSums> by_stack(const MemoryTracker& t) {
  std::map<uint64_t, SiteSums> out;
  for (const MemSite& s : t.sites()) {
    auto& o = out[s.stack];
    o.alloc += s.alloc_bytes;
    o.live += s.live_bytes;
    o.peak += t.peak_bytes(s);
    o.copy += s.copy_bytes;
    o.count += s.alloc_count;
  }
  return out;
}

TEST(MemoryTracker, AllocationsAndFreesMatchById) {
  MemoryTracker t;
  t.config(1, 1 << 20, 0);
  t.alloc(0, 7, 10, 1, 100, 100);
  t.alloc(0, 7, 20, 2, 200, 200);
  t.alloc(1, 8, 30, 3, 50, 50);
  EXPECT_EQ(t.heap_bytes(), 350);
  t.free(2, 40);
  t.free(999, 50);  // never allocated (yet): pending, changes nothing
  EXPECT_EQ(t.heap_bytes(), 150);
  EXPECT_EQ(t.live_allocations(), 2u);
  EXPECT_EQ(t.pending_frees(), 1u);
  auto s = by_stack(t);
  EXPECT_EQ(s[7].alloc, 300);
  EXPECT_EQ(s[7].live, 100);
  EXPECT_DOUBLE_EQ(s[7].count, 2.0);
  EXPECT_EQ(s[8].live, 50);
  EXPECT_EQ(t.stacks().size(), 2u);
  EXPECT_EQ(t.sites().size(), 2u) << "one site per (thread, stack)";
}

TEST(MemoryTracker, FreeBeforeItsAllocIsApplied) {
  // Frees and allocations made by different threads come from different rings: a FREE may be
  // decoded before its ALLOC. The allocation then counts as allocated, never as live.
  MemoryTracker t;
  t.free(42, 5);
  EXPECT_EQ(t.pending_frees(), 1u);
  t.alloc(0, 1, 4, 42, 4096, 4096);
  EXPECT_EQ(t.pending_frees(), 0u);
  EXPECT_EQ(t.live_allocations(), 0u);
  EXPECT_EQ(t.heap_bytes(), 0);
  EXPECT_EQ(t.peak_heap_bytes(), 0);
  auto s = by_stack(t);
  EXPECT_EQ(s[1].alloc, 4096);
  EXPECT_EQ(s[1].live, 0);
  // The id can be used again afterwards (addresses are reused, ids are not, but be safe).
  t.alloc(0, 1, 6, 42, 10, 10);
  EXPECT_EQ(t.heap_bytes(), 10);
}

TEST(MemoryTracker, RepeatedIdReplacesTheOldAllocation) {
  MemoryTracker t;
  t.alloc(0, 1, 1, 5, 100, 100);
  t.alloc(0, 2, 2, 5, 30, 30);
  EXPECT_EQ(t.heap_bytes(), 30);
  auto s = by_stack(t);
  EXPECT_EQ(s[1].live, 0);
  EXPECT_EQ(s[2].live, 30);
}

TEST(MemoryTracker, SampledCountsAreInverseProbabilities) {
  MemoryTracker t;
  t.config(512 << 10, 1 << 20, 0);
  EXPECT_FALSE(t.exact());
  t.alloc(0, 1, 1, 1, 100, 1000);  // P = 0.1: stands for 10 allocations of 100 bytes
  t.alloc(0, 1, 2, 2, 1 << 20, 1 << 20);
  t.alloc(0, 1, 3, 3, 0, 0);  // zero-byte allocations count once
  auto s = by_stack(t);
  EXPECT_EQ(s[1].alloc, 1000 + (1 << 20));
  EXPECT_DOUBLE_EQ(s[1].count, 12.0);
  ASSERT_EQ(t.stacks().size(), 1u);
  // The estimate's variance: sum of w^2 - w*size over the live samples (0 for exact ones).
  EXPECT_DOUBLE_EQ(t.stacks()[0].live_var, 1000.0 * 1000 - 1000.0 * 100);
  EXPECT_EQ(t.stacks()[0].live_samples, 3u);
  t.free(1, 4);
  EXPECT_DOUBLE_EQ(t.stacks()[0].live_var, 0);
  EXPECT_DOUBLE_EQ(t.stacks()[0].live_count, 2.0);
}

TEST(MemoryTracker, CopiesAddToTheirSite) {
  MemoryTracker t;
  mlprof::collector::MemWindow w;
  w.start_ns.store(100);
  w.end_ns.store(200);
  t.set_window(&w);
  t.copy(0, 3, 50, 1 << 20);
  t.copy(0, 3, 150, 1 << 20);
  t.copy(1, 3, 199, 5);
  auto s = by_stack(t);
  EXPECT_EQ(s[3].copy, (2 << 20) + 5);
  int64_t in_window = 0;  // the copies at 150 and 199 ns, not the one before the window
  for (const auto& site : t.sites()) in_window += site.win_copy_bytes;
  EXPECT_EQ(in_window, (1 << 20) + 5);
  EXPECT_EQ(s[3].alloc, 0);
  EXPECT_EQ(t.heap_bytes(), 0);
}

TEST(MemoryTracker, PeakSnapshotNamesTheSitesThatHeldThePeak) {
  MemoryTracker t;
  t.config(1, 1 << 20, 0);
  const int64_t MiB = 1 << 20;
  t.alloc(0, 2, 1, 100, MiB, MiB);  // B: 1 MiB held throughout
  for (uint64_t i = 0; i < 10; ++i) t.alloc(0, 1, static_cast<int64_t>(10 + i), 1 + i, MiB, MiB);  // A: 10 MiB
  for (uint64_t i = 0; i < 10; ++i) t.free(1 + i, 30);  // A frees everything
  for (uint64_t i = 0; i < 5; ++i) t.alloc(0, 2, 40, 200 + i, MiB, MiB);  // B grows, below the peak
  EXPECT_EQ(t.peak_heap_bytes(), 11 * MiB);
  EXPECT_EQ(t.peak_heap_t_ns(), 19) << "the time of the allocation that reached the peak";
  auto s = by_stack(t);
  EXPECT_EQ(s[1].peak, 10 * MiB);
  EXPECT_EQ(s[2].peak, MiB);
  EXPECT_EQ(s[1].live, 0);
  EXPECT_EQ(s[2].live, 6 * MiB);
  // A higher peak later moves the snapshot: B now holds 12 MiB, the most ever.
  for (uint64_t i = 0; i < 6; ++i) t.alloc(0, 2, 50, 300 + i, MiB, MiB);
  t.free(300, 60);
  s = by_stack(t);
  EXPECT_EQ(t.peak_heap_bytes(), 12 * MiB);
  EXPECT_EQ(t.peak_heap_t_ns(), 50);
  EXPECT_EQ(s[1].peak, 0);
  EXPECT_EQ(s[2].peak, 12 * MiB);
}

TEST(MemoryTracker, PeakAtTheEndUsesTheFinalState) {
  MemoryTracker t;
  t.alloc(0, 1, 1, 1, 100, 100);
  t.free(1, 2);
  t.alloc(0, 2, 3, 2, 150, 150);
  auto s = by_stack(t);
  EXPECT_EQ(t.peak_heap_bytes(), 150);
  EXPECT_EQ(s[1].peak, 0);
  EXPECT_EQ(s[2].peak, 150);
}

// The copy-on-write snapshot against a full copy of every site at the first moment the heap
// reached its maximum, over random interleavings of many sites and threads.
TEST(MemoryTracker, PeakSnapshotMatchesBruteForce) {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    MemoryTracker t;
    std::map<std::pair<uint32_t, uint64_t>, int64_t> live, at_peak;
    std::unordered_map<uint64_t, std::tuple<uint32_t, uint64_t, int64_t>> blocks;  // id -> site, weight
    std::vector<uint64_t> ids;
    int64_t heap = 0, max_heap = 0, max_t = 0;
    uint64_t next = 1;
    for (int64_t step = 0; step < 3000; ++step) {
      bool do_alloc = ids.empty() || rng() % 100 < (step < 1500 ? 60u : 45u);
      if (do_alloc) {
        uint32_t thread = static_cast<uint32_t>(rng() % 3);
        uint64_t stack = rng() % 7;
        int64_t w = static_cast<int64_t>(1 + rng() % 5000);
        t.alloc(thread, stack, step, next, static_cast<uint64_t>(w), static_cast<uint64_t>(w));
        blocks[next] = {thread, stack, w};
        ids.push_back(next++);
        live[{thread, stack}] += w;
        heap += w;
      } else {
        size_t k = rng() % ids.size();
        uint64_t id = ids[k];
        ids[k] = ids.back();
        ids.pop_back();
        auto [thread, stack, w] = blocks[id];
        t.free(id, step);
        live[{thread, stack}] -= w;
        heap -= w;
      }
      if (heap > max_heap) max_heap = heap, max_t = step, at_peak = live;
    }
    ASSERT_EQ(t.peak_heap_bytes(), max_heap) << seed;
    ASSERT_EQ(t.peak_heap_t_ns(), max_t) << seed;
    for (const MemSite& s : t.sites()) {
      auto it = at_peak.find({s.thread, s.stack});
      ASSERT_EQ(t.peak_bytes(s), it == at_peak.end() ? 0 : it->second) << "seed " << seed;
      ASSERT_EQ(s.live_bytes, (live[{s.thread, s.stack}])) << "seed " << seed;
    }
  }
}

// Many live allocations, inserted and removed in random order: the open-addressing table must
// agree with a plain map (growth, backward-shift deletion, wrap-around).
TEST(MemoryTracker, LiveTableAgreesWithAMap) {
  std::mt19937_64 rng(7);
  MemoryTracker t;
  std::unordered_map<uint64_t, int64_t> ref;
  std::vector<uint64_t> ids;
  int64_t heap = 0;
  for (int i = 0; i < 300000; ++i) {
    if (ids.empty() || rng() % 3 != 0) {
      uint64_t id = (rng() | 1) & 0xffffffffffull;  // random ids collide in the table's slots
      if (ref.count(id)) continue;
      int64_t w = static_cast<int64_t>(1 + rng() % 100);
      t.alloc(0, rng() % 4, i, id, static_cast<uint64_t>(w), static_cast<uint64_t>(w));
      ref[id] = w;
      ids.push_back(id);
      heap += w;
    } else {
      size_t k = rng() % ids.size();
      uint64_t id = ids[k];
      ids[k] = ids.back();
      ids.pop_back();
      t.free(id, i);
      heap -= ref[id];
      ref.erase(id);
    }
  }
  EXPECT_EQ(t.live_allocations(), ref.size());
  EXPECT_EQ(t.heap_bytes(), heap);
  EXPECT_EQ(t.pending_frees(), 0u) << "every free found its allocation";
  for (uint64_t id : ids) t.free(id, 0);
  EXPECT_EQ(t.live_allocations(), 0u);
  EXPECT_EQ(t.heap_bytes(), 0);
}

TEST(MemoryTracker, TimelineIsBoundedAndKeepsPeaks) {
  MemoryTracker t;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    if (i == 7777) t.alloc(0, 1, i * 1000, 1, 1 << 30, 1 << 30);
    if (i == 7778) t.free(1, i * 1000);
    t.usage(int64_t{i} * 100'000'000, i == 12345 ? int64_t{5} << 30 : int64_t{1} << 20);
  }
  const auto& tl = t.timeline();
  EXPECT_LE(tl.size(), MemoryTracker::kMaxTimeline);
  EXPECT_GE(tl.size(), MemoryTracker::kMaxTimeline / 2);
  int64_t max_rss = 0, max_heap = 0;
  for (size_t i = 0; i < tl.size(); ++i) {
    if (i) EXPECT_LT(tl[i - 1].t_ns, tl[i].t_ns);
    max_rss = std::max(max_rss, tl[i].rss_bytes);
    max_heap = std::max(max_heap, tl[i].heap_bytes);
  }
  EXPECT_EQ(max_rss, int64_t{5} << 30) << "a one-point RSS spike survives the thinning";
  EXPECT_EQ(max_heap, int64_t{1} << 30);
  EXPECT_EQ(t.peak_rss_bytes(), int64_t{5} << 30);
  EXPECT_EQ(t.peak_rss_t_ns(), int64_t{12345} * 100'000'000);
  EXPECT_EQ(tl.front().t_ns, 0);
}

// Per-stack live series: recorded at every MEM_USAGE tick from the tick a stack reaches the
// threshold, halved when too long, always aligned with the tick list.
TEST(MemoryTracker, SeriesStayAlignedWhenHalved) {
  MemoryTracker t;
  t.config(1, 1 << 20, 0);
  const int64_t tick = 100'000'000, block = 64 << 10;  // A grows one threshold-sized block per tick
  uint64_t id = 1;
  for (int i = 0; i < 1001; ++i) {
    const int64_t now = i * tick;
    t.alloc(0, 1, now, id++, block, block);
    if (i >= 301) t.alloc(0, 2, now, id++, 2 * block, 2 * block);  // B from tick 301 (odd)
    t.usage(now, -1);
  }
  ASSERT_LE(t.ticks().size(), MemoryTracker::kMaxTicks);
  ASSERT_EQ(t.stacks().size(), 2u);
  for (const auto& st : t.stacks()) {
    ASSERT_NE(st.first_tick, MemoryTracker::kNoTick);
    ASSERT_EQ(st.first_tick + st.series.size(), t.ticks().size()) << "stack " << st.stack;
    const int64_t per_tick = st.stack == 1 ? block : 2 * block;
    const int64_t start = st.stack == 1 ? 0 : 301;
    for (size_t i = st.stack == 1 ? 0 : 1; i < st.series.size(); ++i) {  // a late stack's first point
      // may merge fewer ticks than its time stands for. The value at a (merged) tick is the value at that tick's time: linear in time.
      const double expect = static_cast<double>(per_tick) * (static_cast<double>(t.ticks()[st.first_tick + i]) / tick - start + 1);
      EXPECT_NEAR(static_cast<double>(st.series[i].bytes), expect, 2.0 * per_tick) << st.stack << " point " << i;
    }
  }
  // B started late: its first point lies at or after tick 301's time.
  EXPECT_GE(t.ticks()[t.stacks()[1].first_tick] + 4 * tick, 301 * tick);
}

TEST(MemoryTracker, SmallSitesAreNotTracked) {
  MemoryTracker t;
  t.config(512 << 10, 1 << 20, 0);
  t.alloc(0, 1, 0, 1, 100, 512 << 10);  // one sample: below two intervals
  t.usage(1, 1);
  EXPECT_EQ(t.stacks()[0].first_tick, MemoryTracker::kNoTick);
  t.alloc(0, 1, 2, 2, 100, 512 << 10);
  t.usage(3, 1);
  EXPECT_EQ(t.stacks()[0].first_tick, 1u);
  EXPECT_EQ(t.stacks()[0].series.size(), 1u);
}

// ------------------------------------------------------------------------------------------------
// Decoding

TEST(MemoryDecoder, ReadsEveryMemoryRecord) {
  MemStream m(100, 4096, wire::kMemPythonAllocator);
  m.thread(101, "worker");
  m.stack(1, "leak", "/src/a.py", 10);
  const int64_t t0 = MemStream::kStart;
  m.alloc(1, t0 + 1000, 1, 100, 4096);
  m.alloc(1, t0 + 500, 2, 8192, 8192, 101);  // earlier than the previous one: negative delta
  m.free(t0 + 2000, 1);
  m.free(t0 + 1500, 77);  // before its ALLOC
  m.alloc(1, t0 + 3000, 77, 64, 4096);
  m.copy(1, t0 + 3500, 1 << 20, 4096, 101);
  m.usage(t0 + 100'000'000, 3 << 20);
  m.counters({{wire::Counter::kMemSamples, 3}, {wire::Counter::kMemFrees, 2}});
  m.end(t0 + 200'000'000);
  auto s = m.decode();
  ASSERT_TRUE(s.error.empty()) << s.error;
  const MemoryTracker& t = s.memory;
  EXPECT_TRUE(t.active());
  EXPECT_EQ(t.interval_bytes(), 4096u);
  EXPECT_EQ(t.copy_interval_bytes(), 1u << 20);
  EXPECT_EQ(t.flags(), uint64_t{wire::kMemPythonAllocator});
  EXPECT_EQ(t.heap_bytes(), 8192);
  EXPECT_EQ(t.peak_heap_bytes(), 4096 + 8192);
  EXPECT_EQ(t.peak_heap_t_ns(), t0 + 500) << "times follow the delta chain from the process start";
  EXPECT_EQ(t.pending_frees(), 0u);
  // The heap's peak (before the first MEM_USAGE) gets its own point, without an RSS.
  ASSERT_EQ(t.timeline().size(), 2u);
  EXPECT_EQ(t.timeline()[0].t_ns, t0 + 500);
  EXPECT_EQ(t.timeline()[0].rss_bytes, -1);
  EXPECT_EQ(t.timeline()[0].heap_bytes, 4096 + 8192);
  EXPECT_EQ(t.timeline()[1].t_ns, t0 + 100'000'000);
  EXPECT_EQ(t.timeline()[1].rss_bytes, 3 << 20);
  EXPECT_EQ(t.timeline()[1].heap_bytes, 8192);
  // Sites per thread: the main thread and thread 101 (index 1).
  std::map<uint32_t, const MemSite*> by_thread;
  for (const auto& site : t.sites()) by_thread[site.thread] = &site;
  ASSERT_EQ(by_thread.size(), 2u);
  EXPECT_EQ(by_thread[0]->alloc_bytes, 4096 + 4096);
  EXPECT_DOUBLE_EQ(by_thread[0]->alloc_count, 4096.0 / 100 + 4096.0 / 64);
  EXPECT_EQ(by_thread[1]->alloc_bytes, 8192);
  EXPECT_EQ(by_thread[1]->copy_bytes, 1 << 20);
  EXPECT_EQ(s.threads[by_thread[1]->thread].tid, 101u);
}

// The preload may send an ALLOC of a thread it has no slot for before (or without) that thread's
// THREAD_START, and after its THREAD_END (TLS destructors): one thread entry either way.
TEST(MemoryDecoder, AllocationsAroundAThreadsStartAndEndStayOnThatThread) {
  MemStream m(100, 1);
  m.stack(1, "f", "/a.py", 1);
  m.alloc(1, MemStream::kStart + 1, 1, 10, 10, 555);  // before its THREAD_START
  m.thread(555, "late");
  m.alloc(1, MemStream::kStart + 2, 2, 10, 10, 555);
  m.thread(556, "short");
  m.thread_end(556, MemStream::kStart + 3);
  m.alloc(1, MemStream::kStart + 4, 3, 10, 10, 556);  // after its THREAD_END
  m.end(MemStream::kStart + 10);
  auto s = m.decode();
  std::map<uint32_t, int> entries;
  for (const auto& t : s.threads) ++entries[t.tid];
  EXPECT_EQ(entries[555], 1);
  EXPECT_EQ(entries[556], 1);
  std::map<uint32_t, int64_t> bytes_by_tid;
  for (const auto& site : s.memory.sites()) bytes_by_tid[s.threads.at(site.thread).tid] += site.alloc_bytes;
  EXPECT_EQ(bytes_by_tid[555], 20);
  EXPECT_EQ(bytes_by_tid[556], 10);
  for (const auto& t : s.threads)
    if (t.tid == 555) EXPECT_EQ(t.name, "late") << "the THREAD_START completed the entry the ALLOC made";
}

TEST(MemoryDecoder, StreamsWithoutMemoryRecordsLeaveTheTrackerInactive) {
  MemStream m(100, 1, 0, /*send_config=*/false);
  m.end(MemStream::kStart + 10);
  auto s = m.decode();
  EXPECT_FALSE(s.memory.active());
}

TEST(MemoryDecoder, EveryPrefixDecodesWithoutCrashing) {
  MemStream m(100, 64, 0);
  m.stack(1, "f", "/a.py", 1);
  for (uint64_t i = 1; i <= 20; ++i) {
    m.alloc(1, MemStream::kStart + static_cast<int64_t>(i), i, i * 10, 64);
    if (i % 3 == 0) m.free(MemStream::kStart + static_cast<int64_t>(i), i - 1);
    m.copy(1, MemStream::kStart + static_cast<int64_t>(i), 64, 8);
    m.usage(MemStream::kStart + static_cast<int64_t>(i), i);
  }
  m.end(MemStream::kStart + 100);
  const auto& b = m.bytes();
  for (size_t n = 0; n <= b.size(); ++n) {
    collector::StreamDecoder d;
    d.feed(b.data(), n);
    d.finish();
    EXPECT_LE(d.stream().memory.heap_bytes(), 20 * 64);
  }
}

}  // namespace
}  // namespace mlprof
