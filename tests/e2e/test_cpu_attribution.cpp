// CPU attribution against ground truth: fixture_cpu_ratio burns in hot_fifty/hot_thirty/hot_twenty
// in a 50/30/20 ratio (same code, different unit counts), each on one marked source line.
#include <array>
#include <cstdio>

#include "e2e_util.h"

namespace {

using namespace e2e;

// The split of CPU time the fixture measured itself (percent of the three functions' sum), from
// its last line "cpu_ratio done ACC cpu_ns FIFTY THIRTY TWENTY"; {50, 30, 20} by construction on
// a quiet machine.
std::array<double, 3> measured_split(const std::string& out) {
  long long v[3] = {0, 0, 0};
  unsigned acc = 0;
  auto pos = out.rfind("cpu_ratio done ");
  if (pos == std::string::npos ||
      sscanf(out.c_str() + pos, "cpu_ratio done %u cpu_ns %lld %lld %lld", &acc, &v[0], &v[1], &v[2]) != 4 ||
      v[0] + v[1] + v[2] <= 0) {
    ADD_FAILURE() << "fixture_cpu_ratio did not print its CPU split: " << out;
    return {50, 30, 20};
  }
  const double sum = static_cast<double>(v[0] + v[1] + v[2]);
  return {100 * v[0] / sum, 100 * v[1] / sum, 100 * v[2] / sum};
}

class CpuRatio : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // 25 rounds of 100 ms: about 250 samples at 100 Hz.
    run_ = new Profiled(profile_run({fixture("fixture_cpu_ratio"), "1000", "25"}));
  }
  static void TearDownTestSuite() { delete run_; }
  static Profiled* run_;
};
Profiled* CpuRatio::run_ = nullptr;

TEST_F(CpuRatio, RunsAndExitsCleanly) {
  ASSERT_TRUE(run_->ok);
  EXPECT_EQ(run_->result.exit_code, 0) << run_->result.err;
  EXPECT_NE(run_->result.out.find("cpu_ratio done"), std::string::npos);
  EXPECT_GE(counter_sum(run_->profile, "samples"), 150);
  EXPECT_EQ(counter_sum(run_->profile, "dropped_ring_full"), 0);
}

TEST_F(CpuRatio, SelfTimeSharesMatchFiftyThirtyTwenty) {
  ASSERT_TRUE(run_->ok);
  const auto& p = run_->profile;
  double a = function_self(p, "hot_fifty"), b = function_self(p, "hot_thirty"), c = function_self(p, "hot_twenty");
  double sum = a + b + c;
  ASSERT_GT(sum, 0);
  // The three functions are (nearly) all the CPU the program uses.
  EXPECT_GT(sum / total_cpu(p), 0.95);
  const auto truth = measured_split(run_->result.out);
  EXPECT_NEAR(truth[0], 50, 15) << "the fixture's own split is far from 50/30/20: the machine is too loaded";
  // +-5 points: on a quiet machine the split is within 2; under CI's parallel load (ctest -j2 on 2
  // cores) it once came out 46/30/25 while the program's own CPU clock said 50/30/20. The cause
  // is not found yet (docs/limits.md); a real misattribution (a wrong frame, a lost unwind) moves
  // far more than that.
  EXPECT_NEAR(100 * a / sum, truth[0], 5) << "hot_fifty";
  EXPECT_NEAR(100 * b / sum, truth[1], 5) << "hot_thirty";
  EXPECT_NEAR(100 * c / sum, truth[2], 5) << "hot_twenty";
}

TEST_F(CpuRatio, HotLineCarriesEachFunctionsTime) {
  ASSERT_TRUE(run_->ok);
  const auto& p = run_->profile;
  const std::string src = fixture_source("cpu_ratio.cpp");
  for (auto [fn, marker] : {std::pair{"hot_fifty", "hot-line: fifty"}, std::pair{"hot_thirty", "hot-line: thirty"},
                            std::pair{"hot_twenty", "hot-line: twenty"}}) {
    uint32_t line = marker_line(src, marker);
    int64_t self = function_self(p, fn);
    EXPECT_GE(line_self(p, "tests/fixtures/cpu_ratio.cpp", line), self * 9 / 10) << fn << " line " << line;
  }
}

TEST_F(CpuRatio, StacksWithoutFramePointersReachMain) {
  // The fixture is built with -fomit-frame-pointer: only DWARF CFI unwinding gets to main.
  ASSERT_TRUE(run_->ok);
  const auto& p = run_->profile;
  EXPECT_GE(function_total(p, "main"), total_cpu(p) * 95 / 100);
  EXPECT_GE(function_total(p, "_start"), total_cpu(p) * 95 / 100);
}

TEST_F(CpuRatio, CollapsedExportNamesFramesByLine) {
  ASSERT_TRUE(run_->ok);
  RunResult r = run({MLPROF_CLI, "export", run_->path, "--format", "collapsed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint32_t line = marker_line(fixture_source("cpu_ratio.cpp"), "hot-line: fifty");
  std::string expect_frame = "hot_fifty(unsigned long, unsigned long) (" + fixture_source("cpu_ratio.cpp") + ":" +
                             std::to_string(line) + ")";
  bool found = false;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    // root first, frames joined by ';', then a space and an integer (microseconds)
    auto sp = l.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << l;
    EXPECT_GT(std::stoll(l.substr(sp + 1)), 0) << l;
    if (l.rfind("_start (", 0) == 0 && l.find(";main (") != std::string::npos &&
        l.find(";" + expect_frame + " ") != std::string::npos)
      found = true;
  }
  EXPECT_TRUE(found) << "no stack _start;...;main;" << expect_frame << " in:\n" << r.out;
}

TEST(CpuAttribution, StrippedBinaryDegradesToModuleOffset) {
  Profiled run = profile_run({fixture("fixture_cpu_ratio_stripped"), "400", "5"});
  ASSERT_TRUE(run.ok);
  EXPECT_EQ(run.result.exit_code, 0);
  RunResult r = run_collapsed(run.path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fixture_cpu_ratio_stripped+0x"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hot_fifty"), std::string::npos);
}

TEST(CpuAttribution, LibunwindUnwinderAgreesOnTheRatio) {
  // 97 Hz: rounds of ~100 ms are not a whole number of periods, so the ticks' phase within a
  // round drifts and the 50/30/20 boundaries are not sampled at the same offsets every round.
  Profiled run = profile_run({fixture("fixture_cpu_ratio"), "1000", "20"}, {"--unwinder", "libunwind", "--rate", "97"});
  ASSERT_TRUE(run.ok);
  const auto& p = run.profile;
  double a = function_self(p, "hot_fifty"), b = function_self(p, "hot_thirty"), c = function_self(p, "hot_twenty");
  double sum = a + b + c;
  ASSERT_GT(sum, 0);
  const auto truth = measured_split(run.result.out);
  EXPECT_NEAR(100 * a / sum, truth[0], 4);
  EXPECT_NEAR(100 * c / sum, truth[2], 4);
  EXPECT_GE(function_total(p, "main"), total_cpu(p) * 95 / 100);
}

TEST(CpuAttribution, PosixTimerFallbackWeightsMissedTicks) {
  // With POSIX CPU-time timers (MLPROF_TIMER=timer, the fallback where perf events are not
  // allowed) 1000 Hz is limited by the kernel tick; missed ticks weight samples, so the CPU total
  // still matches the ticks and the ratio holds.
  Profiled run = profile_run({fixture("fixture_cpu_ratio"), "1000", "10"}, {"--rate", "1000"}, {"MLPROF_TIMER=timer"});
  ASSERT_TRUE(run.ok);
  const auto& p = run.profile;
  EXPECT_EQ(p.run.timer, "thread-cpu-timer");
  EXPECT_GT(counter_sum(p, "posix_timer_threads"), 0);
  double a = function_self(p, "hot_fifty"), b = function_self(p, "hot_thirty"), c = function_self(p, "hot_twenty");
  double sum = a + b + c;
  ASSERT_GT(sum, 0);
  EXPECT_NEAR(100 * a / sum, measured_split(run.result.out)[0], 4);
  int64_t ticks = counter_sum(p, "ticks");
  EXPECT_NEAR(static_cast<double>(total_cpu(p)), ticks * 1000.0, ticks * 1000.0 * 0.02);
  EXPECT_EQ(p.run.rate_hz, 1000u);
}

TEST(CpuAttribution, PerfEventsDeliverTheRequestedRate) {
  Profiled run = profile_run({fixture("fixture_cpu_ratio"), "1000", "10"}, {"--rate", "1000"});
  ASSERT_TRUE(run.ok);
  const auto& p = run.profile;
  if (p.run.timer != "perf-task-clock")
    GTEST_SKIP() << "perf events not permitted here (timer: " << p.run.timer << ")";
  int64_t samples = counter_sum(p, "samples");
  double cpu_s = total_cpu(p) / 1e6;
  ASSERT_GT(cpu_s, 0.3);
  EXPECT_GE(samples / cpu_s, 800) << samples << " samples over " << cpu_s << " s of CPU";
  EXPECT_EQ(counter_sum(p, "ticks"), samples);  // perf events are re-armed: no merged ticks
  double a = function_self(p, "hot_fifty"), b = function_self(p, "hot_thirty"), c = function_self(p, "hot_twenty");
  const auto truth = measured_split(run.result.out);
  EXPECT_NEAR(100 * a / (a + b + c), truth[0], 3);
  EXPECT_NEAR(100 * c / (a + b + c), truth[2], 3);
}

// fixture_short_threads' own measurement: {short_thread_work's CPU, long_thread_work's}, in us.
std::array<double, 2> short_long_truth(const std::string& out) {
  long long s = 0, l = 0;
  auto pos = out.rfind("short_threads done ");
  if (pos == std::string::npos ||
      sscanf(out.c_str() + pos, "short_threads done short_cpu_ns %lld long_cpu_ns %lld", &s, &l) != 2 || s <= 0 || l <= 0) {
    ADD_FAILURE() << "fixture_short_threads did not print its CPU: " << out;
    return {1, 1};
  }
  return {s / 1e3, l / 1e3};
}

// A thread-per-request server's threads each use less than one sampling period of CPU. With a
// fixed first expiry none of them was ever sampled (half of this fixture's CPU, and all of a
// Flask development server's request handling, was missing). Default clock settings: after 32
// such threads new threads get perf task-clock events with a random first period, so the short
// threads' function is counted like the long thread's.
TEST(CpuAttribution, ThreadsShorterThanASamplingPeriodAreCounted) {
  Profiled run = profile_run({fixture("fixture_short_threads"), "800", "30"}, {"--no-memory"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  EXPECT_GE(counter_sum(p, "short_threads"), 790) << "800 threads of ~3 ms CPU each ended";
  if (counter_sum(p, "perf_threads") == 0)
    GTEST_SKIP() << "perf events not permitted here: short threads stay on POSIX timers (see PosixTimersStartAtARandomPhase)";
  EXPECT_GE(counter_sum(p, "perf_threads"), 800 - 32 - 8) << "the switch to perf events after 32 short threads";
  EXPECT_EQ(p.run.timer, "mixed") << "the threads moved to perf events are said (it read thread-cpu-timer)";
  const auto truth = short_long_truth(run.result.out);
  const double shorts = static_cast<double>(function_self(p, "short_thread_work"));
  const double longs = static_cast<double>(function_self(p, "long_thread_work"));
  // ~250 samples on the short threads (the first 32 on POSIX timers lose ~3% of them): +-25% is
  // about 3.5 standard deviations. Without perf events for them: ~28% (a fixed first expiry: 0).
  EXPECT_NEAR(shorts / truth[0], 1.0, 0.25) << "short threads: " << shorts << " us sampled, " << truth[0] << " us used";
  EXPECT_NEAR(longs / truth[1], 1.0, 0.25) << "long thread: " << longs << " us sampled, " << truth[1] << " us used";
  for (auto& w : p.warnings) EXPECT_EQ(w.find("two sampling periods"), std::string::npos) << w;
}

// MLPROF_TIMER=timer keeps POSIX CPU-time timers (checked at the scheduler's tick) for every
// thread. Their first expiry is random in [1, period], so short threads are sampled at all (a
// fixed first expiry gave them none); the part the tick misses is named in a warning.
TEST(CpuAttribution, PosixTimersStartAtARandomPhase) {
  Profiled run = profile_run({fixture("fixture_short_threads"), "400", "30"}, {"--no-memory"}, {"MLPROF_TIMER=timer"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  EXPECT_EQ(counter_sum(p, "perf_threads"), 0) << "MLPROF_TIMER=timer is not switched";
  const auto truth = short_long_truth(run.result.out);
  const double shorts = static_cast<double>(function_self(p, "short_thread_work"));
  EXPECT_GE(shorts, truth[0] * 0.05) << "short threads: " << shorts << " us sampled of " << truth[0] << " us used";
  EXPECT_NEAR(function_self(p, "long_thread_work") / truth[1], 1.0, 0.25);
  bool warned = false;
  for (auto& w : p.warnings) warned |= w.find("threads ended within two sampling periods of CPU each") != std::string::npos;
  EXPECT_TRUE(warned) << "no warning about the undercounted short threads";
}

}  // namespace
