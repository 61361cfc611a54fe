// Writes a synthetic large profile for bench/html_gen.sh: SAMPLES samples over DISTINCT distinct
// stacks (default 1,000,000 and 100,000) on 16 threads in 2 processes, 60 s long, with the CPU
// split metrics and alloc-bytes. Stacks share prefixes like real ones (a few entry points, a
// call graph of 20,000 functions in 300 files, Python and native frames), and their popularity
// follows a Zipf law, so a few stacks are hot and most are rare: the case the report must trim.
// Usage: mlprof_html_gen OUT.mlprof [SAMPLES] [DISTINCT] [SEED]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "profile/aggregate.h"
#include "profile/profile_io.h"

using namespace mlprof::profile;

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT.mlprof [SAMPLES=1000000] [DISTINCT=100000] [SEED=1]\n", argv[0]);
    return 2;
  }
  const size_t samples = argc > 2 ? strtoull(argv[2], nullptr, 10) : 1000000;
  const size_t distinct = argc > 3 ? strtoull(argv[3], nullptr, 10) : 100000;
  std::mt19937_64 rng(argc > 4 ? strtoull(argv[4], nullptr, 10) : 1);

  Profile p;
  p.run.command = {"python3", "synthetic_server.py", "--workers", "2"};
  p.run.start_ns = 1'000'000'000;
  p.run.end_ns = p.run.start_ns + 60'000'000'000LL;
  p.run.rate_hz = 100;
  p.run.timer = "perf-task-clock";
  p.run.mode = "cpu";
  p.run.exit_status = 0;
  p.run.extra["cpus"] = "8";
  p.metrics = {{"cpu", "us"},
               {"cpu-interpreter", "us"},
               {"cpu-native", "us"},
               {"cpu-system", "us"},
               {"alloc-bytes", "bytes"}};
  auto intern = [&](const std::string& s) {
    p.strings.push_back(s);
    return static_cast<uint32_t>(p.strings.size() - 1);
  };
  for (uint32_t pi = 0; pi < 2; ++pi) {
    Process pr;
    pr.pid = 1000 + pi;
    pr.ppid = pi ? 1000 : 1;
    pr.parent = pi ? 0 : kNone;
    pr.exe = "/usr/bin/python3.11";
    pr.argv = p.run.command;
    pr.start_ns = p.run.start_ns;
    pr.end_ns = p.run.end_ns;
    pr.end_reason = EndReason::kExit;
    pr.exit_status = 0;
    pr.counters = {{"samples", samples / 2}};
    p.processes.push_back(pr);
    for (uint32_t t = 0; t < 8; ++t)
      p.threads.push_back({pi, 1000 + pi * 100 + t, t ? "worker-" + std::to_string(t) : "python3",
                           p.run.start_ns, p.run.end_ns});
  }
  // 20,000 functions in 300 files; the first 40% Python.
  const uint32_t nfun = 20000, nfile = 300;
  std::vector<uint32_t> files;
  for (uint32_t f = 0; f < nfile; ++f)
    files.push_back(intern("/srv/app/pkg" + std::to_string(f % 17) + "/mod_" + std::to_string(f) + ".py"));
  uint32_t libpy = intern("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0");
  uint32_t libblas = intern("/usr/lib/x86_64-linux-gnu/libopenblas.so.0");
  for (uint32_t i = 0; i < nfun; ++i) {
    bool py = i < nfun * 4 / 10;
    Frame fr;
    fr.function = intern((py ? "fn_" : "native_fn_") + std::to_string(i));
    fr.file = py ? files[i % nfile] : 0;
    fr.line = py ? 10 + (i * 7) % 500 : 0;
    fr.module = py ? libpy : libblas;
    fr.module_offset = 0x1000 + i * 16;
    fr.kind = py ? FrameKind::kPython : FrameKind::kNative;
    p.frames.push_back(fr);
  }
  // Distinct stacks: a walk down a call graph (each function calls a few "children"), Zipf-ish
  // choices so prefixes repeat.
  std::uniform_int_distribution<uint32_t> any_fun(0, nfun - 1);
  std::geometric_distribution<uint32_t> pick(0.35);
  std::uniform_int_distribution<uint32_t> depth_dist(6, 40);
  auto callee = [&](uint32_t f, uint32_t k) {
    return static_cast<uint32_t>((f * 2654435761u + k * 40503u + 17) % nfun);
  };
  std::set<std::vector<uint32_t>> seen;
  while (p.stacks.size() < distinct) {
    std::vector<uint32_t> root_first;
    uint32_t f = pick(rng) % 8;  // a few entry points
    uint32_t depth = depth_dist(rng);
    for (uint32_t d = 0; d < depth; ++d) {
      root_first.push_back(f);
      f = callee(f, pick(rng) % 6);
    }
    std::vector<uint32_t> leaf_first(root_first.rbegin(), root_first.rend());
    if (seen.insert(leaf_first).second) p.stacks.push_back({leaf_first, false});
  }
  // Zipf popularity over the stacks, samples over 60 s.
  std::vector<double> cdf(distinct);
  double acc = 0;
  for (size_t i = 0; i < distinct; ++i) cdf[i] = acc += 1.0 / std::pow(static_cast<double>(i + 1), 1.1);
  std::uniform_real_distribution<double> u01(0, 1);
  std::uniform_int_distribution<uint32_t> any_thread(0, static_cast<uint32_t>(p.threads.size() - 1));
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int64_t>> values;
  const int64_t dt = (p.run.end_ns - p.run.start_ns) / static_cast<int64_t>(samples);
  p.samples.reserve(samples);
  for (size_t i = 0; i < samples; ++i) {
    uint32_t s =
        static_cast<uint32_t>(std::lower_bound(cdf.begin(), cdf.end(), u01(rng) * acc) - cdf.begin());
    if (s >= distinct) s = static_cast<uint32_t>(distinct - 1);
    uint32_t t = any_thread(rng);
    p.samples.push_back({t, s, p.run.start_ns + static_cast<int64_t>(i) * dt, 1});
    auto& v = values[{t, s}];
    if (v.empty()) v.assign(5, 0);
    v[0] += 10000;
    v[1 + s % 3] += 10000;
    if (s % 5 == 0) v[4] += 4096 * (1 + s % 64);
  }
  for (auto& [k, v] : values) p.stack_values.push_back({k.first, k.second, v});
  compute_aggregates(p);
  if (mlprof::Status st = write_profile(p, argv[1]); !st.ok()) {
    fprintf(stderr, "%s\n", st.error.c_str());
    return 1;
  }
  printf("wrote %s: %zu samples, %zu distinct stacks, %zu stack values, %zu functions, %zu lines\n", argv[1],
         p.samples.size(), p.stacks.size(), p.stack_values.size(), p.functions.size(), p.lines.size());
  return 0;
}
