// Wall mode's per-thread tick (preload/wall_sampler.cpp) on a real thread whose blocked and running
// times are known by construction, and the /proc/self/task/TID/syscall parser.
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "preload/wall_sampler.h"

namespace mlprof::preload {
namespace {

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

struct Sample {
  uint64_t stack;
  uint32_t weight;
};

class RecordingSink : public WallSink {
 public:
  uint64_t wall_stack(const uint64_t*, uint16_t, uint8_t flags, const python::RawPyFrame*, uint8_t) override {
    EXPECT_TRUE(flags & wire::kStackOffCpuWait);
    return ++stacks;
  }
  void wall_sample(uint32_t, uint64_t id, int64_t, uint32_t weight) override { samples.push_back({id, weight}); }
  uint64_t stack_generation() const override { return 1; }

  uint64_t stacks = 0;
  std::vector<Sample> samples;
};

// A thread that sleeps `sleep_ms`, then spins until told to stop.
struct SleepThenSpin {
  std::atomic<uint32_t> tid{0};
  std::atomic<bool> stop{false};
  std::thread t;
  explicit SleepThenSpin(int ms) {
    t = std::thread([this, ms] {
      tid.store(static_cast<uint32_t>(syscall(SYS_gettid)));
      sleep_ms(ms);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
    while (tid.load() == 0) sched_yield();
  }
  ~SleepThenSpin() {
    stop.store(true);
    t.join();
  }
};

ThreadSlot* slot_for(uint32_t tid, int64_t now) {
  auto* s = new ThreadSlot;
  s->tid = tid;
  s->wall.accounted_ns = now;
  return s;
}

void release(ThreadSlot* s) {
  if (s->wall.fd >= 0) close(s->wall.fd);
  if (s->wall.sched_fd >= 0) close(s->wall.sched_fd);
  delete s;
}

constexpr int64_t kPeriod = 10000000;  // 10 ms

// A sleeping-then-spinning thread, its slot and a sampler ticking it every kPeriod.
struct Scene {
  const int64_t t0 = mono_ns();
  SleepThenSpin th;
  ThreadSlot* s;
  WallSampler w;
  RecordingSink sink;
  explicit Scene(int sleep_for_ms) : th(sleep_for_ms), s(slot_for(th.tid.load(), t0)) { w.set_period(kPeriod); }
  ~Scene() { release(s); }
  void tick() { w.tick(s, mono_ns(), false, sink); }
};

// The writer's tick comes late: the thread it last saw blocked has woken and runs. The part of the
// late periods it spent blocked (known: it slept until 300 ms, the blocked tick was at ~50 ms)
// still goes to the blocked stack; the time it ran does not.
TEST(WallSampler, LateTickKeepsTheWaitOfAThreadThatWokeMeanwhile) {
  Scene sc(300);
  sleep_ms(50);
  sc.tick();  // blocked in clock_nanosleep: its first wait sample
  ASSERT_EQ(sc.sink.samples.size(), 1u);
  ASSERT_EQ(sc.sink.stacks, 1u);
  const int64_t blocked_tick = mono_ns();

  sleep_ms(450);  // the thread wakes at ~300 ms and spins: the next tick is ~450 ms late
  sc.tick();
  // Wait still owed to the sleep: from the blocked tick to the wake-up, less its run-queue delay.
  const double owed_periods = static_cast<double>(sc.t0 + 300000000 - blocked_tick) / kPeriod;
  ASSERT_EQ(sc.sink.samples.size(), 2u) << "the late tick dropped the rest of the wait";
  EXPECT_EQ(sc.sink.samples[1].stack, 1u) << "the rest goes to the stack where the thread was blocked";
  EXPECT_NEAR(sc.sink.samples[1].weight, owed_periods, 3.0);
  EXPECT_EQ(sc.sink.stacks, 1u) << "a running thread is not unwound";
  EXPECT_GT(sc.w.reads, 0u);
}

// Ticks every period (as the writer does when it is on time) count the wait once: no extra
// periods for the time the thread ran after it woke. (A tick that takes longer than planned is
// covered by the schedstat split as well.)
TEST(WallSampler, OnTimeTicksCountTheWaitOnce) {
  Scene sc(200);
  sleep_ms(50);
  sc.tick();
  ASSERT_EQ(sc.sink.samples.size(), 1u);
  const int64_t blocked_tick = mono_ns();
  while (mono_ns() < sc.t0 + 400000000) {  // until it has spun ~200 ms
    sleep_ms(10);
    sc.tick();
  }
  uint64_t after = 0;
  for (size_t i = 1; i < sc.sink.samples.size(); ++i) after += sc.sink.samples[i].weight;
  const double owed_periods = static_cast<double>(sc.t0 + 200000000 - blocked_tick) / kPeriod;
  // Counting the wait twice would add ~15 periods; 5 leaves room for ticks delayed on a loaded
  // machine (ctest -j2: 18 against 15 owed was seen once with a margin of 3).
  EXPECT_NEAR(static_cast<double>(after), owed_periods, 5.0);
  EXPECT_EQ(sc.sink.stacks, 1u);
}

TEST(WallSampler, ParsesTheSyscallFile) {
  SyscallState st;
  ASSERT_TRUE(parse_syscall_line("running\n", &st));
  EXPECT_TRUE(st.running);
  ASSERT_TRUE(parse_syscall_line("230 0x1 0x0 0x7ffd 0x0 0x0 0x0 0x7ffc1234 0x7f00abcd\n", &st));
  EXPECT_FALSE(st.running);
  EXPECT_EQ(st.nr, 230);
  EXPECT_EQ(st.sp, 0x7ffc1234u);
  EXPECT_EQ(st.pc, 0x7f00abcdu);
  ASSERT_TRUE(parse_syscall_line("-1 0x7ffc0000 0x401000\n", &st));
  EXPECT_EQ(st.nr, -1);
  EXPECT_EQ(st.pc, 0x401000u);
  EXPECT_FALSE(parse_syscall_line("", &st));
  EXPECT_FALSE(parse_syscall_line("230 0x1\n", &st));
  EXPECT_FALSE(parse_syscall_line("cpu 1 2 3\n", &st));
}

}  // namespace
}  // namespace mlprof::preload
