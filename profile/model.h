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

// The frame the collector puts between a Python line and the native frames of a garbage collection
// that line triggered (the preload saw the interpreter's gc.collecting set on the GIL holder).
inline constexpr const char* kGcFrameName = "[Python garbage collector]";
// The frame the collector puts between a thread-pool worker's frames and the callers, on the thread
// that started the work, of the function the worker ran (collector/pool_attribution.h).
inline constexpr const char* kPoolWorkersFrameName = "[thread-pool workers]";

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
  kStopped = 4,    // mlprof-run stopped it on purpose (--duration, the end of a serving load) after
                   // its streams were flushed: no trailer, nothing lost (since 1.3)
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

// An ELF module that frames refer to (Frame::module), with its GNU build id when the file had one.
struct Module {
  uint32_t path = 0;     // string index, the same as Frame::module
  std::string build_id;  // lowercase hex of NT_GNU_BUILD_ID; empty when unknown
  bool operator==(const Module&) const = default;
};

// The serving workflow (mlprof-run --requests, docs/serving.md): a request dataset replayed
// against the wrapped service. Times are CLOCK_MONOTONIC ns; every figure is measured by
// mlprof-run itself (load loop, /proc polling of the service's process tree), independent of the
// preload, except the per-request tables, which normalize the profile over the steady window.
struct ServingRequest {
  static constexpr int32_t kTimedOut = -1;  // status of a request given up at --timeout (since 1.3)
  // Cut off because mlprof-run was interrupted (Ctrl-C, SIGTERM): not the service's failure, and
  // left out of every figure.
  static constexpr int32_t kAborted = -2;
  int64_t start_ns = 0;    // when the request was handed to the HTTP client
  int64_t latency_ns = 0;  // until the whole response arrived (or the transfer failed)
  int32_t status = 0;      // HTTP status; 0 = transport error, kTimedOut = no complete answer within --timeout, kAborted
  bool operator==(const ServingRequest&) const = default;
};

// One poll of the service's process tree (all processes below mlprof-run).
struct ServingResourcePoint {
  int64_t t_ns = 0;
  int64_t cpu_ns = 0;     // CPU time used by the tree since the first poll (user + system)
  int64_t rss_bytes = 0;  // RSS summed over the tree's processes
  uint32_t processes = 0;
  uint32_t threads = 0;
  bool operator==(const ServingResourcePoint&) const = default;
};

// CPU per source line over the steady window (per-request figures divide by window_requests).
struct ServingLine {
  uint32_t file = 0, line = 0, function = 0;  // string indexes
  int64_t self_us = 0, total_us = 0;          // CPU in the window; total counts a stack once per line
  bool operator==(const ServingLine&) const = default;
};

inline constexpr int64_t kRetainedSamplesUnknown = INT64_MIN;

// The words of the serving advice (Serving::advice, tools/serving_advice.cpp) that name the GIL's
// handoffs between threads; the report's first serving hint looks for them.
inline constexpr const char* kGilHandoffAdvice = "goes to handing the GIL between threads";

// Allocations of one allocation stack over the steady window (estimates, like the memory metrics).
struct ServingSite {
  uint32_t stack = 0;         // index into Profile::stacks
  int64_t alloc_bytes = 0;    // allocated in the window
  int64_t alloc_count = 0;
  int64_t retained_bytes = 0; // allocated minus freed in the window: live at its end minus at its start
  // Sampled blocks behind retained_bytes: allocated in the window minus freed in it (since 1.4;
  // kRetainedSamplesUnknown when read from an older file).
  int64_t retained_samples = kRetainedSamplesUnknown;
  bool operator==(const ServingSite&) const = default;
};

// A site's retained figure is read as memory the requests keep (a leak per request) only when it
// rests on at least this many sampled blocks, either way: fewer are what the window's last
// requests still held when it closed (or the warm-up's, freed in it), which sampling turns into
// +-interval / requests, not a leak. 3 blocks: a Poisson count of 0 has probability e^-3 = 5% when
// the truth is 3 intervals' worth of retained bytes.
inline constexpr int64_t kMinRetainedSamples = 3;
inline bool retained_resolved(const ServingSite& s) {
  return s.retained_samples == kRetainedSamplesUnknown || s.retained_samples >= kMinRetainedSamples ||
         s.retained_samples <= -kMinRetainedSamples;
}

struct Serving {
  bool present = false;
  std::string url, requests_file, content_type;
  std::string load_mode;            // "closed" (--concurrency) or "open" (--rps)
  uint32_t concurrency = 0;         // closed loop: requests in flight; open loop: the most in flight
  int64_t rps_milli = 0;            // open loop: requested arrival rate x 1000
  uint64_t warmup = 0;              // --warmup: the first K requests, outside the steady window
  int64_t timeout_ns = 0;           // per request
  std::string outcome;              // "completed", "not-ready", "service-exited", "interrupted", "time-limit"
  std::string error;                // what went wrong, as told to the user ("" when completed)
  int64_t ready_ns = 0;             // the service first answered (0: never)
  int64_t load_start_ns = 0, load_end_ns = 0;
  int64_t window_start_ns = 0, window_end_ns = 0;  // steady state: end of warmup .. end of the last request
  uint64_t window_requests = 0;     // requests in the steady window (the per-request divisor)
  uint64_t late_starts = 0;         // open loop: requests started > 1 ms after their scheduled time
  // The cloud profile's fields (docs/serving.md: which requests each one covers).
  uint64_t total_queries = 0, success_queries = 0;
  int64_t average_latency_ns = 0;
  int64_t p50_ns = 0, p90_ns = 0, p95_ns = 0, p99_ns = 0, p999_ns = 0;
  int64_t measured_qps_milli = 0;
  int64_t max_utilized_millicores = 0;   // peak over 1 s windows during the load
  int64_t max_utilized_memory_bytes = 0; // peak of the tree's summed VmHWM (and RSS) over the polls
  int64_t requested_millicores = 0;
  int64_t requested_memory_bytes = 0;
  int64_t available_millicores = 0;      // cgroup quota, else online CPUs
  std::map<std::string, std::string> thread_env;  // OMP_NUM_THREADS, MKL_NUM_THREADS, ... as set
  std::vector<std::string> advice;
  std::vector<ServingRequest> requests;  // in start order
  std::vector<ServingResourcePoint> resources;
  std::vector<ServingLine> lines;        // most CPU first, bounded
  std::vector<ServingSite> sites;        // most bytes first, bounded
  int64_t window_copy_bytes = 0;         // sampled memcpy/memmove bytes in the steady window (since 1.3)
  // The steady window's CPU (us, from the samples, like `lines`) and the part of it on a stack with
  // a source line (what the lines' self figures sum to, uncut); 0 and 0: not known (before 1.4).
  int64_t window_cpu_us = 0, window_line_cpu_us = 0;
  bool operator==(const Serving&) const = default;
};

// GPU profiling (docs/gpu.md): what CUPTI's activity records and the launching stacks show.
// Times are CLOCK_MONOTONIC ns (CUPTI's timestamps converted).
struct GpuKernel {
  uint32_t name = 0;        // string index: the name as CUPTI gives it (mangled)
  uint32_t demangled = 0;   // string index: demangled (the same string when it is not mangled)
  uint32_t stack = kNone;   // the launching stack with the largest share of this kernel's time
  uint64_t calls = 0;
  int64_t total_ns = 0, max_ns = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};  // of the longest call
  bool operator==(const GpuKernel&) const = default;
};

struct GpuPoint {
  int64_t t_ns = 0;
  int64_t value = 0;
  bool operator==(const GpuPoint&) const = default;
};

struct GpuHolder {
  uint32_t stack = kNone;  // the allocating stack (kNone: the allocation's launch was not seen)
  int64_t bytes = 0;
  bool operator==(const GpuHolder&) const = default;
};

struct GpuDevice {
  uint32_t device = 0;
  int64_t bucket_ns = 0;               // width of a utilization bucket
  std::vector<GpuPoint> utilization;   // bucket start, permille of it with a kernel running (union)
  std::vector<GpuPoint> memory;        // device memory allocated through CUDA (cudaMalloc level), after changes
  int64_t peak_bytes = 0, peak_t_ns = 0;
  std::vector<GpuHolder> peak_holders; // live at the peak, by stack, biggest first
  bool operator==(const GpuDevice&) const = default;
};

enum class GpuOpKind : uint8_t { kKernel = 1, kMemcpy = 2, kMemset = 3, kSync = 6 };

// One GPU operation, for traces (the first ones of a run; ProcessGpu::ops_truncated says when more ran).
struct GpuOp {
  int64_t start_ns = 0, end_ns = 0;
  int64_t launch_ns = 0;        // when the launching API call entered (0: not joined)
  uint32_t thread = kNone;      // the launching thread (index into Profile::threads), kNone if not joined
  uint32_t device = 0, stream = 0;
  GpuOpKind kind = GpuOpKind::kKernel;
  uint8_t copy_kind = 0;        // memcpy: 1 HtoD, 2 DtoH, 3 DtoD, 4 HtoH, 5 PtoP, 0 other
  uint32_t name = 0;            // kernels: string index (demangled)
  uint64_t bytes = 0;
  uint64_t correlation = 0;
  bool operator==(const GpuOp&) const = default;
};

struct ProcessGpu {
  uint32_t process = 0;              // index into Profile::processes
  uint32_t cupti_version = 0;
  std::string clock;                 // "monotonic" (CUPTI took our clock) or "offset" (calibrated)
  // kernel_ns, memcpy_htod_ns, memcpy_dtoh_ns, memcpy_dtod_ns, memcpy_other_ns, memset_ns,
  // copy_bytes, memset_bytes, sync_ns, overhead_ns, launches, activities, unjoined (activity
  // records whose launch was not seen), dropped (GPU events lost in the preload), cupti_dropped
  std::map<std::string, int64_t> totals;
  std::vector<GpuKernel> kernels;    // by total time, largest first
  std::vector<GpuDevice> devices;
  std::vector<GpuOp> ops;            // time order
  bool ops_truncated = false;
  bool operator==(const ProcessGpu&) const = default;
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
  std::vector<Module> modules;        // build ids of the modules frames refer to (since 1.2)
  std::vector<ProcessGpu> gpu;        // one per process with GPU activity (since 1.2, section 16)
  Serving serving;                    // the serving workflow (since 1.2; present = false otherwise)

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
