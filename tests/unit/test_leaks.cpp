// Leak candidates (collector/leaks.h): the rules on synthetic live series, and simulated
// programs (a leak beside a bounded cache and transient churn) sampled the way the preload samples
// (Poisson over allocated bytes) and accounted by the real MemoryTracker. Ground truth is the
// simulation's own: how many bytes it leaked and at what rate.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <random>

#include "collector/leaks.h"
#include "collector/memory_tracker.h"
#include "profile/string_table.h"

namespace mlprof {
namespace {

using collector::find_leaks;
using collector::fit_growth;
using collector::LeakInput;
using collector::LeakSite;
using collector::MemoryTracker;
using collector::MemSeriesPoint;
using profile::LeakKind;

constexpr int64_t kTick = 100'000'000;  // MEM_USAGE every 100 ms
constexpr int64_t kSec = 1'000'000'000;

// A run of `seconds` with a tick every 100 ms; values(t_seconds) gives the site's live bytes.
template <typename F>
LeakInput series_input(double seconds, F values, double var_per_byte = 0) {
  LeakInput in;
  in.start_ns = 0;
  in.end_ns = static_cast<int64_t>(seconds * kSec);
  in.interval_bytes = 1;
  LeakSite site;
  site.stack = 3;
  for (int64_t t = kTick; t <= in.end_ns; t += kTick) {
    in.ticks.push_back(t);
    double v = values(static_cast<double>(t) / kSec);
    site.series.push_back({static_cast<int64_t>(v), static_cast<float>(v / 100), static_cast<float>(v * var_per_byte)});
  }
  in.sites.push_back(site);
  return in;
}

TEST(LeakRules, SteadyRampIsGrowthWithItsSlope) {
  auto in = series_input(10, [](double t) { return 1'000'000 * t + 5'000'000; });
  auto g = fit_growth(in, in.sites[0]);
  ASSERT_TRUE(g.found);
  EXPECT_NEAR(g.bytes_per_s, 1'000'000, 1);
  EXPECT_NEAR(g.r2, 1.0, 1e-9);
  auto leaks = find_leaks(in);
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_EQ(leaks[0].kind, LeakKind::kGrowth);
  EXPECT_EQ(leaks[0].stack, 3u);
  EXPECT_EQ(leaks[0].growth_bytes_per_s, 1'000'000);
  EXPECT_EQ(leaks[0].bytes, 15'000'000);
  EXPECT_EQ(leaks[0].count, 150'000);
  EXPECT_EQ(leaks[0].confidence_permille, 1000u) << "exact mode, perfect fit";
}

TEST(LeakRules, TeardownDropAtTheEndDoesNotHideGrowth) {
  // Python frees most objects at exit: the leaking site's live bytes fall to 0 in the last tick.
  auto in = series_input(10, [](double t) { return t > 9.85 ? 0.0 : 2'000'000 * t; });
  auto g = fit_growth(in, in.sites[0]);
  ASSERT_TRUE(g.found);
  EXPECT_NEAR(g.bytes_per_s, 2'000'000, 1);
  EXPECT_EQ(in.ticks[in.sites[0].first_tick + g.peak], int64_t{98} * kTick);
  auto leaks = find_leaks(in);
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_EQ(leaks[0].bytes, 19'600'000) << "the bytes at the end of the growth";
}

TEST(LeakRules, CacheThatFillsEarlyThenStaysFlatIsNotGrowth) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0, 200'000);
  auto in = series_input(10, [&](double t) { return std::min(t, 1.0) * 20'000'000 + noise(rng); });
  EXPECT_FALSE(fit_growth(in, in.sites[0]).found);
  EXPECT_TRUE(find_leaks(in).empty());
}

TEST(LeakRules, SawtoothChurnIsNotGrowth) {
  // Batches allocated then freed every 0.5 s (the series is read at ticks: it looks like a saw).
  auto in = series_input(10, [](double t) { return std::fmod(t, 0.5) * 40'000'000; });
  EXPECT_FALSE(fit_growth(in, in.sites[0]).found);
}

TEST(LeakRules, GrowthThatStoppedEarlyIsNotAServerLeak) {
  // Grew during the first half, then flat: the maximum is late (plateau) but the fit is poor.
  auto in = series_input(10, [](double t) { return std::min(t, 5.0) * 1'000'000; });
  EXPECT_FALSE(fit_growth(in, in.sites[0]).found);
  // Grew, then was freed at 60% of the run: the last maximum is early.
  auto early = series_input(10, [](double t) { return t < 6 ? t * 1'000'000 : 0.0; });
  EXPECT_FALSE(fit_growth(early, early.sites[0]).found);
}

TEST(LeakRules, GrowthMustStandOutOfTheSamplingNoise) {
  // Sampled at 512 KiB: a rise of 3 MiB over a population of ~50 samples is noise, not growth.
  LeakInput in = series_input(10, [](double t) { return 25e6 + 0.35e6 * t; }, 512 << 10);
  in.interval_bytes = 512 << 10;
  EXPECT_FALSE(fit_growth(in, in.sites[0]).found);
  // The same population growing by 40 MB stands out.
  LeakInput big = series_input(10, [](double t) { return 25e6 + 5e6 * t; }, 512 << 10);
  big.interval_bytes = 512 << 10;
  EXPECT_TRUE(fit_growth(big, big.sites[0]).found);
}

TEST(LeakRules, TinyRiseIsNotGrowthInExactMode) {
  auto in = series_input(10, [](double t) { return 1000 * t; });  // 10 kB over the run
  EXPECT_FALSE(fit_growth(in, in.sites[0]).found);
}

TEST(LeakRules, UnfreedAtExitNeedsACleanExitAndTwoSamples) {
  LeakInput in;
  in.end_ns = 10 * kSec;
  in.exited = true;
  in.interval_bytes = 512 << 10;
  LeakSite one;  // one sampled block: a stdio buffer would look like this
  one.stack = 1;
  one.end_bytes = 512 << 10;
  one.end_count = 1;
  one.end_samples = 1;
  LeakSite many;
  many.stack = 2;
  many.end_bytes = 100 << 20;
  many.end_count = 12345.4;
  many.end_samples = 100;
  LeakSite runtime = many;  // the thread-stack cache's TLS blocks
  runtime.stack = 3;
  runtime.suppressed = true;
  in.sites = {one, many, runtime};
  auto leaks = find_leaks(in);
  ASSERT_EQ(leaks.size(), 1u);
  EXPECT_EQ(leaks[0].stack, 2u);
  EXPECT_EQ(leaks[0].kind, LeakKind::kUnfreedAtExit);
  EXPECT_EQ(leaks[0].bytes, 100 << 20);
  EXPECT_EQ(leaks[0].count, 12345);
  EXPECT_EQ(leaks[0].confidence_permille, 900u) << "1 - 1/sqrt(100 samples)";
  in.exited = false;  // killed, detached or exec'd: what is live was not left at exit
  EXPECT_TRUE(find_leaks(in).empty());
  in.exited = true;
  in.interval_bytes = 1;
  EXPECT_EQ(find_leaks(in)[0].confidence_permille, 1000u) << "exact mode saw every block";
}

TEST(LeakRules, CandidatesAreOrderedByBytes) {
  LeakInput in;
  in.end_ns = kSec;
  in.exited = true;
  for (uint32_t i = 0; i < 5; ++i) {
    LeakSite s;
    s.stack = i;
    s.end_bytes = (i * 7 % 5 + 1) * 1000;
    s.end_samples = 2;
    in.sites.push_back(s);
  }
  auto leaks = find_leaks(in);
  ASSERT_EQ(leaks.size(), 5u);
  for (size_t i = 1; i < leaks.size(); ++i) EXPECT_GE(leaks[i - 1].bytes, leaks[i].bytes);
}

TEST(LeakRules, RuntimeInternalStacksAreRecognised) {
  profile::Profile p;
  profile::StringTable st(p.strings);
  auto frame = [&](const char* fn, profile::FrameKind kind = profile::FrameKind::kNative) {
    profile::Frame f;
    f.function = st.intern(fn);
    f.kind = kind;
    p.frames.push_back(f);
    return static_cast<uint32_t>(p.frames.size() - 1);
  };
  uint32_t dl = frame("_dl_allocate_tls"), pc = frame("pthread_create"), user = frame("main"),
           tls = frame("__tls_get_addr"), py = frame("pthread_create", profile::FrameKind::kPython);
  p.stacks = {{{frame("[unknown]"), dl, pc, user}}, {{user}}, {{tls, user}}, {{py}}};
  EXPECT_TRUE(collector::runtime_internal_stack(p, 0));
  EXPECT_FALSE(collector::runtime_internal_stack(p, 1));
  EXPECT_TRUE(collector::runtime_internal_stack(p, 2));
  EXPECT_FALSE(collector::runtime_internal_stack(p, 3)) << "a Python function of that name is the program's";
  EXPECT_FALSE(collector::runtime_internal_stack(p, 99));
}

// What an extension module's initialization keeps lives until exit (CPython never unloads them):
// numpy's import left 1-2 MiB "unfreed at exit" under ExtensionFileLoader.create_module in half
// of the runs of examples/serve.py, its own native frames not unwound yet (the module had just
// been loaded). Recognised by the importer's frame, on every version's naming, or by PyInit_*.
TEST(LeakRules, ExtensionModuleInitialisationIsRuntimeInternal) {
  profile::Profile p;
  profile::StringTable st(p.strings);
  auto frame = [&](const char* fn, const char* file, profile::FrameKind kind) {
    profile::Frame f;
    f.function = st.intern(fn);
    f.file = st.intern(file);
    f.kind = kind;
    p.frames.push_back(f);
    return static_cast<uint32_t>(p.frames.size() - 1);
  };
  const auto py = profile::FrameKind::kPython, native = profile::FrameKind::kNative;
  const char* ext = "<frozen importlib._bootstrap_external>";
  const char* boot = "<frozen importlib._bootstrap>";
  uint32_t call = frame("_call_with_frames_removed", boot, py), user = frame("<module>", "/srv/app.py", py);
  p.stacks = {
      {{call, frame("ExtensionFileLoader.create_module", ext, py), frame("module_from_spec", boot, py), user}},  // 3.11+
      {{call, frame("create_module", ext, py), user}},                                                          // 3.8-3.10
      {{frame("BuiltinImporter.create_module", boot, py), user}},                                              // built-in module
      {{frame("PyInit__multiarray_umath", "", native), frame("[unknown]", "", native), user}},
      {{frame("create_module", "/srv/app.py", py), user}},                 // the program's own create_module
      {{frame("MyLoader.create_module", "/srv/loader.py", py), user}},
      {{frame("create_module", ext, native), user}},                       // a native function of that name
      {{call, frame("_LoaderBasics.exec_module", ext, py), user}},          // a Python module's code: the program's
  };
  for (uint32_t s = 0; s < 4; ++s) EXPECT_TRUE(collector::runtime_internal_stack(p, s)) << s;
  for (uint32_t s = 4; s < 8; ++s) EXPECT_FALSE(collector::runtime_internal_stack(p, s)) << s;
}

// ------------------------------------------------------------------------------------------------
// Simulated programs, sampled like the preload samples.

// Poisson sampling over allocated bytes with mean interval T: an allocation of s bytes is sampled
// with probability 1 - exp(-s/T) and then weighs s / (1 - exp(-s/T)). T = 1: every allocation.
struct Sampler {
  double T;
  std::mt19937_64 rng;
  double countdown;
  Sampler(double interval, uint64_t seed) : T(interval), rng(seed) { countdown = draw(); }
  double draw() { return std::exponential_distribution<double>(1 / T)(rng); }
  uint64_t weight(uint64_t size) {
    if (T <= 1) return size;
    countdown -= static_cast<double>(size);
    if (countdown > 0) return 0;
    countdown = draw();
    return static_cast<uint64_t>(std::llround(static_cast<double>(size) / -std::expm1(-static_cast<double>(size) / T)));
  }
};

struct Program {
  double seconds = 10;
  uint64_t interval = 512 << 10;
  uint64_t leak_size = 4096;        // bytes leaked per iteration (stack 1)
  int leak_every_us = 1000;         // an iteration every ... (0: no leak)
  uint64_t cache_entry = 16 << 10;  // bounded cache (stack 2): fills in the first 10%, then FIFO
  size_t cache_entries = 2000;
  int cache_every_steps = 1;        // after the fill, one insertion (and eviction) every ... steps
  bool churn = true;                // transient allocations (stack 3)
  bool teardown = false;            // everything freed at exit (Python's finalization)
  bool cache_freed_at_exit = true;  // a C++ global's destructor (runs before the stream ends)
  bool exits = true;                // clean exit (else: killed / detached)
};

struct Outcome {
  std::vector<profile::LeakCandidate> leaks;
  uint64_t leaked_bytes = 0;
  double leak_rate = 0;  // bytes per second
};

Outcome run(const Program& prog, uint64_t seed) {
  Sampler sampler(static_cast<double>(prog.interval), seed);
  std::mt19937_64 rng(seed * 7919);
  MemoryTracker t;
  t.config(prog.interval, 1 << 20, 0);
  uint64_t id = 1;
  std::vector<uint64_t> leaked;
  std::deque<uint64_t> cache;  // ids, 0 = not sampled
  std::deque<std::pair<int64_t, uint64_t>> transient;
  Outcome out;
  auto alloc = [&](uint64_t stack, int64_t now, uint64_t size) -> uint64_t {
    uint64_t w = sampler.weight(size);
    if (!w) return 0;
    t.alloc(0, stack, now, id, size, w);
    return id++;
  };
  auto release = [&](uint64_t i, int64_t now) {
    if (i) t.free(i, now);
  };
  const int64_t end = static_cast<int64_t>(prog.seconds * kSec);
  const int64_t step = 200'000;  // 200 us
  const size_t fill_per_step = std::max<size_t>(1, static_cast<size_t>(prog.cache_entries * step / (0.1 * static_cast<double>(end))));
  int64_t next_tick = kTick, next_leak = 0;
  for (int64_t now = 0; now < end; now += step) {
    while (prog.leak_every_us && now >= next_leak) {
      leaked.push_back(alloc(1, now, prog.leak_size));
      out.leaked_bytes += prog.leak_size;
      next_leak += int64_t{prog.leak_every_us} * 1000;
    }
    const bool filled = cache.size() >= prog.cache_entries;
    if (!filled || (now / step) % prog.cache_every_steps == 0) for (size_t k = 0; k < fill_per_step; ++k) {
      cache.push_back(alloc(2, now, prog.cache_entry));
      if (cache.size() > prog.cache_entries) release(cache.front(), now), cache.pop_front();
    }
    if (prog.churn) {
      for (int k = 0; k < 3; ++k) transient.push_back({now + static_cast<int64_t>(rng() % 2'000'000), alloc(3, now, 64 + rng() % 65536)});
      while (!transient.empty() && transient.front().first <= now) release(transient.front().second, now), transient.pop_front();
    }
    if (now >= next_tick) t.usage(now, 1), next_tick += kTick;
  }
  if (prog.teardown)
    for (uint64_t i : leaked) release(i, end);
  if (prog.teardown || (prog.exits && prog.cache_freed_at_exit))
    for (uint64_t i : cache) release(i, end);
  for (auto& [when, i] : transient) release(i, end);
  t.usage(end, 1);
  out.leak_rate = prog.leak_every_us ? static_cast<double>(prog.leak_size) * 1e6 / prog.leak_every_us : 0;

  LeakInput in;
  in.start_ns = 0;
  in.end_ns = end;
  in.exited = prog.exits;
  in.interval_bytes = prog.interval;
  in.ticks = t.ticks();
  for (const auto& ms : t.stacks()) {
    LeakSite s;
    s.stack = static_cast<uint32_t>(ms.stack);
    s.end_bytes = ms.live_bytes;
    s.end_count = ms.live_count;
    s.end_samples = ms.live_samples;
    s.first_tick = ms.first_tick == MemoryTracker::kNoTick ? 0 : ms.first_tick;
    s.series = ms.series;
    in.sites.push_back(s);
  }
  out.leaks = find_leaks(in);
  return out;
}

const profile::LeakCandidate* site(const Outcome& o, uint32_t stack) {
  for (const auto& c : o.leaks)
    if (c.stack == stack) return &c;
  return nullptr;
}

// The slope of ~62 sampled allocations (78 intervals, the fit's window is 80% of the run) is known
// to about 1/sqrt(62) = 13%: 3.5 standard deviations.
constexpr double kRateTolerance = 0.45;

TEST(LeakSimulation, ServerLeakIsFoundFromGrowthAloneAndTheCacheIsNot) {
  Program prog;
  prog.exits = false;  // stopped by --duration: no clean exit
  int found = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Outcome o = run(prog, seed);
    const auto* leak = site(o, 1);
    if (leak) {
      ++found;
      EXPECT_EQ(leak->kind, LeakKind::kGrowth);
      EXPECT_NEAR(static_cast<double>(leak->growth_bytes_per_s), o.leak_rate, kRateTolerance * o.leak_rate) << seed;
      EXPECT_GT(leak->confidence_permille, 500u);
    }
    EXPECT_EQ(site(o, 2), nullptr) << "the bounded cache, seed " << seed;
    EXPECT_EQ(site(o, 3), nullptr) << "transient churn, seed " << seed;
  }
  EXPECT_EQ(found, 30) << "a leak of 4 MB/s over 10 s at 512 KiB sampling (78 intervals)";
}

TEST(LeakSimulation, PythonStyleTeardownStillShowsTheLeak) {
  Program prog;
  prog.teardown = true;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Outcome o = run(prog, seed);
    const auto* leak = site(o, 1);
    ASSERT_NE(leak, nullptr) << seed;
    EXPECT_EQ(leak->kind, LeakKind::kGrowth) << "freed at exit: found by its growth";
    EXPECT_NEAR(static_cast<double>(leak->growth_bytes_per_s), o.leak_rate, kRateTolerance * o.leak_rate) << seed;
    EXPECT_EQ(o.leaks.size(), 1u) << seed;
  }
}

TEST(LeakSimulation, CacheIsNeverACandidateWhateverTheNoise) {
  // No leak at all: a bounded cache of 32 MiB (64 intervals) turning over once a second, churn.
  Program prog;
  prog.leak_every_us = 0;
  prog.exits = false;
  int false_candidates = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) false_candidates += static_cast<int>(run(prog, seed).leaks.size());
  EXPECT_EQ(false_candidates, 0);
  // A small cache (8 intervals): noisier, still never growth.
  prog.cache_entries = 256;
  false_candidates = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) false_candidates += static_cast<int>(run(prog, seed).leaks.size());
  EXPECT_EQ(false_candidates, 0);
  // Slow turnover (50 replacements a second): the sampled population drifts like a random walk.
  prog.cache_every_steps = 100;
  false_candidates = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) false_candidates += static_cast<int>(run(prog, seed).leaks.size());
  EXPECT_EQ(false_candidates, 0);
}

TEST(LeakSimulation, UnfreedAtExitBytesWithinTenPercentAtAThousandIntervals) {
  Program prog;
  prog.interval = 64 << 10;
  prog.seconds = 2;
  prog.leak_size = 4099;  // prime
  prog.leak_every_us = 125;  // 16000 blocks: 65.6 MB = 1000 intervals
  prog.churn = false;
  prog.cache_entries = 100;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Outcome o = run(prog, seed);
    const auto* leak = site(o, 1);
    ASSERT_NE(leak, nullptr);
    EXPECT_EQ(leak->kind, LeakKind::kUnfreedAtExit);
    EXPECT_NEAR(static_cast<double>(leak->bytes), static_cast<double>(o.leaked_bytes), 0.1 * static_cast<double>(o.leaked_bytes));
    EXPECT_NEAR(static_cast<double>(leak->count), 16000, 1600);
    EXPECT_GT(leak->confidence_permille, 950u);
  }
}

TEST(LeakSimulation, SmallLeakOfTwentyIntervalsIsStillFoundAndNothingElse) {
  Program prog;
  prog.seconds = 2;
  prog.leak_size = 1009;
  prog.leak_every_us = 190;  // ~10500 blocks: 10.6 MB = 20 intervals of 512 KiB
  int found = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Outcome o = run(prog, seed);
    found += site(o, 1) != nullptr;
    for (const auto& c : o.leaks)
      if (c.stack != 1) EXPECT_LT(c.bytes, static_cast<int64_t>(o.leaked_bytes / 100)) << "false candidate, seed " << seed;
  }
  EXPECT_GE(found, 49) << "P(fewer than 2 of ~20 expected samples) is ~1e-7";
}

TEST(LeakSimulation, ExactModeCountsAndBytesAreExact) {
  Program prog;
  prog.interval = 1;
  prog.seconds = 0.5;
  prog.leak_size = 4099;
  prog.leak_every_us = 1000;  // 500 blocks
  prog.cache_entries = 50;
  Outcome o = run(prog, 3);
  ASSERT_EQ(o.leaks.size(), 1u) << "the cache and the churn are freed by the exit";
  const auto& leak = o.leaks[0];
  EXPECT_EQ(leak.stack, 1u);
  EXPECT_EQ(leak.kind, LeakKind::kUnfreedAtExit);
  EXPECT_EQ(leak.count, 500);
  EXPECT_EQ(leak.bytes, 500 * 4099);
}

}  // namespace
}  // namespace mlprof
