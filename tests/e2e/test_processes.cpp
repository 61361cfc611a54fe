// Threads, forked and exec'd children, and dlopen'ed libraries, each with a known hotspot.
#include "e2e_util.h"

namespace {

using namespace e2e;

TEST(Processes, EachThreadHasItsOwnHotspot) {
  Profiled run = profile_run({fixture("fixture_threads"), "600"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0);
  const auto& p = run.profile;
  ASSERT_EQ(p.processes.size(), 1u);
  // worker-i runs thread_hot_i only, (i+1)*600 units.
  int64_t per_thread[4] = {};
  for (int i = 0; i < 4; ++i) {
    std::string name = "worker-" + std::to_string(i);
    uint32_t ti = profile::kNone;
    for (uint32_t t = 0; t < p.threads.size(); ++t)
      if (p.threads[t].name == name) ti = t;
    ASSERT_NE(ti, profile::kNone) << name << " missing";
    int64_t all = 0, own = 0;
    for (auto& sv : p.stack_values) {
      if (sv.thread != ti) continue;
      all += sv.values[cpu(p)];
      for (uint32_t f : p.stacks[sv.stack].frames)
        if (p.str(p.frames[f].function).rfind("thread_hot_" + std::to_string(i), 0) == 0) {
          own += sv.values[cpu(p)];
          break;
        }
    }
    ASSERT_GT(all, 0) << name;
    EXPECT_GE(own, all * 95 / 100) << name;
    per_thread[i] = all;
    EXPECT_NE(p.threads[ti].end_ns, 0) << name << " end not recorded";
  }
  // CPU per thread follows 1:2:3:4 (within sampling error).
  double sum = per_thread[0] + per_thread[1] + per_thread[2] + per_thread[3];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(per_thread[i] / sum, (i + 1) / 10.0, 0.04) << "worker-" << i;
}

TEST(Processes, ForkedAndExecedChildrenAreTheirOwnProcesses) {
  Profiled run = profile_run({fixture("fixture_fork_exec"), "2000", fixture("fixture_cpu_ratio")});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_NE(run.result.out.find("child status 0"), std::string::npos);
  const auto& p = run.profile;
  ASSERT_EQ(p.processes.size(), 3u);
  // Start order: parent, forked child (ended by exec), the exec'd image (same pid).
  const auto& parent = p.processes[0];
  const auto& child = p.processes[1];
  const auto& image = p.processes[2];
  EXPECT_EQ(child.ppid, parent.pid);
  EXPECT_EQ(child.parent, 0u);
  EXPECT_EQ(child.end_reason, profile::EndReason::kExec);
  EXPECT_EQ(image.pid, child.pid);
  EXPECT_EQ(image.exec_prev, 1u);
  EXPECT_EQ(image.end_reason, profile::EndReason::kExit);
  EXPECT_EQ(image.exit_status, 0);
  EXPECT_EQ(parent.end_reason, profile::EndReason::kExit);
  ASSERT_FALSE(image.argv.empty());
  EXPECT_NE(image.argv[0].find("fixture_cpu_ratio"), std::string::npos);

  EXPECT_GT(process_function_total(p, 0, "parent_hot"), 0);
  EXPECT_EQ(process_function_total(p, 0, "child_hot"), 0);
  EXPECT_GT(process_function_total(p, 1, "child_hot"), 0);
  EXPECT_EQ(process_function_total(p, 1, "parent_hot"), 0);
  EXPECT_GT(process_function_total(p, 2, "hot_fifty"), 0);
  EXPECT_EQ(process_function_total(p, 2, "child_hot"), 0);
}

TEST(Processes, ForkThenExecNeverDiesOfTheSamplingSignal) {
  // Each child is sampled (its own clock starts at fork) and burns CPU, then execs /bin/true: a
  // tick pending at exec would kill the new image (default action of a real-time signal).
  Profiled run = profile_run({fixture("fixture_fork_exec"), "spawn", "100"}, {"--rate", "1000"});
  ASSERT_TRUE(run.ok);
  EXPECT_EQ(run.result.out, "spawned 100, failed 0\n");
  EXPECT_EQ(run.result.exit_code, 0);
}

TEST(Processes, DlopenedLibraryIsSymbolizedAfterDlclose) {
  Profiled run = profile_run({fixture("fixture_dlopen"), "3000", fixture("libfixture_plugin.so")});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  int64_t plugin = function_self(p, "plugin_hot"), after = function_self(p, "after_close_hot");
  EXPECT_GT(plugin, 0);
  EXPECT_GT(after, 0);
  // Same work before and after dlclose; the share is checked against the CPU time each phase
  // took (the fixture's own thread clock), which on a busy machine can differ from half.
  double plugin_ms = 0, after_ms = 0;
  const auto at = run.result.out.find("plugin_ms ");
  ASSERT_NE(at, std::string::npos) << run.result.out;
  ASSERT_EQ(sscanf(run.result.out.c_str() + at, "plugin_ms %lf after_ms %lf", &plugin_ms, &after_ms), 2) << run.result.out;
  EXPECT_NEAR(static_cast<double>(plugin) / (plugin + after), plugin_ms / (plugin_ms + after_ms), 0.06)
      << plugin_ms << " ms in the plugin, " << after_ms << " ms after dlclose";
  uint32_t line = marker_line(fixture_source("plugin.cpp"), "hot-line: plugin");
  EXPECT_GE(line_self(p, "tests/fixtures/plugin.cpp", line), plugin * 9 / 10);
  // The plugin's samples unwind through it back to main.
  EXPECT_GE(function_total(p, "main"), total_cpu(p) * 95 / 100);
}

}  // namespace
