// Memory profiling never changes the program: the allocation API (including allocations made
// before the preload's constructor), signal handlers that copy memory inside the hooks, fork,
// allocators preloaded by the user (tcmalloc, jemalloc); each process's leak is its own;
// --no-memory and --mem-interval do what they say and bad values are refused.
#include <sys/stat.h>

#include "memory_util.h"

namespace {

using namespace e2e;

TEST(MemoryBehaviour, AllocationApiAndEarlyAllocationsBehaveTheSame) {
  RunResult direct = run({fixture("fixture_mem_api")});
  ASSERT_EQ(direct.exit_code, 0) << "the fixture itself fails:\n" << direct.err;
  for (std::vector<std::string> opts : {std::vector<std::string>{}, {"--mem-interval", "1"}, {"--mem-interval", "64"}}) {
    Profiled r = profile_run({fixture("fixture_mem_api")}, opts);
    ASSERT_TRUE(r.ok);
    std::string mode = opts.empty() ? "default interval" : "--mem-interval " + opts[1];
    EXPECT_EQ(r.result.exit_code, 0) << mode << ": the program's own checks failed:\n" << r.result.err;
    EXPECT_EQ(r.result.out, direct.out) << mode;
    EXPECT_EQ(r.result.err, direct.err) << mode;
    EXPECT_TRUE(has_memory_metrics(r.profile)) << mode;
    EXPECT_GT(counter_sum(r.profile, "mem_samples"), 0) << mode;
  }
}

TEST(MemoryBehaviour, OutputAndExitStatusUnchangedWithMemoryOn) {
  RunResult direct = run({fixture("fixture_behave"), "output", "2000"});
  ASSERT_EQ(direct.exit_code, 3);
  for (std::vector<std::string> opts : {std::vector<std::string>{}, {"--mem-interval", "1"}}) {
    Profiled r = profile_run({fixture("fixture_behave"), "output", "2000"}, opts);
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.result.exit_code, 3);  // 4: errno changed under the program
    EXPECT_EQ(r.result.out, direct.out);
    EXPECT_EQ(r.result.err, direct.err);
    EXPECT_TRUE(has_memory_metrics(r.profile));
  }
  RunResult leak_direct = run({fixture("fixture_mem_leak"), "100", "1009", "20000"});
  Profiled leak = profile_run({fixture("fixture_mem_leak"), "100", "1009", "20000"});
  ASSERT_TRUE(leak.ok);
  EXPECT_EQ(leak.result.exit_code, leak_direct.exit_code);
  EXPECT_EQ(leak.result.out, leak_direct.out);  // includes a checksum of everything the churn read back
}

TEST(MemoryBehaviour, SignalHandlersCopyingInsideTheHooks) {
  RunResult direct = run({fixture("fixture_mem_signal"), "1"});
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  // Small intervals so that the handlers' own copies and the interrupted allocations are sampled
  // often; 1 kHz CPU sampling on top. --duration is a guard: a deadlock ends as a failure.
  Profiled r = profile_run({fixture("fixture_mem_signal"), "1"}, {"--mem-interval", "256", "--rate", "1000", "--duration", "60"},
                           {"MLPROF_COPY_INTERVAL=512"});
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.result.exit_code, 0) << r.result.err;
  EXPECT_EQ(r.result.out, "signal ok\n");
  EXPECT_GT(counter_sum(r.profile, "mem_samples"), 1000);
  EXPECT_GT(counter_sum(r.profile, "copy_samples"), 100);
  // The handler's copies are attributed to the handler.
  EXPECT_GT(line_metric_in_stacks(r.profile, "copy-bytes", "mem_signal.cpp",
                                  marker_line(fixture_source("mem_signal.cpp"), "memcpy(b, a, n)")), 0);
}

TEST(MemoryBehaviour, ForkEachProcessLeaksItsOwn) {
  const int64_t pn = 100, ps = 1009, cn = 70, cs = 2003;
  Profiled r = profile_run({fixture("fixture_mem_fork"), std::to_string(pn), std::to_string(ps), std::to_string(cn),
                            std::to_string(cs)},
                           {"--mem-interval", "1"});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  const auto& p = r.profile;
  ASSERT_EQ(p.processes.size(), 2u);
  uint32_t parent = p.processes[0].parent == profile::kNone ? 0 : 1, child = 1 - parent;
  ASSERT_EQ(p.processes[child].parent, parent);
  EXPECT_EQ(p.processes[child].end_reason, profile::EndReason::kExit);
  ASSERT_NE(process_memory(p, parent), nullptr);
  ASSERT_NE(process_memory(p, child), nullptr);

  int64_t bytes[2][2] = {}, count[2][2] = {};  // [process is child][site is child_leak]
  for (auto& l : p.leaks) {
    bool in_child = l.process == child;
    bool parent_site = stack_has_function(p, l.stack, "parent_leak"), child_site = stack_has_function(p, l.stack, "child_leak");
    EXPECT_TRUE(parent_site || child_site) << "exact mode: only the two leaks are candidates\n" << describe_leaks(p);
    if (!parent_site && !child_site) continue;
    EXPECT_EQ(l.kind, profile::LeakKind::kUnfreedAtExit);
    bytes[in_child][child_site] += l.bytes;
    count[in_child][child_site] += l.count;
  }
  // The parent's blocks, half of them allocated before the fork, are the parent's alone.
  EXPECT_EQ(count[0][0], pn) << describe_leaks(p);
  EXPECT_EQ(bytes[0][0], pn * ps);
  EXPECT_EQ(count[1][1], cn) << describe_leaks(p);
  EXPECT_EQ(bytes[1][1], cn * cs);
  EXPECT_EQ(count[1][0], 0) << "the child inherited the parent's blocks; they are not its leak\n" << describe_leaks(p);
  EXPECT_EQ(count[0][1], 0) << describe_leaks(p);
}

// An allocator the user preloads (LD_PRELOAD set before mlprof-run): the program behaves the same,
// and allocations are still seen.
class MemoryAllocator : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryAllocator, PreloadedByTheUser) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/" + GetParam();
  struct stat st;
  if (stat(lib.c_str(), &st) != 0)
    GTEST_SKIP() << lib << " not installed (./scripts/install-deps.sh installs libtcmalloc-minimal4 and libjemalloc2)";
  const std::vector<std::string> env = {"LD_PRELOAD=" + lib};
  RunResult glibc = run({fixture("fixture_mem_api"), "3", "portable"});
  RunResult direct = run({fixture("fixture_mem_api"), "3", "portable"}, env);
  // The program prints facts about its allocator (malloc_usable_size of a 1000-byte block): the
  // preloaded one really is in use, and stays in use under the profiler.
  ASSERT_NE(direct.out, glibc.out) << "the allocator did not replace glibc's malloc";
  Profiled api = profile_run({fixture("fixture_mem_api"), "3", "portable"}, {}, env);
  ASSERT_TRUE(api.ok);
  EXPECT_EQ(api.result.exit_code, direct.exit_code) << api.result.err;
  EXPECT_EQ(api.result.out, direct.out);
  EXPECT_EQ(api.result.err, direct.err);
  EXPECT_TRUE(has_memory_metrics(api.profile));

  // The exact leak is still exact on top of that allocator.
  Profiled leak = profile_run({fixture("fixture_mem_leak"), "200", "1009", "10000"}, {"--mem-interval", "1"}, env);
  ASSERT_TRUE(leak.ok);
  ASSERT_EQ(leak.result.exit_code, 0) << leak.result.err;
  int64_t count = 0, bytes = 0;
  for (auto& l : leak.profile.leaks)
    if (stack_has_function(leak.profile, l.stack, "leak_blocks")) {
      count += l.count;
      bytes += l.bytes;
    }
  EXPECT_EQ(count, 200) << describe_leaks(leak.profile);
  EXPECT_EQ(bytes, 200 * 1009);

  // The same leak made with new char[] (after a new that throws std::bad_alloc, caught by the
  // program): such an allocator's operator new never calls malloc, so mlprof-run switches to the
  // preload variant that hooks operator new/delete; the leak is exact and the only candidate.
  std::vector<std::string> env_new = env;
  env_new.push_back("FIXTURE_LEAK_WITH_NEW=1");
  Profiled leak_new = profile_run({fixture("fixture_mem_leak"), "200", "1009", "10000"}, {"--mem-interval", "1"}, env_new);
  ASSERT_TRUE(leak_new.ok);
  ASSERT_EQ(leak_new.result.exit_code, 0) << leak_new.result.err;
  count = bytes = 0;
  for (auto& l : leak_new.profile.leaks) {
    EXPECT_TRUE(stack_has_function(leak_new.profile, l.stack, "leak_blocks_new")) << describe_leaks(leak_new.profile);
    count += l.count;
    bytes += l.bytes;
  }
  EXPECT_EQ(count, 200) << describe_leaks(leak_new.profile);
  EXPECT_EQ(bytes, 200 * 1009);
}

INSTANTIATE_TEST_SUITE_P(Libraries, MemoryAllocator,
                         ::testing::Values("libtcmalloc_minimal.so.4", "libjemalloc.so.2"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param.rfind("libtcmalloc", 0) == 0 ? std::string("tcmalloc") : std::string("jemalloc");
                         });

TEST(MemoryOptions, NoMemoryGivesACpuOnlyProfile) {
  Profiled r = profile_run({fixture("fixture_mem_leak"), "100", "4099", "20000"}, {"--no-memory"});
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.result.exit_code, 0);
  const auto& p = r.profile;
  for (const char* m : {"alloc-bytes", "alloc-count", "live-peak-bytes", "live-end-bytes", "copy-bytes"})
    EXPECT_EQ(p.metric(m), profile::kNone) << m;
  EXPECT_TRUE(p.memory.empty());
  EXPECT_TRUE(p.leaks.empty());
  EXPECT_EQ(counter_sum(p, "mem_samples"), 0);
  EXPECT_NE(p.metric("cpu"), profile::kNone);
  // The same run without the option has them (the default is on).
  Profiled on = profile_run({fixture("fixture_mem_leak"), "100", "4099", "20000"});
  ASSERT_TRUE(on.ok);
  EXPECT_TRUE(has_memory_metrics(on.profile));
  EXPECT_FALSE(on.profile.memory.empty());
}

// --no-memory injects libmlprof_preload_cpu.so, which exports no allocation function: the
// program's malloc is libc's own, not an entry that would only forward it (with memory on it is
// the preload's). The variant asked to profile memory (MLPROF_PRELOAD_PATH) says once that it
// cannot and profiles CPU.
TEST(MemoryOptions, NoMemoryLeavesMallocToLibc) {
  const char* script =
      "import ctypes\n"
      "class Info(ctypes.Structure):\n"
      "    _fields_ = [('fname', ctypes.c_char_p), ('fbase', ctypes.c_void_p), ('sname', ctypes.c_char_p),"
      " ('saddr', ctypes.c_void_p)]\n"
      "g = ctypes.CDLL(None)\n"
      "info = Info()\n"
      "g.dladdr(ctypes.cast(g.malloc, ctypes.c_void_p), ctypes.byref(info))\n"
      "print(info.fname.decode())\n";
  const std::string dir = scratch();
  RunResult cpu = run({MLPROF_RUN, "-q", "--no-html", "-o", dir + "/cpu.mlprof", "--no-memory", "--", "python3", "-c", script});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.out.find("mlprof"), std::string::npos) << "malloc is defined by " << cpu.out;
  EXPECT_NE(cpu.out.find("libc.so"), std::string::npos) << "malloc is defined by " << cpu.out;
  RunResult mem = run({MLPROF_RUN, "-q", "--no-html", "-o", dir + "/mem.mlprof", "--", "python3", "-c", script});
  ASSERT_EQ(mem.exit_code, 0) << mem.err;
  EXPECT_NE(mem.out.find("libmlprof_preload.so"), std::string::npos) << "malloc is defined by " << mem.out;

  const std::string variant = std::string(MLPROF_RUN).substr(0, std::string(MLPROF_RUN).rfind('/')) + "/libmlprof_preload_cpu.so";
  RunResult asked = run({MLPROF_RUN, "--no-html", "-o", dir + "/asked.mlprof", "--", fixture("fixture_mem_leak"), "100", "4099", "20000"},
                        {"MLPROF_PRELOAD_PATH=" + variant});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  const std::string msg = "has no allocation hooks; memory profiling is off";
  const size_t at = asked.err.find("mlprof: this preload (libmlprof_preload_cpu.so) " + msg);
  ASSERT_NE(at, std::string::npos) << asked.err;
  EXPECT_EQ(asked.err.find("mlprof: this preload", at + 1), std::string::npos) << "said more than once:\n" << asked.err;
  auto p = profile::read_profile(dir + "/asked.mlprof");
  ASSERT_TRUE(p) << p.error();
  EXPECT_FALSE(has_memory_metrics(p.value()));
  EXPECT_NE(p.value().metric("cpu"), profile::kNone);
}

TEST(MemoryOptions, IntervalSuffixesAndTheEnvironment) {
  struct Case {
    std::vector<std::string> opts, env;
    uint64_t expect;
  } cases[] = {
      {{"--mem-interval", "64K"}, {}, 64 << 10},
      {{"--mem-interval", "1M"}, {}, 1 << 20},
      {{"--mem-interval", "3000"}, {}, 3000},
      {{"--mem-interval", "1"}, {}, 1},
      {{}, {"MLPROF_MEM_INTERVAL=8192"}, 8192},                              // the user's own setting passes through
      {{"--mem-interval", "16K"}, {"MLPROF_MEM_INTERVAL=8192"}, 16 << 10},  // the option wins
  };
  for (auto& c : cases) {
    Profiled r = profile_run({fixture("fixture_mem_leak"), "10", "1009", "1000"}, c.opts, c.env);
    ASSERT_TRUE(r.ok);
    const auto* pm = process_memory(r.profile);
    ASSERT_NE(pm, nullptr);
    EXPECT_EQ(pm->interval_bytes, c.expect) << (c.opts.empty() ? c.env[0] : c.opts[1]);
  }
}

TEST(MemoryOptions, BadIntervalsAreRefusedBeforeTheCommandRuns) {
  std::string dir = scratch();
  std::string marker = dir + "/ran";
  for (std::string bad : {"0", "abc", "12X", "-5", "1.5M", "", "0K", "2T", "99999999999999999999"}) {
    RunResult r = run({MLPROF_RUN, "-q", "-o", dir + "/x.mlprof", "--mem-interval", bad, "--", "/usr/bin/touch", marker});
    EXPECT_EQ(r.exit_code, 2) << "'" << bad << "'";
    EXPECT_NE(r.err.find("--mem-interval"), std::string::npos) << "'" << bad << "': " << r.err;
    EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the command ran despite --mem-interval '" << bad << "'";
  }
  RunResult both = run({MLPROF_RUN, "-q", "-o", dir + "/x.mlprof", "--no-memory", "--mem-interval", "1M", "--", "/bin/true"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("contradict"), std::string::npos) << both.err;
}

}  // namespace
