// The in-memory form of a profile: what the collector builds, the profile file stores
// (docs/profile-format.md), and the report reads. Metrics are named columns, so later work adds
// metrics (cpu-interpreter, alloc-bytes, gpu, ...) without changing this shape.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlprof::profile {

inline constexpr uint32_t kNone = UINT32_MAX;

enum class FrameKind : uint8_t {
  kNative = 0,   // machine code in an ELF module
  kPython = 1,   // a Python function (later issues)
  kKernel = 2,   // kernel / system (later issues)
  kUnknown = 3,
};

// One frame of a symbolized stack. String fields are indexes into Profile::strings (0 is "").
struct Frame {
  uint32_t function = 0;    // demangled function name; 0 when unknown
  uint32_t file = 0;        // source file path; 0 when unknown
  uint32_t line = 0;        // source line; 0 when unknown
  uint32_t module = 0;      // module path (ELF file); 0 when unknown
  uint64_t module_offset = 0;  // file-relative address (pc - load bias) of the looked-up pc
  FrameKind kind = FrameKind::kNative;
  bool inlined = false;     // an inlined call inside the next (outer) frame
  bool operator==(const Frame&) const = default;
};

// Frame ids, leaf first.
struct Stack {
  std::vector<uint32_t> frames;
  bool truncated = false;   // the unwinder stopped early or hit the depth limit
  bool operator==(const Stack&) const = default;
};

struct MetricDesc {
  std::string name;  // "cpu"
  std::string unit;  // "us" for time, "bytes", "count"
  bool operator==(const MetricDesc&) const = default;
};

enum class EndReason : uint8_t {
  kExit = 0,       // clean end of stream after exit()
  kExec = 1,       // replaced by execve (see Process::exec_next)
  kDetached = 2,   // profiling stopped on request, process kept running
  kTruncated = 3,  // stream ended without a trailer: killed, _exit, crash; data up to then kept
};

struct Process {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  uint32_t parent = kNone;     // index of the parent process in Profile::processes, if profiled
  uint32_t exec_prev = kNone;  // index of the image this one replaced by execve, if any
  std::string exe;
  std::vector<std::string> argv;
  int64_t start_ns = 0;        // CLOCK_MONOTONIC
  int64_t end_ns = 0;
  EndReason end_reason = EndReason::kTruncated;
  int32_t exit_status = -1;    // exit code, 128+signal, or -1 when unknown
  std::map<std::string, uint64_t> counters;  // "samples", "dropped_ring_full", ... (docs)
  std::vector<std::string> messages;         // warnings from this process's preload
  bool operator==(const Process&) const = default;
};

struct Thread {
  uint32_t process = 0;  // index into Profile::processes
  uint32_t tid = 0;
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;    // 0 when the end was not seen
  bool operator==(const Thread&) const = default;
};

// Aggregated values of one stack on one thread; values[i] belongs to metrics[i].
struct StackValues {
  uint32_t thread = 0;
  uint32_t stack = 0;
  std::vector<int64_t> values;
  bool operator==(const StackValues&) const = default;
};

// One sample in time order (for timelines and traces). weight = timer ticks it stands for.
struct SampleEvent {
  uint32_t thread = 0;
  uint32_t stack = 0;
  int64_t t_ns = 0;      // CLOCK_MONOTONIC
  uint32_t weight = 1;
  bool operator==(const SampleEvent&) const = default;
};

// Per function (function name + module + file) and per source line, self and total per metric.
// "total" counts a stack once per function even when it recurses.
struct FunctionStat {
  uint32_t function = 0, module = 0, file = 0;  // string indexes
  uint32_t first_line = 0;                      // smallest line seen, 0 if none
  std::vector<int64_t> self, total;
  bool operator==(const FunctionStat&) const = default;
};

struct LineStat {
  uint32_t file = 0, line = 0, function = 0;  // string indexes
  std::vector<int64_t> self, total;
  bool operator==(const LineStat&) const = default;
};

// Facts about the whole run. Times are CLOCK_MONOTONIC ns unless named _realtime.
struct RunInfo {
  std::vector<std::string> command;
  std::string cwd;
  std::string hostname;
  std::string mlprof_version;
  int64_t start_realtime_ns = 0;  // wall-clock time of start_ns
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t rate_hz = 0;           // requested sampling rate
  std::string timer;              // "thread-cpu-timer" or "perf-task-clock"
  std::string mode;               // "cpu"
  int32_t exit_status = -1;       // what mlprof-run returned for the command
  int64_t collector_cpu_ns = 0;   // CPU used by the collector itself
  std::map<std::string, std::string> extra;  // forward-compatible key/values
  bool operator==(const RunInfo&) const = default;
};

// Memory use of one process over time (memory profiling). Heap figures are estimates from the
// sampled allocations (exact in exact mode); RSS is measured.
struct MemoryPoint {
  int64_t t_ns = 0;        // CLOCK_MONOTONIC
  int64_t rss_bytes = -1;  // -1 when not measured at this point
  int64_t heap_bytes = 0;  // estimated live heap (sampled allocations still live, weighted)
  bool operator==(const MemoryPoint&) const = default;
};

struct ProcessMemory {
  uint32_t process = 0;               // index into Profile::processes
  uint64_t interval_bytes = 0;        // mean sampling interval; 1 = exact mode
  uint64_t copy_interval_bytes = 0;   // the same for copy volume
  bool python_allocator = false;      // pymalloc allocations were hooked (Python lines get them)
  int64_t peak_heap_bytes = 0, peak_heap_t_ns = 0;  // estimated live heap at its peak, and when
  int64_t peak_rss_bytes = 0, peak_rss_t_ns = 0;    // highest RSS measured, and when
  int64_t end_heap_bytes = 0;         // estimated live heap when the stream ended
  std::vector<MemoryPoint> timeline;  // in time order, >= 10 Hz while the process ran
  bool operator==(const ProcessMemory&) const = default;
};

enum class LeakKind : uint8_t {
  kUnfreedAtExit = 0,  // sampled allocations of this site were still live when the process exited
  kGrowth = 1,         // the site's live bytes grew steadily over the run (servers that never exit)
};

// A site (allocation stack) that looks like a leak. Figures are estimates unless in exact mode.
struct LeakCandidate {
  uint32_t process = 0;              // index into Profile::processes
  uint32_t stack = 0;                // the allocation stack (index into Profile::stacks)
  LeakKind kind = LeakKind::kUnfreedAtExit;
  int64_t bytes = 0;                 // estimated bytes live (at exit; or at the end of the growth)
  int64_t count = 0;                 // estimated blocks
  int64_t growth_bytes_per_s = 0;    // slope of the site's live bytes over the run
  uint32_t confidence_permille = 0;  // 0..1000
  bool operator==(const LeakCandidate&) const = default;
};

struct Profile {
  // Set by the reader to the file's version; the writer always writes the current one.
  uint16_t version_major = 0, version_minor = 0;
  RunInfo run;
  std::vector<std::string> strings{""};  // strings[0] is always ""
  std::vector<MetricDesc> metrics;
  std::vector<Frame> frames;
  std::vector<Stack> stacks;
  std::vector<Process> processes;
  std::vector<Thread> threads;
  std::vector<StackValues> stack_values;
  std::vector<SampleEvent> samples;
  std::vector<FunctionStat> functions;
  std::vector<LineStat> lines;
  std::vector<std::string> warnings;  // run-level warnings (missing debug info, ...)
  std::vector<ProcessMemory> memory;  // one per process that had memory profiling on
  std::vector<LeakCandidate> leaks;   // most important first

  const std::string& str(uint32_t i) const { return i < strings.size() ? strings[i] : strings[0]; }
  // Index of the metric named `name`, or kNone.
  uint32_t metric(const std::string& name) const {
    for (uint32_t i = 0; i < metrics.size(); ++i)
      if (metrics[i].name == name) return i;
    return kNone;
  }
  bool operator==(const Profile&) const = default;
};

}  // namespace mlprof::profile
