// Python line numbers and processes against ground truth: tests/fixtures/python/lines.py burns on
// one marked line in each kind of code (multi-line statement, decorator, comprehension,
// generator, async, zip import, exec); short_modules.py in short-lived module code;
// multiproc.py burns in multiprocessing children; gc_time.py spends one phase in the garbage
// collector.
#include <algorithm>
#include <map>
#include <set>

#include "e2e_util.h"
#include "memory_util.h"
#include "python_util.h"

namespace {

using namespace e2e;

const std::string kDir = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/python/";

// CPU per (file, line) where the line is the innermost Python line.
std::map<std::pair<std::string, uint32_t>, int64_t> python_lines(const profile::Profile& p) {
  std::map<std::pair<std::string, uint32_t>, int64_t> out;
  for (auto& l : p.lines) out[{p.str(l.file), l.line}] += l.self.at(cpu(p));
  return out;
}

// The innermost Python frame of a stack (an index into frames), or frames.size() when it has none.
size_t innermost_python(const profile::Profile& p, const std::vector<uint32_t>& frames) {
  size_t i = 0;
  while (i < frames.size() && p.frames.at(frames[i]).kind != profile::FrameKind::kPython) ++i;
  return i;
}

bool is_gc_frame(const profile::Profile& p, uint32_t frame) {
  return p.str(p.frames.at(frame).function) == profile::kGcFrameName;
}

class PythonLines : public ::testing::TestWithParam<Interpreter> {};

TEST_P(PythonLines, EachKindOfCodeGetsItsExactLine) {
  const double seconds = 0.3;
  Profiled run = profile_run({GetParam().path, kDir + "lines.py", std::to_string(seconds)});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  auto lines = python_lines(run.profile);
  const int64_t expect_us = static_cast<int64_t>(seconds * 1e6);
  for (const char* name : {"multi", "decorated", "comprehension", "generator", "async"}) {
    uint32_t line = marker_line(kDir + "lines.py", std::string("# L:") + name);
    EXPECT_GE((lines[{kDir + "lines.py", line}]), expect_us * 3 / 10) << name << " at line " << line;
  }
  // The zip module: lines.py prints its __file__ (inside the zip); the marker is its line 4.
  std::string zip_file = run.result.out.substr(run.result.out.find("zip:") + 4);
  zip_file.erase(zip_file.find_last_not_of("\n") + 1);
  EXPECT_GE((lines[{zip_file, 4}]), expect_us * 3 / 10) << zip_file;
  // exec() of source compiled as "<generated>": the marker is its line 3.
  EXPECT_GE((lines[{"<generated>", 3}]), expect_us * 3 / 10);
}

// Module-level code lives only while its import runs (4 ms per module here, less than the
// writer's 10 ms cycle): its frames must still be named, with their own file and line.
TEST_P(PythonLines, ShortLivedModuleCodeIsNamed) {
  Profiled run = profile_run({GetParam().path, kDir + "short_modules.py", "120", "4"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const size_t at = run.result.out.find("busy_cpu_ms ");
  ASSERT_NE(at, std::string::npos) << run.result.out;
  const int64_t busy_us = static_cast<int64_t>(std::stod(run.result.out.substr(at + 12)) * 1000);
  int64_t in_modules = 0;
  for (auto& [key, us] : python_lines(run.profile)) {
    const std::string base = key.first.substr(key.first.rfind('/') + 1);
    if (base.rfind("short_mod_", 0) == 0) in_modules += us;
  }
  const int64_t freed = function_total(run.profile, "<code object freed before it was read>");
  EXPECT_GE(in_modules, busy_us * 6 / 10) << "busy " << busy_us << " us, unnamed " << freed << " us";
  EXPECT_LE(freed, busy_us * 2 / 10) << "busy " << busy_us << " us";
}

// Time in the garbage collector shows as a "[Python garbage collector]" frame right under the
// line that triggered the collection (the preload reads the interpreter's gc.collecting flag on
// the GIL holder: no symbols needed), and nowhere else.
TEST_P(PythonLines, GarbageCollectionIsShownUnderItsLine) {
  const std::string script = kDir + "gc_time.py";
  Profiled run = profile_run({GetParam().path, script, "0.4"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  std::map<uint32_t, int64_t> line_cpu, line_gc;  // marked line -> CPU of stacks with it innermost, in GC
  std::map<uint32_t, std::string> names;
  for (const char* name : {"collect", "churn", "arithmetic"}) names[marker_line(script, std::string("# GC: ") + name)] = name;
  int64_t gc_elsewhere = 0;
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    const int64_t c = sv.values.at(cpu(p));
    // The innermost Python frame of the stack, and whether the frame just inside it is the GC's.
    const size_t i = innermost_python(p, frames);
    if (i == frames.size()) continue;
    const auto& f = p.frames.at(frames[i]);
    const bool gc = i > 0 && is_gc_frame(p, frames[i - 1]);
    if (ends_with(p.str(f.file), "gc_time.py") && names.count(f.line)) {
      line_cpu[f.line] += c;
      if (gc) line_gc[f.line] += c;
    } else if (gc) {
      gc_elsewhere += c;
    }
  }
  for (auto& [line, name] : names) {
    SCOPED_TRACE(name);
    ASSERT_GE(line_cpu[line], 200000) << "line " << line << " has most of its 0.4 s";
    if (name == "collect")
      EXPECT_GE(line_gc[line], line_cpu[line] * 8 / 10) << "gc.collect() over a 200,000-object heap";
    else
      EXPECT_LE(line_gc[line], line_cpu[line] / 20);
  }
  int64_t gc_frames = 0;  // the frame is never anywhere but right inside a Python frame
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    for (size_t i = 0; i < frames.size(); ++i)
      if (is_gc_frame(p, frames[i])) {
        ++gc_frames;
        ASSERT_LT(i + 1, frames.size());
        EXPECT_EQ(p.frames.at(frames[i + 1]).kind, profile::FrameKind::kPython);
      }
  }
  EXPECT_GT(gc_frames, 0);
  EXPECT_LE(gc_elsewhere, line_cpu[marker_line(script, "# GC: collect")] / 10) << "imports, start-up (the heap is built with the collector disabled)";
}

// gc.collecting is the interpreter's flag: while the collector has let go of the GIL (a __del__
// that sleeps), another thread holds it with the flag set. Only the collecting thread gets the
// frame (the preload takes the thread that held the GIL when a sample first saw the flag set).
TEST_P(PythonLines, GarbageCollectionIsTheCollectingThreadsOnly) {
  const std::string script = kDir + "gc_threads.py";
  Profiled run = profile_run({GetParam().path, script, "1.0"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  const uint32_t collect = marker_line(script, "# GC: collect"), spin = marker_line(script, "# GC: spin");
  std::map<uint32_t, int64_t> line_cpu, line_gc;
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    const size_t i = innermost_python(p, frames);
    if (i == frames.size() || !ends_with(p.str(p.frames.at(frames[i]).file), "gc_threads.py")) continue;
    // The innermost marked line (a __del__ run by the collection counts for collect()).
    uint32_t line = p.frames.at(frames[i]).line;
    for (size_t j = i; j < frames.size(); ++j)
      if (p.frames.at(frames[j]).line == collect || p.frames.at(frames[j]).line == spin) {
        line = p.frames.at(frames[j]).line;
        break;
      }
    const bool gc = std::any_of(frames.begin(), frames.end(), [&](uint32_t f) { return is_gc_frame(p, f); });
    line_cpu[line] += sv.values.at(cpu(p));
    if (gc) line_gc[line] += sv.values.at(cpu(p));
  }
  ASSERT_GE(line_cpu[spin], 300000) << "the spinning thread ran";
  EXPECT_LE(line_gc[spin], line_cpu[spin] / 20) << "the spinning thread is never the collector";
  ASSERT_GE(line_cpu[collect], 20000);
  EXPECT_GE(line_gc[collect], line_cpu[collect] / 2) << "the collecting thread";
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonLines, ::testing::ValuesIn(supported_interpreters()),
                         [](const ::testing::TestParamInfo<Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonLines);

class PythonMultiprocessing : public ::testing::TestWithParam<const char*> {};

TEST_P(PythonMultiprocessing, ChildrenAreTheirOwnProcessesWithTheirOwnLines) {
  const Interpreter* py = nullptr;
  for (auto& p : interpreters())
    if (mlprof_supports(p) && (!py || p.minor > py->minor)) py = &p;
  if (!py) GTEST_SKIP() << "no supported Python interpreter found";
  Profiled run = profile_run({py->path, kDir + "multiproc.py", GetParam(), "0.4"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_EQ(run.result.out, "exit codes [0, 0]\n");
  const auto& p = run.profile;
  uint32_t child_line = marker_line(kDir + "multiproc.py", "# CHILD-LINE");
  uint32_t parent_line = marker_line(kDir + "multiproc.py", "# PARENT-LINE");
  std::map<uint32_t, int64_t> child_by_process, parent_by_process;  // process index -> cpu
  for (auto& sv : p.stack_values) {
    for (uint32_t f : p.stacks[sv.stack].frames) {
      const auto& fr = p.frames[f];
      if (fr.kind != profile::FrameKind::kPython || p.str(fr.file) != kDir + "multiproc.py") continue;
      uint32_t proc = p.threads[sv.thread].process;
      if (fr.line == child_line) child_by_process[proc] += sv.values[cpu(p)];
      if (fr.line == parent_line) parent_by_process[proc] += sv.values[cpu(p)];
      if (fr.line == child_line || fr.line == parent_line) break;
    }
  }
  // Two children, each its own process with about 0.4 s of CPU on its line; the parent's line in
  // one other process.
  ASSERT_EQ(child_by_process.size(), 2u) << GetParam();
  for (auto& [proc, us] : child_by_process) {
    EXPECT_GE(us, 200000) << "child process " << p.processes[proc].pid;
    EXPECT_FALSE(parent_by_process.count(proc)) << "parent's line in a child";
  }
  ASSERT_EQ(parent_by_process.size(), 1u);
  EXPECT_GE(parent_by_process.begin()->second, 200000);
}

INSTANTIATE_TEST_SUITE_P(StartMethods, PythonMultiprocessing, ::testing::Values("fork", "spawn", "forkserver"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace

namespace {

class PythonCThread : public ::testing::TestWithParam<e2e::Interpreter> {};

// A thread created by C (pthread_create in a library) that calls into Python: its frames are read
// and merged like any other thread's, and its line is on that thread, not the main one.
TEST_P(PythonCThread, ThreadStartedFromCHasItsPythonLine) {
  using namespace e2e;
  Profiled run = profile_run({GetParam().path, kDir + "cthread.py", fixture("libfixture_python_cthread.so"), "0.4"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_EQ(run.result.out, "rc 0\n");
  const auto& p = run.profile;
  uint32_t line = marker_line(kDir + "cthread.py", "# C-THREAD-LINE");
  std::map<uint32_t, int64_t> by_thread;
  for (auto& sv : p.stack_values)
    for (uint32_t f : p.stacks[sv.stack].frames) {
      const auto& fr = p.frames[f];
      if (fr.kind == profile::FrameKind::kPython && fr.line == line && p.str(fr.file) == kDir + "cthread.py") {
        by_thread[sv.thread] += sv.values[cpu(p)];
        break;
      }
    }
  std::string seen;
  for (auto& [t, v] : by_thread)
    seen += " [thread " + std::to_string(t) + " tid " + std::to_string(p.threads[t].tid) + " '" + p.threads[t].name +
            "' cpu " + std::to_string(v) + " us]";
  ASSERT_EQ(by_thread.size(), 1u) << "the line is on:" << seen;
  const auto& th = p.threads[by_thread.begin()->first];
  EXPECT_NE(th.tid, p.processes[th.process].pid) << "the C thread's line is on the main thread";
  EXPECT_GE(by_thread.begin()->second, 200000);
  // Merged into its native stack: the C library's thread function is below the Python frames.
  bool merged = false;
  for (auto& sv : p.stack_values) {
    if (sv.thread != by_thread.begin()->first) continue;
    bool py = false;
    for (uint32_t f : p.stacks[sv.stack].frames) {
      const auto& fr = p.frames[f];
      py |= fr.kind == profile::FrameKind::kPython;
      if (py && p.str(fr.module).find("libfixture_python_cthread.so") != std::string::npos) merged = true;
    }
  }
  EXPECT_TRUE(merged) << "no stack with the C thread function under the Python frames";
  EXPECT_LE(counter_sum(p, "python_merge_failures") * 100, counter_sum(p, "python_samples"));
}

// Native code the unwinder cannot get out of (no unwind information, like OpenBLAS's assembly
// kernels): the stack ends before any eval loop, so the Python frames cannot be merged in place.
// The native frames it has still go above the Python line, and the line's time is native, not
// interpreter (it read 100% interpreter before session 23; Debian's OpenBLAS matmul lines did too).
class PythonNoCfi : public ::testing::TestWithParam<Interpreter> {};

TEST_P(PythonNoCfi, NativeCodeWithoutUnwindInfoIsNativeTimeOfItsLine) {
  Profiled run = profile_run({GetParam().path, kDir + "nocfi.py", fixture("libfixture_python_nocfi.so"), "0.4"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_EQ(run.result.out, "ok True\n");
  const auto& p = run.profile;
  const std::string file = kDir + "nocfi.py";
  const uint32_t native_line = marker_line(file, "# NOCFI-LINE"), python_line = marker_line(file, "# PYTHON-LINE");
  ASSERT_GT(counter_sum(p, "python_unmergeable_truncated"), 0u) << "the unwinder got out of nocfi_burn: this test no longer tests a cut stack";
  const uint32_t native = p.metric("cpu-native"), interp = p.metric("cpu-interpreter");
  int64_t line_cpu = 0, line_native = 0, py_cpu = 0, py_interp = 0, under_line = 0;
  for (auto& l : p.lines) {
    if (p.str(l.file) != file) continue;
    if (l.line == native_line) line_cpu += l.self.at(cpu(p)), line_native += l.self.at(native);
    if (l.line == python_line) py_cpu += l.self.at(cpu(p)), py_interp += l.self.at(interp);
  }
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    const size_t py = innermost_python(p, frames);
    if (py == frames.size() || p.frames[frames[py]].line != native_line) continue;
    for (size_t i = 0; i < py; ++i)
      if (p.str(p.frames[frames[i]].function) == "nocfi_burn") {
        under_line += sv.values.at(cpu(p));
        break;
      }
  }
  EXPECT_GE(line_cpu, 300000);
  EXPECT_GE(line_native, line_cpu * 9 / 10) << "native " << line_native << " of " << line_cpu << " us";
  EXPECT_GE(under_line, line_cpu * 9 / 10) << "nocfi_burn above the line in " << under_line << " of " << line_cpu << " us";
  EXPECT_GE(py_interp, py_cpu * 8 / 10) << "the Python line stays interpreter time";
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonNoCfi, ::testing::ValuesIn(e2e::supported_interpreters()),
                         [](const ::testing::TestParamInfo<e2e::Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonNoCfi);

// Work handed to an OpenMP team from two Python lines, one with twice the other's (pool.py): the
// workers' CPU is charged to the line that started it, under the marker frame, on the workers' own
// threads; a thread the library starts itself, no pool's, keeps its own stacks (ground truth:
// tests/fixtures/python_pool.c).
class PythonPool : public ::testing::TestWithParam<Interpreter> {};

TEST_P(PythonPool, WorkersCpuIsChargedToTheLineThatStartedIt) {
  // Passive waiting: the workers sleep between teams instead of spinning, so their CPU is the
  // work's alone.
  Profiled run = profile_run({GetParam().path, kDir + "pool.py", fixture("libfixture_python_pool.so"), "60"}, {},
                             {"OMP_NUM_THREADS=2", "OMP_WAIT_POLICY=passive"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_EQ(run.result.out, "ok True\n");
  const auto& p = run.profile;
  const std::string file = kDir + "pool.py";
  const uint32_t heavy = marker_line(file, "# POOL-HEAVY"), light = marker_line(file, "# POOL-LIGHT"),
                 plain = marker_line(file, "# PLAIN-THREAD");
  auto named = [&](uint32_t f, const char* prefix) { return p.str(p.frames.at(f).function).rfind(prefix, 0) == 0; };
  auto on_line = [&](const std::vector<uint32_t>& frames, uint32_t line) {
    const size_t i = innermost_python(p, frames);
    return i < frames.size() && p.frames[frames[i]].line == line && p.str(p.frames[frames[i]].file) == file;
  };
  const uint32_t pid = p.processes.at(0).pid;
  int64_t team = 0, worker_work = 0, worker_charged = 0, plain_cpu = 0, plain_on_lines = 0;
  std::map<uint32_t, int64_t> worker_by_line;
  for (auto& sv : p.stack_values) {
    const auto& frames = p.stacks.at(sv.stack).frames;
    const int64_t v = sv.values.at(cpu(p));
    const bool in_team = std::any_of(frames.begin(), frames.end(), [&](uint32_t f) { return named(f, "omp_burn._omp_fn"); });
    team += in_team ? v : 0;
    if (p.threads.at(sv.thread).tid == pid) continue;
    if (std::any_of(frames.begin(), frames.end(), [&](uint32_t f) { return named(f, "plain_worker"); })) {
      plain_cpu += v;
      plain_on_lines += innermost_python(p, frames) < frames.size() ? v : 0;
    }
    if (!in_team) continue;
    worker_work += v;
    auto marker = std::find_if(frames.begin(), frames.end(), [&](uint32_t f) { return named(f, profile::kPoolWorkersFrameName); });
    if (marker == frames.end() || !(on_line(frames, heavy) || on_line(frames, light))) continue;
    worker_charged += v;
    worker_by_line[on_line(frames, heavy) ? heavy : light] += v;
    // Spliced at the call that started the team: the worker's own frames above the marker, the
    // starting thread's GOMP_parallel below it. (A worker stack the unwinder cut short at `burn`
    // is matched at `burn`: the starting thread's omp_fn then comes first below the marker.)
    const bool at_fn = named(*(marker - 1), "omp_burn._omp_fn"), at_burn = named(*(marker - 1), "burn");
    EXPECT_TRUE(at_fn || at_burn) << p.str(p.frames[*(marker - 1)].function);
    auto below = marker + (at_fn ? 1 : 2);
    EXPECT_TRUE(below < frames.end() && named(*below, "GOMP_parallel") && (at_fn || named(*(marker + 1), "omp_burn._omp_fn")))
        << "below the marker: " << (marker + 1 == frames.end() ? "nothing" : p.str(p.frames[*(marker + 1)].function));
  }
  // The team had a worker doing about half of the work (static schedule over two threads), and
  // nearly all of the worker's CPU is charged to the lines.
  ASSERT_GT(worker_work, team / 4) << "the worker thread did little of the team's work";
  EXPECT_GE(worker_charged, worker_work * 95 / 100) << "of the worker's " << worker_work << " us";
  // Each team's to its own line: 2:1 by work. (CPU per unit of work varies on a busy machine whose
  // two CPUs are one core's hyperthreads, hence the wide bounds; one line taking it all is far out.)
  const int64_t wh = worker_by_line[heavy], wl = worker_by_line[light];
  EXPECT_GT(wh * 10, wl * 12) << "worker at heavy " << wh << " us, at light " << wl << " us";
  EXPECT_LT(wh * 10, wl * 33) << "worker at heavy " << wh << " us, at light " << wl << " us";
  // The lines hold the whole team's CPU, both threads', as the line's native time.
  auto lines = python_lines(p);
  EXPECT_GE((lines[{file, heavy}] + lines[{file, light}]), team * 95 / 100);
  for (auto& line : p.lines)
    if (p.str(line.file) == file && line.line == heavy)
      EXPECT_GE(line.self.at(p.metric("cpu-native")), line.self.at(cpu(p)) * 9 / 10);
  // The library's own thread is no pool's: its CPU stays off the lines.
  EXPECT_GT(plain_cpu, 20000);
  EXPECT_EQ(plain_on_lines, 0);
  EXPECT_LT((lines[{file, plain}]), plain_cpu / 4);
  const auto& counters = p.processes.at(0).counters;
  ASSERT_TRUE(counters.count("pool_worker_samples_charged"));
  EXPECT_GE(counters.at("pool_worker_samples_charged") * 100, counters.at("pool_worker_samples") * 90);
  // The summary says how many were charged.
  RunResult report = e2e::run({MLPROF_CLI, "report", run.path});
  EXPECT_NE(report.out.find("Thread pools: " + std::to_string(counters.at("pool_worker_samples_charged")) + " of " +
                            std::to_string(counters.at("pool_worker_samples")) + " worker samples"),
            std::string::npos)
      << report.out;
}

// The same team with OpenMP's active wait policy: the worker spins in libgomp through the 0.1 s
// sleeps between teams. That spin is the pool waiting for work: counted apart (pool_wait_samples),
// said in the summary, and charged to neither line (it matched the starting thread's spin at its
// team's barrier and went to the line of the last team); the lines' split stays the work's 2:1.
TEST(PythonPoolWaiting, SpinningBetweenTeamsIsCountedAndOnNoLine) {
  const std::string file = kDir + "pool.py";
  Profiled run = profile_run({"/usr/bin/python3", file, fixture("libfixture_python_pool.so"), "60"}, {},
                             {"OMP_NUM_THREADS=2", "OMP_WAIT_POLICY=active"});
  ASSERT_TRUE(run.ok);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& p = run.profile;
  const uint32_t heavy = marker_line(file, "# POOL-HEAVY"), light = marker_line(file, "# POOL-LIGHT");
  const auto& counters = p.processes.at(0).counters;
  ASSERT_TRUE(counters.count("pool_wait_samples")) << "no waiting counted";
  EXPECT_GE(counters.at("pool_wait_samples"), 10u);  // ~0.4 s of sleeps: ~40 samples of spin
  // Charged stacks hold the worker's work only: a function of the fixture's above the marker.
  const uint32_t pid = p.processes.at(0).pid;
  std::map<uint32_t, int64_t> worker_by_line;
  for (auto& sv : p.stack_values) {
    if (p.threads.at(sv.thread).tid == pid) continue;
    const auto& frames = p.stacks.at(sv.stack).frames;
    auto marker = std::find_if(frames.begin(), frames.end(),
                               [&](uint32_t f) { return p.str(p.frames.at(f).function) == profile::kPoolWorkersFrameName; });
    if (marker == frames.end()) continue;
    const std::string above = p.str(p.frames.at(*(marker - 1)).function);
    EXPECT_TRUE(above.rfind("omp_burn._omp_fn", 0) == 0 || above == "burn") << "charged at " << above;
    const size_t i = innermost_python(p, frames);
    if (i < frames.size() && p.str(p.frames[frames[i]].file) == file) worker_by_line[p.frames[frames[i]].line] += sv.values.at(cpu(p));
  }
  const int64_t wh = worker_by_line[heavy], wl = worker_by_line[light];
  EXPECT_GT(wh * 10, wl * 12) << "worker at heavy " << wh << " us, at light " << wl << " us";
  EXPECT_LT(wh * 10, wl * 33) << "worker at heavy " << wh << " us, at light " << wl << " us";
  RunResult report = e2e::run({MLPROF_CLI, "report", run.path});
  EXPECT_NE(report.out.find("were pool threads waiting for work (spinning)"), std::string::npos) << report.out;
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonPool, ::testing::ValuesIn(e2e::supported_interpreters()),
                         [](const ::testing::TestParamInfo<e2e::Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonPool);

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonCThread, ::testing::ValuesIn(e2e::supported_interpreters()),
                         [](const ::testing::TestParamInfo<e2e::Interpreter>& i) { return i.param.name(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonCThread);

}  // namespace
