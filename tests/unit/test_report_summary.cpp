#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "profile/aggregate.h"
#include "report/report.h"
#include "report_fixture.h"

using mlprof::profile::Profile;
using mlprof::report::SummaryOptions;
using mlprof::report::text_summary;
using mlprof::report_test::make_report_profile;

namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The lines of the section whose heading starts with `heading`, up to the next blank line.
std::vector<std::string> section(const std::string& text, const std::string& heading) {
  std::vector<std::string> out;
  bool in = false;
  for (const auto& line : split_lines(text)) {
    if (!in && line.rfind(heading, 0) == 0) { in = true; continue; }
    if (in && line.empty()) break;
    if (in) out.push_back(line);
  }
  return out;
}

bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST(ReportSummary, HeaderFacts) {
  std::string s = text_summary(make_report_profile(), {});
  EXPECT_TRUE(has(s, "python3 train.py --epochs 3")) << s;
  EXPECT_TRUE(has(s, "2.50 s")) << s;
  EXPECT_TRUE(has(s, "Processes:  2\n")) << s;
  EXPECT_TRUE(has(s, "Threads:    3\n")) << s;
  EXPECT_TRUE(has(s, "100 taken, 4 dropped (ring full 2, no thread 1, transport 1; 3.8% of all)")) << s;
  EXPECT_TRUE(has(s, "99 Hz requested, timer thread-cpu-timer")) << s;
  EXPECT_TRUE(has(s, "100.0 ms cpu")) << s;  // grand total
}

// Thread-pool workers' samples charged to the starting lines: counted over processes, said only
// when a process had pool workers.
TEST(ReportSummary, ThreadPoolWorkersChargedAreCounted) {
  auto p = make_report_profile();
  EXPECT_FALSE(has(text_summary(p, {}), "Thread pools:"));
  p.processes.at(0).counters["pool_worker_samples"] = 30;
  p.processes.at(0).counters["pool_worker_samples_charged"] = 27;
  p.processes.at(1).counters["pool_worker_samples"] = 10;
  p.processes.at(1).counters["pool_worker_samples_charged"] = 5;
  const std::string s = text_summary(p, {});
  EXPECT_TRUE(has(s, "Thread pools: 32 of 40 worker samples (80.0%) charged to the lines that started their work\n")) << s;
}

TEST(ReportSummary, Warnings) {
  std::string s = text_summary(make_report_profile(), {});
  auto w = section(s, "Warnings (2)");
  ASSERT_EQ(w.size(), 2u) << s;
  // A process's message first, the debug-info lines (one per library) last.
  EXPECT_TRUE(has(w[0], "[pid 200 worker] preload: perf_event_open failed")) << w[0];
  EXPECT_TRUE(has(w[1], "no debug info for /lib/libfoo.so"));
}

// Many "no debug info" lines (one per library of a PyTorch stack) are one line of basenames in the
// terminal; the other warnings stay as they are, first.
TEST(ReportSummary, ManyNoDebugInfoWarningsAreOneLine) {
  auto p = make_report_profile();
  for (int i = 0; i < 5; ++i)
    p.warnings.push_back(fmt::format("no debug info for /usr/lib/libm{}.so.1: functions only (install its -dbgsym package)", i));
  std::string s = text_summary(p, {});
  auto w = section(s, "Warnings (7)");
  ASSERT_EQ(w.size(), 2u) << s;
  EXPECT_TRUE(has(w[0], "[pid 200 worker] preload: perf_event_open failed")) << w[0];
  EXPECT_TRUE(has(w[1], "no debug info for 6 modules, functions only")) << w[1];
  EXPECT_TRUE(has(w[1], "libfoo.so, libm0.so.1, libm1.so.1, libm2.so.1, libm3.so.1, libm4.so.1")) << w[1];
  EXPECT_FALSE(has(s, "/usr/lib/libm0.so.1")) << s;
}

TEST(ReportSummary, TopFunctionsWithPercentages) {
  std::string s = text_summary(make_report_profile(), {});
  auto f = section(s, "Top functions by self cpu (6 functions)");
  ASSERT_EQ(f.size(), 7u) << s;  // column header + 6 rows
  EXPECT_TRUE(has(f[0], "self") && has(f[0], "total%") && has(f[0], "function")) << f[0];
  // add_one: self 50 ms = 50% of 100 ms, total 50%.
  EXPECT_TRUE(has(f[1], "add_one")) << s;
  EXPECT_TRUE(has(f[1], "50.0 ms  50.0%  50.0 ms   50.0%")) << f[1];
  EXPECT_TRUE(has(f[1], "/src/math.h:5")) << f[1];
  EXPECT_TRUE(has(f[2], "[unknown]") && has(f[2], "libfoo.so") && has(f[2], "25.0%")) << f[2];
  // compute and memcpy tie on self (10%); compute's larger total (70%) puts it first.
  EXPECT_TRUE(has(f[3], "compute") && has(f[3], "10.0%") && has(f[3], "70.0%")) << f[3];
  EXPECT_TRUE(has(f[4], "memcpy") && has(f[4], "libc.so.6")) << f[4];
  EXPECT_TRUE(has(f[6], "main") && has(f[6], "0.0%") && has(f[6], "90.0%")) << f[6];
  // Columns are aligned: every row has the function column at the same offset.
  size_t col = f[0].find("function");
  for (size_t i = 1; i < f.size(); ++i) EXPECT_EQ(f[i].find_first_not_of(' ', col - 1), col) << f[i];
}

TEST(ReportSummary, TopLimitsRows) {
  SummaryOptions o;
  o.top = 2;
  std::string s = text_summary(make_report_profile(), o);
  auto f = section(s, "Top functions by self cpu");
  ASSERT_EQ(f.size(), 4u) << s;  // header, 2 rows, "... and 4 more"
  EXPECT_TRUE(has(f[3], "and 4 more functions")) << f[3];
}

TEST(ReportSummary, TopLines) {
  std::string s = text_summary(make_report_profile(), {});
  auto l = section(s, "Top source lines by self cpu");
  ASSERT_EQ(l.size(), 4u) << s;
  EXPECT_TRUE(has(l[1], "/src/math.h:5") && has(l[1], "add_one") && has(l[1], "50.0%")) << l[1];
  EXPECT_TRUE(has(l[2], "/src/compute.cpp:20") && has(l[2], "70.0%")) << l[2];
}

TEST(ReportSummary, ProcessesAndThreads) {
  std::string s = text_summary(make_report_profile(), {});
  auto p = section(s, "Processes (2)");
  ASSERT_EQ(p.size(), 3u) << s;
  EXPECT_TRUE(has(p[1], "100") && has(p[1], "exit") && has(p[1], "90") && has(p[1], "70.0 ms") &&
              has(p[1], "python3 train.py --epochs 3")) << p[1];
  EXPECT_TRUE(has(p[2], "200") && has(p[2], "truncated") && has(p[2], "137") &&
              has(p[2], "30.0 ms") && has(p[2], "worker --fast")) << p[2];
  auto t = section(s, "Threads (3)");
  ASSERT_EQ(t.size(), 4u) << s;
  // Ordered by cpu: python3 50 ms, worker 30 ms, loader 20 ms; samples: sample events (signals,
  // as the processes' count), not their weights (the loader's one event weighs two ticks).
  EXPECT_TRUE(has(t[1], "python3") && has(t[1], "50.0 ms") && has(t[1], "50.0%")) << t[1];
  EXPECT_TRUE(has(t[2], "200") && has(t[2], "30.0 ms")) << t[2];
  EXPECT_TRUE(has(t[3], "loader") && has(t[3], "20.0 ms") && has(t[3], " 1 ")) << t[3];
}

TEST(ReportSummary, OtherMetricAndUnits) {
  SummaryOptions o;
  o.metric = "alloc";
  std::string s = text_summary(make_report_profile(), o);
  auto f = section(s, "Top functions by self alloc");
  ASSERT_GE(f.size(), 2u) << s;
  EXPECT_TRUE(has(f[1], "memcpy") && has(f[1], "4.0 KiB") && has(f[1], "100.0%")) << f[1];
  o.metric = "nope";
  EXPECT_TRUE(has(text_summary(make_report_profile(), o), "Unknown metric 'nope'"));
}

TEST(ReportSummary, ColorOnlyWhenAsked) {
  Profile p = make_report_profile();
  EXPECT_FALSE(has(text_summary(p, {}), "\x1b"));
  SummaryOptions o;
  o.color = true;
  EXPECT_TRUE(has(text_summary(p, o), "\x1b[1m"));
}

TEST(ReportSummary, ProgramTextCannotInjectTerminalEscapes) {
  Profile p = make_report_profile();
  p.threads[0].name = "evil\x1b]0;title\x07";
  p.strings[p.functions[2].function] = "add\x1b[31mone";
  p.processes[0].argv[0] = "py\xc2\x9b" "2J";  // C1 CSI
  std::string s = text_summary(p, {});
  EXPECT_FALSE(has(s, "\x1b")) << s;
  EXPECT_FALSE(has(s, "\x07"));
  EXPECT_FALSE(has(s, "\xc2\x9b"));
  EXPECT_TRUE(has(s, "add?[31mone"));
  EXPECT_TRUE(has(s, "evil?]0:title?") || has(s, "evil?]0;title?")) << s;
}

TEST(ReportSummary, EmptyProfile) {
  Profile p;
  std::string s = text_summary(p, {});
  EXPECT_TRUE(has(s, "No metrics in this profile.")) << s;
  EXPECT_TRUE(has(s, "0 taken, 0 dropped")) << s;
}

// Python lines: the section shows each line's interpreter / native / system shares of its self
// time and the line's source text read from disk.
TEST(ReportSummaryPython, PythonLinesShowTheSplitAndTheSource) {
  using namespace mlprof::profile;
  std::string path = ::testing::TempDir() + "/mlprof_summary_src.py";
  {
    std::ofstream f(path);
    f << "import numpy\n"
         "x = sum(i * i for i in range(10))   \n"  // line 2, trailing blanks are trimmed
         "y = numpy.dot(a, b)\n";                  // line 3
  }
  Profile p;
  p.metrics = {{"cpu", "us"}, {"cpu-interpreter", "us"}, {"cpu-native", "us"}, {"cpu-system", "us"}};
  p.strings = {"", path, "<module>", "libpython.so", "PyNumber_Add", "dgemm_", "libblas.so"};
  p.frames = {Frame{4, 0, 0, 3, 0, FrameKind::kNative, false},   // 0 interpreter leaf
              Frame{2, 1, 2, 0, 0, FrameKind::kPython, false},   // 1 line 2
              Frame{5, 0, 0, 6, 0, FrameKind::kNative, false},   // 2 BLAS leaf
              Frame{2, 1, 3, 0, 0, FrameKind::kPython, false}};  // 3 line 3
  p.stacks = {{{0, 1}, false}, {{2, 3}, false}};
  p.processes = {Process{}};
  p.threads = {{0, 1, "main", 0, 0}};
  p.stack_values = {{0, 0, {300, 300, 0, 0}}, {0, 1, {700, 0, 600, 100}}};
  compute_aggregates(p);
  std::string out = mlprof::report::text_summary(p, {});
  size_t sec = out.find("Top Python lines by self cpu:");
  ASSERT_NE(sec, std::string::npos) << out;
  std::string section = out.substr(sec, out.find("Top source lines") - sec);
  // line 3: 700 us, 0% interpreter, 85.7% native, 14.3% system; line 2: all interpreter.
  EXPECT_NE(section.find("0.0%   85.7%   14.3%  " + path + ":3  main tid 1 pid 0  y = numpy.dot(a, b)"),
            std::string::npos) << section;
  EXPECT_NE(section.find("100.0%    0.0%    0.0%  " + path + ":2  main tid 1 pid 0  x = sum(i * i for i in range(10))\n"),
            std::string::npos) << section;
  EXPECT_LT(section.find(":3 "), section.find(":2 "));  // hottest first
  // The functions table counts line 3's 700 us as <module>'s self and as dgemm_'s: it says so.
  std::string funcs = out.substr(0, sec);
  EXPECT_NE(funcs.find("dgemm_"), std::string::npos) << funcs;
  EXPECT_NE(funcs.find("self% can add up to more than 100%"), std::string::npos) << funcs;
  // Native-only profiles have no such section, and no such note.
  for (auto& f : p.frames) f.kind = FrameKind::kNative;
  std::string native = mlprof::report::text_summary(p, {});
  EXPECT_EQ(native.find("Top Python lines"), std::string::npos);
  EXPECT_EQ(native.find("more than 100%"), std::string::npos) << native;
  unlink(path.c_str());
}
