// Memory profiling from the wire to the reports: synthetic streams with memory records (exact
// values known by construction) built into a Profile (metrics, per-stack values, ProcessMemory,
// leak candidates, counters), written and read back, exported as JSON and summarized as text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mem_stream.h"
#include "profile/profile_io.h"
#include "profile/string_table.h"
#include "report/html.h"
#include "report/json_export.h"
#include "report/memory_sites.h"
#include "report/report.h"

namespace mlprof {
namespace {

using profile::Profile;
using testing::MemStream;

constexpr int64_t T0 = MemStream::kStart;
constexpr int64_t kMs = 1'000'000;

// Stack -> metric -> value, summed over threads; stacks named by their Python frame's line.
std::map<uint32_t, std::map<std::string, int64_t>> by_line(const Profile& p) {
  std::map<uint32_t, std::map<std::string, int64_t>> out;
  for (const auto& sv : p.stack_values) {
    uint32_t line = p.frames[p.stacks[sv.stack].frames.at(0)].line;
    for (size_t m = 0; m < p.metrics.size(); ++m) out[line][p.metrics[m].name] += sv.values.at(m);
  }
  return out;
}

// The exact-mode scenario: line 10 leaks 5 blocks of 1009 bytes; line 20 churns (allocates and
// frees 100 blocks of 64 bytes, 4 live at most) on two threads; line 30 holds 10 MiB at 50 ms then
// frees it (the peak); line 40 copies 3 MiB; line 50 keeps one stdio-like buffer to the end.
MemStream exact_scenario(wire::EndReason end = wire::EndReason::kExit) {
  MemStream m(100, 1);
  m.thread(101, "worker");
  m.stack(1, "leak", "/src/app.py", 10);
  m.stack(2, "churn", "/src/app.py", 20);
  m.stack(3, "big", "/src/app.py", 30);
  m.stack(4, "copy", "/src/app.py", 40);
  m.stack(5, "init", "/src/app.py", 50);
  uint64_t id = 1;
  m.alloc(5, T0 + 1 * kMs, id++, 4096, 4096);
  for (int i = 0; i < 5; ++i) m.alloc(1, T0 + (2 + i) * kMs, id++, 1009, 1009);
  for (int i = 0; i < 100; ++i) {
    const uint32_t tid = i % 2 ? 101 : 0;
    m.alloc(2, T0 + (10 + i / 10) * kMs, id, 64, 64, tid);
    if (i >= 3) m.free(T0 + (10 + i / 10) * kMs, id - 3);
    ++id;
  }
  for (uint64_t k = id - 3; k < id; ++k) m.free(T0 + 25 * kMs, k);
  const uint64_t big = id++;
  m.alloc(3, T0 + 50 * kMs, big, 10 << 20, 10 << 20);
  m.usage(T0 + 60 * kMs, 20 << 20);
  m.free(T0 + 70 * kMs, big);
  m.copy(4, T0 + 80 * kMs, 1 << 20, 1 << 20);
  m.copy(4, T0 + 81 * kMs, 2 << 20, 2 << 20, 101);
  m.usage(T0 + 100 * kMs, 12 << 20);
  m.counters({{wire::Counter::kMemSamples, 107}, {wire::Counter::kMemFrees, 101}, {wire::Counter::kMemDropped, 0},
              {wire::Counter::kCopySamples, 2}, {wire::Counter::kMemTableFull, 0}});
  m.end(T0 + 110 * kMs, end);
  return m;
}

TEST(MemoryProfile, MetricsAreAppendedAfterTheTimeMetrics) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  const char* names[] = {"cpu", "cpu-interpreter", "cpu-native", "cpu-system", "alloc-bytes",
                         "alloc-count", "live-peak-bytes", "live-end-bytes", "copy-bytes"};
  const char* units[] = {"us", "us", "us", "us", "bytes", "count", "bytes", "bytes", "bytes"};
  ASSERT_EQ(p.metrics.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(p.metrics[i].name, names[i]);
    EXPECT_EQ(p.metrics[i].unit, units[i]);
  }
  // Wall mode keeps wall and wait at 4 and 5; memory follows.
  MemStream w = exact_scenario();
  Profile pw = testing::build({&w}, "wall");
  ASSERT_EQ(pw.metrics.size(), 11u);
  EXPECT_EQ(pw.metric("wait"), 5u);
  EXPECT_EQ(pw.metric("alloc-bytes"), 6u);
  EXPECT_EQ(pw.metric("copy-bytes"), 10u);
}

TEST(MemoryProfile, ExactValuesPerStack) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  auto v = by_line(p);
  EXPECT_EQ(v[10]["alloc-bytes"], 5 * 1009);
  EXPECT_EQ(v[10]["alloc-count"], 5);
  EXPECT_EQ(v[10]["live-end-bytes"], 5 * 1009);
  EXPECT_EQ(v[10]["live-peak-bytes"], 5 * 1009);
  EXPECT_EQ(v[20]["alloc-bytes"], 100 * 64);
  EXPECT_EQ(v[20]["alloc-count"], 100);
  EXPECT_EQ(v[20]["live-end-bytes"], 0);
  EXPECT_EQ(v[20]["live-peak-bytes"], 0) << "the churn was over before the peak";
  EXPECT_EQ(v[30]["live-peak-bytes"], 10 << 20);
  EXPECT_EQ(v[30]["live-end-bytes"], 0);
  EXPECT_EQ(v[40]["copy-bytes"], 3 << 20);
  EXPECT_EQ(v[40]["alloc-bytes"], 0);
  EXPECT_EQ(v[50]["live-end-bytes"], 4096);
  for (auto& [line, m] : v) EXPECT_EQ(m["cpu"], 0) << line;
  // Rows per (thread, stack): the churn ran on both threads.
  int churn_rows = 0;
  for (const auto& sv : p.stack_values) churn_rows += p.frames[p.stacks[sv.stack].frames[0]].line == 20;
  EXPECT_EQ(churn_rows, 2);
  // The aggregates carry the metrics to lines: the peak's line holds all of live-peak-bytes but the
  // leak's and the buffer's.
  const uint32_t mp = p.metric("live-peak-bytes");
  int64_t total_peak = 0, line30 = 0;
  for (const auto& l : p.lines) {
    total_peak += l.self[mp];
    if (l.line == 30) line30 = l.self[mp];
  }
  EXPECT_EQ(line30, 10 << 20);
  EXPECT_EQ(total_peak, (10 << 20) + 5 * 1009 + 4096);
}

TEST(MemoryProfile, ProcessMemoryAndCounters) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  ASSERT_EQ(p.memory.size(), 1u);
  const auto& pm = p.memory[0];
  EXPECT_EQ(pm.process, 0u);
  EXPECT_EQ(pm.interval_bytes, 1u);
  EXPECT_EQ(pm.copy_interval_bytes, 1u << 20);
  EXPECT_FALSE(pm.python_allocator);
  EXPECT_EQ(pm.peak_heap_bytes, (10 << 20) + 5 * 1009 + 4096);
  EXPECT_EQ(pm.peak_heap_t_ns, T0 + 50 * kMs);
  EXPECT_EQ(pm.peak_rss_bytes, 20 << 20);
  EXPECT_EQ(pm.peak_rss_t_ns, T0 + 60 * kMs);
  EXPECT_EQ(pm.end_heap_bytes, 5 * 1009 + 4096);
  ASSERT_EQ(pm.timeline.size(), 2u);
  EXPECT_EQ(pm.timeline[0].t_ns, T0 + 60 * kMs);
  EXPECT_EQ(pm.timeline[0].heap_bytes, (10 << 20) + 5 * 1009 + 4096);
  EXPECT_EQ(pm.timeline[1].rss_bytes, 12 << 20);
  const auto& c = p.processes[0].counters;
  EXPECT_EQ(c.at("mem_samples"), 107u);
  EXPECT_EQ(c.at("mem_frees"), 101u);
  EXPECT_EQ(c.at("mem_dropped"), 0u);
  EXPECT_EQ(c.at("copy_samples"), 2u);
  EXPECT_EQ(c.at("mem_table_full"), 0u);
}

// Peaks between two MEM_USAGE records (80-100 ms apart) are not lost: a block held 10 ms between
// them puts a point on the timeline at the heap's peak, and the kernel's RSS high-water mark
// (1.4's third field) is the peak RSS, at that moment. It was read as the highest polled RSS
// (154-204 MiB for a 200 MiB block held 20 ms) and the timeline's heap missed the peak.
TEST(MemoryProfile, PeaksBetweenUsageRecordsReachTheTimeline) {
  MemStream m(100, 1);
  m.stack(1, "spike", "/src/app.py", 10);
  m.usage(T0, 10 << 20, 10 << 20);
  m.alloc(1, T0 + 30 * kMs, 1, 200 << 20, 200 << 20);
  m.free(T0 + 40 * kMs, 1);
  m.usage(T0 + 80 * kMs, 11 << 20, 212 << 20);
  m.usage(T0 + 160 * kMs, 11 << 20, 212 << 20);  // the same high-water mark: no new peak
  m.end(T0 + 170 * kMs, wire::EndReason::kExit);
  Profile p = testing::build({&m});
  ASSERT_EQ(p.memory.size(), 1u);
  const auto& pm = p.memory[0];
  EXPECT_EQ(pm.peak_rss_bytes, 212 << 20);
  EXPECT_EQ(pm.peak_rss_t_ns, T0 + 30 * kMs);
  EXPECT_EQ(pm.peak_heap_bytes, 200 << 20);
  ASSERT_EQ(pm.timeline.size(), 4u);
  EXPECT_EQ(pm.timeline[1].t_ns, T0 + 30 * kMs);
  EXPECT_EQ(pm.timeline[1].heap_bytes, 200 << 20);
  EXPECT_EQ(pm.timeline[1].rss_bytes, 212 << 20);
  EXPECT_EQ(pm.timeline[2].rss_bytes, 11 << 20);
  EXPECT_EQ(pm.timeline[2].heap_bytes, 0);
  // A 1.3 stream (no high-water mark): the heap's peak still shows, the RSS is the polled one.
  MemStream old(100, 1);
  old.stack(1, "spike", "/src/app.py", 10);
  old.usage(T0, 10 << 20);
  old.alloc(1, T0 + 30 * kMs, 1, 200 << 20, 200 << 20);
  old.free(T0 + 40 * kMs, 1);
  old.usage(T0 + 80 * kMs, 11 << 20);
  old.end(T0 + 90 * kMs, wire::EndReason::kExit);
  Profile q = testing::build({&old});
  EXPECT_EQ(q.memory.at(0).peak_rss_bytes, 11 << 20);
  ASSERT_EQ(q.memory.at(0).timeline.size(), 3u);
  EXPECT_EQ(q.memory.at(0).timeline[1].heap_bytes, 200 << 20);
  EXPECT_EQ(q.memory.at(0).timeline[1].rss_bytes, -1);
}

// Memory events the preload lost (kMemDropped) are said in the process's messages (the summary's,
// the HTML's and the JSON's warnings): every byte figure is low by their share.
TEST(MemoryProfile, LostMemoryEventsAreSaid) {
  auto lost_message = [](uint64_t dropped) {
    MemStream m(100, 1);
    m.stack(1, "leak", "/src/app.py", 10);
    m.alloc(1, T0 + 1 * kMs, 1, 1009, 1009);
    m.counters({{wire::Counter::kMemSamples, 300}, {wire::Counter::kMemDropped, dropped}});
    m.end(T0 + 10 * kMs, wire::EndReason::kExit);
    Profile p = testing::build({&m});
    for (const auto& msg : p.processes.at(0).messages)
      if (msg.find("were lost, against") != std::string::npos) return msg;
    return std::string();
  };
  EXPECT_EQ(lost_message(0), "");
  const std::string msg = lost_message(12);
  EXPECT_NE(msg.find("12 memory events (allocation and copy samples, frees) were lost, against 300 allocation samples kept"), std::string::npos) << msg;
}

TEST(MemoryProfile, ExactLeakIsTheOnlyCandidate) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  ASSERT_EQ(p.leaks.size(), 1u) << "one block (line 50) is never a candidate; the churn was freed";
  const auto& c = p.leaks[0];
  EXPECT_EQ(c.kind, profile::LeakKind::kUnfreedAtExit);
  EXPECT_EQ(p.frames[p.stacks[c.stack].frames[0]].line, 10u);
  EXPECT_EQ(c.bytes, 5 * 1009);
  EXPECT_EQ(c.count, 5);
  EXPECT_EQ(c.process, 0u);
  EXPECT_EQ(c.confidence_permille, 1000u);
}

TEST(MemoryProfile, NoUnfreedCandidatesWithoutACleanExit) {
  for (auto reason : {wire::EndReason::kDetached, wire::EndReason::kExec}) {
    MemStream m = exact_scenario(reason);
    EXPECT_TRUE(testing::build({&m}).leaks.empty());
  }
}

TEST(MemoryProfile, StacksThatSymbolizeAlikeAreOneSite) {
  // Two stream stacks with the same Python frame (same code, same line) merge into one profile
  // stack: their blocks add up to one candidate.
  MemStream m(100, 1);
  m.stack(1, "leak", "/src/app.py", 10);
  m.stack(2, "leak", "/src/app.py", 10);
  m.alloc(1, T0 + 1, 1, 100, 100);
  m.alloc(2, T0 + 2, 2, 100, 100);
  m.end(T0 + 10);
  Profile p = testing::build({&m});
  ASSERT_EQ(p.leaks.size(), 1u) << "one block per stream stack, two for the site";
  EXPECT_EQ(p.leaks[0].bytes, 200);
  EXPECT_EQ(p.leaks[0].count, 2);
}

TEST(MemoryProfile, ProcessesKeepTheirOwnMemory) {
  MemStream a(100, 1), b(200, 1 << 19, wire::kMemPythonAllocator);
  a.stack(1, "f", "/a.py", 1);
  b.stack(1, "g", "/b.py", 2);
  a.alloc(1, T0 + 5, 1, 10, 10);
  a.alloc(1, T0 + 6, 2, 10, 10);
  b.alloc(1, T0 + 5, 1, 1 << 20, 1 << 20);
  a.end(T0 + 10);
  b.end(T0 + 10);
  Profile p = testing::build({&a, &b});
  ASSERT_EQ(p.memory.size(), 2u);
  std::map<uint32_t, const profile::ProcessMemory*> by_pid;
  for (const auto& pm : p.memory) by_pid[p.processes[pm.process].pid] = &pm;
  EXPECT_EQ(by_pid[100]->peak_heap_bytes, 20);
  EXPECT_EQ(by_pid[200]->peak_heap_bytes, 1 << 20);
  EXPECT_TRUE(by_pid[200]->python_allocator);
  EXPECT_EQ(by_pid[200]->interval_bytes, 1u << 19);
  ASSERT_EQ(p.leaks.size(), 1u);
  EXPECT_EQ(p.processes[p.leaks[0].process].pid, 100u);
}

TEST(MemoryProfile, NothingAllocatedPeaksAtTheStart) {
  MemStream m(100, 1);
  m.end(T0 + 10);
  Profile p = testing::build({&m});
  ASSERT_EQ(p.memory.size(), 1u);
  EXPECT_EQ(p.memory[0].peak_heap_bytes, 0);
  EXPECT_EQ(p.memory[0].peak_heap_t_ns, T0);
  EXPECT_EQ(p.memory[0].peak_rss_t_ns, T0);
  auto j = nlohmann::json::parse(report::export_json(p));
  EXPECT_EQ(j["processes"][0]["memory"]["peak_heap_t_ns"], 0);
}

TEST(MemoryProfile, ProfileWithoutMemoryHasNoMemoryMetrics) {
  MemStream m(100, 1, 0, /*send_config=*/false);
  m.end(T0 + 10);
  Profile p = testing::build({&m});
  EXPECT_EQ(p.metrics.size(), 4u);
  EXPECT_TRUE(p.memory.empty());
  EXPECT_FALSE(report::detail::has_memory(p));
}

TEST(MemoryProfile, RoundTripsThroughTheProfileFile) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  const auto bytes = profile::encode_profile(p);
  auto back = profile::decode_profile(bytes.data(), bytes.size(), "x");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->memory, p.memory);
  EXPECT_EQ(back->leaks, p.leaks);
  EXPECT_EQ(back->stack_values, p.stack_values);
}

// ------------------------------------------------------------------------------------------------
// Reports

TEST(MemoryReport, SiteIsTheInnermostUserFrame) {
  Profile p;
  profile::StringTable st(p.strings);
  auto frame = [&](const char* fn, const char* file, uint32_t line, const char* module,
                   profile::FrameKind kind = profile::FrameKind::kNative) {
    profile::Frame f;
    f.function = st.intern(fn);
    f.file = st.intern(file);
    f.line = line;
    f.module = st.intern(module);
    f.kind = kind;
    p.frames.push_back(f);
    return static_cast<uint32_t>(p.frames.size() - 1);
  };
  const char* libstdcxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";
  uint32_t op_new = frame("operator new(unsigned long)", "", 0, libstdcxx);
  uint32_t alloc_h = frame("std::__new_allocator<int>::allocate", "/usr/include/c++/12/bits/new_allocator.h", 137, "/src/fill");
  uint32_t user = frame("fill", "/src/fill.cpp", 12, "/src/fill");
  uint32_t no_debug = frame("churn(int)", "", 0, "/src/churn");
  uint32_t libc = frame("start_thread", "nptl/pthread_create.c", 442, "/lib/x86_64-linux-gnu/libc.so.6");
  uint32_t py = frame("load", "/src/app.py", 7, "", profile::FrameKind::kPython);
  p.stacks = {{{op_new, alloc_h, user}}, {{op_new, alloc_h}}, {{op_new}}, {{op_new, user, py}}, {{}},
              {{op_new, no_debug, libc}}, {{op_new, libc}}};
  using report::detail::site_frame;
  EXPECT_EQ(site_frame(p, 0), user);
  EXPECT_EQ(site_frame(p, 1), alloc_h) << "the program's own (inlined) frame, though its line is a system header's";
  EXPECT_EQ(site_frame(p, 2), op_new);
  EXPECT_EQ(site_frame(p, 3), py) << "a Python line names the site";
  EXPECT_EQ(site_frame(p, 4), profile::kNone);
  EXPECT_EQ(site_frame(p, 5), no_debug) << "the program's function without debug info beats libc's line";
  EXPECT_EQ(site_frame(p, 6), libc) << "only system code: the first line";
  EXPECT_EQ(report::detail::site_label(p, 0), "fill (/src/fill.cpp:12)");
  EXPECT_EQ(report::detail::site_label(p, 4), "[unknown]");
}

TEST(MemoryReport, JsonExportCarriesMemoryAndLeakCandidates) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  std::string text = report::export_json(p);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], "mlprof-json");
  EXPECT_EQ(j["version"], report::kJsonVersion);
  ASSERT_EQ(j["metrics"].size(), p.metrics.size());
  EXPECT_EQ(j["metrics"][4]["name"], "alloc-bytes");
  EXPECT_EQ(j["metrics"][4]["total"], 5 * 1009 + 100 * 64 + (10 << 20) + 4096);
  const auto& proc = j["processes"][0];
  EXPECT_EQ(proc["pid"], 100);
  EXPECT_EQ(proc["end_reason"], "exit");
  EXPECT_EQ(proc["counters"]["mem_samples"], 107);
  const auto& mem = proc["memory"];
  EXPECT_EQ(mem["exact"], true);
  EXPECT_EQ(mem["interval_bytes"], 1);
  EXPECT_EQ(mem["peak_heap_bytes"], (10 << 20) + 5 * 1009 + 4096);
  EXPECT_EQ(mem["peak_heap_t_ns"], 50 * kMs) << "times are since the process started";
  EXPECT_EQ(mem["peak_rss_bytes"], 20 << 20);
  EXPECT_EQ(mem["peak_rss_t_ns"], 60 * kMs);
  EXPECT_EQ(mem["end_heap_bytes"], 5 * 1009 + 4096);
  ASSERT_EQ(mem["timeline"].size(), 2u);
  EXPECT_EQ(mem["timeline"][1]["t_ns"], 100 * kMs);
  EXPECT_EQ(mem["timeline"][1]["rss_bytes"], 12 << 20);
  // Top lists per metric; memory metrics also list sites.
  const auto& peak = j["top"]["live-peak-bytes"];
  ASSERT_FALSE(peak["lines"].empty());
  EXPECT_EQ(peak["lines"][0]["line"], 30);
  EXPECT_EQ(peak["lines"][0]["self"], 10 << 20);
  ASSERT_FALSE(peak["sites"].empty());
  EXPECT_EQ(peak["sites"][0]["function"], "big");
  EXPECT_EQ(peak["sites"][0]["value"], 10 << 20);
  EXPECT_EQ(j["top"]["copy-bytes"]["sites"][0]["line"], 40);
  EXPECT_FALSE(j["top"]["cpu"].contains("sites"));
  // Leak candidates.
  ASSERT_EQ(j["leak_candidates"].size(), 1u);
  const auto& c = j["leak_candidates"][0];
  EXPECT_EQ(c["kind"], "unfreed-at-exit");
  EXPECT_EQ(c["pid"], 100);
  EXPECT_EQ(c["process"], 0);
  EXPECT_EQ(c["bytes"], 5 * 1009);
  EXPECT_EQ(c["count"], 5);
  EXPECT_EQ(c["growth_bytes_per_s"], 0);
  EXPECT_DOUBLE_EQ(c["confidence"].get<double>(), 1.0);
  EXPECT_EQ(c["site"], "leak (/src/app.py:10)");
  ASSERT_EQ(c["frames"].size(), 1u);
  EXPECT_EQ(c["frames"][0]["function"], "leak");
  EXPECT_EQ(c["frames"][0]["file"], "/src/app.py");
  EXPECT_EQ(c["frames"][0]["line"], 10);
  EXPECT_EQ(c["frames"][0]["kind"], "python");
  EXPECT_EQ(c["truncated"], false);
  EXPECT_TRUE(j["warnings"].is_array());
}

TEST(MemoryReport, JsonExportOfAProfileWithoutMemory) {
  Profile p;
  p.metrics = {{"cpu", "us"}};
  p.processes.resize(1);
  p.strings.push_back(std::string("bad \xff utf-8 \"quoted\"", 20));
  p.warnings.push_back(p.strings.back());
  auto j = nlohmann::json::parse(report::export_json(p));
  EXPECT_TRUE(j["processes"][0]["memory"].is_null());
  EXPECT_TRUE(j["leak_candidates"].empty());
  EXPECT_EQ(j["warnings"][0], "bad \xef\xbf\xbd utf-8 \"quoted\"") << "invalid UTF-8 is replaced, quotes escaped";
}

TEST(MemoryReport, SummaryShowsPeaksSitesAndCandidates) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  std::string s = report::text_summary(p, {});
  auto has = [&](const std::string& part) { return s.find(part) != std::string::npos; };
  EXPECT_TRUE(has("Memory:")) << s;
  EXPECT_TRUE(has("exact (every allocation)")) << s;
  EXPECT_TRUE(has("peak heap 10.0 MiB at 50.0 ms")) << s;
  EXPECT_TRUE(has("peak RSS 20.0 MiB at 60.0 ms")) << s;
  EXPECT_TRUE(has("Top allocation sites by alloc-bytes:")) << s;
  EXPECT_TRUE(has("Sites holding the heap at its peak")) << s;
  EXPECT_TRUE(has("big (/src/app.py:30)")) << s;
  EXPECT_TRUE(has("Top copy sites by copy-bytes")) << s;
  EXPECT_TRUE(has("copy (/src/app.py:40)")) << s;
  EXPECT_TRUE(has("Leak candidates (1):")) << s;
  EXPECT_TRUE(has("unfreed-at-exit")) << s;
  EXPECT_TRUE(has("leak (/src/app.py:10)")) << s;
  // The peak's site comes first in its table.
  size_t table = s.find("Sites holding the heap at its peak");
  EXPECT_LT(s.find("big (", table), s.find("leak (", table)) << s;
}

TEST(MemoryReport, SummaryWithoutMemoryHasNoMemorySection) {
  MemStream m(100, 1, 0, /*send_config=*/false);
  m.end(T0 + 10);
  Profile p = testing::build({&m});
  EXPECT_EQ(report::text_summary(p, {}).find("Memory:"), std::string::npos);
}

TEST(MemoryReport, SummaryCleansProgramText) {
  MemStream m(100, 1);
  m.stack(1, "evil\x1b[31m", "/src/\x07x.py", 3);
  m.alloc(1, T0 + 1, 1, 10, 10);
  m.alloc(1, T0 + 2, 2, 10, 10);
  m.end(T0 + 10);
  Profile p = testing::build({&m});
  std::string s = report::text_summary(p, {});
  EXPECT_EQ(s.find('\x1b'), std::string::npos);
  EXPECT_EQ(s.find('\x07'), std::string::npos);
  EXPECT_NE(s.find("evil?[31m"), std::string::npos) << s;
}

}  // namespace
}  // namespace mlprof

namespace mlprof {
namespace {

TEST(MemoryReport, HtmlHasTheLeakTableForMemoryProfilesOnly) {
  MemStream m = exact_scenario();
  Profile p = testing::build({&m});
  // The page draws the Leak candidates section (assets/tables.js) when data.memory is true; the
  // browser tests (tests/browser: memory vs native) check the drawn page.
  std::string html = report::html_report(p);
  EXPECT_NE(html.find("id: \"leaks\""), std::string::npos);
  auto d = report::report_data(p);
  ASSERT_EQ(d["leak_candidates"].size(), 1u);
  EXPECT_EQ(d["leak_candidates"][0]["site"], "leak (/src/app.py:10)");
  EXPECT_EQ(d["leak_candidates"][0]["bytes"], 5 * 1009);
  EXPECT_EQ(d["memory"], true);
  MemStream plain(100, 1, 0, /*send_config=*/false);
  plain.end(T0 + 10);
  EXPECT_EQ(report::report_data(testing::build({&plain}))["memory"], false);
}

TEST(MemoryReport, HtmlEscapesLeakSites) {
  MemStream m(100, 1);
  m.stack(1, "</script><script>alert(1)</script>", "/src/<b>.py", 3);
  m.alloc(1, T0 + 1, 1, 10, 10);
  m.alloc(1, T0 + 2, 2, 10, 10);
  m.end(T0 + 10);
  std::string html = report::html_report(testing::build({&m}));
  EXPECT_EQ(html.find("<script>alert(1)"), std::string::npos);
  EXPECT_EQ(html.find("<b>.py"), std::string::npos);
}

}  // namespace
}  // namespace mlprof
