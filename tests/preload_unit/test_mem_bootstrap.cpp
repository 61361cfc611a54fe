// preload/mem_bootstrap.cpp: the static arena that serves allocations made while the hooks
// resolve the real allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "preload/mem_bootstrap.h"

namespace mlprof::preload::mem {
namespace {

TEST(MemBootstrap, AlignedZeroedBlocksThatKnowTheirSize) {
  auto arena = std::make_unique<BootstrapArena>();
  int outside = 0;
  EXPECT_FALSE(arena->contains(&outside));
  EXPECT_FALSE(arena->contains(nullptr));
  for (size_t align : {1u, 8u, 16u, 64u, 4096u}) {
    for (size_t size : {0u, 1u, 24u, 1000u}) {
      auto* p = static_cast<unsigned char*>(arena->alloc(size, align));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 16), 0u);
      EXPECT_TRUE(arena->contains(p));
      EXPECT_TRUE(arena->contains(p + size));
      EXPECT_EQ(arena->usable_size(p), size);
      for (size_t i = 0; i < size; ++i) ASSERT_EQ(p[i], 0);
      std::fill(p, p + size, 0xab);  // the next block's header must survive this
    }
  }
  EXPECT_EQ(arena->alloc(16, 48), nullptr);  // not a power of two
  EXPECT_EQ(arena->usable_size(&outside), 0u);
}

TEST(MemBootstrap, ExhaustionFailsCleanly) {
  auto arena = std::make_unique<BootstrapArena>();
  EXPECT_EQ(arena->alloc(BootstrapArena::kSize + 1), nullptr);
  size_t n = 0;
  while (arena->alloc(1000)) ++n;
  EXPECT_GT(n, BootstrapArena::kSize / 1100);
  EXPECT_LE(arena->used(), BootstrapArena::kSize);
  EXPECT_EQ(arena->alloc(1), arena->alloc(1));  // both nullptr: nothing left
}

TEST(MemBootstrap, ConcurrentAllocationsNeverOverlap) {
  auto arena = std::make_unique<BootstrapArena>();
  std::vector<std::vector<std::pair<uintptr_t, size_t>>> got(4);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        size_t size = 8 + (i * 7 + t) % 100;
        if (void* p = arena->alloc(size)) got[t].emplace_back(reinterpret_cast<uintptr_t>(p), size);
      }
    });
  for (auto& th : ts) th.join();
  std::vector<std::pair<uintptr_t, size_t>> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 2000u);
  for (size_t i = 1; i < all.size(); ++i) ASSERT_GE(all[i].first, all[i - 1].first + all[i - 1].second + 16);
}

}  // namespace
}  // namespace mlprof::preload::mem
