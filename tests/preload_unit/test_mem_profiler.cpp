// preload/mem_profiler.cpp, mem_events.cpp and unwind_cfi_here: the hooks' slow paths as the
// interposed functions call them (the test calls the fast-path helpers itself, with a fake
// "hook" frame), down to the events in the rings. No interposition here: the core library only.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "preload/mem_events.h"
#include "preload/mem_profiler.h"
#include "preload/threads.h"
#include "preload/unwinder.h"

namespace mlprof::preload::mem {
namespace {

struct Event {
  RawMemEvent h;
  std::vector<uint64_t> pcs;
};

std::vector<Event> drain(Ring& ring) {
  std::vector<Event> out;
  ring.drain([&](const uint8_t* data, uint32_t len) {
    Event e;
    memcpy(&e.h, data, sizeof e.h);
    EXPECT_GE(len, sizeof(RawMemEvent) + e.h.nframes * sizeof(uint64_t) + e.h.npy * sizeof(python::RawPyFrame));
    e.pcs.resize(e.h.nframes);
    memcpy(e.pcs.data(), data + sizeof(RawMemEvent), e.h.nframes * sizeof(uint64_t));
    out.push_back(e);
  });
  return out;
}

// The calling thread's stack range (empty when pthread cannot tell).
StackBounds own_stack() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return {};
  void* lo = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &lo, &size);
  pthread_attr_destroy(&attr);
  return StackBounds{reinterpret_cast<uintptr_t>(lo), reinterpret_cast<uintptr_t>(lo) + size};
}

uint64_t g_hook_ra = 0;  // where fake_malloc returned to, last time
uint64_t g_site_ra = 0;  // where alloc_site returned to

// What an interposed malloc/free does around the real call.
__attribute__((noinline)) void* fake_malloc(size_t n) {
  g_hook_ra = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  void* p = malloc(n);
  after_alloc(p, n, wire::AllocKind::kMalloc, reinterpret_cast<uint64_t>(__builtin_return_address(0)));
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return p;
}
__attribute__((noinline)) void fake_free(void* p) {
  before_free(p);
  free(p);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void* alloc_site(size_t n) {
  g_site_ra = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  void* p = fake_malloc(n);
  asm volatile("" ::: "memory");
  return p;
}

class MemProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(init(1, 0));  // exact mode, copies off
    set_recording(true);
    t_slot = nullptr;
    t_mem.countdown = t_mem.copy_countdown = 0;  // tests switch intervals: draw afresh
    t_mem.seeded = t_mem.copy_seeded = false;
    drain(g_fallback.ring());
  }
  void TearDown() override {
    set_recording(false);
    t_slot = nullptr;
  }
};

TEST_F(MemProfilerTest, ExactModeRecordsEveryAllocationAndTheFreeOfEach) {
  ASSERT_TRUE(exact());
  std::vector<void*> ptrs;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 300; ++i) {
    sizes.push_back(i * 7);  // malloc(0) included: exact mode counts it
    ptrs.push_back(fake_malloc(i * 7));
  }
  for (size_t i = 0; i < ptrs.size(); i += 2) fake_free(ptrs[i]);
  const auto events = drain(g_fallback.ring());  // no slot: the fallback ring
  ASSERT_EQ(events.size(), 300u + 150u);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 300; ++i) {
    const RawMemEvent& e = events[i].h;
    ASSERT_EQ(e.kind, static_cast<uint8_t>(EventKind::kAlloc));
    EXPECT_EQ(e.size, sizes[i]);
    EXPECT_EQ(e.weight, sizes[i]);
    EXPECT_EQ(e.alloc_kind, static_cast<uint8_t>(wire::AllocKind::kMalloc));
    EXPECT_EQ(e.tid, static_cast<uint32_t>(syscall(SYS_gettid)));
    EXPECT_NE(e.alloc_id, 0u);
    // No slot, no stack bounds: the leaf only (inside the call instruction of fake_malloc's caller).
    EXPECT_EQ(e.flags & wire::kStackLeafOnly, wire::kStackLeafOnly);
    ASSERT_EQ(e.nframes, 1);
    ids.push_back(e.alloc_id);
  }
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), ids.size());
  for (size_t k = 0; k < 150; ++k) {
    const RawMemEvent& e = events[300 + k].h;
    ASSERT_EQ(e.kind, static_cast<uint8_t>(EventKind::kFree));
    EXPECT_EQ(e.alloc_id, ids[2 * k]);  // recorded before the real free, in order
  }
  for (size_t i = 1; i < ptrs.size(); i += 2) EXPECT_EQ(g_mem.table.lookup(reinterpret_cast<uint64_t>(ptrs[i])), ids[i]);
  for (size_t i = 1; i < ptrs.size(); i += 2) fake_free(ptrs[i]);
  EXPECT_EQ(drain(g_fallback.ring()).size(), 150u);
}

// What the interposed realloc and munmap do: a failed call leaves the block the program's, so
// no FREE goes out and the block stays in the table; a successful one sends the FREE.
TEST_F(MemProfilerTest, AFailedReleaseKeepsTheBlockLive) {
  void* p = fake_malloc(100);
  auto events = drain(g_fallback.ring());
  ASSERT_EQ(events.size(), 1u);
  const uint64_t id = events[0].h.alloc_id;

  uint64_t taken = take_before_release(p);
  EXPECT_EQ(taken, id);
  errno = 0;
  volatile size_t huge = SIZE_MAX / 2;  // volatile: the compiler must not fold the call away
  void* r = realloc(p, huge);
  ASSERT_EQ(r, nullptr);
  settle_release(p, taken, r != nullptr);
  EXPECT_EQ(errno, ENOMEM) << "the failed call's errno is kept";
  EXPECT_TRUE(drain(g_fallback.ring()).empty()) << "no FREE for a block that was not released";
  EXPECT_EQ(g_mem.table.lookup(reinterpret_cast<uint64_t>(p)), id);

  // A mapping whose munmap fails (length 0: EINVAL) stays live too.
  void* m = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  after_alloc(m, 8192, wire::AllocKind::kMmap, reinterpret_cast<uint64_t>(__builtin_return_address(0)));
  events = drain(g_fallback.ring());
  ASSERT_EQ(events.size(), 1u);
  const uint64_t mid = events[0].h.alloc_id;
  taken = take_before_release(m);
  int rc = munmap(m, 0);
  ASSERT_EQ(rc, -1);
  settle_release(m, taken, rc == 0);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(drain(g_fallback.ring()).empty());
  EXPECT_EQ(g_mem.table.lookup(reinterpret_cast<uint64_t>(m)), mid);

  // The successful releases send their FREEs, with the ids of the original samples.
  taken = take_before_release(m);
  rc = munmap(m, 8192);
  settle_release(m, taken, rc == 0);
  taken = take_before_release(p);
  free(p);
  settle_release(p, taken, true);
  events = drain(g_fallback.ring());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].h.kind, static_cast<uint8_t>(EventKind::kFree));
  EXPECT_EQ(events[0].h.alloc_id, mid);
  EXPECT_EQ(events[1].h.alloc_id, id);
  EXPECT_EQ(g_mem.table.lookup(reinterpret_cast<uint64_t>(p)), 0u);
}

TEST_F(MemProfilerTest, GuardAndRecordingSwitchTheHooksToForwardOnly) {
  {
    Guard g;
    void* p = fake_malloc(100);
    fake_free(p);
  }
  set_recording(false);
  void* q = fake_malloc(100);
  set_recording(true);
  fake_free(q);  // its allocation was not recorded: nothing to free
  EXPECT_TRUE(drain(g_fallback.ring()).empty());
  EXPECT_EQ(t_mem.guard, 0);
}

TEST_F(MemProfilerTest, CountdownsParkWhenNothingIsRecorded) {
  ASSERT_TRUE(init(4096, 4096));
  set_recording(false);  // the stream ended (exit, exec, detach): may restart
  fake_malloc(8);        // the first call of a thread takes the slow path
  EXPECT_EQ(t_mem.countdown, kIdleBytes);
  EXPECT_FALSE(t_mem.seeded);  // a restart draws afresh
  settle_off();  // the constructor ended without turning recording on: off for good
  EXPECT_EQ(g_mem.mode.load(), Mode::kOff);
  t_mem.countdown = 0;
  void* p = fake_malloc(8);
  EXPECT_EQ(t_mem.countdown, kParked);  // the fast path never calls out again
  fake_free(p);
  ASSERT_TRUE(init(1, 0));  // back on for the other tests
  set_recording(true);
  EXPECT_TRUE(drain(g_fallback.ring()).empty());
}

TEST_F(MemProfilerTest, StackFromInsideTheHookStartsAtItsCaller) {
  ASSERT_TRUE(cfi_refresh_modules());
  ThreadSlot slot;  // a registered thread, without its timer
  slot.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  slot.bounds = own_stack();
  ASSERT_GT(slot.bounds.hi, slot.bounds.lo);
  t_slot = &slot;
  void* p = alloc_site(64);
  const uint64_t hook_ra = g_hook_ra;
  fake_free(p);
  t_slot = nullptr;
  ASSERT_TRUE(slot.mem_ring_ready.load());  // mapped by the first event
  const auto events = drain(slot.mem_ring);
  ASSERT_EQ(events.size(), 2u);
  const Event& a = events[0];
  ASSERT_EQ(a.h.kind, static_cast<uint8_t>(EventKind::kAlloc));
  EXPECT_EQ(a.h.flags & (wire::kStackLeafOnly | wire::kStackUnwindStop), 0) << int(a.h.flags);
  ASSERT_GE(a.h.nframes, 3);
  // pcs[0] is inside alloc_site's call of fake_malloc (its return address - 1): the hook's own
  // frames and the profiler's are cut off. pcs[1] is where alloc_site returns to in this test.
  EXPECT_EQ(a.pcs[0], hook_ra - 1);
  EXPECT_GT(a.pcs[0], reinterpret_cast<uint64_t>(&alloc_site));
  EXPECT_EQ(a.pcs[1], g_site_ra);
  EXPECT_EQ(events[1].h.kind, static_cast<uint8_t>(EventKind::kFree));
  EXPECT_EQ(events[1].h.alloc_id, a.h.alloc_id);
  munmap(slot.mem_ring_mem, slot.mem_ring_bytes + ThreadSlot::kMemoMapBytes);
}

// A hook with a frame pointer (as the preload's are built), calling into a "slow path" that
// walks from its own frame to the hook's caller.
UnwindResult g_caller_walk;
uint64_t g_caller_walk_pcs[kMaxFrames];
__attribute__((noinline)) void slow_path(const StackBounds* b, uint64_t caller) {
  g_caller_walk = unwind_cfi_caller(*b, caller, g_caller_walk_pcs, kMaxFrames);
  asm volatile("" ::: "memory");
}
__attribute__((noinline, optimize("no-omit-frame-pointer"))) void fake_hook(const StackBounds* b) {
  g_hook_ra = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  slow_path(b, g_hook_ra);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void hook_site(const StackBounds* b) {
  g_site_ra = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  fake_hook(b);
  asm volatile("" ::: "memory");
}

TEST_F(MemProfilerTest, CallerWalkStepsOverOwnFramesByFramePointer) {
  ASSERT_TRUE(cfi_refresh_modules());
  const StackBounds b = own_stack();
  ASSERT_GT(b.hi, b.lo);
  hook_site(&b);
  ASSERT_GE(g_caller_walk.nframes, 3);
  EXPECT_EQ(g_caller_walk.flags & wire::kStackUnwindStop, 0) << int(g_caller_walk.flags);
  EXPECT_EQ(g_caller_walk_pcs[0], g_hook_ra);  // the hook's caller, then its callers: same as the CFI walk
  EXPECT_EQ(g_caller_walk_pcs[1], g_site_ra);
  // Above hook_site (inside this test body) the stack is this body's: the CFI walk from here
  // (frame 0 in unwind_cfi_here, frame 1 in this body) has the same frames from its frame 2 on.
  uint64_t full[kMaxFrames];
  const UnwindResult r = unwind_cfi_here(b, full, kMaxFrames);
  ASSERT_EQ(r.nframes, g_caller_walk.nframes);
  for (int k = 2; k < r.nframes; ++k) EXPECT_EQ(g_caller_walk_pcs[k], full[k]) << k;
  // A caller that is not on the stack: nothing, so the hook falls back on the full walk.
  const UnwindResult none = unwind_cfi_caller(b, 0x1234, g_caller_walk_pcs, kMaxFrames);
  EXPECT_EQ(none.nframes, 0);
  EXPECT_NE(none.flags & wire::kStackUnwindStop, 0);
}

TEST_F(MemProfilerTest, AFullRingMakesExactModeWaitForTheWriter) {
  // Fill the fallback ring.
  std::atomic<bool> yes{true};
  size_t filled = 0;
  for (;;) {
    EventSlot es;
    uint8_t* p = es.reserve(kMaxMemEvent, kThreadRingBytes, 0, yes);
    if (!p) break;
    memset(p, 0, sizeof(RawMemEvent));
    es.commit(sizeof(RawMemEvent) + 1000);
    ++filled;
  }
  ASSERT_GT(filled, 100u);
  // Without a wait, or when recording stops, a full ring drops at once.
  std::atomic<bool> no{false};
  EventSlot es;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(es.reserve(kMaxMemEvent, kThreadRingBytes, 2'000'000'000, no), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  // With a wait, the writer's drain makes room.
  std::thread writer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    drain(g_fallback.ring());
  });
  t0 = std::chrono::steady_clock::now();
  uint8_t* p = es.reserve(kMaxMemEvent, kThreadRingBytes, 2'000'000'000, yes);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_NE(p, nullptr);
  EXPECT_GE(waited, std::chrono::milliseconds(40));
  es.abandon();
  writer.join();
}

TEST_F(MemProfilerTest, SampledModeEstimatesTheBytesAllocated) {
  ASSERT_TRUE(init(64 * 1024, 0));
  std::vector<void*> ptrs;
  uint64_t truth = 0;
  for (int i = 0; i < 200000; ++i) {
    const size_t n = 16 + (i * 2654435761u) % 4000;
    truth += n;
    ptrs.push_back(fake_malloc(n));
  }
  double est = 0;
  size_t allocs = 0;
  for (const Event& e : drain(g_fallback.ring()))
    if (e.h.kind == static_cast<uint8_t>(EventKind::kAlloc)) {
      est += static_cast<double>(e.h.weight);
      ++allocs;
    }
  // ~400 MB at a 64 KiB interval: ~6,100 samples, standard error ~1.3%.
  EXPECT_NEAR(est / static_cast<double>(truth), 1.0, 0.06) << allocs << " samples";
  for (void* p : ptrs) fake_free(p);
  size_t frees = 0;
  for (const Event& e : drain(g_fallback.ring())) frees += e.h.kind == static_cast<uint8_t>(EventKind::kFree);
  EXPECT_EQ(frees, allocs);  // every sampled block's free, none of the others
  EXPECT_EQ(g_mem.table.size(), 0u);
}

// What the CPython wrappers' fast paths do (mem_python.cpp; the copy entries likewise): charge the
// countdown with no guard test, and when it is due, the slow path's sampled_alloc after the call.
__attribute__((noinline)) void* fake_fast_malloc(size_t n) {
  void* p = malloc(n);
  if (!charge_not_due(&t_mem.countdown, n) && p)
    sampled_alloc(p, n, wire::AllocKind::kMalloc, reinterpret_cast<uint64_t>(__builtin_return_address(0)));
  asm volatile("" ::: "memory");
  return p;
}

TEST_F(MemProfilerTest, AllocationsInsideTheProfilerChargeTheCountdownButAreNeverSampled) {
  ASSERT_TRUE(init(64 * 1024, 64 * 1024));
  // The program's allocations interleaved with as many bytes allocated inside the profiler (the
  // guard held, as on the writer thread or around a real allocator's nested call), which the
  // wrappers' fast paths and the copy entries charge too. Those must never be sampled, and the program's must keep their estimate:
  // a due countdown found under the guard draws a new one (without that it would stay due and
  // the program's next allocation would be sampled for it: ~2x the bytes).
  constexpr size_t kInside = 4099;  // a size the program's allocations never have
  std::vector<void*> ptrs, inside;
  uint64_t truth = 0;
  for (int i = 0; i < 100000; ++i) {
    const size_t n = 16 + (i * 2654435761u) % 4000;
    truth += n;
    ptrs.push_back(fake_fast_malloc(n));
    Guard g;
    inside.push_back(fake_fast_malloc(kInside));
    if (!copy_not_due(kInside)) sampled_copy(kInside, 0);  // a copy inside the profiler
  }
  double est = 0;
  size_t allocs = 0;
  for (const Event& e : drain(g_fallback.ring())) {
    EXPECT_NE(e.h.kind, static_cast<uint8_t>(EventKind::kCopy));
    EXPECT_NE(e.h.size, kInside);
    if (e.h.kind == static_cast<uint8_t>(EventKind::kAlloc)) {
      est += static_cast<double>(e.h.weight);
      ++allocs;
    }
  }
  EXPECT_GT(t_mem.countdown, 0);  // drawn afresh, not left due
  EXPECT_GT(t_mem.copy_countdown, 0);
  // ~200 MB of the program's at 64 KiB: ~3,100 samples, standard error ~1.8%.
  EXPECT_NEAR(est / static_cast<double>(truth), 1.0, 0.08) << allocs << " samples";
  for (void* p : inside) free(p);
  for (void* p : ptrs) fake_free(p);
  drain(g_fallback.ring());
  EXPECT_EQ(g_mem.table.size(), 0u);
}

TEST_F(MemProfilerTest, ForkChildStartsWithAnEmptyTable) {
  void* kept = fake_malloc(32);
  drain(g_fallback.ring());
  ASSERT_NE(g_mem.table.lookup(reinterpret_cast<uint64_t>(kept)), 0u);
  ++t_mem.guard;  // as entry.cpp's atfork handlers do
  fork_prepare();
  pid_t pid = fork();
  if (pid == 0) {
    fork_child();
    --t_mem.guard;
    // The parent's block is not the child's to report; new blocks are recorded.
    int bad = g_mem.table.size() != 0 || g_mem.table.lookup(reinterpret_cast<uint64_t>(kept)) != 0;
    void* q = fake_malloc(48);
    bad |= g_mem.table.lookup(reinterpret_cast<uint64_t>(q)) == 0;
    _exit(bad ? 1 : 0);
  }
  fork_parent();
  --t_mem.guard;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(g_mem.table.lookup(reinterpret_cast<uint64_t>(kept)), 0u);  // the parent keeps it
  fake_free(kept);
  drain(g_fallback.ring());
}

}  // namespace
}  // namespace mlprof::preload::mem
