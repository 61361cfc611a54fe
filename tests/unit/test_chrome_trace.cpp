// The Chrome trace export, parsed back with nlohmann-json: valid trace-event JSON, metadata for
// every process and named thread, per-thread flame-chart slices whose times and sample counts
// follow from samples placed by construction, proper nesting, and memory counters.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "report/chrome_trace.h"
#include "report_fixture.h"

namespace {

using mlprof::profile::Frame;
using mlprof::profile::FrameKind;
using mlprof::profile::Profile;
using mlprof::report::chrome_trace;
using mlprof::report_test::kBig;
using nlohmann::json;

json parse_trace(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not valid JSON:\n" << text.substr(0, 2000);
  if (j.is_discarded()) return json::object({{"traceEvents", json::array()}});
  EXPECT_TRUE(j.is_object());
  EXPECT_TRUE(j["traceEvents"].is_array());
  for (const auto& e : j["traceEvents"]) {
    EXPECT_TRUE(e["ph"].is_string()) << e;
    EXPECT_TRUE(e["pid"].is_number_unsigned()) << e;
    EXPECT_TRUE(e["name"].is_string()) << e;
    std::string ph = e["ph"];
    if (ph == "X") {
      EXPECT_TRUE(e["ts"].is_number()) << e;
      EXPECT_TRUE(e["dur"].is_number()) << e;
      EXPECT_GT(e["dur"].get<double>(), 0) << e;
      EXPECT_TRUE(e["tid"].is_number_unsigned()) << e;
      EXPECT_TRUE(e["args"]["samples"].is_number_unsigned()) << e;
    } else if (ph == "C") {
      EXPECT_TRUE(e["ts"].is_number()) << e;
      EXPECT_TRUE(e["args"].is_object()) << e;
    } else {
      EXPECT_EQ(ph, "M") << e;
    }
  }
  return j;
}

struct Slice {
  uint32_t pid, tid;
  std::string name;
  double ts, dur;
  uint64_t samples;
  auto key() const { return std::tie(pid, tid, ts, name, dur, samples); }
  bool operator<(const Slice& o) const { return key() < o.key(); }
  bool operator==(const Slice& o) const { return key() == o.key(); }
};
std::ostream& operator<<(std::ostream& os, const Slice& s) {
  return os << "{" << s.pid << "/" << s.tid << " " << s.name << " ts=" << s.ts << " dur=" << s.dur
            << " n=" << s.samples << "}";
}

std::vector<Slice> slices(const json& trace) {
  std::vector<Slice> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X")
      out.push_back({e["pid"], e["tid"], e["name"], e["ts"], e["dur"], e["args"]["samples"]});
  return out;
}

// Slices on one track must nest: each one lies inside the enclosing open slice or after it.
// Returns the root slices' sample counts per (pid, tid).
std::map<std::pair<uint32_t, uint32_t>, uint64_t> check_nesting(const std::vector<Slice>& all) {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> tracks;
  for (auto& s : all) tracks[{s.pid, s.tid}].push_back(s);
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> roots;
  for (auto& [track, v] : tracks) {
    std::stable_sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
    });
    std::vector<const Slice*> open;
    for (auto& s : v) {
      while (!open.empty() && open.back()->ts + open.back()->dur <= s.ts + 1e-6) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.ts + s.dur, open.back()->ts + open.back()->dur + 1e-6) << s << " overlaps " << *open.back();
        EXPECT_LE(s.samples, open.back()->samples) << s << " inside " << *open.back();
      } else {
        roots[track] += s.samples;
      }
      open.push_back(&s);
    }
  }
  return roots;
}

uint32_t intern(Profile& p, const std::string& s) {
  p.strings.push_back(s);
  return static_cast<uint32_t>(p.strings.size() - 1);
}

constexpr int64_t kStart = 1'000'000'000, kMs = 1'000'000;

// Ground truth by construction (1000 Hz: each sample covers the 1 ms before it, times its weight):
//   thread main (tid 10):  +1 ms, +2 ms main;compute;add_one   +3 ms main;compute(line 21);memcpy
//                          +10 ms main   +13 ms main (weight 3: 10..13 ms, contiguous)
//   thread worker (tid 11): +5 ms main;compute;add_one (weight 2: 3..5 ms)
Profile timed_profile() {
  Profile p;
  p.run.start_ns = kStart;
  p.run.end_ns = kStart + 20 * kMs;
  p.run.rate_hz = 1000;
  p.run.mode = "cpu";
  p.run.command = {"./app", "--x"};
  p.metrics = {{"cpu", "us"}};
  mlprof::profile::Process proc;
  proc.pid = 10;
  proc.exe = "/opt/app";
  proc.argv = {"./app", "--x"};
  p.processes = {proc};
  p.threads = {{0, 10, "main", 0, 0}, {0, 11, "worker", 0, 0}};
  uint32_t main_fn = intern(p, "main"), compute = intern(p, "compute"), add_one = intern(p, "add_one"),
           memcpy_fn = intern(p, "memcpy"), src = intern(p, "/src/app.cpp"), app = intern(p, "/opt/app");
  p.frames = {
      {main_fn, src, 5, app, 0, FrameKind::kNative, false},      // F0
      {compute, src, 20, app, 0, FrameKind::kNative, false},     // F1
      {add_one, src, 30, app, 0, FrameKind::kNative, true},      // F2 inlined into F1
      {memcpy_fn, 0, 0, app, 0, FrameKind::kNative, false},      // F3
      {compute, src, 21, app, 0, FrameKind::kNative, false},     // F4: compute at another line
  };
  p.stacks = {{{2, 1, 0}, false}, {{3, 4, 0}, false}, {{0}, false}};
  p.samples = {
      {0, 0, kStart + 1 * kMs, 1}, {0, 0, kStart + 2 * kMs, 1}, {0, 1, kStart + 3 * kMs, 1},
      {1, 0, kStart + 5 * kMs, 2}, {0, 2, kStart + 10 * kMs, 1}, {0, 2, kStart + 13 * kMs, 3},
  };
  return p;
}

TEST(ChromeTrace, SlicesFollowTheSamples) {
  json t = parse_trace(chrome_trace(timed_profile()));
  std::vector<Slice> got = slices(t);
  std::vector<Slice> want = {
      {10, 10, "main", 0, 3000, 3},     {10, 10, "compute", 0, 3000, 3},  {10, 10, "add_one", 0, 2000, 2},
      {10, 10, "memcpy", 2000, 1000, 1}, {10, 10, "main", 9000, 4000, 2},
      {10, 11, "main", 3000, 2000, 1},  {10, 11, "compute", 3000, 2000, 1}, {10, 11, "add_one", 3000, 2000, 1},
  };
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  auto roots = check_nesting(slices(t));
  EXPECT_EQ((roots[{10, 10}]), 5u);
  EXPECT_EQ((roots[{10, 11}]), 1u);
}

TEST(ChromeTrace, ParentsComeBeforeChildrenAtTheSameTime) {
  json t = parse_trace(chrome_trace(timed_profile()));
  std::vector<std::string> order;
  for (auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 10 && e["ts"] == 0) order.push_back(e["name"]);
  EXPECT_EQ(order, (std::vector<std::string>{"main", "compute", "add_one"}));
}

TEST(ChromeTrace, SliceArgsNameTheCode) {
  json t = parse_trace(chrome_trace(timed_profile()));
  for (auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["cat"], "cpu");
    EXPECT_EQ(e["args"]["module"], "/opt/app") << e;
    if (e["name"] == "memcpy") EXPECT_FALSE(e["args"].contains("file"));
    else EXPECT_EQ(e["args"]["file"], "/src/app.cpp") << e;
    EXPECT_EQ(e["args"].contains("inlined"), e["name"] == "add_one") << e;
  }
  EXPECT_EQ(t["otherData"]["command"], "./app --x");
  EXPECT_EQ(t["otherData"]["rate_hz"], 1000);
}

TEST(ChromeTrace, MetadataNamesProcessesAndThreads) {
  Profile prof = mlprof::report_test::make_report_profile();
  json t = parse_trace(chrome_trace(prof));
  std::map<uint32_t, std::string> procs;
  std::map<std::pair<uint32_t, uint32_t>, std::string> threads;
  for (auto& e : t["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") procs[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  EXPECT_EQ(procs, (std::map<uint32_t, std::string>{{100, "python3"}, {200, "worker"}}));
  EXPECT_EQ(threads, (std::map<std::pair<uint32_t, uint32_t>, std::string>{{{100, 100}, "python3"},
                                                                         {{100, 101}, "loader"}}));
  // Every sample lands under a root slice of its own thread.
  auto roots = check_nesting(slices(t));
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> want;
  for (auto& s : prof.samples) {
    auto& th = prof.threads[s.thread];
    ++want[{prof.processes[th.process].pid, th.tid}];
  }
  EXPECT_EQ(roots, want);
}

TEST(ChromeTrace, TruncatedAndUnknownStacksGetMarkerRoots) {
  Profile p = timed_profile();
  p.stacks.push_back({{1, 0}, true});   // S3 truncated
  p.stacks.push_back({{}, false});      // S4 empty
  p.samples = {{0, 3, kStart + 1 * kMs, 1}, {0, 4, kStart + 5 * kMs, 1}, {0, 77, kStart + 9 * kMs, 1}};
  std::vector<Slice> got = slices(parse_trace(chrome_trace(p)));
  std::sort(got.begin(), got.end());
  std::vector<Slice> want = {{10, 10, "[truncated]", 0, 1000, 1}, {10, 10, "main", 0, 1000, 1},
                             {10, 10, "compute", 0, 1000, 1},     {10, 10, "[unknown]", 4000, 1000, 1},
                             {10, 10, "[unknown]", 8000, 1000, 1}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST(ChromeTrace, MemoryTimelinesAreCounters) {
  Profile p = timed_profile();
  mlprof::profile::ProcessMemory pm;
  pm.process = 0;
  pm.timeline = {{kStart + 1 * kMs, 50'000'000, 1000}, {kStart + 2 * kMs, -1, 3000}, {kStart + 3 * kMs, 52'000'000, 500}};
  p.memory = {pm};
  json t = parse_trace(chrome_trace(p));
  std::vector<std::tuple<std::string, double, int64_t>> got;
  for (auto& e : t["traceEvents"])
    if (e["ph"] == "C") {
      EXPECT_EQ(e["pid"], 10);
      got.emplace_back(e["name"], e["ts"], e["args"]["bytes"]);
    }
  std::vector<std::tuple<std::string, double, int64_t>> want = {
      {"RSS", 1000, 50'000'000}, {"Heap", 1000, 1000}, {"Heap", 2000, 3000},  // RSS not measured at 2 ms
      {"RSS", 3000, 52'000'000}, {"Heap", 3000, 500}};
  EXPECT_EQ(got, want);
}

TEST(ChromeTrace, NamesAreEscapedByTheJsonLibrary) {
  Profile p = timed_profile();
  p.strings[p.frames[0].function] = "ma\"in\\\n<script>";
  p.strings[p.frames[3].function] = std::string("mem\xff" "cpy");  // invalid UTF-8
  p.threads[0].name = "th\"read\x01";
  json t = parse_trace(chrome_trace(p));
  std::set<std::string> names;
  for (auto& s : slices(t)) names.insert(s.name);
  EXPECT_TRUE(names.count("ma\"in\\\n<script>"));
  EXPECT_TRUE(names.count("mem\xEF\xBF\xBD" "cpy"));
  bool thread = false;
  for (auto& e : t["traceEvents"])
    thread |= e["name"] == "thread_name" && e["args"]["name"] == "th\"read\x01";
  EXPECT_TRUE(thread);
}

TEST(ChromeTrace, EmptyProfileIsAValidTrace) {
  json t = parse_trace(chrome_trace(Profile{}));
  EXPECT_TRUE(t["traceEvents"].empty());
}

TEST(ChromeTrace, WriteFailureIsReported) {
  std::ostringstream os;
  os.setstate(std::ios::badbit);
  auto st = mlprof::report::write_chrome_trace(timed_profile(), os);
  EXPECT_FALSE(st.ok());
}

TEST(ChromeTrace, MillionSamplesInSeconds) {
  // 4 threads x kBig/4 samples at 1 kHz under one root; the leaf changes every sample, the
  // middle of the stack every 100 samples.
  Profile p;
  p.run.start_ns = kStart;
  p.run.rate_hz = 1000;
  p.metrics = {{"cpu", "us"}};
  mlprof::profile::Process proc;
  proc.pid = 1;
  p.processes = {proc};
  for (uint32_t t = 0; t < 4; ++t) p.threads.push_back({0, 100 + t, "t" + std::to_string(t), 0, 0});
  for (uint32_t i = 0; i <= 200; ++i) {
    p.strings.push_back(i == 200 ? "root" : "fn_" + std::to_string(i));
    p.frames.push_back({i + 1, 0, 0, 0, 0, FrameKind::kNative, false});
  }
  for (uint32_t s = 0; s < 1000; ++s) {
    mlprof::profile::Stack st;
    st.frames.push_back(100 + s % 100);  // leaf
    for (uint32_t d = 0; d < 20; ++d) st.frames.push_back((s / 100 + d) % 100);
    st.frames.push_back(200);  // root
    p.stacks.push_back(st);
  }
  for (uint32_t i = 0; i < kBig; ++i)
    p.samples.push_back({i % 4, (i / 4) % 1000, kStart + (i / 4 + 1) * kMs, 1});
  auto t0 = std::chrono::steady_clock::now();
  std::string text = chrome_trace(p);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One event per line: parse them one at a time (a DOM of the whole trace would be huge).
  std::istringstream in(text);
  std::string line;
  size_t slices = 0;
  std::map<uint32_t, std::pair<uint64_t, double>> root;  // tid -> samples, duration
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{' || line.rfind("{\"traceEvents\"", 0) == 0) continue;
    if (line.back() == ',') line.pop_back();
    json e = json::parse(line, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << line;
    if (e["ph"] != "X") continue;
    ++slices;
    if (e["name"] == "root") {
      root[e["tid"]].first += e["args"]["samples"].get<uint64_t>();
      root[e["tid"]].second += e["dur"].get<double>();
    }
  }
  for (uint32_t th = 0; th < 4; ++th) {
    EXPECT_EQ(root[100 + th].first, kBig / 4);
    EXPECT_EQ(root[100 + th].second, kBig / 4 * 1000.0);  // contiguous: one root slice
  }
  // Per thread: a leaf slice per sample, and 20 middle frames + root renewed every 100 samples at most.
  EXPECT_GE(slices, kBig);
  EXPECT_LE(slices, kBig + kBig / 100 * 21 + 4 * 22);  // 4 threads x (kBig / 4 / 100) renewals
  RecordProperty("export_seconds", std::to_string(secs));
  // Speed is measured by bench/ (docs/benchmarks.md), not asserted here.
}

}  // namespace
