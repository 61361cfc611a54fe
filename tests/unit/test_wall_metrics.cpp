// The collector's accounting of wall mode (docs/wire-format.md: PROCESS_START flags bit 1 and
// wall_period_ns, STACK flag 128): synthetic streams written with the preload's Encoder, decoded
// and built into a profile. Wait samples add weight x wall period to `wait` and `wall` only; CPU
// samples add weight x period to the CPU metrics and to `wall`; CPU-mode profiles keep exactly the
// four CPU metrics.
#include <gtest/gtest.h>

#include <map>

#include "collector/profile_builder.h"
#include "collector/stream_decoder.h"
#include "common/wire_format.h"
#include "preload/encoder.h"

namespace mlprof {
namespace {

constexpr uint64_t kPeriodNs = 10'000'000;     // CPU: 100 Hz
constexpr uint64_t kWallPeriodNs = 5'000'000;  // wall tick (deliberately different)

struct Spec {
  bool wall = true;
  bool send_wall_period = true;
};

// One process, one thread; stack 1: pcs A (CPU), stack 2: pcs B (wait), stack 3: pcs A (wait).
// Samples: stack 1 weight 3, stack 2 weight 4, stack 3 weight 2.
std::vector<uint8_t> stream(const Spec& spec) {
  preload::Encoder e;
  e.header();
  e.begin(wire::Record::kProcessStart);
  for (uint64_t v : {uint64_t{4242}, uint64_t{1}, uint64_t{1000}, uint64_t{5000}, kPeriodNs, uint64_t{0}}) e.u(v);
  e.str("/bin/fake");
  e.u(0);
  e.u(spec.wall ? uint64_t{wire::kProcessWallMode} : 0);
  if (spec.wall && spec.send_wall_period) e.u(kWallPeriodNs);
  e.end();
  e.begin(wire::Record::kThreadStart);
  e.u(4242);
  e.u(5000);
  e.str("main");
  e.end();
  auto stack = [&](uint64_t id, std::vector<uint64_t> pcs, uint8_t flags) {
    e.begin(wire::Record::kStack);
    e.u(id);
    e.u(pcs.size());
    for (size_t i = 0; i < pcs.size(); ++i) {
      if (i == 0) e.u(pcs[0]);
      else e.s(static_cast<int64_t>(pcs[i] - pcs[i - 1]));
    }
    e.u(flags);
    e.u(0);  // no Python frames
    e.end();
  };
  stack(1, {0x1000, 0x2000}, 0);
  stack(2, {0x3000, 0x2000}, wire::kStackOffCpuWait | wire::kStackInSyscall);
  stack(3, {0x1000, 0x2000}, wire::kStackOffCpuWait);
  int64_t t = 5000;
  for (auto [id, w] : std::vector<std::pair<uint64_t, uint64_t>>{{1, 3}, {2, 4}, {3, 2}}) {
    e.begin(wire::Record::kSample);
    e.u(4242);
    e.u(id);
    e.s(1000);
    e.u(w);
    e.end();
    t += 1000;
  }
  e.begin(wire::Record::kProcessEnd);
  e.u(static_cast<uint64_t>(t + 1000));
  e.u(0);
  e.s(0);
  e.end();
  return e.out();
}

profile::Profile build(const Spec& spec, const std::string& run_mode = "") {
  collector::StreamDecoder d;
  auto bytes = stream(spec);
  EXPECT_TRUE(d.feed(bytes.data(), bytes.size())) << d.error();
  d.finish();
  EXPECT_TRUE(d.stream().ended);
  std::vector<collector::ProcessStream> streams{std::move(d.stream())};
  profile::RunInfo run;
  run.mode = run_mode;
  return collector::build_profile(streams, run);
}

// stack -> metric name -> value (us), summed over threads.
std::map<uint32_t, std::map<std::string, int64_t>> values(const profile::Profile& p) {
  std::map<uint32_t, std::map<std::string, int64_t>> out;
  for (auto& sv : p.stack_values)
    for (size_t m = 0; m < p.metrics.size(); ++m) out[sv.stack][p.metrics[m].name] += sv.values.at(m);
  return out;
}

TEST(WallMetrics, DecoderReadsModeAndWallPeriod) {
  collector::StreamDecoder d;
  auto bytes = stream({});
  ASSERT_TRUE(d.feed(bytes.data(), bytes.size()));
  EXPECT_EQ(d.stream().flags & wire::kProcessWallMode, uint64_t{wire::kProcessWallMode});
  EXPECT_EQ(d.stream().wall_period_ns, static_cast<int64_t>(kWallPeriodNs));
  EXPECT_EQ(d.stream().stacks.at(2).flags & wire::kStackOffCpuWait, wire::kStackOffCpuWait);
}

TEST(WallMetrics, WaitSamplesAddToWaitAndWallOnly) {
  profile::Profile p = build({});
  EXPECT_EQ(p.run.mode, "wall") << "the stream's flag decides when the run does not say";
  ASSERT_EQ(p.metrics.size(), 6u);
  const char* names[] = {"cpu", "cpu-interpreter", "cpu-native", "cpu-system", "wall", "wait"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p.metrics[i].name, names[i]);
    EXPECT_EQ(p.metrics[i].unit, "us");
  }
  auto v = values(p);
  // Stacks 1 and 3 have the same frames: one profile stack with CPU (3 x 10 ms) and wait (2 x 5 ms).
  ASSERT_EQ(v.size(), 2u);
  bool seen_mixed = false, seen_wait = false;
  for (auto& [stack, m] : v) {
    if (m["cpu"] > 0) {
      seen_mixed = true;
      EXPECT_EQ(m["cpu"], 30000);
      EXPECT_EQ(m["cpu-native"], 30000);
      EXPECT_EQ(m["wait"], 10000);
      EXPECT_EQ(m["wall"], 40000);
    } else {
      seen_wait = true;  // stack 2: wait only; the syscall flag does not make it system CPU
      EXPECT_EQ(m["wait"], 20000);
      EXPECT_EQ(m["wall"], 20000);
      EXPECT_EQ(m["cpu-system"], 0);
      EXPECT_EQ(m["cpu-native"], 0);
    }
  }
  EXPECT_TRUE(seen_mixed);
  EXPECT_TRUE(seen_wait);
  // Aggregates: the per-function totals carry the new metrics too (the root frame 0x2000 is on both).
  int64_t wall_total = 0;
  for (auto& f : p.functions) wall_total = std::max(wall_total, f.total.at(p.metric("wall")));
  EXPECT_EQ(wall_total, 60000);
}

TEST(WallMetrics, WithoutWallPeriodWaitSamplesWeighTheCpuPeriod) {
  profile::Profile p = build({true, false});
  int64_t wait = 0;
  for (auto& [stack, m] : values(p)) wait += m["wait"];
  EXPECT_EQ(wait, 60000);  // (4 + 2) x 10 ms
}

TEST(WallMetrics, CpuModeKeepsExactlyTheFourCpuMetrics) {
  profile::Profile p = build({false, false}, "cpu");
  EXPECT_EQ(p.run.mode, "cpu");
  ASSERT_EQ(p.metrics.size(), 4u);
  EXPECT_EQ(p.metric("wait"), profile::kNone);
  int64_t cpu = 0;
  for (auto& sv : p.stack_values) {
    ASSERT_EQ(sv.values.size(), 4u);
    cpu += sv.values[0];
  }
  EXPECT_EQ(cpu, 30000) << "wait-flagged samples in a CPU-mode stream count nowhere";
}

TEST(WallMetrics, RunModeWallAddsTheColumnsEvenWithoutWaitSamples) {
  profile::Profile p = build({false, false}, "wall");
  EXPECT_EQ(p.metrics.size(), 6u);
  EXPECT_NE(p.metric("wall"), profile::kNone);
}

}  // namespace
}  // namespace mlprof
