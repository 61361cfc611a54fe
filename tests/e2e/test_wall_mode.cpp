// Wall-clock mode (mlprof-run --mode wall): off-CPU wait time at the place where threads block,
// measured without signalling blocked threads. Ground truth: tests/fixtures/wall_block.cpp (native
// threads blocked in read, nanosleep and poll for times they measure themselves, and that exit 3
// when a sleep returned early or with EINTR) and tests/fixtures/python/cpu_split.py (SLEEP-LINE).
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "e2e_util.h"
#include "python_util.h"

namespace {

using namespace e2e;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Blocked {
  int64_t wait = 0, wall = 0, cpu = 0;
  bool leaf_ok = true;  // every wait stack through `fn` has a frame matching the leaf inside it
  int stacks = 0;
};

// Values of the stacks that pass through a function whose name contains `fn`; `leaf` must name a
// frame between the leaf and that function (the blocking call) in each wait stack.
Blocked through(const profile::Profile& p, const std::string& fn, const std::vector<std::string>& leaf) {
  Blocked b;
  const uint32_t wait = p.metric("wait"), wall = p.metric("wall"), cpu_m = p.metric("cpu");
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    size_t at = frames.size();
    for (size_t i = 0; i < frames.size() && at == frames.size(); ++i)
      if (contains(p.str(p.frames.at(frames[i]).function), fn)) at = i;
    if (at == frames.size()) continue;
    if (wait != profile::kNone) b.wait += sv.values.at(wait);
    if (wall != profile::kNone) b.wall += sv.values.at(wall);
    b.cpu += sv.values.at(cpu_m);
    if (wait != profile::kNone && sv.values.at(wait) > 0) {
      ++b.stacks;
      bool found = false;
      for (size_t i = 0; i < at; ++i)
        for (auto& l : leaf) found = found || contains(p.str(p.frames.at(frames[i]).function), l);
      b.leaf_ok = b.leaf_ok && found;
    }
  }
  return b;
}

TEST(WallMode, NativeThreadsBlockedInReadSleepAndPollGetTheirWaitWithoutBeingDisturbed) {
  Profiled run = profile_run({fixture("fixture_wall_block"), "0.5"}, {"--mode", "wall", "--no-html"});
  ASSERT_TRUE(run.ok);
  // 3: a nanosleep returned early / with EINTR, or a poll did not time out: wall mode signalled it.
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  EXPECT_EQ(p.run.mode, "wall");
  // cpu, cpu-interpreter, cpu-native, cpu-system, wall, wait; memory metrics (on by default) follow.
  ASSERT_GE(p.metrics.size(), 6u);
  EXPECT_EQ(p.metric("cpu"), 0u) << "the CPU metrics keep their indexes";
  EXPECT_EQ(p.metric("wall"), 4u);
  EXPECT_EQ(p.metric("wait"), 5u);
  auto truth = nlohmann::json::parse(run.result.out);

  struct Case {
    const char* fn;
    const char* key;
    std::vector<std::string> leaf;
  } cases[] = {{"reader_wait", "read_off_cpu", {"read"}},
               {"sleeper_wait", "sleep_off_cpu", {"nanosleep"}},
               {"poller_wait", "poll_off_cpu", {"poll"}}};
  for (auto& c : cases) {
    Blocked b = through(p, c.fn, c.leaf);
    const double truth_us = truth[c.key].get<double>() * 1e6;
    EXPECT_NEAR(static_cast<double>(b.wait), truth_us, 0.15 * truth_us) << c.fn;
    EXPECT_TRUE(b.leaf_ok) << c.fn << ": a wait stack without the blocking call (" << c.leaf[0] << ") inside it";
    EXPECT_GE(b.stacks, 1) << c.fn;
    EXPECT_EQ(b.wall, b.wait + b.cpu) << c.fn << ": wall = cpu + wait";
    EXPECT_LE(b.cpu * 10, b.wait) << c.fn << ": a blocked thread took CPU";
  }
  // The main thread burns CPU: wall there is its CPU time, no wait.
  Blocked burn = through(p, "burn", {""});
  const double burn_us = truth["burn_cpu"].get<double>() * 1e6;
  EXPECT_NEAR(static_cast<double>(burn.cpu), burn_us, 0.15 * burn_us);
  EXPECT_EQ(burn.wall, burn.cpu + burn.wait);
  EXPECT_LE(burn.wait * 10, burn.cpu) << "the burning thread shows as waiting";
  // Three threads blocked for ~0.5 s at 100 Hz. A wait's periods after its first tick are held back
  // until it ends (up to 100 ms: preload/wall_sampler.h) and sent together, so the short sleeps
  // and polls send about two samples each: 60 were seen, where one sample a tick gave over 100.
  EXPECT_GT(counter_sum(p, "wait_samples"), 30);
}

TEST(WallMode, CpuModeHasNoWaitMetric) {
  Profiled run = profile_run({fixture("fixture_wall_block"), "0.2"}, {"--no-html"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  EXPECT_EQ(p.run.mode, "cpu");
  EXPECT_EQ(p.metric("cpu-system"), 3u);
  EXPECT_EQ(p.metric("wait"), profile::kNone);
  EXPECT_EQ(p.metric("wall"), profile::kNone);
  EXPECT_EQ(counter_sum(p, "wait_samples"), 0);
}

TEST(WallMode, ModeIsValidated) {
  RunResult r = run({MLPROF_RUN, "-q", "--mode", "both", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "--mode")) << r.err;
  // The preload's own check of MLPROF_MODE (an offline run: no collector needed).
  std::string dir = scratch();
  r = run({fixture("fixture_wall_block"), "0.05"},
          {std::string("LD_PRELOAD=") + MLPROF_PRELOAD, "MLPROF_OUTPUT_DIR=" + dir, "MLPROF_MODE=both"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "MLPROF_MODE=both is not a profiling mode (cpu or wall); using cpu")) << r.err;
}

// ---- Python ------------------------------------------------------------------------------------

const std::string kFixture = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/cpu_split.py";

struct LineVals {
  int64_t cpu = 0, wall = 0, wait = 0;
};

LineVals line_vals(const profile::Profile& p, uint32_t line) {
  LineVals v;
  const uint32_t c = p.metric("cpu"), w = p.metric("wall"), wt = p.metric("wait");
  for (auto& l : p.lines) {
    if (l.line != line || p.str(l.file) != kFixture) continue;
    v.cpu += l.self.at(c);
    if (w != profile::kNone) v.wall += l.self.at(w);
    if (wt != profile::kNone) v.wait += l.self.at(wt);
  }
  return v;
}

class PythonWall : public ::testing::TestWithParam<Interpreter> {};

TEST_P(PythonWall, SleepLineWaitsAndComputeLinesRun) {
  const Interpreter& py = GetParam();
  Profiled run = profile_run({py.path, kFixture, "0.3", "4", "--no-numpy"}, {"--mode", "wall", "--no-html"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  auto truth = nlohmann::json::parse(run.result.out);
  const auto& p = run.profile;
  ASSERT_NE(p.metric("wait"), profile::kNone);

  LineVals sl = line_vals(p, marker_line(kFixture, "# SLEEP-LINE")),
           pl = line_vals(p, marker_line(kFixture, "# PY-LINE")),
           nl = line_vals(p, marker_line(kFixture, "# NATIVE-LINE hashlib"));
  // Wait is off-CPU time: the sleep's wall time minus what the thread spent running or runnable
  // behind busy cores (the fixture reads both from schedstat; a CI run measured a sleep 23% over
  // its off-CPU time, all of it run-queue delay after the wake-up).
  const double sleep_us = truth["sleep_wall"].get<double>() * 1e6;
  const double off_cpu_us = truth["sleep_off_cpu"].get<double>() * 1e6;
  EXPECT_NEAR(static_cast<double>(sl.wait), off_cpu_us, 0.15 * off_cpu_us)
      << "SLEEP-LINE wait vs the off-CPU time of its sleep (wall " << sleep_us << " us)";
  EXPECT_GE(sl.wait * 100, sl.wall * 85) << "SLEEP-LINE: wait share of its wall time";
  EXPECT_EQ(sl.wall, sl.cpu + sl.wait);
  // The compute lines run on CPU, each for rounds x per_round seconds of wall time. The fixture's
  // worker thread competes for the GIL all along, so part of that wall time is real GIL wait (the
  // main thread blocked in take_gil at that line): about half for pure-Python code on CPython's
  // 5 ms switch interval, and most of it on a loaded machine, where the worker holding the GIL
  // waits for a core. So wall must be at most the time the line's calls took (the fixture times
  // them: a round's last call runs past its deadline by a GIL hand-over, which on a loaded machine
  // took 430 ms over 4 rounds once), and CPU the CPU time the fixture measured itself
  // (time.thread_time) at that line. 10% and 5 periods of 10 ms for the sampling.
  // (No lower bound on wall: time runnable-but-waiting-for-a-core is neither CPU nor wait,
  // docs/limits.md.)
  ASSERT_GT(pl.cpu, 0);
  ASSERT_GT(nl.cpu, 0);
  const double py_cpu_us = truth["python"].get<double>() * 1e6, native_cpu_us = truth["native"].get<double>() * 1e6;
  const double py_wall_us = truth["python_wall"].get<double>() * 1e6,
               native_wall_us = truth["native_wall"].get<double>() * 1e6;
  // The fixture ran each line for rounds x per_round seconds (less the loop's own steps).
  EXPECT_GE(py_wall_us, 0.9 * 0.3 * 4 * 1e6);
  EXPECT_GE(native_wall_us, 0.9 * 0.3 * 4 * 1e6);
  EXPECT_LE(static_cast<double>(pl.wall), 1.1 * py_wall_us + 50000) << "cpu " << pl.cpu << " wait " << pl.wait;
  EXPECT_LE(static_cast<double>(nl.wall), 1.1 * native_wall_us + 50000) << "cpu " << nl.cpu << " wait " << nl.wait;
  // 100 Hz CPU-clock samples: +-20%, and two samples for short totals.
  EXPECT_NEAR(static_cast<double>(pl.cpu), py_cpu_us, 0.2 * py_cpu_us + 20000) << "PY-LINE wait " << pl.wait;
  EXPECT_NEAR(static_cast<double>(nl.cpu), native_cpu_us, 0.2 * native_cpu_us + 20000) << "NATIVE-LINE wait " << nl.wait;
  EXPECT_EQ(pl.wall, pl.cpu + pl.wait);
}

// Every supported interpreter (the issue asks the sleep line's wait of all seven).
INSTANTIATE_TEST_SUITE_P(Interpreters, PythonWall, ::testing::ValuesIn(supported_interpreters()),
                         [](const ::testing::TestParamInfo<Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonWall);

TEST(PythonWallCpuMode, SleepLineHasNoWaitMetric) {
  auto pys = supported_interpreters();
  if (pys.empty()) GTEST_SKIP() << "no supported Python";
  Profiled run = profile_run({pys[0].path, kFixture, "0.1", "2", "--no-numpy"}, {"--no-html"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_EQ(run.profile.metric("wait"), profile::kNone);
  EXPECT_EQ(run.profile.metric("wall"), profile::kNone);
  EXPECT_EQ(run.profile.metric("cpu-system"), 3u);
}

}  // namespace
