// The serving section of the profile (format 1.2, section 15): round trip, absence in profiles
// without a serving run (older files read fine), validation; the JSON export's "serving" object
// and the text summary; the collector's memory window; CPU per line over the steady window.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "collector/memory_tracker.h"
#include "profile/profile_io.h"
#include "profile/string_table.h"
#include "report/json_export.h"
#include "report/report.h"
#include "report/serving_json.h"
#include "tools/serving_window.h"

using namespace mlprof;
using namespace mlprof::profile;

namespace {

// A profile with one thread, two stacks (a Python line over a native leaf; a native leaf only)
// and samples at known times, plus a serving run whose window covers part of them.
Profile serving_profile() {
  Profile p;
  p.run.start_ns = 1000;
  StringTable st(p.strings);
  const uint32_t f_py = st.intern("serve.py"), fn_handle = st.intern("handle"), fn_gemm = st.intern("sgemm_kernel"),
                 m_blas = st.intern("libopenblas.so"), fn_tok = st.intern("tokenize");
  p.metrics = {{"cpu", "us"}, {"cpu-interpreter", "us"}, {"cpu-native", "us"}, {"cpu-system", "us"}};
  p.frames = {{fn_gemm, 0, 0, m_blas, 0x10, FrameKind::kNative, false},
              {fn_handle, f_py, 12, 0, 0, FrameKind::kPython, false},
              {fn_tok, f_py, 30, 0, 0, FrameKind::kPython, false}};
  p.stacks = {{{0, 1}, false}, {{2, 1}, false}};
  Process proc;
  proc.pid = 42;
  p.processes = {proc};
  p.threads = {{0, 42, "main", 0, 0}};
  // Stack 0: 10 samples of weight 1 = 100 ms native; stack 1: 10 samples = 50 ms interpreter.
  p.stack_values = {{0, 0, {100000, 0, 100000, 0}}, {0, 1, {50000, 50000, 0, 0}}};
  for (int i = 0; i < 10; ++i) {
    p.samples.push_back({0, 0, 1000 + i * 100, 1});
    p.samples.push_back({0, 1, 1050 + i * 100, 1});
  }
  Serving& s = p.serving;
  s.present = true;
  s.url = "http://127.0.0.1:1/score";
  s.requests_file = "r.txt";
  s.content_type = "application/json";
  s.load_mode = "closed";
  s.concurrency = 2;
  s.warmup = 1;
  s.outcome = "completed";
  s.ready_ns = 1500;
  s.window_start_ns = 1500;  // samples at 1500..1950: 5 of each stack
  s.window_end_ns = 2000;
  s.window_requests = 5;
  s.total_queries = 6;
  s.success_queries = 6;
  s.p50_ns = 2000000;
  s.requested_millicores = 1200;
  s.requested_memory_bytes = int64_t{5} << 28;
  s.thread_env = {{"OMP_NUM_THREADS", "4"}};
  s.advice = {"an advice <b>"};
  s.requests = {{1100, 300, 200}, {1500, 100, 200}, {1600, 100, 500}, {1700, 400, ServingRequest::kTimedOut}};
  s.window_copy_bytes = 3 << 20;
  s.resources = {{1000, 0, 1 << 20, 1, 3}, {1100, 50, 2 << 20, 2, 5}};
  s.sites = {{1, 5000, 5, 2500}};
  return p;
}

}  // namespace

TEST(ServingProfile, RoundTripKeepsEveryField) {
  Profile p = serving_profile();
  tools::fill_window_lines(p, p.serving);
  ASSERT_TRUE(validate_profile(p).ok()) << validate_profile(p).error;
  auto back = decode_profile(encode_profile(p).data(), encode_profile(p).size(), "t");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_TRUE(back->serving == p.serving);
}

TEST(ServingProfile, AbsentWithoutAServingRunAndOlderFilesReadFine) {
  Profile p = serving_profile();
  p.serving = Serving{};
  auto bytes = encode_profile(p);
  auto with = serving_profile();
  EXPECT_LT(bytes.size(), encode_profile(with).size());
  auto back = decode_profile(bytes.data(), bytes.size(), "t");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_FALSE(back->serving.present);
  // The JSON export says null.
  auto j = nlohmann::json::parse(report::export_json(back.value()));
  EXPECT_TRUE(j["serving"].is_null());
}

TEST(ServingProfile, OutOfRangeSiteStackIsRejected) {
  Profile p = serving_profile();
  p.serving.sites[0].stack = 7;
  Status v = validate_profile(p);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error.find("serving section"), std::string::npos) << v.error;
}

TEST(ServingWindow, CpuPerLineCountsOnlyTheWindow) {
  Profile p = serving_profile();
  tools::fill_window_lines(p, p.serving);
  // In the window: 5 samples of stack 0 (10 ms each) and 5 of stack 1 (5 ms each).
  auto find = [&](uint32_t line) -> const ServingLine* {
    for (auto& l : p.serving.lines)
      if (l.line == line) return &l;
    return nullptr;
  };
  const ServingLine* handle = find(12);
  const ServingLine* tok = find(30);
  ASSERT_NE(handle, nullptr);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(handle->total_us, 75000);  // both stacks pass through line 12
  EXPECT_EQ(handle->self_us, 50000);   // the innermost line over the line-less sgemm_kernel
  EXPECT_EQ(tok->total_us, 25000);
  EXPECT_EQ(tok->self_us, 25000);
  EXPECT_EQ(p.serving.lines.front().line, 12u);  // most total first
  auto w = tools::window_cpu(p, p.serving.window_start_ns, p.serving.window_end_ns);
  EXPECT_EQ(w.total_us, 75000);
  EXPECT_EQ(w.interpreter_us, 25000);
  EXPECT_EQ(w.native_us, 50000);
  EXPECT_EQ(w.matmul_us, 50000);  // sgemm_kernel
  // Every sample of the window has a line: the lines hold all of its CPU, and no note is due.
  EXPECT_EQ(p.serving.window_cpu_us, 75000);
  EXPECT_EQ(p.serving.window_line_cpu_us, 75000);
  EXPECT_EQ(report::serving_detail::line_coverage_note(p.serving), "");
}

// A thread pool's worker in a library without line information: its CPU is in no line, and the
// summary, the JSON export and the report say what share of the window's CPU the lines hold.
TEST(ServingWindow, CpuWithoutALineIsToldApart) {
  Profile p = serving_profile();
  StringTable st(p.strings);
  p.frames.push_back({st.intern("blas_thread_server"), 0, 0, 0, 0x20, FrameKind::kNative, false});
  p.stacks.push_back({{3}, false});
  p.threads.push_back({0, 43, "worker", 0, 0});
  p.stack_values.push_back({1, 2, {40000, 0, 40000, 0}});  // 4 samples of 10 ms, all in the window
  for (int i = 0; i < 4; ++i) p.samples.push_back({1, 2, 1600 + i * 100, 1});
  tools::fill_window_lines(p, p.serving);
  EXPECT_EQ(p.serving.window_cpu_us, 115000);
  EXPECT_EQ(p.serving.window_line_cpu_us, 75000);  // 65%
  ASSERT_TRUE(validate_profile(p).ok()) << validate_profile(p).error;
  const std::string t = report::text_summary(p, {});
  EXPECT_NE(t.find("(the lines hold 65% of the steady state's CPU; the other 35% ran in code without a source line"),
            std::string::npos) << t;
  auto j = nlohmann::json::parse(report::export_json(p));
  EXPECT_DOUBLE_EQ(j["serving"]["per_request"]["lines_cpu_share"].get<double>(), 0.652);
  EXPECT_DOUBLE_EQ(j["serving"]["per_request"]["cpu_ms_per_request"].get<double>(), 23.0);  // 115 ms / 5
  EXPECT_NE(j["serving"]["per_request"]["lines_note"].get<std::string>().find("65%"), std::string::npos);
  // At 90% or more nothing is said; a profile without the figures (before 1.4) says nothing either.
  p.serving.window_line_cpu_us = 103500;
  EXPECT_EQ(report::serving_detail::line_coverage_note(p.serving), "");
  p.serving.window_line_cpu_us = 103499;
  EXPECT_NE(report::serving_detail::line_coverage_note(p.serving), "");
  // No line at all (a server without debug information, glibc without its symbols): the table is
  // empty and the note still says why.
  Profile none = p;
  none.serving.lines.clear();
  none.serving.window_line_cpu_us = 0;
  EXPECT_NE(report::text_summary(none, {}).find("(the lines hold 0% of the steady state's CPU"), std::string::npos)
      << report::text_summary(none, {});
  p.serving.window_cpu_us = p.serving.window_line_cpu_us = 0;
  EXPECT_EQ(report::serving_detail::line_coverage_note(p.serving), "");
  j = nlohmann::json::parse(report::export_json(p));
  EXPECT_FALSE(j["serving"]["per_request"].contains("lines_cpu_share"));
}

// The collector's "[Python garbage collector]" frame (the preload saw gc.collecting on the GIL
// holder) counts as time in the collector, in an interpreter without symbols too.
TEST(ServingWindow, TheGarbageCollectorFrameCountsAsGc) {
  Profile p = serving_profile();
  auto w = tools::window_cpu(p, p.serving.window_start_ns, p.serving.window_end_ns);
  EXPECT_EQ(w.gc_us, 0);
  StringTable st(p.strings);
  p.frames.push_back({st.intern(profile::kGcFrameName), 0, 0, 0, 0, FrameKind::kNative, false});
  p.stacks[1].frames.insert(p.stacks[1].frames.begin(), static_cast<uint32_t>(p.frames.size() - 1));
  w = tools::window_cpu(p, p.serving.window_start_ns, p.serving.window_end_ns);
  EXPECT_EQ(w.gc_us, 25000);  // stack 1's window: 5 samples of 5 ms
  EXPECT_EQ(w.total_us, 75000);
}

TEST(ServingJson, CloudFieldsUnderTheirNames) {
  Profile p = serving_profile();
  auto j = nlohmann::json::parse(report::export_json(p));
  const auto& s = j["serving"];
  ASSERT_TRUE(s.is_object());
  for (const char* k : {"requestedCpu", "requestedMemoryInGB", "maxUtilizedCpu", "maxUtilizedMemoryInGB",
                        "averageLatencyInMs", "latencyPercentile50InMs", "latencyPercentile90InMs",
                        "latencyPercentile95InMs", "latencyPercentile99InMs", "latencyPercentile999InMs",
                        "measuredQueriesPerSecond", "totalQueries", "successQueries", "successRate"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_DOUBLE_EQ(s["requestedCpu"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(s["requestedMemoryInGB"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(s["latencyPercentile50InMs"].get<double>(), 2.0);
  EXPECT_EQ(s["totalQueries"], 6);
  EXPECT_DOUBLE_EQ(s["successRate"].get<double>(), 1.0);
  EXPECT_EQ(s["requests"]["status"].size(), 4u);
  EXPECT_EQ(s["requests"]["status"][3], -1);
  EXPECT_EQ(s["timed_out_queries"], 1);
  EXPECT_DOUBLE_EQ(s["copy_bytes_per_request"].get<double>(), (3 << 20) / 5.0);
  EXPECT_EQ(s["per_request"]["sites"][0]["retained_bytes_per_request"], 500.0);
  EXPECT_EQ(s["per_request"]["sites"][0]["alloc_bytes_per_request"], 1000.0);
}

TEST(ServingSummary, TextHasTheFiguresAndAdvice) {
  Profile p = serving_profile();
  std::string t = report::text_summary(p, {});
  EXPECT_NE(t.find("Serving: http://127.0.0.1:1/score"), std::string::npos) << t;
  EXPECT_NE(t.find("requestedCpu 1.2"), std::string::npos) << t;
  EXPECT_NE(t.find("advice: an advice <b>"), std::string::npos) << t;
  EXPECT_NE(t.find("6 total"), std::string::npos) << t;
  // Open loop's late starts: "1 request", not "1 requests".
  p.serving.late_starts = 1;
  t = report::text_summary(p, {});
  EXPECT_NE(t.find("(1 request started late)"), std::string::npos) << t;
  p.serving.late_starts = 2;
  t = report::text_summary(p, {});
  EXPECT_NE(t.find("(2 requests started late)"), std::string::npos) << t;
}

// --duration ended the replay during the warmup: no steady-state request, so no latency,
// throughput or recommendation; null in the JSON and "none" in the summary, not 0.
TEST(ServingJson, NoSteadyStateRequestMeansNullNotZero) {
  Profile p = serving_profile();
  Serving& s = p.serving;
  s.outcome = "time-limit";
  s.warmup = 20;
  s.window_requests = 0;
  s.window_start_ns = s.window_end_ns = 1900;
  s.requested_millicores = s.requested_memory_bytes = 0;
  s.error = "no steady-state request was measured: ...";
  for (int64_t* v : {&s.average_latency_ns, &s.p50_ns, &s.p90_ns, &s.p95_ns, &s.p99_ns, &s.p999_ns, &s.measured_qps_milli})
    *v = 0;
  auto j = nlohmann::json::parse(report::export_json(p))["serving"];
  for (const char* k : {"averageLatencyInMs", "latencyPercentile50InMs", "latencyPercentile90InMs",
                        "latencyPercentile95InMs", "latencyPercentile99InMs", "latencyPercentile999InMs",
                        "measuredQueriesPerSecond", "requestedCpu", "requestedMemoryInGB"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_TRUE(j[k].is_null()) << k << ": " << j[k];
  }
  EXPECT_EQ(j["window_queries"], 0);
  const std::string t = report::text_summary(p, {});
  EXPECT_NE(t.find("latency ms: none"), std::string::npos) << t;
  EXPECT_NE(t.find("throughput: none"), std::string::npos) << t;
  EXPECT_NE(t.find("recommended: none (no steady-state request was measured)"), std::string::npos) << t;
  EXPECT_EQ(t.find("p99 0.00"), std::string::npos) << t;
  // A steady state whose every request failed to connect (status 0) has a throughput but no latency.
  Profile q = serving_profile();
  q.serving.warmup = 1;
  for (size_t i = 1; i < q.serving.requests.size(); ++i) q.serving.requests[i].status = 0;
  auto k = nlohmann::json::parse(report::export_json(q))["serving"];
  EXPECT_TRUE(k["latencyPercentile99InMs"].is_null());
  EXPECT_FALSE(k["measuredQueriesPerSecond"].is_null());
  // With requests measured, numbers as before.
  auto m = nlohmann::json::parse(report::export_json(serving_profile()))["serving"];
  EXPECT_DOUBLE_EQ(m["latencyPercentile50InMs"].get<double>(), 2.0);
}

TEST(ServingMemoryWindow, AllocationsAndFreesInsideTheWindowOnly) {
  collector::MemoryTracker t;
  collector::MemWindow w;
  t.set_window(&w);
  t.config(1, 1, 0);
  t.alloc(0, 7, 100, 1, 1000, 1000);  // before the window, freed inside: counts as freed
  w.start_ns.store(200);
  t.alloc(0, 7, 150, 2, 500, 500);    // arrived late, happened before the window: not counted
  t.alloc(0, 7, 250, 3, 300, 300);    // inside, kept: retained
  t.alloc(0, 7, 260, 4, 200, 200);    // inside, freed inside
  t.free(4, 270);
  t.free(1, 280);
  t.free(6, 290);                      // free before its alloc (another thread's ring)...
  t.alloc(0, 7, 285, 6, 50, 50);       // ...both inside: allocated and freed
  w.end_ns.store(300);
  t.alloc(0, 7, 310, 5, 4000, 4000);  // after the window
  t.free(3, 320);                      // after the window: still retained in it
  ASSERT_EQ(t.sites().size(), 1u);
  const auto& s = t.sites()[0];
  EXPECT_EQ(s.win_alloc_bytes, 300 + 200 + 50);
  EXPECT_EQ(s.win_free_bytes, 200 + 1000 + 50);
  EXPECT_DOUBLE_EQ(s.win_alloc_count, 3);
  // Live at the window's end minus at its start: {2, 3} = 800 bytes minus {1, 2} = 1500 bytes.
  EXPECT_EQ(s.win_alloc_bytes - s.win_free_bytes, 800 - 1500);
  // The same in sampled blocks: 2 live at each end; 3 allocated and 3 freed inside.
  EXPECT_EQ(s.win_net_samples, 0);
  t.alloc(0, 7, 330, 8, 100, 0);  // a weightless entry is no sample, after the window or not
  EXPECT_EQ(t.sites()[0].win_net_samples, 0);
}

// A retained figure is a leak only on kMinRetainedSamples sampled blocks or more (either way): one
// block in flight when the window closed, at a 1 MiB interval over 3,000 requests, reads 350 B
// retained per request; the text summary, the JSON export and the ordering say ~0 for it.
TEST(ServingRetained, FewSampledBlocksAreNotALeak) {
  ServingSite s{0, 0, 0, 0};
  for (int64_t n : {-2, -1, 0, 1, 2}) {
    s.retained_samples = n;
    EXPECT_FALSE(retained_resolved(s)) << n;
  }
  for (int64_t n : {int64_t{-3}, int64_t{3}, int64_t{400}, kRetainedSamplesUnknown}) {  // unknown: a 1.3 file, read as before
    s.retained_samples = n;
    EXPECT_TRUE(retained_resolved(s)) << n;
  }
  Profile p = serving_profile();
  // Site 0 (stack 0): one sampled block of 1 MiB kept; site 1 (stack 1): 12 blocks of 8 KiB kept.
  p.serving.sites = {{0, 1 << 20, 1, 1 << 20, 1}, {1, 96 << 10, 12, 96 << 10, 12}};
  const std::string t = report::text_summary(p, {});
  EXPECT_NE(t.find("~0 /    204.8 KiB"), std::string::npos) << t;
  EXPECT_NE(t.find("19.2 KiB /     19.2 KiB"), std::string::npos) << t;
  EXPECT_NE(t.find("(~0: fewer than 3 sampled blocks"), std::string::npos) << t;
  auto j = nlohmann::json::parse(report::export_json(p));
  const auto& sites = j["serving"]["per_request"]["sites"];
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0]["retained_resolved"], false);
  EXPECT_EQ(sites[0]["retained_samples"], 1);
  EXPECT_EQ(sites[0]["retained_bytes_per_request"], (1 << 20) / 5.0);  // the estimate itself is kept
  EXPECT_EQ(sites[1]["retained_resolved"], true);
  // Every site resolved: no footnote.
  p.serving.sites[0].retained_samples = 5;
  EXPECT_EQ(report::text_summary(p, {}).find("(~0:"), std::string::npos);
  // An older file's sites (no sample counts) read as before, and say null.
  p.serving.sites[0].retained_samples = kRetainedSamplesUnknown;
  j = nlohmann::json::parse(report::export_json(p));
  EXPECT_TRUE(j["serving"]["per_request"]["sites"][0]["retained_samples"].is_null());
  EXPECT_EQ(j["serving"]["per_request"]["sites"][0]["retained_resolved"], true);
}
