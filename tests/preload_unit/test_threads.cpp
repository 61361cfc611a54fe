// preload/threads.cpp: the thread registry. Slots are constructed 64 at a time as threads need
// them (constructing all 8192 at start cost every process ~650 page faults); many threads
// registering at once, more than a chunk, each get a slot of their own, and freed slots are reused.
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "preload/threads.h"

namespace mlprof::preload {
namespace {

constexpr int64_t kPeriodNs = 10'000'000'000;  // the timers (CPU time) never fire in these tests

// The registry's timers send this signal; ignored here (no profiler's handler in this test).
int test_signal() {
  const int s = SIGRTMIN + 7;
  signal(s, SIG_IGN);
  return s;
}

struct Registered {
  ThreadSlot* slot = nullptr;
  uint32_t tid = 0;
};

// Starts n threads that register at the same moment, each waiting until all have; returns what
// each got, after they retired.
std::vector<Registered> register_at_once(ThreadRegistry& reg, int n, int signo) {
  std::vector<Registered> got(static_cast<size_t>(n));
  std::atomic<int> ready{0}, registered{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < n) std::this_thread::yield();
      ThreadSlot* s = reg.register_current(signo, kPeriodNs, 1);
      got[static_cast<size_t>(i)] = {s, static_cast<uint32_t>(syscall(SYS_gettid))};
      ++registered;
      while (registered.load() < n) std::this_thread::yield();  // all hold their slots at once
      if (s) reg.retire_current(2);
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

TEST(ThreadRegistry, ManyThreadsAtOnceGetSlotsOfTheirOwnAndFreedOnesAreReused) {
  const int signo = test_signal();
  ThreadRegistry reg;
  ASSERT_TRUE(reg.init());
  const int n = 300;  // several chunks of 64
  std::vector<Registered> got = register_at_once(reg, n, signo);
  std::set<ThreadSlot*> slots;
  for (auto& r : got) {
    ASSERT_NE(r.slot, nullptr);
    EXPECT_TRUE(slots.insert(r.slot).second) << "two threads got the same slot";
    EXPECT_EQ(r.slot->tid, r.tid);
  }
  EXPECT_EQ(reg.no_slot.load(), 0u);
  EXPECT_GE(reg.high_water(), static_cast<uint32_t>(n));
  EXPECT_LE(reg.high_water(), static_cast<uint32_t>(n + ThreadRegistry::kSlotChunk));
  for (ThreadSlot* s : slots) reg.release(s);

  // The same number again: the freed slots serve them, the registry does not grow.
  const uint32_t hw = reg.high_water();
  got = register_at_once(reg, n, signo);
  for (auto& r : got) {
    ASSERT_NE(r.slot, nullptr);
    reg.release(r.slot);
  }
  EXPECT_EQ(reg.high_water(), hw);
  EXPECT_EQ(reg.no_slot.load(), 0u);
}

}  // namespace
}  // namespace mlprof::preload
