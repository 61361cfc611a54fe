// Serving workflow, pure parts: percentiles (nearest rank) against a brute-force definition, the
// cloud fields from recorded requests, the recommendation rule, CPU peaks from polled points,
// cgroup cpu.max parsing, the process-tree poller on a fake /proc, the request file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "profile/string_table.h"
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

// Requests cut off by mlprof-run's interruption (kAborted) are in no figure: not sent as far as
// the totals go, no latency, not in the throughput.
TEST(ServingStats, RequestsCutOffByTheInterruptionCountNowhere) {
  profile::Serving s;
  s.warmup = 1;
  s.requests.push_back({0, 5000000, 200});
  for (int i = 0; i < 4; ++i) s.requests.push_back({1000 + i, (i + 1) * 1000000LL, 200});
  s.requests.push_back({2000, 900000000, profile::ServingRequest::kAborted});
  s.requests.push_back({2001, 800000000, profile::ServingRequest::kAborted});
  s.window_start_ns = 1000000000;
  s.window_end_ns = 2000000000;
  fill_latency_fields(s);
  EXPECT_EQ(s.total_queries, 5u);
  EXPECT_EQ(s.success_queries, 5u);
  EXPECT_EQ(s.p999_ns, 4000000);
  EXPECT_EQ(s.average_latency_ns, 2500000);
  EXPECT_EQ(s.measured_qps_milli, 4000);  // 4 steady requests in 1 s
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
  // A load shorter than the poll period, between two points: the points around it count (it had
  // no point inside, and the figure was 0).
  EXPECT_EQ(peak_millicores(pts, 2230000000, 2270000000), 2000);
  EXPECT_EQ(peak_millicores(pts, 1230000000, 1270000000), 500);
  // The poller's last point comes just after the load's end.
  std::vector<profile::ServingResourcePoint> short_load = {{0, 0, 0, 1, 1}, {100000000, 80000000, 0, 1, 1},
                                                          {128000000, 100000000, 0, 1, 1}};
  EXPECT_EQ(peak_millicores(short_load, 5000000, 122000000), 714);  // 20 ms of CPU over 28 ms
  // Start-up (4 cores while the model loads) is left out when a point was taken at ready: polls
  // at 0 and 100 ms, ready at 190 ms with its point at 192 ms, the load at 1 core until 210 ms.
  std::vector<profile::ServingResourcePoint> after_startup = {{0, 0, 0, 1, 1},
                                                             {100000000, 400000000, 0, 1, 1},
                                                             {192000000, 768000000, 0, 1, 1},
                                                             {211000000, 787000000, 0, 1, 1}};
  EXPECT_EQ(peak_millicores(after_startup, 190000000, 210000000), 1000);
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

TEST(ServingResources, CgroupQuotaInV1AndV2Hierarchies) {
  std::map<std::string, std::string> files;
  auto read = [&](const std::string& path) { return files.count(path) ? files[path] : std::string(); };
  // cgroup v1 as on this project's VM (cpu on its own hierarchy) with a quota on a parent:
  // 150000 / 100000 = 1.5 cores.
  const std::string v1_cgroup = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/\n1:cpu:/svc/job\n0::/\n";
  const std::string v1_mounts =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n";
  files["/sys/fs/cgroup/cpu/svc/job/cpu.cfs_quota_us"] = "-1\n";
  files["/sys/fs/cgroup/cpu/svc/job/cpu.cfs_period_us"] = "100000\n";
  files["/sys/fs/cgroup/cpu/svc/cpu.cfs_quota_us"] = "150000\n";
  files["/sys/fs/cgroup/cpu/svc/cpu.cfs_period_us"] = "100000\n";
  CgroupQuota q = cgroup_cpu_quota(v1_cgroup, v1_mounts, read);
  EXPECT_EQ(q.millicores, 1500);
  EXPECT_EQ(q.source, "/sys/fs/cgroup/cpu/svc/cpu.cfs_quota_us");
  // A container whose cpu,cpuacct hierarchy is mounted at its own cgroup (root /docker/c1).
  files.clear();
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = "50000";
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"] = "100000";
  q = cgroup_cpu_quota("3:cpu,cpuacct:/docker/c1\n",
                       "40 31 0:33 /docker/c1 /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n", read);
  EXPECT_EQ(q.millicores, 500);
  // cgroup v2: the smallest cpu.max on the way up wins; "max" is no limit.
  files.clear();
  files["/sys/fs/cgroup/a/b/cpu.max"] = "max 100000\n";
  files["/sys/fs/cgroup/a/cpu.max"] = "300000 100000\n";
  files["/sys/fs/cgroup/cpu.max"] = "400000 100000\n";
  q = cgroup_cpu_quota("0::/a/b\n", "29 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", read);
  EXPECT_EQ(q.millicores, 3000);
  EXPECT_EQ(q.source, "/sys/fs/cgroup/a/cpu.max");
  // No quota anywhere.
  files.clear();
  EXPECT_EQ(cgroup_cpu_quota(v1_cgroup, v1_mounts, read).millicores, 0);
}

TEST(ServingOptions, UrlsAreCheckedBeforeAnythingRuns) {
  std::string why;
  EXPECT_TRUE(check_service_url("http://127.0.0.1:8080/score", &why)) << why;
  EXPECT_TRUE(check_service_url("HTTP://localhost/score", &why)) << why;
  EXPECT_TRUE(check_service_url("https://[::1]:8443/", &why)) << why;
  EXPECT_FALSE(check_service_url("http://", &why));
  EXPECT_FALSE(why.empty());
  // No host: libcurl took "score" for the host and the run waited for --ready-timeout.
  for (const char* no_host : {"http:///score", "https:///", "http://?x=1", "http://#top"}) {
    EXPECT_FALSE(check_service_url(no_host, &why)) << no_host;
    EXPECT_NE(why.find("names no host"), std::string::npos) << no_host << ": " << why;
  }
  EXPECT_TRUE(check_service_url("http://score/", &why)) << why;  // a host named score is one
  EXPECT_FALSE(check_service_url("http://127.0.0.1:notaport/", &why));
  EXPECT_NE(why.find("ort"), std::string::npos) << why;  // libcurl's "Port number was not a decimal number ..."
  EXPECT_FALSE(check_service_url("ftp://127.0.0.1/", &why));
  EXPECT_NE(why.find("http://"), std::string::npos) << why;
  EXPECT_FALSE(check_service_url("127.0.0.1:8080", &why));
  EXPECT_NE(why.find("no scheme (write http://127.0.0.1:8080)"), std::string::npos) << why;
  EXPECT_FALSE(check_service_url("http://127.0.0.1:0/", &why));
  EXPECT_NE(why.find("port 0"), std::string::npos) << why;
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

// A process's reaped children's CPU (cutime + cstime) counts: a child that lived between two polls
// (a service that forks one per request) was missed, and a child seen alive is not counted again
// when its parent reaps it. Ticks: hz = 1 s, hz / 10 = 100 ms.
TEST(ServingResources, PollerCountsReapedChildrenOnce) {
  const std::string root = temp_dir();
  const long hz = sysconf(_SC_CLK_TCK);
  auto write = [&](int pid, int ppid, long ut, long cut, long start = 0) {
    fs::create_directories(root + "/" + std::to_string(pid));
    std::ofstream f(root + "/" + std::to_string(pid) + "/stat");
    f << pid << " (srv) S " << ppid << " 0 0 0 -1 0 0 0 0 0 " << ut << " 0 " << cut << " 0 20 0 1 0 "
      << (start ? start : 1000 + pid) << " 0 10 0 0\n";
  };
  auto gone = [&](int pid) { fs::remove_all(root + "/" + std::to_string(pid)); };
  write(10, 1, 0, 0);        // mlprof-run
  write(11, 10, hz, 0);      // the service, 1 s
  write(12, 11, hz / 2, 0);  // a worker it forked, 0.5 s
  TreePoller poller(10, root);
  EXPECT_EQ(poller.poll(1).cpu_ns, 0);
  write(12, 11, hz * 8 / 10, 0);  // +0.3 s
  EXPECT_EQ(poller.poll(2).cpu_ns, 300000000);
  // The worker ends at 1.0 s and the service reaps it; a child forked and reaped between the two
  // polls used 0.2 s: the service's cutime is 1.2 s. New: 0.2 s + 0.2 s (it read 0.3 s before).
  gone(12);
  write(11, 10, hz, hz * 12 / 10);
  EXPECT_EQ(poller.poll(3).cpu_ns, 700000000);
  // A child seen alive at 0.5 s (new: counted whole), gone at the next poll before its parent's
  // cutime shows it (read between the two files), shown at the one after with 0.6 s: +0.1 s.
  write(13, 11, hz / 2, 0);
  EXPECT_EQ(poller.poll(4).cpu_ns, 1200000000);
  gone(13);
  EXPECT_EQ(poller.poll(5).cpu_ns, 1200000000);
  write(11, 10, hz, hz * 18 / 10);
  EXPECT_EQ(poller.poll(6).cpu_ns, 1300000000);
  // A child (0.1 s) with a grandchild (0.1 s) that it reaped (its cutime): both gone, the service
  // reaps the child with 0.3 s (0.1 s more of its own, 0.1 s more of the grandchild's):
  write(14, 11, hz / 10, 0);
  write(15, 14, hz / 10, 0);
  EXPECT_EQ(poller.poll(7).cpu_ns, 1500000000);
  gone(15);
  gone(14);
  write(11, 10, hz, hz * 21 / 10);
  EXPECT_EQ(poller.poll(8).cpu_ns, 1600000000);
  // A pid reused by a new child: the old one (0.1 s, seen) was reaped, the new one (0.2 s) is new.
  write(16, 11, hz / 10, 0);
  EXPECT_EQ(poller.poll(9).cpu_ns, 1700000000);
  write(16, 11, hz * 2 / 10, 0, 5000);
  write(11, 10, hz, hz * 23 / 10);  // +0.2 s: the old 16 ended at 0.2 s, 0.1 s of it new
  EXPECT_EQ(poller.poll(10).cpu_ns, 2000000000);
  // A child its parent never waits for (SIGCHLD ignored: the kernel reaps it, no cutime grows),
  // seen with 0.5 s: what it owes is dropped after a few polls, so the 0.2 s of a child the same
  // parent does reap later counts (it was swallowed by that debt for good).
  gone(16);
  write(17, 11, hz / 2, 0);
  write(11, 10, hz, hz * 25 / 10);  // the new 16's 0.2 s, reaped
  EXPECT_EQ(poller.poll(11).cpu_ns, 2500000000);  // 16's 0.2 s was counted at poll 10; +0.5 s of 17
  gone(17);
  for (int t = 12; t <= 15; ++t) EXPECT_EQ(poller.poll(t).cpu_ns, 2500000000);
  write(11, 10, hz, hz * 27 / 10);  // a child forked and reaped between two polls: 0.2 s
  EXPECT_EQ(poller.poll(16).cpu_ns, 2700000000);
  fs::remove_all(root);
}

// The memory peak is the largest sum of the processes' VmHWM (their own peaks, kept by the
// kernel), not of the RSS the polls saw: a spike between two polls counts.
TEST(ServingResources, PollerPeakMemoryIsTheSumOfThePeaks) {
  const std::string root = temp_dir();
  const long page = sysconf(_SC_PAGESIZE);
  auto write = [&](int pid, int ppid, long rss_pages, long hwm_kb) {
    fs::create_directories(root + "/" + std::to_string(pid));
    std::ofstream(root + "/" + std::to_string(pid) + "/stat")
        << pid << " (srv) S " << ppid << " 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << 1000 + pid << " 0 " << rss_pages
        << " 0 0\n";
    std::ofstream st(root + "/" + std::to_string(pid) + "/status");
    st << "Name:\tsrv\nVmPeak:\t  999999 kB\n";
    if (hwm_kb >= 0) st << "VmHWM:\t  " << hwm_kb << " kB\nVmRSS:\t  1 kB\n";
  };
  write(10, 1, 0, 0);
  write(11, 10, 100, 102400);  // 100 MiB at its peak, a few pages now
  write(12, 11, 100, 51200);   // 50 MiB
  TreePoller poller(10, root);
  auto a = poller.poll(1);
  EXPECT_EQ(a.rss_bytes, 200 * page);
  EXPECT_EQ(poller.peak_hwm_bytes(), int64_t{150} << 20);
  fs::remove_all(root + "/12");  // its peak goes with it; the largest sum stays
  EXPECT_EQ((poller.poll(2), poller.peak_hwm_bytes()), int64_t{150} << 20);
  write(13, 11, 10, 204800);   // a new one peaked at 200 MiB: 300 MiB now
  EXPECT_EQ((poller.poll(3), poller.peak_hwm_bytes()), int64_t{300} << 20);
  write(14, 11, 1000, -1);     // no VmHWM (a zombie): its RSS
  EXPECT_EQ((poller.poll(4), poller.peak_hwm_bytes()), (int64_t{300} << 20) + 1000 * page);
  fs::remove_all(root);
}

TEST(ServingOptions, RequestFileLinesAreBodies) {
  const std::string d = temp_dir();
  {
    std::ofstream f(d + "/r.txt", std::ios::binary);
    f << "{\"a\":1}\r\n\n{\"b\":2}\nlast";
  }
  {  // a UTF-8 byte order mark before the first body is stripped (it was sent with it); only there
    std::ofstream f(d + "/bom.txt", std::ios::binary);
    f << "\xEF\xBB\xBF{\"a\":1}\n\xEF\xBB\xBFsecond\n";
  }
  {
    std::vector<std::string> b;
    std::string w;
    ASSERT_TRUE(read_request_bodies(d + "/bom.txt", &b, &w)) << w;
    EXPECT_EQ(b, (std::vector<std::string>{"{\"a\":1}", "\xEF\xBB\xBFsecond"}));
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
  // From a /proc/PID/environ block; two processes' values merge to the larger.
  auto blk = thread_pool_env_block(std::string("PATH=/bin\0OMP_NUM_THREADS=3\0MKL_NUM_THREADS=1\0", 45));
  EXPECT_EQ(blk.size(), 2u);
  EXPECT_EQ(blk["OMP_NUM_THREADS"], "3");
  merge_thread_env(&blk, m);
  EXPECT_EQ(blk["OMP_NUM_THREADS"], "8");
  EXPECT_EQ(blk["MKL_NUM_THREADS"], "2");
  // 8 threads x 1 process for 2 cores, and the pools run (matrix products in the window): the
  // advice names the variable and the numbers.
  profile::Profile p;
  profile::Serving s;
  s.thread_env = m;
  s.available_millicores = 2000;
  s.window_start_ns = 0;
  s.window_end_ns = 1000000000;
  WindowCpu w;
  w.matmul_us = 1000;
  auto advice = serving_advice(p, s, w);
  ASSERT_FALSE(advice.empty());
  bool found = false;
  for (auto& x : advice) found = found || (x.find("OMP_NUM_THREADS=8") != std::string::npos && x.find("2.0") != std::string::npos);
  EXPECT_TRUE(found) << advice[0];
  for (auto& x : advice) EXPECT_EQ(x.find("MKL_NUM_THREADS=2"), std::string::npos) << "2 threads fit in 2 cores: " << x;
  // No pool at work (no matrix product, one busy thread per process): the variable is moot.
  for (auto& x : serving_advice(p, s, WindowCpu{})) EXPECT_EQ(x.find("OMP_NUM_THREADS=8"), std::string::npos) << x;
}

namespace {

bool said(const std::vector<std::string>& advice, const std::string& needle) {
  for (auto& a : advice)
    if (a.find(needle) != std::string::npos) return true;
  return false;
}

// A one-second steady window of 100 requests on 2 cores, with its CPU split as given.
struct AdviceCase {
  profile::Profile p;
  profile::Serving s;
  WindowCpu w;
  AdviceCase() {
    s.available_millicores = 2000;
    s.window_start_ns = 0;
    s.window_end_ns = 1000000000;
    s.window_requests = 100;
    s.p50_ns = s.p99_ns = 2000000;
    s.requested_millicores = 1200;
    s.max_utilized_millicores = 1000;
    w.total_us = 500000;
    w.native_us = 500000;
  }
  std::vector<std::string> advice() const { return serving_advice(p, s, w); }
};

}  // namespace

TEST(ServingAdvice, EachRuleFiresAtItsThresholdAndNotBelow) {
  {  // a quiet case says nothing
    AdviceCase c;
    EXPECT_TRUE(c.advice().empty()) << c.advice().front();
  }
  {  // oversubscription: 3 threads busy (>= 0.1 core each) in one process for 2 cores, two of them
     // an OpenMP team's workers
    AdviceCase c;
    c.p.threads = {{0, 1, "a", 0, 0}, {0, 2, "b", 0, 0}, {0, 3, "c", 0, 0}};
    c.w.per_thread_us = {{0, 300000}, {1, 200000}, {2, 100000}};
    c.w.pool_threads = {1, 2};
    EXPECT_TRUE(said(c.advice(), "3 threads were busy")) << ::testing::PrintToString(c.advice());
    EXPECT_TRUE(said(c.advice(), "2 of them a thread pool's workers"));
    c.w.per_thread_us[2] = 99000;  // under 0.1 core: 2 busy threads fit
    EXPECT_FALSE(said(c.advice(), "threads were busy"));
  }
  {  // 4 request-handler threads (no pool), taking turns on the GIL at 0.6 of 2 cores: no advice to
     // limit pools (it named OMP_NUM_THREADS for a threaded HTTP server's handlers)
    AdviceCase c;
    c.p.threads = {{0, 1, "a", 0, 0}, {0, 2, "b", 0, 0}, {0, 3, "c", 0, 0}, {0, 4, "d", 0, 0}};
    c.w.per_thread_us = {{0, 150000}, {1, 150000}, {2, 150000}, {3, 150000}};
    c.w.total_us = 600000;
    EXPECT_FALSE(said(c.advice(), "threads were busy")) << ::testing::PrintToString(c.advice());
    EXPECT_FALSE(said(c.advice(), "OMP_NUM_THREADS"));
    EXPECT_FALSE(said(c.advice(), "service's own threads"));
    // The same handlers using 1.9 of the 2 cores: CPU-bound, said as such.
    c.w.per_thread_us = {{0, 475000}, {1, 475000}, {2, 475000}, {3, 475000}};
    c.w.total_us = c.w.native_us = 1900000;
    EXPECT_TRUE(said(c.advice(), "4 of the service's own threads")) << ::testing::PrintToString(c.advice());
    EXPECT_FALSE(said(c.advice(), "OMP_NUM_THREADS"));
    c.w.total_us = 1700000;  // 85% of the cores: not CPU-bound
    EXPECT_FALSE(said(c.advice(), "service's own threads"));
  }
  {  // thread pools spinning while they wait: >= 10% of the window's CPU
    AdviceCase c;
    c.w.pool_wait_us = 50000;
    c.w.pool_wait_by_library = {{"libgomp.so.1", 10000}, {"libpthreadpool.so.0", 40000}};
    EXPECT_TRUE(said(c.advice(), "10% of the steady-state CPU (0.50 ms per request) was thread pools' threads "
                                 "spinning while they waited for work (libpthreadpool.so.0 8%, libgomp.so.1 2%)"))
        << ::testing::PrintToString(c.advice());
    EXPECT_TRUE(said(c.advice(), "OMP_WAIT_POLICY=passive"));
    c.w.pool_wait_us = 49000;
    EXPECT_FALSE(said(c.advice(), "spinning"));
  }
  {  // interpreter share >= 50%
    AdviceCase c;
    c.w.interpreter_us = 250000;
    EXPECT_TRUE(said(c.advice(), "50% of the steady-state CPU"));
    c.w.interpreter_us = 249000;
    EXPECT_FALSE(said(c.advice(), "Python interpreter"));
  }
  {  // matrix products >= 30%
    AdviceCase c;
    c.w.matmul_us = 150000;
    EXPECT_TRUE(said(c.advice(), "matrix products"));
    c.w.matmul_us = 149000;
    EXPECT_FALSE(said(c.advice(), "quantization"));
  }
  {  // GIL handoffs >= 10%
    AdviceCase c;
    c.w.gil_us = 50000;
    EXPECT_TRUE(said(c.advice(), "10% of the steady-state CPU (0.50 ms per request) goes to handing the GIL"))
        << ::testing::PrintToString(c.advice());
    c.w.gil_us = 49900;
    EXPECT_FALSE(said(c.advice(), "GIL"));
  }
  {  // too few samples: no share advice, a sentence saying why
    AdviceCase c;
    c.w.total_us = c.w.interpreter_us = c.w.matmul_us = c.w.gil_us = 150000;
    auto a = c.advice();
    EXPECT_TRUE(said(a, "only 150 ms of sampled CPU (100 requests)")) << ::testing::PrintToString(a);
    EXPECT_FALSE(said(a, "Python interpreter"));
    EXPECT_FALSE(said(a, "quantization"));
    EXPECT_FALSE(said(a, "handing the GIL"));
  }
  {  // copies: >= 1 MiB per steady-state request
    AdviceCase c;
    c.s.window_copy_bytes = 100LL << 20;
    EXPECT_TRUE(said(c.advice(), "copied 1.0 MiB per request in the steady state"));
    c.s.window_copy_bytes -= 100;
    EXPECT_FALSE(said(c.advice(), "copied"));
  }
  {  // a long tail (p99 >= 3 x p50) and its likely cause
    AdviceCase c;
    c.s.p99_ns = 6000000;
    EXPECT_TRUE(said(c.advice(), "--mode wall"));
    c.w.lock_wait_us = 40000;
    EXPECT_TRUE(said(c.advice(), "waited 40 ms on locks"));
    c.w.gc_us = 25000;  // 5% of the window's CPU
    EXPECT_TRUE(said(c.advice(), "garbage collector"));
    c.s.p99_ns = 5999999;
    EXPECT_FALSE(said(c.advice(), "latency tail"));
  }
  {  // CPU-bound: the peak >= 90% of the cores; a recommendation above them
    AdviceCase c;
    c.s.max_utilized_millicores = 1800;
    c.s.requested_millicores = 2200;
    EXPECT_TRUE(said(c.advice(), "CPU-bound"));
    EXPECT_TRUE(said(c.advice(), "recommended 2.2 cores exceed"));
    c.s.requested_millicores = 0;  // no recommendation (the replay did not complete): nothing to compare
    EXPECT_FALSE(said(c.advice(), "recommended"));
  }
}

TEST(ServingWindow, GilHandoffFramesAreCountedByName) {
  for (const char* yes : {"PyEval_SaveThread", "PyEval_RestoreThread", "PyGILState_Ensure", "take_gil",
                          "take_gil.constprop.0", "drop_gil.lto_priv.0"})
    EXPECT_TRUE(is_gil_handoff_function(yes)) << yes;
  for (const char* no : {"PyEval_SaveThreadState", "take_gilded", "_PyEval_EvalFrameDefault", "pthread_cond_signal",
                         "PyEval_EvalCode", ""})
    EXPECT_FALSE(is_gil_handoff_function(no)) << no;
  // A stack through PyEval_RestoreThread counts its CPU as the GIL's; a stack without one does not;
  // samples outside the window do not count.
  profile::Profile p;
  profile::StringTable st(p.strings);
  p.metrics = {{"cpu", "us"}};
  p.frames = {{st.intern("handle"), 0, 0, 0, 0, profile::FrameKind::kPython, false},
              {st.intern("PyEval_RestoreThread"), 0, 0, 0, 0, profile::FrameKind::kNative, false},
              {st.intern("__futex_abstimed_wait_common64"), 0, 0, 0, 0, profile::FrameKind::kNative, false},
              {st.intern("tokenize"), 0, 0, 0, 0, profile::FrameKind::kPython, false}};
  p.stacks = {{{2, 1, 0}, false}, {{3, 0}, false}};  // leaf first
  p.processes = {profile::Process{}};
  p.threads = {{0, 1, "main", 0, 0}};
  p.stack_values = {{0, 0, {30000}}, {0, 1, {70000}}};  // 3 and 7 samples of 10 ms
  for (int i = 0; i < 3; ++i) p.samples.push_back({0, 0, 100 + i, 1});
  for (int i = 0; i < 7; ++i) p.samples.push_back({0, 1, 200 + i, 1});
  WindowCpu all = window_cpu(p, 0, 1000);
  EXPECT_EQ(all.total_us, 100000);
  EXPECT_EQ(all.gil_us, 30000);
  WindowCpu later = window_cpu(p, 150, 1000);
  EXPECT_EQ(later.total_us, 70000);
  EXPECT_EQ(later.gil_us, 0);
}


// A pool's worker is known by its stack: the C runtime's thread start, then the pool's routine
// (libgomp here), or a sample charged to its starting line under the [thread-pool workers] frame.
// A request handler's thread (started by the interpreter) is not one.
TEST(ServingWindow, ThreadPoolWorkersAreKnownByTheirStacks) {
  profile::Profile p;
  profile::StringTable st(p.strings);
  p.metrics = {{"cpu", "us"}};
  const uint32_t libc = st.intern("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                 gomp = st.intern("/usr/lib/x86_64-linux-gnu/libgomp.so.1"), py = st.intern("/usr/bin/python3.11");
  p.frames = {{st.intern("clone3"), 0, 0, libc, 0, profile::FrameKind::kNative, false},
              {st.intern("start_thread"), 0, 0, libc, 0, profile::FrameKind::kNative, false},
              {0, 0, 0, gomp, 0x1cd67, profile::FrameKind::kNative, false},
              {st.intern("burn"), 0, 0, py, 0, profile::FrameKind::kNative, false},
              {st.intern("thread_run"), 0, 0, py, 0, profile::FrameKind::kNative, false},
              {st.intern(profile::kPoolWorkersFrameName), 0, 0, 0, 0, profile::FrameKind::kNative, false}};
  p.stacks = {{{3, 2, 1, 0}, false},   // an OpenMP worker
              {{3, 4, 1, 0}, false},   // a thread the interpreter started
              {{3, 5, 4}, false},      // a worker's sample charged to its starting stack
              {{2, 1, 0}, false}};     // a stack that is only the pool's routine: still its thread
  p.processes = {profile::Process{}};
  p.threads = {{0, 1, "main", 0, 0}, {0, 2, "omp", 0, 0}, {0, 3, "handler", 0, 0}, {0, 4, "omp2", 0, 0}};
  p.stack_values = {{1, 0, {10000}}, {2, 1, {10000}}, {3, 2, {10000}}, {0, 3, {10000}}};
  p.samples = {{1, 0, 100, 1}, {2, 1, 100, 1}, {3, 2, 100, 1}, {0, 3, 100, 1}};
  WindowCpu w = window_cpu(p, 0, 1000);
  EXPECT_EQ(w.pool_threads, (std::set<uint32_t>{0, 1, 3}));
  EXPECT_EQ(w.pool_wait_us, 10000);  // the stack of nothing but the pool's routine: waiting for work
  EXPECT_EQ(w.pool_wait_by_library, (std::map<std::string, int64_t>{{"libgomp.so.1", 10000}}));
}

// Wall mode: the window's waits in locks (futex, pthread_cond, the GIL) come from the wait metric
// of the stacks through them, not from their CPU.
TEST(ServingWindow, LockWaitsAreTheWaitMetricOfLockStacks) {
  profile::Profile p;
  profile::StringTable st(p.strings);
  p.metrics = {{"cpu", "us"}, {"wait", "us"}};
  p.frames = {{st.intern("handle"), 0, 0, 0, 0, profile::FrameKind::kPython, false},
              {st.intern("__futex_abstimed_wait_common64"), 0, 0, 0, 0, profile::FrameKind::kNative, false},
              {st.intern("tokenize"), 0, 0, 0, 0, profile::FrameKind::kPython, false}};
  p.stacks = {{{1, 0}, false}, {{2}, false}};
  p.processes = {profile::Process{}};
  p.threads = {{0, 1, "main", 0, 0}};
  p.stack_values = {{0, 0, {0, 250000}}, {0, 1, {40000, 0}}};  // 250 ms waiting in the futex, 40 ms of CPU
  p.samples = {{0, 0, 100, 25}, {0, 1, 200, 4}};
  WindowCpu w = window_cpu(p, 0, 1000);
  EXPECT_EQ(w.lock_wait_us, 250000);
  EXPECT_EQ(w.total_us, 40000);
}
