// The hand-built profile the report tests share (declared in report_fixture.h).
// Ground truth, cpu in us (grand total 100000 us = 100 ms):
//   main;compute;add_one(inlined)  thread python3 30000 + thread loader 20000
//   main;compute;memcpy             thread python3 10000 (alloc 4096 from thread loader)
//   main;libfoo.so+0x1a2b           worker thread 25000
//   main;operator;weird\nname       worker thread 5000
//   [truncated] compute             thread python3 10000
#include <string>

#include "profile/model.h"
#include "report_fixture.h"

namespace mlprof::report_test {

using namespace mlprof::profile;

uint32_t intern(Profile& p, const std::string& s) {
  for (uint32_t i = 0; i < p.strings.size(); ++i)
    if (p.strings[i] == s) return i;
  p.strings.push_back(s);
  return static_cast<uint32_t>(p.strings.size() - 1);
}

Profile make_report_profile() {
  Profile p;
  p.run.command = {"python3", "train.py", "--epochs", "3"};
  p.run.start_ns = 1'000'000'000;
  p.run.end_ns = 3'500'000'000;  // 2.5 s
  p.run.rate_hz = 99;
  p.run.timer = "thread-cpu-timer";
  p.run.mode = "cpu";
  p.run.exit_status = 0;
  p.run.hostname = "box";
  p.warnings = {"no debug info for /lib/libfoo.so"};
  p.metrics = {{"cpu", "us"}, {"alloc", "bytes"}};

  Process py;
  py.pid = 100;
  py.ppid = 1;
  py.exe = "/usr/bin/python3";
  py.argv = {"python3", "train.py", "--epochs", "3"};
  py.end_reason = EndReason::kExit;
  py.exit_status = 0;
  py.counters = {{"samples", 90}, {"dropped_ring_full", 2}, {"dropped_no_thread", 1}};
  Process worker;
  worker.pid = 200;
  worker.ppid = 100;
  worker.parent = 0;
  worker.exe = "/opt/app/worker";
  worker.argv = {"worker", "--fast"};
  worker.end_reason = EndReason::kTruncated;
  worker.exit_status = 137;
  worker.counters = {{"samples", 10}, {"dropped_transport", 1}};
  worker.messages = {"preload: perf_event_open failed, using timer"};
  p.processes = {py, worker};
  p.threads = {{0, 100, "python3", 0, 0}, {0, 101, "loader", 0, 0}, {1, 200, "", 0, 0}};

  uint32_t app = intern(p, "/opt/app/app.bin");
  uint32_t libc = intern(p, "/lib/x86_64-linux-gnu/libc.so.6");
  uint32_t libfoo = intern(p, "/lib/libfoo.so");
  uint32_t main_fn = intern(p, "main"), main_file = intern(p, "/src/main.cpp");
  uint32_t compute = intern(p, "compute"), compute_file = intern(p, "/src/compute.cpp");
  uint32_t add_one = intern(p, "add_one"), math_h = intern(p, "/src/math.h");
  uint32_t memcpy_fn = intern(p, "memcpy");
  uint32_t weird = intern(p, "operator;weird\nname");
  p.frames = {
      {main_fn, main_file, 10, app, 0x1000, FrameKind::kNative, false},     // F0
      {compute, compute_file, 20, app, 0x2000, FrameKind::kNative, false},  // F1
      {add_one, math_h, 5, app, 0x2010, FrameKind::kNative, true},          // F2 inlined in F1
      {memcpy_fn, 0, 0, libc, 0x9abc, FrameKind::kNative, false},           // F3
      {0, 0, 0, libfoo, 0x1a2b, FrameKind::kNative, false},                 // F4
      {weird, 0, 0, app, 0x3000, FrameKind::kNative, false},                // F5
  };
  p.stacks = {
      {{2, 1, 0}, false},  // S0 main;compute;add_one
      {{3, 1, 0}, false},  // S1 main;compute;memcpy
      {{4, 0}, false},     // S2 main;libfoo+0x1a2b
      {{5, 0}, false},     // S3 main;operator;weird
      {{1}, true},         // S4 [truncated];compute
  };
  p.stack_values = {
      {0, 0, {30000, 0}}, {1, 0, {20000, 0}}, {0, 1, {10000, 0}}, {2, 2, {25000, 0}},
      {2, 3, {5000, 0}},  {0, 4, {10000, 0}}, {1, 1, {0, 4096}},
  };
  p.samples = {{0, 0, 1'100'000'000, 3}, {1, 0, 1'200'000'000, 2}, {2, 2, 1'300'000'000, 2}};

  p.functions = {
      {main_fn, app, main_file, 10, {0, 0}, {90000, 4096}},
      {compute, app, compute_file, 20, {10000, 0}, {70000, 4096}},
      {add_one, app, math_h, 5, {50000, 0}, {50000, 0}},
      {memcpy_fn, libc, 0, 0, {10000, 4096}, {10000, 4096}},
      {0, libfoo, 0, 0, {25000, 0}, {25000, 0}},
      {weird, app, 0, 0, {5000, 0}, {5000, 0}},
  };
  p.lines = {
      {main_file, 10, main_fn, {0, 0}, {90000, 4096}},
      {compute_file, 20, compute, {10000, 0}, {70000, 4096}},
      {math_h, 5, add_one, {50000, 0}, {50000, 0}},
  };
  return p;
}

}  // namespace mlprof::report_test
