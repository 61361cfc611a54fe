// Serving workflow, pure parts: percentiles (nearest rank) against a brute-force definition, the
// cloud fields from recorded requests, the recommendation rule, CPU peaks from polled points,
// cgroup cpu.max parsing, the process-tree poller on a fake /proc, the request file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "tools/serving_advice.h"
#include "tools/serving_options.h"
#include "tools/serving_recommend.h"
#include "tools/serving_resources.h"
#include "tools/serving_stats.h"

using namespace mlprof;
using namespace mlprof::tools;
namespace fs = std::filesystem;

namespace {

// The definition: the smallest value v such that at least q% of the values are <= v.
int64_t brute_percentile(const std::vector<int64_t>& v, double q) {
  std::vector<int64_t> s = v;
  std::sort(s.begin(), s.end());
  for (int64_t x : s) {
    size_t le = 0;
    for (int64_t y : s) le += y <= x;
    if (100.0 * static_cast<double>(le) >= q * static_cast<double>(s.size()) - 1e-9) return x;
  }
  return s.empty() ? 0 : s.back();
}

std::string temp_dir() {
  std::string d = ::testing::TempDir() + "/mlprof_serving_XXXXXX";
  std::vector<char> b(d.begin(), d.end());
  b.push_back(0);
  return mkdtemp(b.data());
}

}  // namespace

TEST(ServingStats, PercentilesAreNearestRank) {
  std::vector<int64_t> v;
  for (int i = 1; i <= 1000; ++i) v.push_back(i);
  EXPECT_EQ(percentile(v, 50), 500);
  EXPECT_EQ(percentile(v, 90), 900);
  EXPECT_EQ(percentile(v, 99), 990);
  EXPECT_EQ(percentile(v, 99.9), 999);
  EXPECT_EQ(percentile(v, 100), 1000);
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({7}, 99.9), 7);
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> x(1 + rng() % 300);
    for (auto& e : x) e = rng() % 50;  // many ties
    std::vector<int64_t> sorted = x;
    std::sort(sorted.begin(), sorted.end());
    for (double q : {50.0, 90.0, 95.0, 99.0, 99.9})
      ASSERT_EQ(percentile(sorted, q), brute_percentile(x, q)) << "n=" << x.size() << " q=" << q;
  }
}

TEST(ServingStats, FieldsCoverTheRightRequests) {
  profile::Serving s;
  s.warmup = 2;
  // Two warmup requests (slow, one failed), then 10 steady: every 5th fails with 500, one
  // transport error (status 0, i = 9) that is excluded from latencies but counted as a failure.
  s.requests.push_back({0, 900000000, 200});
  s.requests.push_back({1, 800000000, 503});
  for (int i = 0; i < 10; ++i) {
    int status = i == 9 ? 0 : (i % 5 == 4 ? 500 : 200);
    s.requests.push_back({1000 + i, (i + 1) * 1000000LL, status});
  }
  s.window_start_ns = 1000000000;
  s.window_end_ns = 3000000000;  // 2 s
  fill_latency_fields(s);
  EXPECT_EQ(s.total_queries, 12u);
  EXPECT_EQ(s.success_queries, 12u - 3);  // the warmup 503, the 500 (i = 4), the transport error (i = 9)
  // Latencies: 1..9 ms (the 10th had no response).
  EXPECT_EQ(s.average_latency_ns, 5000000);
  EXPECT_EQ(s.p50_ns, 5000000);
  EXPECT_EQ(s.p90_ns, 9000000);
  EXPECT_EQ(s.p999_ns, 9000000);
  EXPECT_EQ(s.measured_qps_milli, 5000);  // 10 requests in 2 s
}

TEST(ServingRecommend, HeadroomAndSchedulerSteps) {
  auto r = recommend(1000, int64_t{1} << 30);  // 1 core, 1 GiB
  EXPECT_EQ(r.millicores, 1200);
  EXPECT_EQ(r.memory_bytes, int64_t{5} << 28);  // 1.2 GiB -> 1.25 GiB
  r = recommend(0, 0);
  EXPECT_EQ(r.millicores, kCpuStepMillicores);
  EXPECT_EQ(r.memory_bytes, kMemoryStepBytes);
  r = recommend(251, 300 << 20);  // 0.3012 cores -> 0.4; 360 MiB -> 512 MiB
  EXPECT_EQ(r.millicores, 400);
  EXPECT_EQ(r.memory_bytes, int64_t{512} << 20);
  for (int64_t mc : {1, 99, 100, 833, 834, 5000, 12345})
    for (int64_t mem : {int64_t{1}, int64_t{123456789}, int64_t{7} << 30}) {
      auto x = recommend(mc, mem);
      EXPECT_GE(x.millicores * 10, mc * 12) << mc;
      EXPECT_LT(x.millicores - kCpuStepMillicores, std::max<int64_t>(mc * 12 / 10, kCpuStepMillicores) + 1);
      EXPECT_EQ(x.millicores % kCpuStepMillicores, 0);
      EXPECT_GE(x.memory_bytes * 10, mem * 12);
      EXPECT_EQ(x.memory_bytes % kMemoryStepBytes, 0);
    }
}

TEST(ServingResources, PeakCoresOverOneSecondWindows) {
  std::vector<profile::ServingResourcePoint> pts;
  // 10 Hz for 5 s: 0.5 cores, then 2 cores during [2 s, 3 s), then 0.5 again.
  int64_t cpu = 0;
  for (int i = 0; i <= 50; ++i) {
    const int64_t t = i * 100000000LL;
    pts.push_back({t, cpu, 0, 1, 1});
    const bool busy = t >= 2000000000 && t < 3000000000;
    cpu += busy ? 200000000 : 50000000;
  }
  EXPECT_EQ(peak_millicores(pts, 0, INT64_MAX), 2000);
  EXPECT_EQ(peak_millicores(pts, 0, 1500000000), 500);
  // Shorter than a window: the average over the span.
  EXPECT_EQ(peak_millicores(pts, 2000000000, 2500000000), 2000);
  EXPECT_EQ(peak_millicores({}, 0, 1), 0);
}

TEST(ServingResources, CgroupCpuMax) {
  EXPECT_EQ(parse_cpu_max("max 100000"), 0);
  EXPECT_EQ(parse_cpu_max("200000 100000"), 2000);
  EXPECT_EQ(parse_cpu_max("50000 100000\n"), 500);
  EXPECT_EQ(parse_cpu_max("garbage"), 0);
  EXPECT_EQ(parse_cpu_max("-5 100000"), 0);
  std::string src;
  EXPECT_GT(available_millicores(&src), 0);
  EXPECT_FALSE(src.empty());
}

TEST(ServingResources, PollerSumsTheTreeBelowTheAncestor) {
  const std::string root = temp_dir();
  const long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  // pid ppid utime stime threads start rss(pages). Comm with spaces and a ')' inside.
  auto write = [&](int pid, int ppid, long ut, long st, int threads, long rss, const char* comm = "(py thon) x)") {
    fs::create_directories(root + "/" + std::to_string(pid));
    std::ofstream f(root + "/" + std::to_string(pid) + "/stat");
    f << pid << " " << comm << " S " << ppid << " 0 0 0 -1 0 0 0 0 0 " << ut << " " << st << " 0 0 20 0 " << threads
      << " 0 " << 1000 + pid << " 0 " << rss << " 0 0\n";
  };
  write(10, 1, 0, 0, 1, 100);        // the ancestor (mlprof-run): not counted
  write(11, 10, hz, 0, 4, 1000);     // the service
  write(12, 11, 0, hz, 2, 500);      // its worker
  write(13, 1, hz * 50, 0, 1, 9999); // unrelated
  TreePoller poller(10, root);
  auto a = poller.poll(1);
  EXPECT_EQ(a.processes, 2u);
  EXPECT_EQ(a.threads, 6u);
  EXPECT_EQ(a.rss_bytes, 1500 * page);
  EXPECT_EQ(a.cpu_ns, 0);  // the first poll is the baseline
  write(11, 10, 2 * hz, 0, 4, 1000);  // +1 s
  write(12, 11, 0, 3 * hz, 2, 700);   // +2 s
  write(13, 1, hz * 90, 0, 1, 9999);
  auto b = poller.poll(2);
  EXPECT_EQ(b.cpu_ns, 3000000000LL);
  EXPECT_EQ(b.rss_bytes, 1700 * page);
  fs::remove_all(root + "/12");  // the worker exits: nothing is subtracted
  write(14, 11, hz, 0, 1, 10);    // a new worker: its CPU since start counts
  auto c = poller.poll(3);
  EXPECT_EQ(c.cpu_ns, 4000000000LL);
  EXPECT_EQ(c.processes, 2u);
  fs::remove_all(root);
}

TEST(ServingOptions, RequestFileLinesAreBodies) {
  const std::string d = temp_dir();
  {
    std::ofstream f(d + "/r.txt", std::ios::binary);
    f << "{\"a\":1}\r\n\n{\"b\":2}\nlast";
  }
  std::vector<std::string> bodies;
  std::string why;
  ASSERT_TRUE(read_request_bodies(d + "/r.txt", &bodies, &why)) << why;
  EXPECT_EQ(bodies, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "last"}));
  { std::ofstream f(d + "/empty.txt"); f << "\n\n"; }
  bodies.clear();
  EXPECT_FALSE(read_request_bodies(d + "/empty.txt", &bodies, &why));
  EXPECT_NE(why.find("no request"), std::string::npos) << why;
  EXPECT_FALSE(read_request_bodies(d + "/missing.txt", &bodies, &why));
  EXPECT_NE(why.find("missing.txt"), std::string::npos) << why;
  fs::remove_all(d);
}

TEST(ServingAdvice, ThreadPoolEnvironment) {
  std::string a = "OMP_NUM_THREADS=8", b = "PATH=/bin", c = "MKL_NUM_THREADS=2", d = "OMP_NUM_THREADSX=1";
  char* env[] = {a.data(), b.data(), c.data(), d.data(), nullptr};
  auto m = thread_pool_env(env);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m["OMP_NUM_THREADS"], "8");
  EXPECT_EQ(m["MKL_NUM_THREADS"], "2");
  // 8 threads x 1 process for 2 cores: the advice names the variable and the numbers.
  profile::Profile p;
  profile::Serving s;
  s.thread_env = m;
  s.available_millicores = 2000;
  s.window_start_ns = 0;
  s.window_end_ns = 1000000000;
  auto advice = serving_advice(p, s, WindowCpu{});
  ASSERT_FALSE(advice.empty());
  bool found = false;
  for (auto& x : advice) found = found || (x.find("OMP_NUM_THREADS=8") != std::string::npos && x.find("2.0") != std::string::npos);
  EXPECT_TRUE(found) << advice[0];
  for (auto& x : advice) EXPECT_EQ(x.find("MKL_NUM_THREADS=2"), std::string::npos) << "2 threads fit in 2 cores: " << x;
}
