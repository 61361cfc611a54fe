// Python: per-line CPU split into interpreter / native / system on every CPython mlprof supports,
// against tests/fixtures/python/cpu_split.py, which measures each line's CPU itself.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "e2e_util.h"
#include "python_util.h"

namespace {

using namespace e2e;

const std::string kFixture = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/cpu_split.py";

struct LineCpu {
  int64_t total = 0, interp = 0, native = 0, system = 0;
};

// Per-line values where the line is the innermost Python frame (a Python frame's "self").
LineCpu line_cpu(const profile::Profile& p, uint32_t line) {
  LineCpu c;
  uint32_t m[4] = {p.metric("cpu"), p.metric("cpu-interpreter"), p.metric("cpu-native"), p.metric("cpu-system")};
  for (auto& l : p.lines) {
    if (l.line != line || p.str(l.file) != kFixture) continue;
    c.total += l.self.at(m[0]);
    c.interp += l.self.at(m[1]);
    c.native += l.self.at(m[2]);
    c.system += l.self.at(m[3]);
  }
  return c;
}

class PythonSplit : public ::testing::TestWithParam<Interpreter> {};

TEST_P(PythonSplit, LinesCarryTheirOwnKindOfTime) {
  const Interpreter& py = GetParam();
  std::vector<std::string> cmd = {py.path, kFixture, "0.3", "4"};
  Profiled run = profile_run(cmd);
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  auto truth = nlohmann::json::parse(run.result.out);
  const auto& p = run.profile;
  ASSERT_NE(p.metric("cpu-interpreter"), profile::kNone);

  uint32_t py_line = marker_line(kFixture, "# PY-LINE"),
           native_line = marker_line(kFixture, "# NATIVE-LINE " + truth["native_kind"].get<std::string>()),
           sleep_line = marker_line(kFixture, "# SLEEP-LINE"), thread_line = marker_line(kFixture, "# THREAD-LINE");
  LineCpu pl = line_cpu(p, py_line), nl = line_cpu(p, native_line), sl = line_cpu(p, sleep_line),
          tl = line_cpu(p, thread_line);
  ASSERT_GT(pl.total, 0) << "no samples on the Python line";
  ASSERT_GT(nl.total, 0) << "no samples on the native line";
  ASSERT_GT(tl.total, 0) << "no samples on the thread's line";
  EXPECT_GE(pl.interp, pl.total * 85 / 100) << "interpreter share of the pure-Python line";
  EXPECT_GE(nl.native, nl.total * 85 / 100) << "native share of the " << truth["native_kind"] << " line";
  // Sleeping takes no CPU; a sample may still land in the kernel's entry or wake-up path of the
  // sleep (real, tiny), so allow 2% of the measured lines, a sample or two.
  EXPECT_LE(sl.total * 50, pl.total + nl.total + tl.total) << "the sleeping line took CPU";

  // Shares between the three CPU lines within 5 points of what the program measured itself.
  double t_py = truth["python"], t_nat = truth["native"], t_thr = truth["thread"];
  double truth_sum = t_py + t_nat + t_thr, prof_sum = pl.total + nl.total + tl.total;
  EXPECT_NEAR(100.0 * pl.total / prof_sum, 100.0 * t_py / truth_sum, 5) << "PY-LINE share";
  EXPECT_NEAR(100.0 * nl.total / prof_sum, 100.0 * t_nat / truth_sum, 5) << "NATIVE-LINE share";
  EXPECT_NEAR(100.0 * tl.total / prof_sum, 100.0 * t_thr / truth_sum, 5) << "THREAD-LINE share";

  // The thread's line is on one thread, not the main one (tid == pid); the main thread's lines are
  // on the main thread.
  std::map<uint32_t, int64_t> thread_line_by_thread, py_line_by_thread;
  for (auto& sv : p.stack_values) {
    for (uint32_t f : p.stacks[sv.stack].frames) {
      const auto& fr = p.frames[f];
      if (fr.kind != profile::FrameKind::kPython || p.str(fr.file) != kFixture) continue;
      if (fr.line == thread_line) thread_line_by_thread[sv.thread] += sv.values[cpu(p)];
      if (fr.line == py_line) py_line_by_thread[sv.thread] += sv.values[cpu(p)];
      if (fr.line == thread_line || fr.line == py_line) break;
    }
  }
  ASSERT_EQ(thread_line_by_thread.size(), 1u);
  ASSERT_EQ(py_line_by_thread.size(), 1u);
  const auto& worker = p.threads[thread_line_by_thread.begin()->first];
  const auto& main_thread = p.threads[py_line_by_thread.begin()->first];
  EXPECT_NE(worker.tid, p.processes[worker.process].pid) << "the worker's line is on the main thread";
  EXPECT_EQ(main_thread.tid, p.processes[main_thread.process].pid) << "the main thread's line is on another thread";

  // Merging Python frames into native stacks failed on fewer than 1% of samples.
  int64_t py_samples = counter_sum(p, "python_samples"), failures = counter_sum(p, "python_merge_failures");
  EXPECT_GT(py_samples, 50);
  EXPECT_LE(failures * 100, py_samples) << failures << " merge failures of " << py_samples;

  // The GIL is recorded: the Python lines hold it, hashlib and BLAS release it while they run.
  int64_t gil = counter_sum(p, "python_gil_held");
  EXPECT_GT(gil, 0);
  EXPECT_LT(gil, py_samples);
}


INSTANTIATE_TEST_SUITE_P(Interpreters, PythonSplit, ::testing::ValuesIn(supported_interpreters()),
                         [](const ::testing::TestParamInfo<Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonSplit);

// The seven interpreters the issue names: CPython 3.8-3.13 (pyenv's builds on the project's
// machines, or any other install found on PATH) and Debian's static /usr/bin/python3. Each one
// found is profiled once with a line of pure Python, which must come out as Python frames with
// interpreter time; one not found is said by name and skipped (so are the tests that run on every
// interpreter: they have no instance for it).
struct ExpectedInterpreter {
  const char* label;  // test-name-safe
  int minor;
  bool system;  // Debian's /usr/bin/python3
};
class ExpectedPython : public ::testing::TestWithParam<ExpectedInterpreter> {};

TEST_P(ExpectedPython, IsFoundAndProfiled) {
  const ExpectedInterpreter& want = GetParam();
  const Interpreter* py = nullptr;
  std::string found;
  for (auto& p : interpreters()) {
    found += " " + p.path + " (" + p.version + ")";
    const bool system = p.path.rfind("/usr/bin/", 0) == 0;
    if (!py && p.major == 3 && p.minor == want.minor && system == want.system) py = &p;
  }
  if (!py)
    GTEST_SKIP() << "CPython 3." << want.minor << (want.system ? " at /usr/bin/python3" : "")
                 << " not found (looked in $MLPROF_TEST_PYTHONS, else pyenv's versions, /usr/bin and PATH; found:"
                 << found << "): skipped here and in every per-interpreter test";
  const std::string script = scratch() + "/burn.py";
  {
    std::ofstream f(script);
    f << "import time\nt = time.process_time()\nn = 0\nwhile time.process_time() - t < 0.5:\n"
         "    n += sum(i * i for i in range(1000))  # BURN\n";
  }
  Profiled r = profile_run({py->path, script}, {"--no-memory"});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  const int64_t at_line = line_self(r.profile, "burn.py", 5);
  EXPECT_GT(at_line * 2, total_cpu(r.profile)) << py->path << ": the Python line has " << at_line << " of "
                                               << total_cpu(r.profile) << " ns of CPU\n" << r.result.err;
  const uint32_t interp = r.profile.metric("cpu-interpreter");
  ASSERT_NE(interp, profile::kNone);
  int64_t interp_total = 0;
  for (auto& sv : r.profile.stack_values) interp_total += sv.values.at(interp);
  EXPECT_GT(interp_total * 2, total_cpu(r.profile)) << "interpreter time";
}

INSTANTIATE_TEST_SUITE_P(Interpreters, ExpectedPython,
                         ::testing::Values(ExpectedInterpreter{"cpython3_8", 8, false}, ExpectedInterpreter{"cpython3_9", 9, false},
                                           ExpectedInterpreter{"cpython3_10", 10, false},
                                           ExpectedInterpreter{"cpython3_11", 11, false},
                                           ExpectedInterpreter{"cpython3_12", 12, false},
                                           ExpectedInterpreter{"cpython3_13", 13, false},
                                           ExpectedInterpreter{"debian_python3_11", 11, true}),
                         [](const ::testing::TestParamInfo<ExpectedInterpreter>& i) { return std::string(i.param.label); });

TEST(PythonInterpreters, UnsupportedVersionIsSaidOnceAndNativeProfilingGoesOn) {
  const Interpreter* old = nullptr;
  for (auto& p : interpreters())
    if (p.major == 3 && p.minor < 8) old = &p;
  if (!old) GTEST_SKIP() << "no CPython older than 3.8 installed to check the message with";
  std::string dir = scratch();
  RunResult r = run({MLPROF_RUN, "-o", dir + "/old.mlprof", "--no-html", "--", old->path, "-c",
                     "s = 0\nfor i in range(3000000): s += i\nprint(s)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.err);
  int said = 0;
  for (std::string l; std::getline(lines, l);) said += l.rfind("mlprof: CPython " + std::to_string(old->major) + "." + std::to_string(old->minor), 0) == 0;
  EXPECT_EQ(said, 1) << r.err;
  auto prof = profile::read_profile(dir + "/old.mlprof");
  ASSERT_TRUE(prof) << prof.error();
  EXPECT_GT(counter_sum(*prof, "samples"), 0);
  bool python_frame = false;
  for (auto& f : prof->frames) python_frame |= f.kind == profile::FrameKind::kPython;
  EXPECT_FALSE(python_frame);
  EXPECT_GT(function_total(*prof, "main"), 0);  // the native stack is there
}

}  // namespace

namespace {

// A thread-per-request Python server's handler threads each use a few ms of CPU, less than one
// sampling period: tests/fixtures/python/short_threads.py runs 600 such threads, then the main
// thread as long, each measuring itself with time.thread_time(). Both functions come out near
// their measured CPU (before the random first expiry, the short threads had no samples at all):
// ~150 samples on the short threads, so +-35% is over 3.5 standard deviations.
TEST(PythonThreads, ThreadsShorterThanASamplingPeriodAreCounted) {
  const Interpreter* py = nullptr;
  for (auto& i : interpreters())
    if (i.path == "/usr/bin/python3" || (!py && i.major == 3 && i.minor >= 8 && i.minor <= 13)) py = &i;
  if (!py) GTEST_SKIP() << "no CPython 3.8-3.13 found";
  const std::string script = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/short_threads.py";
  Profiled run = profile_run({py->path, script, "600", "60000"}, {"--no-memory"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  double short_s = 0, long_s = 0;
  const auto pos = run.result.out.rfind("short_threads done ");
  ASSERT_NE(pos, std::string::npos) << run.result.out;
  ASSERT_EQ(sscanf(run.result.out.c_str() + pos, "short_threads done short_cpu_s %lf long_cpu_s %lf", &short_s, &long_s), 2);
  if (counter_sum(p, "perf_threads") == 0)
    GTEST_SKIP() << "perf events not permitted here: short threads stay on POSIX timers (CpuAttribution.PosixTimersStartAtARandomPhase)";
  const double shorts = function_self(p, "short_work") / 1e6, longs = function_self(p, "long_work") / 1e6;
  EXPECT_NEAR(shorts / short_s, 1.0, 0.35) << "short threads: " << shorts << " s sampled, " << short_s << " s measured";
  EXPECT_NEAR(longs / long_s, 1.0, 0.3) << "main thread: " << longs << " s sampled, " << long_s << " s measured";
}

}  // namespace
