// GPU join, clock conversion, aggregation and timelines with synthetic records (docs/gpu.md): the
// truth is what the records say by construction. Also the profile's gpu section round trip and
// decoding of wire records 20-24.
#include <gtest/gtest.h>

#include "collector/gpu_profile.h"
#include "collector/gpu_tracker.h"
#include "collector/stream_decoder.h"
#include "common/varint.h"
#include "common/wire_format.h"
#include "profile/profile_io.h"

namespace {

using namespace mlprof;
using collector::GpuActivityIn;
using collector::GpuTracker;
using K = wire::GpuActivityKind;

GpuActivityIn kernel(uint64_t corr, uint64_t start, uint64_t end, uint64_t name = 1, uint32_t device = 0) {
  GpuActivityIn a;
  a.kind = static_cast<uint8_t>(K::kKernel);
  a.correlation = corr;
  a.start = start;
  a.end = end;
  a.name_id = name;
  a.device = device;
  a.grid[0] = 4;
  a.block[0] = 32;
  return a;
}

GpuActivityIn copy(uint64_t corr, wire::GpuCopyKind kind, uint64_t bytes, uint64_t start, uint64_t end) {
  GpuActivityIn a;
  a.kind = static_cast<uint8_t>(K::kMemcpy);
  a.correlation = corr;
  a.copy_kind = static_cast<uint8_t>(kind);
  a.bytes = bytes;
  a.start = start;
  a.end = end;
  return a;
}

GpuActivityIn memory(uint64_t corr, bool release, uint64_t addr, uint64_t bytes, uint64_t t) {
  GpuActivityIn a;
  a.kind = static_cast<uint8_t>(release ? K::kMemFree : K::kMemAlloc);
  a.correlation = corr;
  a.address = addr;
  a.bytes = bytes;
  a.start = a.end = t;
  return a;
}

const collector::GpuSite* site(const GpuTracker& g, uint32_t thread, uint64_t stack) {
  for (auto& s : g.sites())
    if (s.thread == thread && s.stack == stack) return &s;
  return nullptr;
}

TEST(GpuTracker, JoinsLaunchFirstAndActivityFirst) {
  GpuTracker g;
  g.config(static_cast<uint8_t>(wire::GpuClock::kMonotonic), 0, 1);
  g.launch(0, 10, 100, 1, 0, 0);
  g.activity(kernel(1, 1000, 1500));  // launch already known
  g.activity(kernel(2, 2000, 2700));  // launch comes later
  g.launch(1, 20, 150, 2, 0, 0);
  g.finish();
  ASSERT_NE(site(g, 0, 10), nullptr);
  ASSERT_NE(site(g, 1, 20), nullptr);
  EXPECT_EQ(site(g, 0, 10)->kernel_ns, 500);
  EXPECT_EQ(site(g, 1, 20)->kernel_ns, 700);
  EXPECT_EQ(site(g, 1, 20)->gpu_ns, 700);
  EXPECT_EQ(g.totals().count("unjoined"), 0u);
}

TEST(GpuTracker, NestedDriverCallsJoinTheOuterStackEitherOrder) {
  GpuTracker g;
  g.launch(0, 7, 100, 5, 0, 0);
  g.alias(6, 5);                      // alias before the activity
  g.activity(kernel(6, 1000, 1300));
  g.activity(kernel(9, 2000, 2100));  // activity before its alias and launch
  g.alias(9, 8);
  g.launch(0, 8, 200, 8, 0, 0);
  g.finish();
  ASSERT_NE(site(g, 0, 7), nullptr);
  EXPECT_EQ(site(g, 0, 7)->kernel_ns, 300);
  ASSERT_NE(site(g, 0, 8), nullptr);
  EXPECT_EQ(site(g, 0, 8)->kernel_ns, 100);
  EXPECT_EQ(g.totals().count("unjoined"), 0u);
}

TEST(GpuTracker, UnjoinedActivityIsCountedNotAttributed) {
  GpuTracker g;
  g.activity(kernel(42, 1000, 2000));
  g.finish();
  EXPECT_TRUE(g.sites().empty());
  EXPECT_EQ(g.totals().at("unjoined"), 1);
  EXPECT_EQ(g.totals().at("kernel_ns"), 1000);
  EXPECT_EQ(g.kernels().at(1).unjoined_ns, 1000);
}

TEST(GpuTracker, ClockOffsetConvertsToMonotonic) {
  GpuTracker g;
  const int64_t offset = -1'700'000'000'000'000'000;  // CUPTI's realtime clock ahead of monotonic
  g.config(static_cast<uint8_t>(wire::GpuClock::kOffset), offset, 1);
  g.launch(0, 1, 5000, 1, 0, 0);
  const uint64_t start = 1'700'000'000'000'010'000ull;
  g.activity(kernel(1, start, start + 250));
  g.finish();
  ASSERT_EQ(g.ops().size(), 1u);
  EXPECT_EQ(g.ops()[0].start_ns, 10000);
  EXPECT_EQ(g.ops()[0].end_ns, 10250);
  EXPECT_EQ(g.ops()[0].launch_ns, 5000);
  // A monotonic clock ignores any offset.
  GpuTracker m;
  m.config(static_cast<uint8_t>(wire::GpuClock::kMonotonic), 12345, 1);
  EXPECT_EQ(m.to_mono(100), 100);
}

TEST(GpuTracker, CopiesByDirectionWithBytesAndKernelTable) {
  GpuTracker g;
  g.launch(0, 1, 0, 1, 1, 0);
  g.activity(copy(1, wire::GpuCopyKind::kHtoD, 1 << 20, 100, 150));
  g.launch(0, 2, 0, 2, 1, 0);
  g.activity(copy(2, wire::GpuCopyKind::kDtoH, 2 << 20, 200, 280));
  g.launch(0, 3, 0, 3, 1, 0);
  g.activity(copy(3, wire::GpuCopyKind::kDtoD, 4 << 20, 300, 320));
  g.launch(0, 4, 0, 4, 0, 0);
  g.activity(kernel(4, 400, 500, 7));
  g.launch(0, 4, 0, 5, 0, 0);
  g.activity(kernel(5, 600, 900, 7));
  g.name(7, "_Z3fooi");
  g.finish();
  EXPECT_EQ(site(g, 0, 1)->htod_ns, 50);
  EXPECT_EQ(site(g, 0, 1)->copy_bytes, 1 << 20);
  EXPECT_EQ(site(g, 0, 2)->dtoh_ns, 80);
  EXPECT_EQ(site(g, 0, 3)->dtod_ns, 20);
  EXPECT_EQ(site(g, 0, 3)->gpu_ns, 20);
  EXPECT_EQ(site(g, 0, 4)->kernel_ns, 400);
  EXPECT_EQ(g.totals().at("copy_bytes"), 7 << 20);
  const auto& k = g.kernels().at(7);
  EXPECT_EQ(k.calls, 2u);
  EXPECT_EQ(k.total_ns, 400);
  EXPECT_EQ(k.max_ns, 300);
  EXPECT_EQ(collector::demangle_kernel(g.kernel_name(7)), "foo(int)");
  EXPECT_EQ(collector::demangle_kernel("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(collector::demangle_kernel("_Zbroken"), "_Zbroken");
}

TEST(GpuUtilization, BusyUnionOfOverlappingIntervals) {
  // Bucket 0 [0,100): [10,40) and [30,60) overlap -> 50 busy; [90,130) spans buckets 0 and 1.
  auto u = collector::utilization({{10, 40}, {30, 60}, {90, 130}, {150, 150}}, 0, 200, 100);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].t_ns, 0);
  EXPECT_EQ(u[0].value, 600);  // (50 + 10) / 100
  EXPECT_EQ(u[1].value, 300);  // 30 / 100
  // Fully covered by concurrent streams: never above 1000.
  auto full = collector::utilization({{0, 100}, {0, 100}, {50, 100}}, 0, 100, 100);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(full[0].value, 1000);
  // A last partial bucket is measured against its own width.
  auto part = collector::utilization({{100, 150}}, 0, 150, 100);
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part[1].value, 1000);
}

TEST(GpuProfile, PeakDeviceMemoryAndItsHolders) {
  GpuTracker g;
  g.launch(0, 1, 0, 1, 5, 0);
  g.activity(memory(1, false, 0x1000, 64, 10));
  g.launch(0, 2, 0, 2, 5, 0);
  g.activity(memory(2, false, 0x2000, 32, 20));
  g.launch(0, 3, 0, 3, 6, 0);
  g.activity(memory(3, true, 0x2000, 32, 30));
  g.launch(0, 4, 0, 4, 5, 0);
  g.activity(memory(4, false, 0x3000, 16, 40));
  g.finish();
  std::vector<uint32_t> tmap = {0};
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>> values;
  collector::GpuBuildContext ctx;
  ctx.thread_map = &tmap;
  ctx.stack_of = [](uint64_t id) { return static_cast<uint32_t>(id + 100); };
  ctx.intern = [](const std::string&) { return 0u; };
  ctx.values = &values;
  ctx.start_ns = 0;
  ctx.end_ns = 50;
  auto pg = collector::build_gpu(g, ctx);
  ASSERT_EQ(pg.devices.size(), 1u);
  const auto& d = pg.devices[0];
  EXPECT_EQ(d.peak_bytes, 96);
  EXPECT_EQ(d.peak_t_ns, 20);
  ASSERT_EQ(d.peak_holders.size(), 2u);
  EXPECT_EQ(d.peak_holders[0].stack, 101u);
  EXPECT_EQ(d.peak_holders[0].bytes, 64);
  EXPECT_EQ(d.peak_holders[1].stack, 102u);
  ASSERT_EQ(d.memory.size(), 4u);
  EXPECT_EQ(d.memory[2].value, 64);
  EXPECT_EQ(d.memory[3].value, 80);
}

TEST(GpuProfile, MetricsPerStackInMicroseconds) {
  GpuTracker g;
  g.launch(0, 1, 0, 1, 0, 0);
  g.activity(kernel(1, 0, 2'000'000));
  g.launch(0, 1, 0, 2, 1, 0);
  g.activity(copy(2, wire::GpuCopyKind::kHtoD, 4096, 0, 500'000));
  g.finish();
  std::vector<uint32_t> tmap = {3};
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>> values;
  collector::GpuBuildContext ctx;
  ctx.thread_map = &tmap;
  ctx.stack_of = [](uint64_t id) { return static_cast<uint32_t>(id); };
  ctx.intern = [](const std::string&) { return 0u; };
  ctx.values = &values;
  ctx.metrics = true;
  ctx.first = 2;
  ctx.metric_count = 2 + collector::kGpuMetricCount;
  collector::build_gpu(g, ctx);
  auto& v = values.at({3, 1});
  EXPECT_EQ(v[2 + collector::kGpu], 2500);
  EXPECT_EQ(v[2 + collector::kGpuKernel], 2000);
  EXPECT_EQ(v[2 + collector::kGpuHtoD], 500);
  EXPECT_EQ(v[2 + collector::kGpuCopyBytes], 4096);
  EXPECT_EQ(v[0], 0);
}

// Wire records 20-24 through the stream decoder.
struct Rec {
  std::vector<uint8_t> out;
  void header() { out.insert(out.end(), {'M', 'L', 'P', 'W', wire::kMajor, wire::kMinor, 0, 0}); }
  void rec(wire::Record t, std::vector<uint64_t> fields, const std::string& s = "", size_t str_at = SIZE_MAX) {
    std::vector<uint8_t> p;
    auto u = [&p](uint64_t v) {
      uint8_t b[varint::kMaxBytes];
      size_t n = varint::encode(v, b);
      p.insert(p.end(), b, b + n);
    };
    for (size_t i = 0; i <= fields.size(); ++i) {
      if (i == str_at) {
        u(s.size());
        p.insert(p.end(), s.begin(), s.end());
      }
      if (i < fields.size()) u(fields[i]);
    }
    out.push_back(static_cast<uint8_t>(t));
    uint8_t b[varint::kMaxBytes];
    size_t n = varint::encode(p.size(), b);
    out.insert(out.end(), b, b + n);
    out.insert(out.end(), p.begin(), p.end());
  }
};

TEST(GpuWire, DecoderFeedsTheTracker) {
  Rec r;
  r.header();
  r.rec(wire::Record::kGpuConfig, {1, varint::zigzag(-1000), 130001});
  r.rec(wire::Record::kGpuLaunch, {4242, 9, 5000, 77, 0, 211});
  r.rec(wire::Record::kGpuCorrelation, {78, 77});
  r.rec(wire::Record::kGpuName, {1}, "_Z4testv", 1);
  r.rec(wire::Record::kGpuActivity, {1, 78, 11000, 12000, 0, 3, 0, 0, 1, 2, 1, 1, 64, 1, 1, 0});
  collector::StreamDecoder d;
  ASSERT_TRUE(d.feed(r.out.data(), r.out.size())) << d.error();
  auto& g = d.stream().gpu;
  g.finish();
  EXPECT_TRUE(g.active());
  EXPECT_EQ(g.cupti_version(), 130001u);
  ASSERT_EQ(g.ops().size(), 1u);
  EXPECT_EQ(g.ops()[0].start_ns, 10000);
  EXPECT_EQ(g.ops()[0].end_ns, 11000);
  EXPECT_EQ(g.ops()[0].stream, 3u);
  ASSERT_EQ(g.sites().size(), 1u);
  EXPECT_EQ(g.sites()[0].stack, 9u);
  EXPECT_EQ(d.stream().threads.at(g.sites()[0].thread).tid, 4242u);
  EXPECT_EQ(g.kernel_name(1), "_Z4testv");
  EXPECT_EQ(g.kernels().at(1).grid[0], 2u);
  EXPECT_EQ(g.kernels().at(1).block[0], 64u);
}

profile::Profile gpu_profile() {
  profile::Profile p;
  p.strings = {"", "k", "kernel()", "f.cpp", "main"};
  p.metrics = {{"cpu", "us"}, {"gpu", "us"}};
  p.frames = {{4, 3, 12, 0, 0x10, profile::FrameKind::kNative, false}};
  p.stacks = {{{0}, false}};
  p.processes.resize(1);
  p.processes[0].pid = 99;
  p.threads = {{0, 99, "main", 0, 0}};
  profile::ProcessGpu g;
  g.process = 0;
  g.cupti_version = 130001;
  g.clock = "offset";
  g.totals = {{"kernel_ns", 1234}, {"unjoined", 2}, {"negative", -5}};
  profile::GpuKernel k;
  k.name = 1;
  k.demangled = 2;
  k.stack = 0;
  k.calls = 3;
  k.total_ns = 1234;
  k.max_ns = 600;
  k.grid[0] = 8, k.grid[1] = 2, k.block[2] = 4;
  g.kernels = {k, profile::GpuKernel{}};
  profile::GpuDevice d;
  d.device = 1;
  d.bucket_ns = 100;
  d.utilization = {{1000, 500}, {1100, 0}};
  d.memory = {{1000, 64}, {1050, 0}};
  d.peak_bytes = 64;
  d.peak_t_ns = 1000;
  d.peak_holders = {{0, 64}, {profile::kNone, 3}};
  g.devices = {d};
  profile::GpuOp o;
  o.start_ns = 1000, o.end_ns = 1200, o.launch_ns = 900, o.thread = 0, o.device = 1, o.stream = 7;
  o.kind = profile::GpuOpKind::kMemcpy, o.copy_kind = 2, o.name = 0, o.bytes = 4096, o.correlation = 5;
  profile::GpuOp o2 = o;
  o2.launch_ns = 0, o2.thread = profile::kNone, o2.start_ns = 1300, o2.end_ns = 1300;
  o2.kind = profile::GpuOpKind::kKernel, o2.name = 2;
  g.ops = {o, o2};
  g.ops_truncated = true;
  p.gpu = {g};
  return p;
}

TEST(GpuProfileFile, SectionRoundTrips) {
  profile::Profile p = gpu_profile();
  auto bytes = profile::encode_profile(p);
  auto back = profile::decode_profile(bytes.data(), bytes.size(), "test");
  ASSERT_TRUE(back) << back.error();
  ASSERT_EQ(back.value().gpu.size(), 1u);
  EXPECT_EQ(back.value().gpu[0], p.gpu[0]);
}

TEST(GpuProfileFile, WithoutGpuNoSectionAndReadsEmpty) {
  profile::Profile p = gpu_profile();
  p.gpu.clear();
  auto bytes = profile::encode_profile(p);
  auto back = profile::decode_profile(bytes.data(), bytes.size(), "test");
  ASSERT_TRUE(back) << back.error();
  EXPECT_TRUE(back.value().gpu.empty());
  // The section costs nothing when absent: the same file as before the GPU section existed.
  profile::Profile with = gpu_profile();
  EXPECT_LT(bytes.size(), profile::encode_profile(with).size());
}

TEST(GpuProfileFile, BadIndexesAreRejected) {
  profile::Profile p = gpu_profile();
  p.gpu[0].kernels[0].stack = 5;  // no such stack
  auto bytes = profile::encode_profile(p);
  auto back = profile::decode_profile(bytes.data(), bytes.size(), "test");
  ASSERT_FALSE(back);
  EXPECT_NE(back.error().find("gpu"), std::string::npos) << back.error();
}

}  // namespace
