// GPU profiling end to end without a GPU (docs/gpu.md): the fixture dlopens a fake libcuda.so.1
// and queues GPU work of known durations from marked lines; the preload loads the stub libcupti
// (MLPROF_CUPTI_PATH) whose callbacks and activity records carry those durations. mlprof-run must
// attribute GPU time per line within 1% of the truth, copies by direction with bytes, memsets,
// list the kernels, find the device-memory peak and its holders; and every degradation path
// (no CUPTI, CUPTI taken, no privileges, no libcuda, --no-gpu) must leave a clear message and the
// CPU profile intact.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <set>

#include "e2e_util.h"
#include "memory_util.h"
#include "python_util.h"

namespace {

using namespace e2e;

std::string gpu_dir() { return fixture("gpu"); }
std::string stub_cupti() { return gpu_dir() + "/libcupti.so"; }
std::string fake_cuda() { return gpu_dir() + "/libcuda.so.1"; }

bool have_gpu_fixtures() {
  struct stat st;
  return stat(stub_cupti().c_str(), &st) == 0 && stat(fake_cuda().c_str(), &st) == 0;
}

#define REQUIRE_GPU_FIXTURES()                                                                                 \
  if (!have_gpu_fixtures())                                                                                    \
  GTEST_SKIP() << "built without the CUPTI headers (no stub libcupti / fake libcuda): set MLPROF_CUDA_ROOT to " \
                  "a CUDA toolkit to build the GPU tests"

constexpr int kIters = 50;

uint32_t line_of(const std::string& marker) { return marker_line(fixture_source("gpu/gpu_app.cpp"), marker); }

// Total of `metric` over the lines numbered `line` of the files ending in `file_suffix`; -1 when
// the profile has no such metric.
int64_t file_line_total(const profile::Profile& p, const std::string& metric, const std::string& file_suffix,
                        uint32_t line) {
  const uint32_t m = p.metric(metric);
  if (m == profile::kNone) return -1;
  int64_t v = 0;
  for (auto& l : p.lines)
    if (l.line == line && ends_with(p.str(l.file), file_suffix)) v += l.total.at(m);
  return v;
}

// The same on gpu_app.cpp (the call's line).
int64_t line_total(const profile::Profile& p, const std::string& metric, uint32_t line) {
  return file_line_total(p, metric, "gpu_app.cpp", line);
}

bool has_message(const profile::Profile& p, const std::string& text) {
  for (auto& proc : p.processes)
    for (auto& m : proc.messages)
      if (m.find(text) != std::string::npos) return true;
  return false;
}

std::string messages(const profile::Profile& p) {
  std::string out;
  for (auto& proc : p.processes)
    for (auto& m : proc.messages) out += m + "\n";
  return out;
}

// wait: the fixture waits until CUPTI is attached (up to 5 s). Otherwise it still gives the
// profiler 300 ms to notice libcuda (10 ms cycles) and try, so a degradation message must be there.
Profiled run_app(const std::vector<std::string>& env, const std::vector<std::string>& extra = {}, bool wait = true) {
  std::vector<std::string> cmd = {fixture("fixture_gpu_app"), fake_cuda(), std::to_string(kIters)};
  if (wait) {
    cmd.push_back("--wait");
  } else {
    cmd.push_back("--wait-ms");
    cmd.push_back("300");
  }
  return profile_run(cmd, extra, env);
}

void expect_near_pct(int64_t got, int64_t want, double pct, const std::string& what) {
  EXPECT_NEAR(static_cast<double>(got), static_cast<double>(want), want * pct / 100.0) << what;
}

// The attribution a full run must show (times in us).
void check_attribution(const Profiled& r) {
  const auto& p = r.profile;
  ASSERT_EQ(p.gpu.size(), 1u) << messages(p) << r.result.err;
  ASSERT_NE(p.metric("gpu"), profile::kNone);
  expect_near_pct(line_total(p, "gpu", line_of("GPU-LINE: matmul")), kIters * 400, 1, "matmul line gpu");
  expect_near_pct(line_total(p, "gpu-kernel", line_of("GPU-LINE: matmul")), kIters * 400, 1, "matmul line kernels");
  expect_near_pct(line_total(p, "gpu", line_of("GPU-LINE: elementwise")), kIters * 150, 1, "elementwise line");
  expect_near_pct(line_total(p, "gpu-memcpy-htod", line_of("GPU-LINE: htod")), kIters * 50, 1, "htod time");
  EXPECT_EQ(line_total(p, "gpu-copy-bytes", line_of("GPU-LINE: htod")), int64_t{kIters} << 20) << "htod bytes";
  expect_near_pct(line_total(p, "gpu-memcpy-dtoh", line_of("GPU-LINE: dtoh")), kIters * 80, 1, "dtoh time");
  EXPECT_EQ(line_total(p, "gpu-copy-bytes", line_of("GPU-LINE: dtoh")), int64_t{kIters} * (2 << 20)) << "dtoh bytes";
  expect_near_pct(line_total(p, "gpu-memcpy-dtod", line_of("GPU-LINE: dtod")), kIters * 20, 1, "dtod time");
  expect_near_pct(line_total(p, "gpu-memset", line_of("GPU-LINE: memset")), kIters * 5, 1, "memset time");
  // No GPU time leaks onto the other lines' columns.
  EXPECT_EQ(line_total(p, "gpu-kernel", line_of("GPU-LINE: htod")), 0);
  EXPECT_EQ(line_total(p, "gpu-memcpy-htod", line_of("GPU-LINE: matmul")), 0);

  const auto& g = p.gpu[0];
  EXPECT_EQ(g.totals.count("unjoined"), 0u) << "every activity record found its launch";
  ASSERT_EQ(g.kernels.size(), 2u);
  EXPECT_EQ(p.str(g.kernels[0].demangled), "matmul_big(float const*, float const*, float*, int)");
  EXPECT_EQ(p.str(g.kernels[0].name), "_Z10matmul_bigPKfS0_Pfi");
  EXPECT_EQ(g.kernels[0].calls, static_cast<uint64_t>(kIters));
  EXPECT_EQ(g.kernels[0].total_ns, int64_t{kIters} * 400000);
  EXPECT_EQ(g.kernels[0].max_ns, 400000);
  EXPECT_EQ(g.kernels[0].grid[0], 256u);
  EXPECT_EQ(g.kernels[0].block[0], 128u);
  EXPECT_EQ(p.str(g.kernels[1].demangled), "elementwise(float*, int)");
  // The kernel's launching line is the marked line.
  ASSERT_NE(g.kernels[0].stack, profile::kNone);
  bool found = false;
  for (uint32_t f : p.stacks[g.kernels[0].stack].frames)
    found = found || p.frames[f].line == line_of("GPU-LINE: matmul");
  EXPECT_TRUE(found) << "the matmul kernel's stack holds its launching line";

  // Device memory: 64 + 32 MiB live together at the peak, held by the two marked lines.
  ASSERT_EQ(g.devices.size(), 1u);
  const auto& d = g.devices[0];
  EXPECT_EQ(d.peak_bytes, int64_t{96} << 20);
  ASSERT_EQ(d.peak_holders.size(), 2u);
  EXPECT_EQ(d.peak_holders[0].bytes, int64_t{64} << 20);
  EXPECT_EQ(d.peak_holders[1].bytes, int64_t{32} << 20);
  auto holds_line = [&](const profile::GpuHolder& h, uint32_t line) {
    if (h.stack == profile::kNone) return false;
    for (uint32_t f : p.stacks[h.stack].frames)
      if (p.frames[f].line == line) return true;
    return false;
  };
  EXPECT_TRUE(holds_line(d.peak_holders[0], line_of("GPU-LINE: malloc-a")));
  EXPECT_TRUE(holds_line(d.peak_holders[1], line_of("GPU-LINE: malloc-b")));
  ASSERT_FALSE(d.memory.empty());
  EXPECT_EQ(d.memory.back().value, 0) << "everything was freed";
  // Utilization: busy kernel time is within the run and at most 100% per bucket; its sum over
  // buckets equals the kernel time (one stream: no overlap).
  // The last bucket is measured against its own width: up to the later of the process's end and
  // the last GPU work's end.
  int64_t busy_ns = 0, last_end = p.processes[g.process].end_ns;
  for (const auto& o : g.ops) last_end = std::max(last_end, o.end_ns);
  for (size_t i = 0; i < d.utilization.size(); ++i) {
    const auto& pt = d.utilization[i];
    EXPECT_GE(pt.value, 0);
    EXPECT_LE(pt.value, 1000);
    const int64_t width = i + 1 < d.utilization.size() ? d.bucket_ns : last_end - pt.t_ns;
    busy_ns += pt.value * width / 1000;
  }
  expect_near_pct(busy_ns, int64_t{kIters} * 550000, 2, "utilization sums the kernel time");
  // Operations: on the two streams, each with its launch time before its start.
  ASSERT_FALSE(g.ops.empty());
  int streams7 = 0, streams13 = 0;
  for (const auto& o : g.ops) {
    streams7 += o.stream == 7;
    streams13 += o.stream == 13;
    EXPECT_NE(o.thread, profile::kNone);
    EXPECT_LE(o.launch_ns, o.start_ns);
  }
  EXPECT_EQ(streams7, kIters * 4);
  EXPECT_EQ(streams13, kIters * 2);
  // The GPU ran inside the process's life (clock conversion).
  const auto& proc = p.processes[g.process];
  EXPECT_GE(g.ops.front().start_ns, proc.start_ns);
  EXPECT_LE(g.ops.front().start_ns, proc.end_ns);
}

TEST(Gpu, TimePerLineKernelsCopiesAndMemory) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.result.exit_code, 0) << r.result.err;
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
  check_attribution(r);
  EXPECT_EQ(r.profile.gpu[0].clock, "monotonic");
}

TEST(Gpu, CalibratedClockWhenCuptiKeepsItsOwn) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=no-timestamp-callback"});
  ASSERT_TRUE(r.ok);
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.err;
  check_attribution(r);
  EXPECT_EQ(r.profile.gpu[0].clock, "offset");
}

TEST(Gpu, BuffersCompletedOnCuptisThread) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=small-buffers"});
  ASSERT_TRUE(r.ok);
  check_attribution(r);
}

// 60,000 iterations of the fake driver's app, all their activity records held by the stub until
// the flush at exit (stub mode `mode`, with hold-buffers and no-callbacks): 360,000 records, ~46
// MB in the ring's format against its 8 MiB (API callbacks off: the launch events, which come as
// fast as the loop runs, are not what is measured here). None may be lost.
void expect_a_held_flush_loses_nothing(const std::string& mode) {
  constexpr int n = 60000;
  auto r = profile_run({fixture("fixture_gpu_app"), fake_cuda(), std::to_string(n), "--wait"}, {},
                       {"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=hold-buffers,no-callbacks" + mode});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile) << r.result.err;
  const auto& g = r.profile.gpu[0];
  EXPECT_EQ(g.totals.count("dropped") ? g.totals.at("dropped") : 0, 0) << "events lost in mlprof";
  EXPECT_GE(g.totals.at("activities"), int64_t{6} * n);
  ASSERT_EQ(g.kernels.size(), 2u);
  EXPECT_EQ(g.kernels[0].calls, static_cast<uint64_t>(n));
  EXPECT_EQ(g.kernels[1].calls, static_cast<uint64_t>(n));
}

// CUPTI hands back all the buffers it filled since its last delivery at once, on the flushing
// thread: at exit, tens of megabytes of records in a launch-bound program (session 14, H200: a
// sixth of a 300,000-launch loop's kernel records lost). The flush drains the ring as it fills it.
TEST(Gpu, AFlushOfManyHeldBuffersLosesNothing) {
  REQUIRE_GPU_FIXTURES();
  expect_a_held_flush_loses_nothing("");
}

// The same flush, delivered on another thread while the flushing writer waits for it (CUPTI's
// worker thread): that thread drains the ring itself. Without it, ~0.4 s of a launch-bound
// loop's kernel records were lost around each of the writer's flushes on an H200 (session 15).
TEST(Gpu, AFlushDeliveredOnAnotherThreadLosesNothing) {
  REQUIRE_GPU_FIXTURES();
  expect_a_held_flush_loses_nothing(",worker-deliveries");
}

// Interned kernel names (gpu_cupti.cpp): a name pointer reused for another name of the same
// length and ends gets a reference of its own; past the 4,096-entry table names go in full.
TEST(Gpu, KernelNamesStayRightWhenPointersAreReusedOrMany) {
  REQUIRE_GPU_FIXTURES();
  const std::string script = fixture_source("gpu/gpu_names.py");
  auto r = profile_run({"/usr/bin/python3", script, fake_cuda()}, {},
                       {"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=small-buffers"});
  ASSERT_TRUE(r.ok);
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile);
  const auto& g = r.profile.gpu[0];
  std::map<std::string, std::pair<uint64_t, int64_t>> by_name;  // calls, total ns
  for (auto& k : g.kernels) by_name[r.profile.str(k.name)] = {k.calls, k.total_ns};
  EXPECT_EQ(by_name["reused_name_head_AAAA_and_the_same_tail"], (std::pair<uint64_t, int64_t>{8, 8000}));
  EXPECT_EQ(by_name["reused_name_head_BBBB_and_the_same_tail"], (std::pair<uint64_t, int64_t>{8, 16000}));
  int many = 0;
  for (int i = 0; i < 5000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "many_%05d", i);
    auto it = by_name.find(name);
    many += it != by_name.end() && it->second == std::pair<uint64_t, int64_t>{1, 3000};
  }
  EXPECT_EQ(many, 5000);
  EXPECT_EQ(g.kernels.size(), 5002u);
}

// Launch stacks use the CFI unwinder whatever the sampling unwinder is, with memory profiling off
// too (the writer then builds the CFI tables for the GPU callbacks alone).
TEST(Gpu, StacksWithLibunwindSamplerAndNoMemory) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti()}, {"--unwinder", "libunwind", "--no-memory"});
  ASSERT_TRUE(r.ok);
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.err;
  check_attribution(r);
}

TEST(Gpu, CuptiDirectoryAsOverride) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + gpu_dir()});
  ASSERT_TRUE(r.ok);
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile);
  ASSERT_FALSE(r.profile.gpu[0].kernels.empty());
  EXPECT_EQ(r.profile.gpu[0].kernels[0].calls, static_cast<uint64_t>(kIters));
}

TEST(Gpu, ExportsJsonSummaryAndTrace) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  auto js = run({MLPROF_CLI, "export", r.path, "--format", "json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j["gpu"].is_array());
  ASSERT_EQ(j["gpu"].size(), 1u);
  EXPECT_EQ(j["gpu"][0]["kernels"][0]["name"], "matmul_big(float const*, float const*, float*, int)");
  EXPECT_EQ(j["gpu"][0]["kernels"][0]["calls"], kIters);
  EXPECT_EQ(j["gpu"][0]["kernels"][0]["launched_from"]["launch"]["line"], line_of("GPU-LINE: matmul"));
  EXPECT_EQ(j["gpu"][0]["devices"][0]["peak_memory_bytes"], int64_t{96} << 20);
  bool gpu_metric = false;
  for (auto& m : j["metrics"]) gpu_metric = gpu_metric || m["name"] == "gpu";
  EXPECT_TRUE(gpu_metric);
  auto sum = run({MLPROF_CLI, "report", r.path});
  ASSERT_EQ(sum.exit_code, 0) << sum.err;
  EXPECT_NE(sum.out.find("GPU:"), std::string::npos) << sum.out;
  EXPECT_NE(sum.out.find("matmul_big(float const*"), std::string::npos) << sum.out;
  EXPECT_NE(sum.out.find("gpu_app.cpp:" + std::to_string(line_of("GPU-LINE: matmul"))), std::string::npos) << sum.out;
  auto tr = run({MLPROF_CLI, "export", r.path, "--format", "chrome-trace"});
  ASSERT_EQ(tr.exit_code, 0) << tr.err;
  {
    auto t = nlohmann::json::parse(tr.out);
    int gpu_slices = 0, flows = 0;
    std::set<std::string> tracks;
    for (auto& e : t["traceEvents"]) {
      if (e.value("cat", "") == "gpu" && e.value("ph", "") == "X") ++gpu_slices;
      if (e.value("ph", "") == "s" || e.value("ph", "") == "f") ++flows;
      if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name" &&
          e["args"].value("name", "").rfind("CUDA stream", 0) == 0)
        tracks.insert(e["args"].value("name", ""));
    }
    EXPECT_EQ(gpu_slices, kIters * 6);
    EXPECT_EQ(tracks.size(), 2u) << "one track per CUDA stream";
    EXPECT_EQ(flows, 2 * kIters * 6) << "a flow from each launch to its GPU work";
  }
}

// The same from Python: ctypes calls from five Python lines on two threads (gpu_lines.py); the
// launch stacks' Python frames put the GPU time on those lines.
// Every supported interpreter: the frame reads differ (<= 3.11 / 3.12+ GIL checks, frame layouts).
TEST(Gpu, PythonLinesGetTheirGpuTime) {
  REQUIRE_GPU_FIXTURES();
  const std::string script = fixture_source("gpu/gpu_lines.py");
  const uint32_t matmul = marker_line(script, "PY-GPU: matmul"), copy = marker_line(script, "PY-GPU: copy"),
                 with_gil = marker_line(script, "PY-GPU: with-gil"), deep = marker_line(script, "PY-GPU: deep"),
                 shallow = marker_line(script, "PY-GPU: shallow");
  constexpr int n = 200;
  int tried = 0;
  for (auto& py : interpreters()) {
    if (!mlprof_supports(py)) continue;
    ++tried;
    SCOPED_TRACE(py.path);
    auto r = profile_run({py.path, script, fake_cuda(), std::to_string(n)}, {}, {"MLPROF_CUPTI_PATH=" + stub_cupti()});
    ASSERT_TRUE(r.ok);
    ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
    const auto& p = r.profile;
    ASSERT_EQ(p.gpu.size(), 1u) << messages(p);
    auto py_line_total = [&](const std::string& metric, uint32_t line) {
      return file_line_total(p, metric, "gpu_lines.py", line);
    };
    expect_near_pct(py_line_total("gpu", matmul), n * 300, 1, "matmul line, main thread, GIL released");
    expect_near_pct(py_line_total("gpu-memcpy-htod", copy), n * 40, 1, "copy line, main thread, GIL released");
    EXPECT_EQ(py_line_total("gpu-copy-bytes", copy), int64_t{n} << 20);
    EXPECT_EQ(py_line_total("gpu-kernel", copy), 0);
    expect_near_pct(py_line_total("gpu", with_gil), n * 200, 1, "launch line, GIL held");
    expect_near_pct(py_line_total("gpu", deep), n * 100, 1, "second thread, 6 calls deep, GIL released");
    expect_near_pct(py_line_total("gpu", shallow), n * 50, 1, "second thread, 1 call deep, GIL released");
  }
  if (!tried) GTEST_SKIP() << "no supported Python interpreter found";
}

// The hook walks' own-stack copies and guesses under a storm of sampling signals: at 5 kHz the CPU
// sampler's handler often interrupts a launch callback's walk on the same thread (it empties the
// walk's own-stack range and puts it back). 3.11 and 3.12 keep the cframe and the entry frames on
// the C stack, where those copies happen. The lines must stay right and the program unharmed.
TEST(Gpu, HookWalksSurviveSignalsInTheMiddle) {
  REQUIRE_GPU_FIXTURES();
  const std::string script = fixture_source("gpu/gpu_lines.py");
  const uint32_t deep = marker_line(script, "PY-GPU: deep"), shallow = marker_line(script, "PY-GPU: shallow");
  constexpr int n = 3000;
  int tried = 0;
  for (auto& py : interpreters()) {
    if (!mlprof_supports(py) || (py.minor != 11 && py.minor != 12)) continue;
    ++tried;
    SCOPED_TRACE(py.path);
    auto r = profile_run({py.path, script, fake_cuda(), std::to_string(n)}, {"--rate", "5000"},
                         {"MLPROF_CUPTI_PATH=" + stub_cupti()});
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.result.exit_code, 0) << r.result.err;
    ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile);
    expect_near_pct(file_line_total(r.profile, "gpu", "gpu_lines.py", deep), int64_t{n} * 100, 1,
                    "second thread, 6 calls deep");
    expect_near_pct(file_line_total(r.profile, "gpu", "gpu_lines.py", shallow), int64_t{n} * 50, 1,
                    "second thread, 1 call deep");
  }
  if (!tried) GTEST_SKIP() << "no Python 3.11 or 3.12 found";
}

// mlprof-run --duration stops a program that would run for minutes: the flush before SIGTERM
// must bring CUPTI's buffered activity with it (the stub only hands buffers back when flushed).
TEST(Gpu, DurationStopFlushesActivity) {
  REQUIRE_GPU_FIXTURES();
  auto r = profile_run({fixture("fixture_gpu_app"), fake_cuda(), "100000", "--wait", "--sleep-us", "2000"},
                       {"--duration", "1"}, {"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile) << r.result.err;
  const auto& g = r.profile.gpu[0];
  ASSERT_FALSE(g.kernels.empty());
  const uint64_t iterations = g.kernels[0].calls;
  EXPECT_GT(iterations, 50u) << "about 1 s of 2 ms iterations";
  EXPECT_LT(iterations, 1000u);
  // Every flushed kernel joined its launch, and the matmul line holds exactly its kernels' time.
  EXPECT_EQ(g.totals.count("unjoined"), 0u);
  EXPECT_EQ(line_total(r.profile, "gpu-kernel", line_of("GPU-LINE: matmul")),
            static_cast<int64_t>(g.kernels[0].total_ns / 1000));
}

// libcuda linked into the program (loaded before the preload's constructor): the writer's first
// module scan attaches CUPTI.
TEST(Gpu, LibcudaLinkedAtStart) {
  REQUIRE_GPU_FIXTURES();
  auto r = profile_run({fixture("fixture_gpu_app_linked"), fake_cuda(), std::to_string(kIters), "--wait"}, {},
                       {"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile);
  const auto& g = r.profile.gpu[0];
  ASSERT_FALSE(g.kernels.empty());
  EXPECT_EQ(g.kernels[0].calls, static_cast<uint64_t>(kIters));
  expect_near_pct(line_total(r.profile, "gpu", line_of("GPU-LINE: matmul")), kIters * 400, 1, "matmul line");
}

// ---- degradation ------------------------------------------------------------------------------

TEST(Gpu, NoCuptiLibrarySaysWhereItLooked) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=/nonexistent/libcupti.so"}, {}, false);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.result.exit_code, 0);
  EXPECT_TRUE(has_message(r.profile, "MLPROF_CUPTI_PATH=/nonexistent/libcupti.so: no usable libcupti"))
      << messages(r.profile);
  EXPECT_TRUE(r.profile.gpu.empty());
  EXPECT_EQ(r.profile.metric("gpu"), profile::kNone);
  EXPECT_NE(r.profile.metric("cpu"), profile::kNone);
}

TEST(Gpu, CuptiTakenByAnotherTool) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=multiple"}, {}, false);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.result.exit_code, 0);
  EXPECT_TRUE(has_message(r.profile, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")) << messages(r.profile);
  EXPECT_TRUE(r.profile.gpu.empty());
}

// What gpu_app's --cupti-user client (cupti_user.cpp) received, from its last line.
struct UserClient {
  bool found = false;
  int callbacks = -1, records = -1, realtime = -1;
};
UserClient user_client(const std::string& out) {
  UserClient u;
  const size_t at = out.find("user_callbacks=");
  u.found = at != std::string::npos &&
            sscanf(out.c_str() + at, "user_callbacks=%d user_records=%d user_clock_realtime=%d", &u.callbacks,
                   &u.records, &u.realtime) == 3;
  return u;
}

// The program starts its own CUPTI client midway (what torch.profiler does): mlprof yields CUPTI
// to it. Before this, the program's cuptiSubscribe failed with MULTIPLE_SUBSCRIBERS and
// torch.profiler saw no CUDA events under mlprof-run (seen on an H100).
TEST(Gpu, TheProgramsOwnCuptiClientGetsCupti) {
  REQUIRE_GPU_FIXTURES();
  constexpr int kBefore = 10, kAfter = 10;
  auto r = profile_run({fixture("fixture_gpu_app"), fake_cuda(), std::to_string(kBefore + kAfter), "--wait",
                        "--cupti-user", gpu_dir() + "/libcupti_user.so", "--user-after", std::to_string(kBefore)},
                       {}, {"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  ASSERT_NE(r.result.out.find("attached=1"), std::string::npos) << r.result.out << r.result.err;
  EXPECT_NE(r.result.out.find("user_start=0\n"), std::string::npos) << "the program's CUPTI calls succeeded\n"
                                                                    << r.result.out;
  const UserClient u = user_client(r.result.out);
  ASSERT_TRUE(u.found) << r.result.out;
  // Its callbacks fire for its launches (ENTER and EXIT), it gets exactly the kernels launched
  // after it started (2 per iteration), and CUPTI's default clock is back.
  EXPECT_GE(u.callbacks, 2 * 2 * kAfter);
  EXPECT_EQ(u.records, 2 * kAfter) << "mlprof's disabled kinds would add copies and memsets";
  EXPECT_EQ(u.realtime, 1) << "activity timestamps are still mlprof's CLOCK_MONOTONIC";
  // mlprof kept what it saw before: the first kBefore iterations, exactly.
  ASSERT_EQ(r.profile.gpu.size(), 1u) << messages(r.profile);
  expect_near_pct(line_total(r.profile, "gpu", line_of("GPU-LINE: matmul")), kBefore * 400, 1, "matmul line gpu");
  expect_near_pct(line_total(r.profile, "gpu", line_of("GPU-LINE: htod")), kBefore * 50, 1, "htod line gpu");
  const std::string said = messages(r.profile);
  const size_t first = said.find("the program started its own CUPTI client");
  EXPECT_NE(first, std::string::npos) << said;
  EXPECT_EQ(said.find("its own CUPTI client", first + 40), std::string::npos) << "said once\n" << said;
}

// The program's client starts before libcuda is loaded, so before mlprof can attach: mlprof never
// attaches (it would take the activity callbacks from the program), and says why. (Started at
// iteration 0, after libcuda's load, a writer cycle could attach first on a loaded machine: the
// yield of the test above, not this path.)
TEST(Gpu, AProgramsClientStartedFirstKeepsCupti) {
  REQUIRE_GPU_FIXTURES();
  constexpr int kIters = 20;
  auto r = profile_run({fixture("fixture_gpu_app"), fake_cuda(), std::to_string(kIters), "--sleep-us", "20000",
                        "--cupti-user", gpu_dir() + "/libcupti_user.so", "--user-after", "first"},
                       {}, {"MLPROF_CUPTI_PATH=" + stub_cupti()});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  EXPECT_NE(r.result.out.find("user_start=0\n"), std::string::npos) << r.result.out;
  const UserClient u = user_client(r.result.out);
  ASSERT_TRUE(u.found) << r.result.out;
  EXPECT_EQ(u.records, 2 * kIters) << "the program's client got every kernel";
  EXPECT_TRUE(has_message(r.profile, "before mlprof attached")) << messages(r.profile);
  EXPECT_TRUE(r.profile.gpu.empty());
  EXPECT_NE(r.profile.metric("cpu"), profile::kNone);
}

TEST(Gpu, InsufficientPrivileges) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti(), "STUB_CUPTI_MODE=privileges"}, {}, false);
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(has_message(r.profile, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")) << messages(r.profile);
  EXPECT_TRUE(r.profile.gpu.empty());
}

TEST(Gpu, NoGpuFlagLoadsNothing) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti()}, {"--no-gpu"}, false);
  ASSERT_TRUE(r.ok);
  EXPECT_NE(r.result.out.find("attached=0"), std::string::npos) << "CUPTI never attached: " << r.result.out;
  EXPECT_TRUE(r.profile.gpu.empty());
  EXPECT_EQ(r.profile.metric("gpu"), profile::kNone);
  EXPECT_EQ(messages(r.profile).find("CUPTI"), std::string::npos) << messages(r.profile);
}

TEST(Gpu, BadGpuVariableIsReported) {
  REQUIRE_GPU_FIXTURES();
  auto r = run_app({"MLPROF_CUPTI_PATH=" + stub_cupti(), "MLPROF_GPU=maybe"}, {}, true);
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(has_message(r.profile, "MLPROF_GPU=maybe is not 0")) << messages(r.profile);
  EXPECT_EQ(r.profile.gpu.size(), 1u) << "GPU profiling stays on";
}

TEST(Gpu, WithoutLibcudaNothingHappens) {
  REQUIRE_GPU_FIXTURES();
  // A CPU fixture with the stub named: libcuda never loads, so CUPTI is never looked for.
  auto r = profile_run({fixture("fixture_cpu_ratio")}, {}, {"MLPROF_CUPTI_PATH=/nonexistent/libcupti.so"});
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(r.profile.gpu.empty());
  EXPECT_EQ(messages(r.profile).find("CUPTI"), std::string::npos) << messages(r.profile);
  EXPECT_EQ(r.profile.metric("gpu"), profile::kNone);
}

}  // namespace
