// The profiled program is sacred: its output, exit status, signal death, own SIGPROF timer and
// errno are unchanged; a killed program still leaves a readable profile; bad input is refused
// with a clear message.
#include <algorithm>

#include "e2e_util.h"

namespace {

using namespace e2e;

TEST(Behaviour, OutputExitStatusAndErrnoUnchanged) {
  RunResult direct = run({fixture("fixture_behave"), "output", "3000"});
  ASSERT_EQ(direct.exit_code, 3) << "fixture itself misbehaves";
  Profiled prof = profile_run({fixture("fixture_behave"), "output", "3000"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 3);  // 4 would mean errno changed under the program
  EXPECT_EQ(prof.result.out, direct.out);
  EXPECT_EQ(prof.result.err, direct.err);  // -q: not a byte of ours on stderr
  EXPECT_GE(counter_sum(prof.profile, "samples"), 10);
}

// The descriptor table is the program's. A daemon that closes every descriptor and opens its own
// files gets the numbers mlprof held: mlprof must not write its event stream into them, read
// them or close them (it did: the program's file, opened at fd 3, was closed under it, and a
// socket there received the stream). The profile ends there, and mlprof says so once.
TEST(Behaviour, AProgramThatClosesEveryDescriptorKeepsItsOwnFiles) {
  const std::string dir = scratch(), script = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/close_fds.py";
  RunResult direct = run({"/usr/bin/python3", script, dir + "/direct.txt"});
  ASSERT_EQ(direct.exit_code, 0) << direct.out;
  for (const char* timer : {"timer", "perf"}) {
    SCOPED_TRACE(timer);
    const std::string out = dir + "/profiled-" + timer + ".txt", path = dir + "/run-" + timer + ".mlprof";
    RunResult r = run({MLPROF_RUN, "-o", path, "--no-html", "--", "/usr/bin/python3", script, out},
                      {std::string("MLPROF_TIMER=") + timer});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, direct.out);  // "closefds fd 3 wrote 5 foreign 0"
    EXPECT_EQ(read_all(out), "kept\n");
    EXPECT_NE(r.err.find("closed mlprof's connection to the collector"), std::string::npos) << r.err;
    auto prof = mlprof::profile::read_profile(path);
    ASSERT_TRUE(prof) << "what was collected before the close is still a profile";
    // Said as what it was, not as a crash (the program ran on and exited 0).
    std::string all;
    for (auto& w : prof->warnings) all += w + "\n";
    EXPECT_NE(all.find("closed mlprof's connection while it ran"), std::string::npos) << all;
    EXPECT_EQ(all.find("killed or crashed"), std::string::npos) << all;
  }
}

// Shells pick low numbers by hand (`exec 3>file` is a dup2 onto 3): mlprof's descriptors sit high,
// so the profile stays whole.
TEST(Behaviour, DescriptorsProgramsPickByHandLeaveTheProfileWhole) {
  const std::string out = scratch() + "/out.txt";
  Profiled prof = profile_run({fixture("fixture_behave"), "dup2low", "3000", out});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 0) << prof.result.out << prof.result.err;
  EXPECT_EQ(read_all(out), "kept\n");
  ASSERT_EQ(prof.profile.processes.size(), 1u);
  EXPECT_EQ(prof.profile.processes[0].end_reason, profile::EndReason::kExit);
  EXPECT_GE(counter_sum(prof.profile, "samples"), 10);
  EXPECT_GT(function_self(prof.profile, "behave_hot"), 0);
}

TEST(Behaviour, SignalDeathIsReturnedAs128PlusSignal) {
  RunResult direct = run({fixture("fixture_behave"), "abort", "500"});
  ASSERT_EQ(direct.exit_code, 128 + SIGABRT);
  Profiled prof = profile_run({fixture("fixture_behave"), "abort", "500"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 128 + SIGABRT);
  EXPECT_EQ(prof.profile.run.exit_status, 128 + SIGABRT);
  // The process's own record too: its stream had no END, but mlprof-run's waitpid saw the signal.
  ASSERT_EQ(prof.profile.processes.size(), 1u);
  EXPECT_EQ(prof.profile.processes[0].end_reason, profile::EndReason::kTruncated);
  EXPECT_EQ(prof.profile.processes[0].exit_status, 128 + SIGABRT);
}

TEST(Behaviour, ProgramsOwnSigprofTimerKeepsWorking) {
  Profiled prof = profile_run({fixture("fixture_behave"), "sigprof", "4000"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 0) << prof.result.out;
  EXPECT_NE(prof.result.out.find("sigprof ok"), std::string::npos);
  EXPECT_GT(function_self(prof.profile, "behave_hot"), 0);
}

TEST(Behaviour, SignalsOfTheSamplingNumberFromElsewhereAreNotSamples) {
  // 20 signals of the profiler's own number per unit (~0.1 ms of CPU) come from the program itself,
  // not from its thread's clock: with either clock they must not count as samples (each would
  // add 10 ms of CPU at 100 Hz: ~200 s here instead of ~1 s).
  for (const char* timer : {"timer", "perf"}) {
    SCOPED_TRACE(timer);
    Profiled prof = profile_run({fixture("fixture_behave"), "foreign", "10000"}, {}, {std::string("MLPROF_TIMER=") + timer});
    ASSERT_TRUE(prof.ok);
    ASSERT_EQ(prof.result.exit_code, 0) << prof.result.err;
    unsigned long long sent = 0;
    long long cpu_ns = 0;
    ASSERT_EQ(sscanf(prof.result.out.c_str(), "foreign %llu cpu_ns %lld", &sent, &cpu_ns), 2) << prof.result.out;
    EXPECT_EQ(sent, 200000u) << "the profiler's handler was not installed";
    const double cpu_us = static_cast<double>(total_cpu(prof.profile));
    EXPECT_NEAR(cpu_us, cpu_ns / 1000.0, 0.3 * cpu_ns / 1000.0 + 30000) << "profile CPU vs the program's own clock";
  }
}

TEST(Behaviour, SigkilledProgramLeavesReadableProfile) {
  Profiled prof = profile_run({fixture("fixture_behave"), "sigkill", "6000"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 128 + SIGKILL);
  ASSERT_EQ(prof.profile.processes.size(), 1u);
  EXPECT_EQ(prof.profile.processes[0].end_reason, profile::EndReason::kTruncated);
  // ~600 ms of CPU were burnt; all but the last writer cycle (10 ms) reached the collector.
  EXPECT_GE(function_self(prof.profile, "behave_hot"), 300000);
  // Samples taken: at least those that arrived (the preload's last counters came up to a second
  // before the kill; the header read 0 when none had come).
  size_t arrived = 0;
  for (const auto& smp : prof.profile.samples) arrived += smp.weight > 0;
  EXPECT_GE(std::max(counter_sum(prof.profile, "samples"), counter_sum(prof.profile, "samples_received")),
            static_cast<int64_t>(arrived));
  RunResult report = run({MLPROF_CLI, "report", prof.path});
  unsigned long long taken = 0;
  const size_t at = report.out.find("Samples:");
  ASSERT_NE(at, std::string::npos) << report.out;
  EXPECT_EQ(sscanf(report.out.c_str() + at, "Samples: %llu taken", &taken), 1);
  EXPECT_GE(taken, arrived) << "the header's samples taken";
  EXPECT_GE(arrived, 30u);
  bool warned = false;
  for (auto& w : prof.profile.warnings) warned |= w.find("without a clean end") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(Behaviour, DurationStopsANeverEndingProgramAndKeepsItsProfile) {
  Profiled prof = profile_run({fixture("fixture_behave"), "forever"}, {"--duration", "1"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 128 + SIGTERM);
  int64_t cpu_us = function_self(prof.profile, "behave_hot");
  EXPECT_GE(cpu_us, 300000);  // about a second of CPU; at least part of a loaded core
  EXPECT_GT(prof.profile.run.end_ns - prof.profile.run.start_ns, 900000000);
  // Stopped on purpose after a flush: said so, and no "killed or crashed" warning.
  ASSERT_EQ(prof.profile.run.extra.count("stopped_by"), 1u);
  EXPECT_NE(prof.profile.run.extra.at("stopped_by").find("SIGTERM after --duration"), std::string::npos);
  for (auto& w : prof.profile.warnings) EXPECT_EQ(w.find("without a clean end"), std::string::npos) << w;
  EXPECT_EQ(prof.profile.processes[0].end_reason, profile::EndReason::kStopped);
}

// --duration stops the whole tree: a prefork server's workers that ignore SIGTERM are killed 5 s
// after it, like the command would be (they ran on after mlprof-run, reparented to init, burning
// CPU until killed by hand).
TEST(Behaviour, DurationStopsWorkersThatIgnoreSigterm) {
  Profiled prof = profile_run({fixture("fixture_behave"), "prefork"}, {"--duration", "1"});
  ASSERT_TRUE(prof.ok);
  EXPECT_EQ(prof.result.exit_code, 128 + SIGTERM);  // the command's own end: SIGTERM
  std::vector<pid_t> workers;
  std::istringstream out(prof.result.out);
  for (std::string word, pid; out >> word >> pid;)
    if (word == "worker") workers.push_back(static_cast<pid_t>(std::stol(pid)));
  ASSERT_EQ(workers.size(), 2u) << prof.result.out;
  for (pid_t w : workers) {
    EXPECT_EQ(kill(w, 0), -1) << "worker " << w << " still runs";
    if (kill(w, 0) == 0) kill(w, SIGKILL);
  }
  ASSERT_EQ(prof.profile.processes.size(), 3u);
  for (auto& w : prof.profile.warnings) EXPECT_EQ(w.find("killed or crashed"), std::string::npos) << w;
  ASSERT_EQ(prof.profile.run.extra.count("stopped_by"), 1u);
  EXPECT_NE(prof.profile.run.extra.at("stopped_by").find("2 processes below the command still ran 5 s after SIGTERM and got SIGKILL"),
            std::string::npos) << prof.profile.run.extra.at("stopped_by");
}

TEST(Behaviour, SignalsSentToMlprofRunReachTheProgram) {
  // kill(mlprof-run, SIGTERM) from outside the terminal: mlprof-run passes it on, the program
  // handles it its own way (exit 7), and the profile is still written.
  std::string dir = scratch();
  std::string out = dir + "/out.txt";
  pid_t pid = fork();
  if (pid == 0) {
    freopen(out.c_str(), "w", stdout);
    freopen((dir + "/err.txt").c_str(), "w", stderr);
    execl(MLPROF_RUN, MLPROF_RUN, "-q", "-o", (dir + "/run.mlprof").c_str(), "--",
          fixture("fixture_behave").c_str(), "term", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until the program is running its loop.
  for (int i = 0; i < 200 && read_all(out).find("ready") == std::string::npos; ++i) usleep(20000);
  ASSERT_NE(read_all(out).find("ready"), std::string::npos);
  usleep(300000);
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 7);
  EXPECT_NE(read_all(out).find("got SIGTERM"), std::string::npos);
  auto prof = profile::read_profile(dir + "/run.mlprof");
  ASSERT_TRUE(prof) << prof.error();
  EXPECT_GT(function_self(*prof, "behave_hot"), 0);
  EXPECT_EQ(prof->processes.at(0).exit_status, 7);
}

TEST(Behaviour, SummaryGoesToStderrWithoutQuiet) {
  std::string dir = scratch();
  RunResult r = run({MLPROF_RUN, "-o", dir + "/x.mlprof", "--", fixture("fixture_cpu_ratio"), "300", "3"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("hot_fifty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("x.html"), std::string::npos);
  // stdout is the program's alone: its one line.
  EXPECT_EQ(r.out.rfind("cpu_ratio done ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  std::string html = read_all(dir + "/x.html");
  EXPECT_NE(html.find("<html"), std::string::npos);
  EXPECT_NE(html.find("hot_fifty"), std::string::npos);
}

TEST(BadInput, OptionsAreValidatedBeforeTheCommandRuns) {
  expect_refused(MLPROF_RUN, {
      {{"--rate", "0", "--", "/bin/true"}, "'0' is not a whole number from 1 to 10000"},
      {{"--rate", "fast", "--", "/bin/true"}, "'fast' is not a whole number from 1 to 10000"},
      {{"--duration", "-1", "--", "/bin/true"}, "'-1' is not a number of seconds above 0"},
      {{"--duration", "abc", "--", "/bin/true"}, "'abc' is not a number of seconds above 0"},
      // A mistyped option is not run as the command (it was: "cannot run '--no-memroy'", 127).
      {{"--no-memroy", "-q", "--", "/bin/true"}, "unknown option '--no-memroy'"},
      {{"-Z", "/bin/true"}, "unknown option '-Z'"},
      {{"--unwinder", "magic", "--", "/bin/true"}, "unwinder"},
      {{"-o", "/nonexistent-dir/x.mlprof", "--", "/bin/true"}, "does not exist"},
      // The whole run's profile would be lost at its end (it was, with "profile written" said).
      {{"-o", "/tmp", "--", "/bin/true"}, "/tmp is a directory, not a file"},
      {{"--html", "/tmp", "--", "/bin/true"}, "/tmp is a directory, not a file"},
      {{"-o", "/tmp/mlprof-same-out", "--html", "/tmp/../tmp/mlprof-same-out", "--", "/bin/true"},
       "-o and --html both name /tmp/mlprof-same-out"},
      {{}, "no command"},
  });
}

// A run that profiled no process says why: a statically linked program (no loader to preload
// with), MLPROF_DISABLE=1. It said "Processes: 0" and "profile written", nothing more.
TEST(BadInput, ARunThatProfiledNothingSaysWhy) {
  Profiled st = profile_run({fixture("fixture_behave_static"), "output", "20"});
  ASSERT_TRUE(st.ok);
  EXPECT_EQ(st.result.exit_code, 3);  // the program ran as it does alone
  EXPECT_TRUE(st.profile.processes.empty());
  std::string all;
  for (auto& w : st.profile.warnings) all += w + "\n";
  EXPECT_NE(all.find("fixture_behave_static is statically linked, and the loader ignores LD_PRELOAD"),
            std::string::npos) << all;
  Profiled off = profile_run({fixture("fixture_behave"), "output", "20"}, {}, {"MLPROF_DISABLE=1"});
  ASSERT_TRUE(off.ok);
  all.clear();
  for (auto& w : off.profile.warnings) all += w + "\n";
  EXPECT_NE(all.find("MLPROF_DISABLE=1 is set in the environment"), std::string::npos) << all;
  // A value that is neither 1 nor 0 is said, not silently taken.
  std::string dir = scratch();
  RunResult r = run({MLPROF_RUN, "-o", dir + "/x.mlprof", "--no-html", "--", fixture("fixture_behave"), "output", "20"},
                    {"MLPROF_DISABLE=yes"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("MLPROF_DISABLE=yes is not 1 or 0; taken as 0"), std::string::npos) << r.err;
}

TEST(BadInput, MissingCommandIs127WithAMessage) {
  std::string dir = scratch();
  RunResult r = run({MLPROF_RUN, "-q", "-o", dir + "/x.mlprof", "--", "/no/such/program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot run '/no/such/program'"), std::string::npos) << r.err;
}

TEST(BadInput, BadEnvironmentValueIsReportedOnceAndTheProgramRuns) {
  std::string dir = scratch();
  RunResult r = run({MLPROF_RUN, "-o", dir + "/x.mlprof", "--no-html", "--", fixture("fixture_cpu_ratio"), "200", "2"},
                    {"MLPROF_UNWINDER=bogus"});
  EXPECT_EQ(r.exit_code, 0);
  // The preload says it once on stderr, as its own line; the summary lists it again as a warning.
  std::istringstream lines(r.err);
  int said = 0;
  for (std::string l; std::getline(lines, l);) said += l.rfind("mlprof: MLPROF_UNWINDER=bogus", 0) == 0;
  EXPECT_EQ(said, 1) << r.err;
  auto prof = profile::read_profile(dir + "/x.mlprof");
  ASSERT_TRUE(prof) << prof.error();
  bool in_report = false;
  for (auto& proc : prof->processes)
    for (auto& m : proc.messages) in_report |= m.find("MLPROF_UNWINDER=bogus") != std::string::npos;
  EXPECT_TRUE(in_report);
}

TEST(BadInput, ReportRejectsForeignAndTruncatedFiles) {
  std::string dir = scratch();
  {
    std::ofstream f(dir + "/foreign.mlprof");
    f << "{\"not\": \"a profile\"}";
  }
  RunResult r = run({MLPROF_CLI, "report", dir + "/foreign.mlprof"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not an mlprof profile"), std::string::npos) << r.err;

  Profiled prof = profile_run({fixture("fixture_cpu_ratio"), "200", "2"});
  std::string data = read_all(prof.path);
  {
    std::ofstream f(dir + "/cut.mlprof", std::ios::binary);
    f << data.substr(0, data.size() / 2);
  }
  r = run({MLPROF_CLI, "report", dir + "/cut.mlprof"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

}  // namespace

namespace {

// The preload's writer thread wakes every 10 ms only while there is work: a program that sleeps
// has its rings drained every 80 ms after the first second (docs/how-it-works.md, the writer
// thread), plus the memory timeline's records (every 80 ms). Counted by writer_cycles.
TEST(Behaviour, AnIdleProgramsWriterCyclesLessOften) {
  for (const bool memory : {true, false}) {
    Profiled prof = profile_run({"/bin/sleep", "3"}, memory ? std::vector<std::string>{} : std::vector<std::string>{"--no-memory"});
    ASSERT_TRUE(prof.ok);
    ASSERT_EQ(prof.result.exit_code, 0) << prof.result.err;
    ASSERT_EQ(prof.profile.processes.size(), 1u);
    const auto& proc = prof.profile.processes[0];
    const double seconds = (proc.end_ns - proc.start_ns) / 1e9;
    ASSERT_GT(seconds, 2.9);
    const double per_s = counter_sum(prof.profile, "writer_cycles") / seconds;
    // 100 in the first second, then ~12.5 a second: ~42/s over 3 s (every 10 ms: 100/s).
    EXPECT_LT(per_s, 70) << (memory ? "memory on" : "--no-memory");
    EXPECT_GT(per_s, 20) << (memory ? "memory on" : "--no-memory");
  }
}

// A walk that misses the walker's code cache (1,024 slots) wakes the writer only for a code
// object the writer has not named yet. 400 functions (800 code objects with their list
// comprehensions) called in turn, many sharing a cache slot: a third of the memory samples missed
// the cache, and each woke the writer (~570 cycles a second). Now the writer is woken while it
// names them at the start, then cycles at the idle rate: the steady state is the difference
// between a 6-second and a 2-second run.
TEST(Behaviour, HotCodeObjectsDoNotKeepWakingTheWriter) {
  const std::string script = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/many_codes.py";
  double cycles[2] = {}, seconds[2] = {};
  for (int k = 0; k < 2; ++k) {
    Profiled prof = profile_run({"/usr/bin/python3", script, k == 0 ? "2" : "6"});
    ASSERT_TRUE(prof.ok);
    ASSERT_EQ(prof.result.exit_code, 0) << prof.result.err;
    ASSERT_EQ(prof.profile.processes.size(), 1u);
    const auto& proc = prof.profile.processes[0];
    seconds[k] = (proc.end_ns - proc.start_ns) / 1e9;
    cycles[k] = static_cast<double>(counter_sum(prof.profile, "writer_cycles"));
    // ~1,500 a second on a free core; fewer when the machine is busy (the test then tells less).
    EXPECT_GT(counter_sum(prof.profile, "mem_samples"), 150 * seconds[k]) << "too few samples to tell";
    EXPECT_GE(counter_sum(prof.profile, "python_codes"), 400);  // most of them sampled
  }
  ASSERT_GT(seconds[1] - seconds[0], 3.5);
  // Every ~80 ms while the rings stay nearly empty: ~13 a second (every 10 ms for a while after
  // a ring filled, when the writer was held off the CPU for 100 ms or more on a busy machine).
  EXPECT_LT((cycles[1] - cycles[0]) / (seconds[1] - seconds[0]), 100)
      << cycles[0] << " cycles in " << seconds[0] << " s, " << cycles[1] << " in " << seconds[1] << " s";
}

}  // namespace

namespace {

int opened(const std::string& out) {
  int n = -1;
  auto pos = out.rfind("opened ");
  if (pos == std::string::npos || sscanf(out.c_str() + pos, "opened %d", &n) != 1) ADD_FAILURE() << "no count: " << out;
  return n;
}

// Each perf-sampled thread holds a descriptor. With 150 live threads after the switch to perf
// events (32 short threads), a program at RLIMIT_NOFILE 256 could open 99 descriptors instead of
// 251: mlprof uses perf events for at most 1/16 of the limit's worth of threads, POSIX timers
// for the rest.
TEST(Behaviour, PerfEventsLeaveTheProgramItsDescriptors) {
  const std::string script = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/fd_limit.py";
  RunResult direct = run({"/usr/bin/python3", script});
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  Profiled prof = profile_run({"/usr/bin/python3", script}, {"--no-memory"});
  ASSERT_TRUE(prof.ok);
  ASSERT_EQ(prof.result.exit_code, 0) << prof.result.err;
  EXPECT_GE(opened(prof.result.out), opened(direct.out) - 24) << "the profiler took the program's descriptors";
  EXPECT_LE(counter_sum(prof.profile, "perf_threads"), 16 + 12);  // 256 / 16, and the 8 short threads after the switch
  EXPECT_GE(counter_sum(prof.profile, "posix_timer_threads"), 150 - 16);
}

}  // namespace
