// The HTML report's data builders (report/html_flame.h, html_source.h, html_hints.h,
// html_timeline.h) against profiles built by hand, whose answers are known by construction.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "profile/aggregate.h"
#include "report/html.h"
#include "report/html_flame.h"
#include "report/html_hints.h"
#include "report/html_serving.h"
#include "report/html_source.h"
#include "report/html_timeline.h"
#include "report/source.h"
#include "report/report.h"
#include "report_fixture.h"

using mlprof::profile::Frame;
using mlprof::profile::FrameKind;
using mlprof::profile::Profile;
using nlohmann::json;
namespace report = mlprof::report;

using mlprof::report_test::intern;

namespace {

// Children of `node` in a flame tree: frame name -> value of metric m.
std::map<std::string, int64_t> children(const json& flame, const json& tree, int node, int m = 0) {
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < tree["parent"].size(); ++i) {
    if (tree["parent"][i] != node) continue;
    int f = tree["frame"][i];
    std::string name = f < 0 ? "[rare]" : flame["frames"]["name"][f].get<std::string>();
    out[name] += tree["values"][m][i].get<int64_t>();
  }
  return out;
}

int child_index(const json& flame, const json& tree, int node, const std::string& name) {
  for (size_t i = 0; i < tree["parent"].size(); ++i) {
    int f = tree["frame"][i];
    if (tree["parent"][i] == node && f >= 0 && flame["frames"]["name"][f] == name) return static_cast<int>(i);
  }
  return -1;
}

// A profile with one Python thread: `rows` of (function, line, cpu us) single-frame stacks under
// a common "<module>" frame at line 1 of `file`.
Profile python_profile(const std::string& file,
                       const std::vector<std::tuple<std::string, uint32_t, int64_t>>& rows) {
  Profile p;
  p.metrics = {{"cpu", "us"}};
  p.processes.resize(1);
  p.processes[0].pid = 10;
  p.threads = {{0, 10, "main", 0, 0}};
  uint32_t f_file = intern(p, file);
  p.frames.push_back({intern(p, "<module>"), f_file, 1, 0, 0, FrameKind::kPython, false});
  for (auto& [fn, line, us] : rows) {
    p.frames.push_back({intern(p, fn), f_file, line, 0, 0, FrameKind::kPython, false});
    p.stacks.push_back({{static_cast<uint32_t>(p.frames.size() - 1), 0}, false});
    p.stack_values.push_back({0, static_cast<uint32_t>(p.stacks.size() - 1), {us}});
  }
  mlprof::profile::compute_aggregates(p);
  return p;
}

}  // namespace

TEST(HtmlFlame, TreeValuesAreInclusiveSumsOfTheStacks) {
  Profile p = mlprof::report_test::make_report_profile();
  json f = report::flame_data(p);
  const json& all = f["trees"][0];
  EXPECT_EQ(all["id"], "all");
  EXPECT_EQ(all["parent"][0], -1);
  EXPECT_EQ(all["values"][0][0], 100000);  // root = grand total
  auto top = children(f, all, 0);
  EXPECT_EQ(top["main"], 90000);
  EXPECT_EQ(top["[truncated stack]"], 10000);
  int main_node = child_index(f, all, 0, "main");
  ASSERT_GE(main_node, 0);
  auto under_main = children(f, all, main_node);
  EXPECT_EQ(under_main["compute"], 60000);
  EXPECT_EQ(under_main["[unknown] libfoo.so"], 25000);
  int compute = child_index(f, all, main_node, "compute");
  EXPECT_EQ(children(f, all, compute)["add_one"], 50000);
  EXPECT_EQ(children(f, all, compute)["memcpy"], 10000);
  // Second metric (alloc bytes): only the memcpy stack.
  EXPECT_EQ(all["values"][1][0], 4096);
  EXPECT_TRUE(all["rare"].empty());
  EXPECT_EQ(all["trimmed"]["nodes"], 0);
  // Two processes and three threads: per-process and per-thread trees whose roots are their totals.
  int64_t process_sum = 0, thread_sum = 0;
  size_t processes = 0, threads = 0;
  for (const auto& t : f["trees"]) {
    if (t["scope"] == "process") {
      ++processes;
      process_sum += t["values"][0][0].get<int64_t>();
    }
    if (t["scope"] == "thread") {
      ++threads;
      thread_sum += t["values"][0][0].get<int64_t>();
    }
  }
  EXPECT_EQ(processes, 2u);
  EXPECT_EQ(threads, 3u);
  EXPECT_EQ(process_sum, 100000);
  EXPECT_EQ(thread_sum, 100000);
}

TEST(HtmlFlame, PythonFramesSplitByLineNativeFramesDoNot) {
  Profile p = python_profile("/x/app.py", {{"work", 5, 100}, {"work", 7, 50}});
  // Two native frames of one function at different lines.
  uint32_t fn = intern(p, "blas_kernel"), so = intern(p, "/usr/lib/libblas.so"), src = intern(p, "/src/k.c");
  p.frames.push_back({fn, src, 11, so, 0x10, FrameKind::kNative, false});
  p.frames.push_back({fn, src, 12, so, 0x20, FrameKind::kNative, false});
  uint32_t n = static_cast<uint32_t>(p.frames.size());
  p.stacks.push_back({{n - 2, 0}, false});
  p.stacks.push_back({{n - 1, 0}, false});
  p.stack_values.push_back({0, static_cast<uint32_t>(p.stacks.size() - 2), {30}});
  p.stack_values.push_back({0, static_cast<uint32_t>(p.stacks.size() - 1), {20}});
  json f = report::flame_data(p);
  const json& all = f["trees"][0];
  int module = child_index(f, all, 0, "<module>");
  ASSERT_GE(module, 0);
  size_t work_nodes = 0, blas_nodes = 0;
  for (size_t i = 0; i < all["parent"].size(); ++i) {
    if (all["parent"][i] != module) continue;
    std::string name = f["frames"]["name"][all["frame"][i].get<int>()];
    work_nodes += name == "work";
    if (name == "blas_kernel") {
      ++blas_nodes;
      EXPECT_EQ(all["values"][0][i], 50);
    }
  }
  EXPECT_EQ(work_nodes, 2u);
  EXPECT_EQ(blas_nodes, 1u);
}

TEST(HtmlFlame, RareStacksAreSummarizedNotDropped) {
  // One heavy stack and 500 distinct light ones under the same root function.
  Profile p;
  p.metrics = {{"cpu", "us"}, {"alloc-bytes", "bytes"}};
  p.processes.resize(1);
  p.threads = {{0, 1, "t", 0, 0}};
  uint32_t root = intern(p, "root");
  p.frames.push_back({root, 0, 0, 0, 0, FrameKind::kNative, false});
  p.frames.push_back({intern(p, "heavy"), 0, 0, 0, 0, FrameKind::kNative, false});
  p.stacks.push_back({{1, 0}, false});
  p.stack_values.push_back({0, 0, {1000000, 0}});
  for (int i = 0; i < 500; ++i) {
    p.frames.push_back({intern(p, "light" + std::to_string(i)), 0, 0, 0, 0, FrameKind::kNative, false});
    p.stacks.push_back({{static_cast<uint32_t>(p.frames.size() - 1), 0}, false});
    p.stack_values.push_back({0, static_cast<uint32_t>(p.stacks.size() - 1), {10, i == 7 ? 5000 : 0}});
  }
  report::FlameOptions opt;
  opt.max_nodes = 50;
  json f = report::flame_data(p, opt);
  const json& all = f["trees"][0];
  ASSERT_EQ(all["rare"].size(), 1u);
  int rare_node = all["rare"][0][0];
  // 50 kept + 1 rare node; the heaviest light stack by alloc-bytes (light7) is among the kept.
  EXPECT_EQ(all["parent"].size(), 51u);
  EXPECT_GE(child_index(f, all, 1, "light7"), 0);
  EXPECT_GE(child_index(f, all, 1, "heavy"), 0);
  // Nothing lost: root's children add up to the root, per metric.
  for (int m = 0; m < 2; ++m) {
    auto c = children(f, all, 1, m);
    int64_t sum = 0;
    for (auto& [name, v] : c) sum += v;
    EXPECT_EQ(sum, all["values"][m][1]) << m;
  }
  const int kept_light = static_cast<int>(children(f, all, 1).size()) - 2;  // minus heavy and [rare]
  EXPECT_EQ(all["rare"][0][1], 500 - kept_light);                           // stacks it stands for
  EXPECT_EQ(all["values"][0][rare_node], 10 * (500 - kept_light));
  EXPECT_EQ(all["trimmed"]["stacks"], 500 - kept_light);
  EXPECT_EQ(all["trimmed"]["nodes"], 500 - kept_light);
}

TEST(HtmlSource, HotRegionsCarryTheirTextOnly) {
  std::string path = ::testing::TempDir() + "/mlprof_html_source.py";
  {
    std::ofstream f(path);
    for (int i = 1; i <= 40; ++i)
      f << (i == 10 ? "    hot_line()  # ten" : "line" + std::to_string(i)) << "\n";
  }
  Profile p = python_profile(path, {{"work", 10, 900}, {"work", 30, 100}, {"other", 38, 0}});
  report::SourceOptions opt;
  opt.context = 2;
  json s = report::source_data(p, opt);
  ASSERT_EQ(s["files"].size(), 1u);
  const json& f = s["files"][0];
  EXPECT_EQ(f["path"], path);
  EXPECT_TRUE(f["readable"]);
  EXPECT_EQ(f["total"][0], 1000);
  EXPECT_EQ(f["line"], json({10, 30}));
  EXPECT_EQ(f["hot"], json({1, 1}));
  EXPECT_EQ(f["self"][0][0], 900);
  ASSERT_EQ(f["regions"].size(), 2u);
  EXPECT_EQ(f["regions"][0]["start"], 8);
  EXPECT_EQ(f["regions"][0]["text"].size(), 5u);
  EXPECT_EQ(f["regions"][0]["text"][2], "    hot_line()  # ten");  // indentation kept
  EXPECT_EQ(f["regions"][1]["start"], 28);
  // Nothing outside the regions is embedded.
  EXPECT_EQ(json(f["regions"]).dump().find("line1\""), std::string::npos);
  unlink(path.c_str());

  Profile q = python_profile("<generated>", {{"gen", 3, 10}});
  json t = report::source_data(q);
  ASSERT_EQ(t["files"].size(), 1u);
  EXPECT_FALSE(t["files"][0]["readable"]);
  EXPECT_TRUE(t["files"][0]["regions"].empty());
}

// Python 3.8 names a script started by a relative path relatively ("app.py"): its text is read
// under the run's working directory, in the HTML source view and the terminal summary alike.
TEST(HtmlSource, RelativeFilesAreReadUnderTheRunsWorkingDirectory) {
  const std::string dir = ::testing::TempDir() + "/mlprof_rel_src";
  mkdir(dir.c_str(), 0700);
  {
    std::ofstream f(dir + "/app.py");
    for (int i = 1; i <= 12; ++i) f << (i == 5 ? "total = sum(range(1000))" : "pass") << "\n";
  }
  Profile p = python_profile("app.py", {{"work", 5, 900}});
  json without = report::source_data(p);
  ASSERT_EQ(without["files"].size(), 1u);
  EXPECT_FALSE(without["files"][0]["readable"]);  // no working directory recorded: not guessed
  p.run.cwd = dir;
  json with = report::source_data(p);
  ASSERT_EQ(with["files"].size(), 1u);
  EXPECT_TRUE(with["files"][0]["readable"]);
  EXPECT_EQ(with["files"][0]["path"], "app.py");  // shown as the profile names it
  EXPECT_NE(json(with["files"][0]["regions"]).dump().find("total = sum(range(1000))"), std::string::npos);
  report::SourceCache cache(dir);
  EXPECT_EQ(cache.line("app.py", 5), "total = sum(range(1000))");
  EXPECT_EQ(report::SourceCache().line("app.py", 5), "");
  EXPECT_EQ(report::source_path("<frozen importlib._bootstrap>", dir), "");
  unlink((dir + "/app.py").c_str());
  rmdir(dir.c_str());
}

TEST(HtmlHints, RuntimeModulesAreTold) {
  // The modules whose lines the hints pass over: the C runtime and the interpreter, not the program.
  Profile p = python_profile("/x/app.py", {{"work", 12, 700}});
  for (const char* m : {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/usr/bin/python3.11",
                        "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0", "/usr/lib/libstdc++.so.6"}) {
    const uint32_t fn = intern(p, std::string("f_") + m), file = intern(p, std::string("src_") + m);
    p.functions.push_back({fn, intern(p, m), file, 1, {}, {}});
    p.lines.push_back({file, 1, fn, {900}, {900}});
  }
  for (const char* m : {"/srv/app/python_server", "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.so",
                        "/opt/app/libcustom.so"}) {
    const uint32_t fn = intern(p, std::string("f_") + m), file = intern(p, std::string("src_") + m);
    p.functions.push_back({fn, intern(p, m), file, 1, {}, {}});
    p.lines.push_back({file, 1, fn, {800}, {800}});
  }
  auto hs = report::hints(p);
  std::vector<std::string> files;
  for (const auto& h : hs)
    if (h.kind == "hot-line") files.push_back(h.file);
  // The five runtime lines (900 each) are passed over; the program's three (800, in any order) are
  // the hints.
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"src_/opt/app/libcustom.so", "src_/srv/app/python_server",
                                             "src_/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.so"}));
}

// No line holds 5%: the hottest function is named, but not an unnamed one or one of the runtime's
// (the demo's serving report said "Function [unknown] uses 29% of the CPU time itself": Debian's
// python3.11 without its symbols).
TEST(HtmlHints, TheHotFunctionIsTheProgramsAndNamed) {
  Profile p = python_profile("/x/app.py", {{"work", 12, 1000}});
  p.lines.clear();
  p.functions.clear();
  const uint32_t none = intern(p, "");
  p.functions.push_back({none, intern(p, "/usr/bin/python3.11"), none, 0, {400}, {400}});
  p.functions.push_back({intern(p, "__memmove_avx_unaligned_erms"), intern(p, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                         none, 0, {300}, {300}});
  p.functions.push_back({none, intern(p, "/srv/app/server"), none, 0, {250}, {250}});
  p.functions.push_back({intern(p, "score"), intern(p, "/srv/app/server"), intern(p, "score.cpp"), 40, {200}, {200}});
  auto hs = report::hints(p);
  ASSERT_FALSE(hs.empty());
  EXPECT_EQ(hs[0].kind, "hot-function");
  EXPECT_EQ(hs[0].function, "score");
  EXPECT_NE(hs[0].text.find("20%"), std::string::npos) << hs[0].text;
  // Below 5%: no function hint at all (not the next one down).
  p.functions.back().self = {40};
  for (const auto& h : report::hints(p)) EXPECT_NE(h.kind, "hot-function") << h.text;
}

TEST(HtmlHints, HottestLineFirstAndSystemTime) {
  Profile p = python_profile("/x/app.py", {{"work", 12, 700}, {"load", 30, 300}});
  auto hs = report::hints(p);
  ASSERT_GE(hs.size(), 2u);
  EXPECT_EQ(hs[0].kind, "hot-line");
  EXPECT_EQ(hs[0].file, "/x/app.py");
  EXPECT_EQ(hs[0].line, 12u);
  EXPECT_NE(hs[0].text.find("app.py:12"), std::string::npos) << hs[0].text;
  EXPECT_NE(hs[0].text.find("70%"), std::string::npos) << hs[0].text;
  EXPECT_EQ(hs[1].line, 30u);
  for (const auto& h : hs) EXPECT_NE(h.kind, "system-time");
  // Add a cpu-system metric holding 40% of cpu.
  p.metrics.push_back({"cpu-system", "us"});
  p.stack_values[0].values.push_back(400);
  p.stack_values[1].values.push_back(0);
  mlprof::profile::compute_aggregates(p);
  bool system = false;
  for (const auto& h : report::hints(p))
    system |= h.kind == "system-time" && h.text.find("40%") != std::string::npos;
  EXPECT_TRUE(system);
}

// A serving run whose start-up (an import line) outweighs the replay: the steady state's lines per
// request come first, the costliest with its share of the service's CPU per request (polled
// process-tree CPU over the window, interpolated), a second one only from 5% of it; the whole
// run's hot line follows, said to include the start-up.
TEST(HtmlHints, AServingRunLeadsWithTheSteadyStatePerRequest) {
  Profile p = python_profile("/x/serve.py", {{"load_model", 5, 900'000}, {"handle", 40, 60'000}, {"parse", 41, 2'000}});
  auto& s = p.serving;
  s.present = true;
  s.window_requests = 100;
  s.window_start_ns = 2'000'000'000;
  s.window_end_ns = 3'000'000'000;
  // The tree used 0.5 ms of CPU per request in the window: 50 ms between 2 s and 3 s, polled at
  // 1.5 s and 3.5 s (100 ms of CPU over those 2 s, 1 ms before).
  s.resources = {{1'500'000'000, 1'000'000, 0, 1, 2}, {3'500'000'000, 101'000'000, 0, 1, 2}};
  const uint32_t file = intern(p, "/x/serve.py");
  s.lines = {{file, 41, intern(p, "parse"), 2'000, 2'000}, {file, 40, intern(p, "handle"), 20'000, 22'000},
             {file, 42, intern(p, "reply"), 1'000, 1'000}};
  auto hs = report::hints(p);
  ASSERT_GE(hs.size(), 3u);
  EXPECT_EQ(hs[0].kind, "serving-line");
  EXPECT_EQ(hs[0].line, 40u);
  EXPECT_EQ(hs[0].file, "/x/serve.py");
  EXPECT_NE(hs[0].text.find("0.200 ms of CPU per request (40% of the service's 0.50 ms)"), std::string::npos) << hs[0].text;
  EXPECT_EQ(hs[1].kind, "hot-line");  // parse: 0.02 ms, 4%: not a hint
  EXPECT_EQ(hs[1].line, 5u);
  EXPECT_NE(hs[1].text.find("start-up included"), std::string::npos) << hs[1].text;
  EXPECT_NE(hs[0].text.find(", the most of any line: start"), std::string::npos) << hs[0].text;
  // A line of the C runtime costs more (libc's futex wait, the service's threads handing the GIL
  // over): no code to change, so the hint passes over it and says so.
  const uint32_t futex_fn = intern(p, "__futex_abstimed_wait_common64"), futex_file = intern(p, "nptl/futex-internal.c");
  p.functions.push_back({futex_fn, intern(p, "/usr/lib/x86_64-linux-gnu/libc.so.6"), futex_file, 57, {}, {}});
  s.lines.push_back({futex_file, 57, futex_fn, 30'000, 30'000});
  hs = report::hints(p);
  ASSERT_FALSE(hs.empty());
  EXPECT_EQ(hs[0].line, 40u) << hs[0].text;
  EXPECT_NE(hs[0].text.find("the most of any line outside the C runtime and the interpreter: start"), std::string::npos)
      << hs[0].text;
  for (const auto& h : hs) EXPECT_NE(h.file, "nptl/futex-internal.c") << h.text;
  EXPECT_EQ(hs[0].text.find("handing the GIL"), std::string::npos) << hs[0].text;
  // When the advice names the GIL's handoffs, the first hint points there.
  s.advice = {"19% of the steady-state CPU (0.18 ms per request) goes to handing the GIL between threads (...)."};
  hs = report::hints(p);
  EXPECT_EQ(hs[0].line, 40u) << hs[0].text;
  EXPECT_NE(hs[0].text.find("The C runtime's lines above it are the service's threads handing the GIL over: see the "
                            "advice in the Serving section."),
            std::string::npos)
      << hs[0].text;
  s.advice.clear();
  s.lines.pop_back();
  // Two lines with the same CPU (a short window's few samples): neither is called the most.
  s.lines[0].self_us = 20'000;
  hs = report::hints(p);
  EXPECT_NE(hs[0].text.find("the most of any line, tied with others"), std::string::npos) << hs[0].text;
  // Without a steady window (the service never became ready): the whole run's hints as before.
  s.window_requests = 0;
  hs = report::hints(p);
  ASSERT_FALSE(hs.empty());
  EXPECT_EQ(hs[0].kind, "hot-line");
  EXPECT_EQ(hs[0].text.find("start-up included"), std::string::npos) << hs[0].text;
}

// `threads` threads each busy all the time for 1 s at 100 Hz (weight 1 = 10 ms); the first `pool` of
// them an OpenMP team's workers (their stacks start at libgomp's thread routine).
Profile busy_threads(int threads, const std::string& cpus, int pool = 0) {
  Profile p;
  p.metrics = {{"cpu", "us"}};
  p.run.start_ns = 1'000'000'000;
  p.run.end_ns = 2'000'000'000;
  p.run.rate_hz = 100;
  if (!cpus.empty()) p.run.extra["cpus"] = cpus;
  p.processes.resize(1);
  p.frames.push_back({intern(p, "spin"), 0, 0, 0, 0, FrameKind::kNative, false});
  p.stacks.push_back({{0}, false});
  p.frames.push_back({intern(p, "gomp_thread_start"), 0, 0, intern(p, "/usr/lib/libgomp.so.1"), 0, FrameKind::kNative, false});
  p.frames.push_back({intern(p, "start_thread"), 0, 0, intern(p, "/usr/lib/libc.so.6"), 0, FrameKind::kNative, false});
  p.stacks.push_back({{0, 1, 2}, false});
  for (int t = 0; t < threads; ++t) {
    p.threads.push_back({0, static_cast<uint32_t>(100 + t), "omp", 0, 0});
    p.stack_values.push_back({static_cast<uint32_t>(t), t < pool ? 1u : 0u, {1'000'000}});
  }
  for (int k = 0; k < 100; ++k)
    for (int t = 0; t < threads; ++t)
      p.samples.push_back({static_cast<uint32_t>(t), t < pool ? 1u : 0u, p.run.start_ns + k * 10'000'000 + t, 1});
  mlprof::profile::compute_aggregates(p);
  return p;
}

TEST(HtmlTimeline, CoresUsedFromSamples) {
  Profile p = busy_threads(3, "8");
  report::CpuUsage u = report::cpu_usage(p);
  EXPECT_EQ(u.duration_ns, 1'000'000'000);
  EXPECT_NEAR(u.average_cores, 3.0, 1e-9);
  EXPECT_NEAR(u.peak_cores, 3.0, 0.01);
  EXPECT_EQ(u.peak_busy_threads, 3u);
  EXPECT_EQ(u.cpus, 8u);
  json t = report::timeline_data(p);
  ASSERT_EQ(t["cpu"].size(), 1u);  // one process: only "all"
  const json& pts = t["cpu"][0]["points"];
  ASSERT_GE(pts.size(), 10u);
  EXPECT_LE(pts.size(), 400u);
  double sum = 0;
  for (const auto& pt : pts) sum += pt[1].get<double>();
  EXPECT_NEAR(sum / pts.size(), 3.0, 0.05);
  ASSERT_EQ(t["strips"]["threads"].size(), 3u);
  for (const auto& s : t["strips"]["threads"])
    for (const auto& b : s["busy"]) EXPECT_GE(b.get<int>(), 90);
}

TEST(HtmlTimeline, MemoryDownsamplingKeepsThePeak) {
  Profile p;
  p.run.start_ns = 0;
  p.run.end_ns = 10'000'000'000;
  p.processes.resize(1);
  p.processes[0].pid = 5;
  mlprof::profile::ProcessMemory m;
  for (int i = 0; i < 5000; ++i) m.timeline.push_back({i * 2'000'000LL, i == 3333 ? 999'999 : 1000 + i, i});
  p.memory.push_back(m);
  // start_ns = 0 is "unknown": the span comes from the timeline.
  json t = report::timeline_data(p);
  ASSERT_EQ(t["memory"].size(), 1u);
  const json& rss = t["memory"][0]["rss"];
  EXPECT_LE(rss.size(), 800u);
  int64_t max = 0;
  for (const auto& pt : rss) max = std::max(max, pt[1].get<int64_t>());
  EXPECT_EQ(max, 999'999);
}

TEST(HtmlHints, MoreBusyThreadsThanCpus) {
  auto kinds = [](const Profile& p) {
    std::vector<std::string> k;
    for (const auto& h : report::hints(p)) k.push_back(h.kind);
    return k;
  };
  auto has = [](const std::vector<std::string>& v, const char* k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  EXPECT_TRUE(has(kinds(busy_threads(4, "2")), "oversubscribed"));
  EXPECT_FALSE(has(kinds(busy_threads(4, "8")), "oversubscribed"));
  EXPECT_FALSE(has(kinds(busy_threads(4, "")), "oversubscribed"));  // CPU count unknown: no claim
  Profile q = busy_threads(4, "16");
  q.run.extra["cpu_quota"] = "1.50";  // a cgroup limit below the CPU count wins
  EXPECT_TRUE(has(kinds(q), "oversubscribed"));
  auto text = [](const Profile& p) {
    for (const auto& h : report::hints(p))
      if (h.kind == "oversubscribed") return h.text;
    return std::string();
  };
  // The knob named is the one for whose threads they were: a pool's size, or the program's own.
  const std::string own = text(busy_threads(4, "2")), pools = text(busy_threads(4, "2", 3));
  EXPECT_NE(own.find("Up to 4 threads"), std::string::npos) << own;
  EXPECT_NE(own.find("None was a thread pool's"), std::string::npos) << own;
  EXPECT_EQ(own.find("OMP_NUM_THREADS"), std::string::npos) << own;
  EXPECT_EQ(report::cpu_usage(busy_threads(4, "2", 3)).peak_busy_pool_threads, 3u);
  EXPECT_NE(pools.find("Up to 4 threads"), std::string::npos) << pools;
  EXPECT_NE(pools.find("3 of them were thread pools' workers"), std::string::npos) << pools;
  EXPECT_NE(pools.find("OMP_NUM_THREADS"), std::string::npos) << pools;
}

// Thread pools spinning for a tenth or more of the samples get a hint; less does not.
TEST(HtmlHints, ThreadPoolsSpinningForWorkAreTold) {
  auto pool_hint = [](uint64_t samples, uint64_t waiting) {
    Profile p;
    p.processes.resize(1);
    p.processes[0].counters["samples"] = samples;
    if (waiting) p.processes[0].counters["pool_wait_samples"] = waiting;
    for (const auto& h : report::hints(p))
      if (h.kind == "pool-waiting") return h.text;
    return std::string();
  };
  EXPECT_NE(pool_hint(1000, 550).find("55% of the samples were thread pools' threads spinning"), std::string::npos)
      << pool_hint(1000, 550);
  EXPECT_NE(pool_hint(1000, 100).find("OMP_WAIT_POLICY=passive"), std::string::npos);
  EXPECT_EQ(pool_hint(1000, 99), "");
  EXPECT_EQ(pool_hint(1000, 0), "");
}

TEST(HtmlData, PageDataHasTheInteractiveParts) {
  Profile p = mlprof::report_test::make_report_profile();
  json d = report::report_data(p);
  EXPECT_EQ(d["format"], 2);
  EXPECT_TRUE(d["flame"]["trees"].is_array());
  EXPECT_TRUE(d["source"]["files"].is_array());
  EXPECT_TRUE(d["hints"].is_array());
  EXPECT_TRUE(d["timelines"]["cpu"].is_array());
  EXPECT_NEAR(d["usage"]["average_cores"].get<double>(), 100000e3 / 2.5e9, 1e-9);
  EXPECT_EQ(d["functions_omitted"], 0);
}

TEST(HtmlData, PageHasTheModulesInOrderAndTheHosts) {
  std::string html = mlprof::report::html_report(mlprof::report_test::make_report_profile());
  size_t core = html.find("window.MLPROF = window.MLPROF || {}");  // core.js
  size_t charts = html.find("M.charts = {");                       // charts.js
  size_t flame = html.find("id: \"flame\"");                       // flame.js registers itself
  size_t boot = html.find("document.body.dataset.ready = \"1\"");  // main.js renders, last
  ASSERT_NE(core, std::string::npos);
  ASSERT_NE(charts, std::string::npos);
  ASSERT_NE(flame, std::string::npos);
  ASSERT_NE(boot, std::string::npos);
  EXPECT_LT(core, charts);
  EXPECT_LT(charts, flame);
  EXPECT_LT(flame, boot);
  EXPECT_NE(html.find("<div id=\"sections\"></div>"), std::string::npos);
  EXPECT_NE(html.find("<div id=\"hints\" class=\"hints\"></div>"), std::string::npos);
  EXPECT_NE(html.find("<dt>Cores used</dt>"), std::string::npos);
}

TEST(HtmlServing, RequestsAreBucketedNotEmbeddedOneByOne) {
  Profile p;
  p.run.start_ns = 1'000'000'000;
  auto& s = p.serving;
  s.present = true;
  s.load_start_ns = p.run.start_ns + 100'000'000;  // the load runs 100 ms .. 1100 ms of the run
  s.load_end_ns = s.load_start_ns + 1'000'000'000;
  // 1000 requests, one per ms; latency 1 ms except every 100th (10 ms); every 10th fails (status 0)
  // but request 501, which timed out at 50 ms. The first 100 are warmup.
  s.warmup = 100;
  for (int i = 0; i < 1000; ++i) {
    const bool slow = i % 100 == 99;
    s.requests.push_back({s.load_start_ns + i * 1'000'000LL, slow ? 10'000'000LL : 1'000'000LL, i % 10 == 3 ? 0 : 200});
  }
  s.requests[503] = {s.load_start_ns + 503 * 1'000'000LL, 50'000'000LL, mlprof::profile::ServingRequest::kTimedOut};
  const json series = report::serving_series(p);
  ASSERT_TRUE(series.is_object());
  EXPECT_EQ(series["requests"], 1000);
  EXPECT_EQ(series["answered"], 901);  // 900 answers and the timeout
  EXPECT_EQ(series["steady"], 811);    // the same after the 100 warmup requests (90 answered)
  // 1000 / 20 = 50 buckets of 20 ms from t = 100 ms.
  EXPECT_DOUBLE_EQ(series["bucket_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(series["t0_ms"].get<double>(), 100.0);
  ASSERT_EQ(series["latency"].size(), 50u);
  ASSERT_EQ(series["throughput"].size(), 50u);
  // Bucket 4 holds requests 80..99 by start: 18 answered, one of them (99) slow. p50 1 ms, p99 10 ms
  // (nearest rank 18 of 18); bucket 0 has no slow request: p99 1 ms.
  EXPECT_EQ(series["latency"][4][0], 180'000'000);
  EXPECT_DOUBLE_EQ(series["latency"][4][1].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(series["latency"][4][2].get<double>(), 10000.0);
  EXPECT_DOUBLE_EQ(series["latency"][0][2].get<double>(), 1000.0);
  // Completions: 20 per 20 ms bucket = 1000/s, except where the slow ones move across buckets.
  double completed = 0;
  for (const auto& b : series["throughput"]) completed += b[1].get<double>() * 0.020;
  EXPECT_NEAR(completed, 1000.0, 1e-6);
  EXPECT_DOUBLE_EQ(series["throughput"][1][1].get<double>(), 1000.0);
  // The histogram counts every steady request with a latency once: 801 fast, 9 slow (i % 100 ==
  // 99 never fails) and the 50 ms timeout, the last bin.
  uint64_t total = 0;
  for (const auto& b : series["histogram"]) total += b["count"].get<uint64_t>();
  EXPECT_EQ(total, 811u);
  EXPECT_EQ(series["histogram"].front()["count"], 801);
  EXPECT_EQ(series["histogram"].back()["count"], 1);
  // The page's data carries the series, not the 1000 requests.
  const json d = report::report_data(p);
  EXPECT_FALSE(d["serving"].contains("requests"));
  EXPECT_EQ(d["serving"]["series"]["requests"], 1000);
  // No serving run: null.
  EXPECT_TRUE(report::serving_series(Profile{}).is_null());
}
