// preload/mem_table.cpp: the sampled live-pointer table (counting filter + striped open
// addressing). Ground truth is a std::unordered_map fed the same operations.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "preload/mem_table.h"

namespace mlprof::preload::mem {
namespace {

// Distinct addresses shaped like malloc's (16-byte granules) or mmap's (pages), scattered over
// 2^32 granules: granule index = (seed * 2^24 + i) * odd mod 2^32, a bijection, so sets with
// different seeds never share an address.
std::vector<uint64_t> pointers(size_t n, uint64_t granule, uint64_t seed) {
  std::vector<uint64_t> out;
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t k = ((seed << 24) + i) * 0x9e3779b1ull & 0xffffffffull;
    out.push_back(0x7f0000000000ull + k * granule);
  }
  return out;
}

struct TableTest : ::testing::Test {
  void SetUp() override { ASSERT_TRUE(t.init()); }
  void TearDown() override { t.destroy(); }
  LiveTable t;
};

TEST_F(TableTest, InsertLookupRemove) {
  uint64_t replaced = 1;
  EXPECT_FALSE(t.maybe_contains(0x7f0000001000));
  EXPECT_EQ(t.lookup(0x7f0000001000), 0u);
  EXPECT_EQ(t.remove(0x7f0000001000), 0u);
  ASSERT_TRUE(t.insert(0x7f0000001000, 7, &replaced));
  EXPECT_EQ(replaced, 0u);
  EXPECT_TRUE(t.maybe_contains(0x7f0000001000));
  EXPECT_EQ(t.lookup(0x7f0000001000), 7u);
  EXPECT_EQ(t.size(), 1u);
  // The same address again (its free was not seen): the old id comes back, the count stays.
  ASSERT_TRUE(t.insert(0x7f0000001000, 9, &replaced));
  EXPECT_EQ(replaced, 7u);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.remove(0x7f0000001000), 9u);
  EXPECT_EQ(t.remove(0x7f0000001000), 0u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.maybe_contains(0x7f0000001000));
  EXPECT_FALSE(t.insert(0, 1, &replaced));  // null is never a sampled block
}

TEST_F(TableTest, GrowsToAMillionEntriesAndFindsEachOne) {
  const auto ptrs = pointers(1'000'000, 16, 1);  // distinct by construction; id of ptrs[i]: i + 1
  uint64_t replaced = 0;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    ASSERT_TRUE(t.insert(ptrs[i], i + 1, &replaced)) << i;
    ASSERT_EQ(replaced, 0u);
  }
  EXPECT_EQ(t.size(), ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) ASSERT_EQ(t.lookup(ptrs[i]), i + 1);
  // Remove every other one (backward-shift deletion must keep every probe run intact).
  for (size_t i = 0; i < ptrs.size(); i += 2) ASSERT_EQ(t.remove(ptrs[i]), i + 1);
  EXPECT_EQ(t.size(), ptrs.size() / 2);
  for (size_t i = 0; i < ptrs.size(); ++i) ASSERT_EQ(t.lookup(ptrs[i]), i % 2 ? i + 1 : 0u) << i;
}

TEST_F(TableTest, PageAlignedAddressesSpreadToo) {
  const auto ptrs = pointers(200'000, 4096, 2);
  uint64_t replaced = 0;
  for (size_t i = 0; i < ptrs.size(); ++i) ASSERT_TRUE(t.insert(ptrs[i], i + 1, &replaced));
  for (size_t i = 0; i < ptrs.size(); ++i) ASSERT_EQ(t.remove(ptrs[i]), i + 1);
  EXPECT_EQ(t.size(), 0u);
}

TEST_F(TableTest, FilterHasNoFalseNegativesAndEmptiesAgain) {
  const auto in = pointers(5000, 16, 3);
  const auto out = pointers(200'000, 16, 4);
  uint64_t replaced = 0;
  for (size_t i = 0; i < in.size(); ++i) ASSERT_TRUE(t.insert(in[i], i + 1, &replaced));
  for (uint64_t p : in) ASSERT_TRUE(t.maybe_contains(p));
  // Pointers never inserted: the filter must turn almost all of them away (5000 live entries in
  // 65536 counters: at most ~7.6% of counters are non-zero).
  size_t passed = 0;
  for (uint64_t p : out) passed += t.maybe_contains(p) && t.lookup(p) == 0;
  EXPECT_LT(passed, out.size() / 10);
  for (uint64_t p : in) t.remove(p);
  for (uint64_t p : in) EXPECT_FALSE(t.maybe_contains(p));
  for (uint64_t p : out) ASSERT_FALSE(t.maybe_contains(p));
}

TEST_F(TableTest, FilterSlotSharedByManyPointersClearsOnlyWithTheLast) {
  // 300 pointers that share one filter slot (more than a byte counter could hold).
  std::vector<uint64_t> same;
  const uint32_t target = LiveTable::filter_index(0x7f0000000000ull);
  for (uint64_t p = 0x7f0000000000ull; same.size() < 300; p += 16)
    if (LiveTable::filter_index(p) == target) same.push_back(p);
  uint64_t replaced = 0;
  for (size_t i = 0; i < same.size(); ++i) ASSERT_TRUE(t.insert(same[i], i + 1, &replaced));
  // A neighbour slot in the same bitmap word stays clear.
  uint64_t neighbour = 0x7f0000000000ull;
  while (LiveTable::filter_index(neighbour) != (target ^ 1)) neighbour += 16;
  EXPECT_FALSE(t.maybe_contains(neighbour));
  for (size_t i = 0; i + 1 < same.size(); ++i) {
    ASSERT_EQ(t.remove(same[i]), i + 1);
    ASSERT_TRUE(t.maybe_contains(same.back())) << "cleared with " << same.size() - i - 1 << " left";
  }
  ASSERT_EQ(t.remove(same.back()), same.size());
  EXPECT_FALSE(t.maybe_contains(same[0]));
  // Removing a pointer that is not there does not disturb the count.
  ASSERT_TRUE(t.insert(same[0], 1, &replaced));
  EXPECT_EQ(t.remove(same[1]), 0u);
  EXPECT_TRUE(t.maybe_contains(same[0]));
}

TEST_F(TableTest, ConcurrentInsertRemoveOnSharedFilterWordsNeverHidesALivePointer) {
  // Four threads churn pointers whose filter slots fall in the same few bitmap words; a fifth
  // keeps one pointer per word live and checks the filter never reports it absent.
  constexpr int kThreads = 4, kRounds = 20'000;
  std::vector<uint64_t> keep;
  std::vector<std::vector<uint64_t>> churn(kThreads);
  for (uint64_t p = 0x7f0000000000ull; keep.size() < 4 || churn[kThreads - 1].size() < 64; p += 16) {
    const uint32_t word = LiveTable::filter_index(p) >> 6;
    if (word >= 4) continue;
    if (keep.size() < 4 && LiveTable::filter_index(p) % 64 == 0 && word == keep.size()) {
      keep.push_back(p);
      continue;
    }
    for (auto& c : churn)
      if (c.size() < 64) {
        c.push_back(p);
        break;
      }
  }
  uint64_t replaced = 0;
  for (size_t i = 0; i < keep.size(); ++i) ASSERT_TRUE(t.insert(keep[i], 1000 + i, &replaced));
  std::atomic<bool> stop{false};
  std::atomic<int> misses{0};
  std::thread checker([&] {
    while (!stop.load())
      for (uint64_t p : keep)
        if (!t.maybe_contains(p)) misses.fetch_add(1);
  });
  std::vector<std::thread> ts;
  for (int k = 0; k < kThreads; ++k)
    ts.emplace_back([&, k] {
      uint64_t r = 0;
      for (int round = 0; round < kRounds; ++round) {
        const uint64_t p = churn[k][round % churn[k].size()];
        t.insert(p, 1 + round, &r);
        t.remove(p);
      }
    });
  for (auto& th : ts) th.join();
  stop = true;
  checker.join();
  EXPECT_EQ(misses.load(), 0);
  // Every churned pointer is gone again: its slot is clear unless a kept pointer shares it.
  for (auto& c : churn)
    for (uint64_t p : c)
      if (LiveTable::filter_index(p) % 64 != 0) EXPECT_FALSE(t.maybe_contains(p));
  for (size_t i = 0; i < keep.size(); ++i) EXPECT_EQ(t.remove(keep[i]), 1000 + i);
  EXPECT_EQ(t.size(), 0u);
}

TEST_F(TableTest, ConcurrentThreadsKeepTheirOwnEntries) {
  constexpr int kThreads = 8, kPer = 50'000;
  std::vector<std::vector<uint64_t>> sets;
  for (int i = 0; i < kThreads; ++i) sets.push_back(pointers(kPer, 16, 100 + i));
  std::atomic<int> errors{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] {
      const auto& mine = sets[i];
      uint64_t replaced = 0;
      for (int round = 0; round < 3; ++round) {
        for (size_t k = 0; k < mine.size(); ++k)
          if (!t.insert(mine[k], (uint64_t(i) << 32) | (k + 1), &replaced) || replaced) ++errors;
        for (size_t k = 0; k < mine.size(); ++k)
          if (t.lookup(mine[k]) != ((uint64_t(i) << 32) | (k + 1))) ++errors;
        // Leave the odd ones in on the last round.
        for (size_t k = 0; k < mine.size(); ++k)
          if (round < 2 || k % 2 == 0)
            if (t.remove(mine[k]) != ((uint64_t(i) << 32) | (k + 1))) ++errors;
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(t.size(), size_t{kThreads} * kPer / 2);
}

TEST_F(TableTest, ForkChildStartsEmptyAndUnlocked) {
  const auto ptrs = pointers(1000, 16, 5);
  uint64_t replaced = 0;
  for (size_t i = 0; i < ptrs.size(); ++i) ASSERT_TRUE(t.insert(ptrs[i], i + 1, &replaced));
  t.lock_all();  // as fork's prepare handler leaves it
  t.reset_in_child();
  EXPECT_EQ(t.size(), 0u);
  for (uint64_t p : ptrs) EXPECT_FALSE(t.maybe_contains(p));
  ASSERT_TRUE(t.insert(ptrs[0], 42, &replaced));  // no lock is left held
  EXPECT_EQ(t.lookup(ptrs[0]), 42u);
  // And in the parent the locks are simply released.
  t.lock_all();
  t.unlock_all();
  EXPECT_EQ(t.remove(ptrs[0]), 42u);
}

}  // namespace
}  // namespace mlprof::preload::mem
