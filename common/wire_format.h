// The event stream from the preload (one per process image) to the collector.
// Specified in docs/wire-format.md; keep the two in step.
//
// Layout: a 8-byte header ("MLPW", major, minor, 2 reserved bytes), then records.
// A record is: u8 type, varint payload length, payload. Payload fields are varints (unsigned, or
// zigzag where marked "s"), strings are varint length + bytes. A reader skips record types it does
// not know (later minor versions add types and append fields to existing payloads; readers ignore
// trailing payload bytes they do not understand). The stream ends cleanly with PROCESS_END.
//
// signal-safe: constants only.
#pragma once
#include <cstdint>

namespace mlprof::wire {

inline constexpr char kMagic[4] = {'M', 'L', 'P', 'W'};
inline constexpr uint8_t kMajor = 1;
inline constexpr uint8_t kMinor = 4;  // 1.1: Python records and frames; 1.2: memory records; 1.3: GPU; 1.4: MEM_USAGE hwm_bytes
inline constexpr unsigned kHeaderSize = 8;

enum class Record : uint8_t {
  // pid, ppid, start_realtime_ns, start_mono_ns, period_ns, timer_kind, exe (str),
  // argc, argv[argc] (str), flags (ProcessFlags), wall_period_ns (optional: wall mode's tick)
  kProcessStart = 1,
  // module_id, load_bias, path (str), build_id (str, raw bytes, may be empty),
  // nranges, {start, end}[nranges]  (absolute addresses of executable PT_LOAD segments)
  kModuleLoad = 2,
  // module_id, mono_ns
  kModuleUnload = 3,
  // tid, mono_ns, name (str)
  kThreadStart = 4,
  // tid, name (str)
  kThreadName = 5,
  // tid, mono_ns
  kThreadEnd = 6,
  // stack_id, nframes, then nframes pcs, leaf first: first as a plain varint, each following one
  // as a zigzag delta from the previous. Frame 0 is the interrupted pc; the rest are return
  // addresses (the collector looks them up at pc-1). flags (see StackFlags).
  // Since 1.1: npy, then npy Python frames, innermost first: code_id, offset+1 (0 = the frame has
  // not started: its first line), frame flags (1 = entry frame of an eval-loop invocation; 2 = on
  // the innermost frame: the interpreter's garbage collector was running on this thread).
  kStack = 7,
  // tid, stack_id, mono_ns delta from the previous sample of this stream (s), weight (ticks)
  kSample = 8,
  // nkeys, {counter id, value}[nkeys]  -- absolute values, the latest one wins
  kCounters = 9,
  // severity (0 info, 1 warning), text (str): shown once on stderr by the preload and kept in the report
  kMessage = 10,
  // mono_ns, reason (EndReason), status (s: exit code when known, else -1)
  kProcessEnd = 11,
  // reply to a collector's flush request: one reserved varint, written as 0
  kFlushed = 12,
  // Since 1.1. The Python interpreter found in the process: version_hex, supported (0/1),
  // description (str). Sent once it is detected.
  kPython = 13,
  // Since 1.1. A code object, before the first stack that refers to it: code_id, filename (str),
  // qualname (str), firstlineno, table format (0 lnotab <=3.9, 1 linetable 3.10, 2 locations
  // 3.11+), line table (str, raw bytes).
  kPyCode = 14,
  // Since 1.2. Memory profiling is on in this process (sent once, after PROCESS_START):
  // interval_bytes (mean of the Poisson sampling interval over allocated bytes; 1 = exact mode:
  // every allocation), copy_interval_bytes (the same for memcpy/memmove volume), flags (MemFlags).
  // May be sent again when a flag changes (e.g. the Python allocator got hooked); the latest wins.
  kMemConfig = 15,
  // Since 1.2. A sampled allocation: tid, stack_id, mono_ns delta (s) from the previous memory
  // event (ALLOC/FREE/COPY) of this stream, alloc_id (unique in the stream, never 0), size (bytes
  // requested), weight (estimated bytes this sample stands for: size / P(sampled); size in exact
  // mode), kind (AllocKind).
  kAlloc = 16,
  // Since 1.2. A sampled allocation was released (free, realloc, munmap, Python free): alloc_id,
  // mono_ns delta (s) as for ALLOC. May arrive before its ALLOC (frees and allocations made by
  // different threads are drained from different rings); readers match by alloc_id.
  kFree = 17,
  // Since 1.2. A sampled memcpy/memmove: tid, stack_id, mono_ns delta (s) as for ALLOC, weight
  // (estimated bytes copied this sample stands for), size (bytes of the sampled call).
  kCopy = 18,
  // Since 1.2. Process memory use, sent by the writer at >= 10 Hz while memory profiling is on:
  // mono_ns, rss_bytes (resident set size from /proc/self/statm).
  kMemUsage = 19,
  // Since 1.3 (GPU, docs/gpu.md). CUDA profiling through CUPTI is on in this process (sent once,
  // when CUPTI got attached): clock (GpuClock), clock_offset_ns (s: add it to a CUPTI timestamp to
  // get CLOCK_MONOTONIC; 0 with kMonotonic), cupti_version (cuptiGetVersion).
  kGpuConfig = 20,
  // Since 1.3. A CUDA API call that queues GPU work (kernel launch, copy, memset, graph launch),
  // allocates or frees device memory, or waits for the GPU, seen in CUPTI's ENTER callback on the
  // calling thread: tid, stack_id, mono_ns (absolute), correlation_id, api (GpuApi), cbid
  // (CUPTI callback id, domain in bit 31: 1 = driver).
  kGpuLaunch = 21,
  // Since 1.3. A driver API call made inside an outer API call (a runtime launch calls the
  // driver): inner correlation_id, outer correlation_id. Activity carrying the inner id belongs to
  // the outer call's stack.
  kGpuCorrelation = 22,
  // Since 1.3. A kernel name before the first GPU_ACTIVITY that refers to it: name_id, name (str,
  // mangled as CUPTI gives it).
  kGpuName = 23,
  // Since 1.3. One completed activity record: kind (GpuActivityKind), correlation_id, start, end
  // (CUPTI timestamps, ns; equal for instantaneous records), device, stream, bytes (copies,
  // memsets, memory records), copy_kind (GpuCopyKind), name_id (kernels; 0 = none), grid_x, grid_y,
  // grid_z, block_x, block_y, block_z (kernels), address (memory records).
  kGpuActivity = 24,
  // 25-29 reserved for later GPU records.
};

enum class GpuClock : uint8_t {
  kMonotonic = 0,  // CUPTI timestamps are CLOCK_MONOTONIC ns (timestamp callback registered)
  kOffset = 1,        // CUPTI's own clock: CLOCK_MONOTONIC = timestamp + clock_offset_ns
};

// What a GPU_LAUNCH call does.
enum class GpuApi : uint8_t {
  kKernel = 0, kMemcpy = 1, kMemset = 2, kGraph = 3, kSync = 4, kAlloc = 5, kFree = 6, kOther = 7,
};

enum class GpuActivityKind : uint8_t {
  kKernel = 1, kMemcpy = 2, kMemset = 3, kMemAlloc = 4, kMemFree = 5, kSync = 6, kOverhead = 7,
};

// Copy directions (CUPTI's CUpti_ActivityMemcpyKind collapsed).
enum class GpuCopyKind : uint8_t { kOther = 0, kHtoD = 1, kDtoH = 2, kDtoD = 3, kHtoH = 4, kPtoP = 5 };

// MEM_CONFIG flags.
enum MemFlags : uint64_t {
  kMemExact = 1,            // every allocation is recorded (interval 1)
  kMemPythonAllocator = 2,  // CPython's object/mem allocator domains are hooked (pymalloc objects seen)
};

// ALLOC kinds.
enum class AllocKind : uint8_t {
  kMalloc = 0,  // malloc, calloc, realloc, memalign family, C++ new (through malloc)
  kMmap = 1,    // anonymous mmap / mremap made by the program
  kPython = 2,  // CPython's PyMem/PyObject allocator (pymalloc), hooked with PyMem_SetAllocator
};

enum class TimerKind : uint8_t { kThreadCpuTimer = 0, kPerfTaskClock = 1 };

enum class EndReason : uint8_t {
  kExit = 0,      // exit() / return from main: atexit and destructors ran
  kExec = 1,      // the image was replaced by execve; a new stream with the same pid follows
  kDetached = 2,  // profiling was stopped on request (processes still running after the command
                  // exited), the process runs on
};

enum StackFlags : uint8_t {
  kStackTruncated = 1,   // deeper than the frame limit: the outermost frames are missing
  kStackUnwindStop = 2,  // the unwinder stopped early (no unwind info / bad frame)
  kStackLeafOnly = 4,    // unwinding was unsafe at that moment (inside the loader): leaf pc only
  kStackInSyscall = 8,   // the interrupted instruction follows a syscall instruction (system time)
  kStackGilHeld = 16,    // the thread held the Python GIL
  kStackPyWalkFailed = 32,  // the Python frame chain could not be read completely
  kStackHasPython = 64,  // the thread has a Python thread state (its Python frames follow)
  kStackOffCpuWait = 128,  // wall mode: the thread was blocked (off CPU) where this stack shows;
                           // its SAMPLEs weigh wall periods (wall_period_ns), not CPU ticks
};

// PROCESS_START flags.
enum ProcessFlags : uint64_t {
  kProcessOffline = 1,  // the stream was written to a file (MLPROF_OUTPUT_DIR)
  kProcessWallMode = 2, // wall-clock mode: off-CPU wait samples (kStackOffCpuWait) are sent too
};

enum class Counter : uint8_t {
  kSamples = 1,          // signals handled with a stack written to the ring
  kDroppedRingFull = 2,  // samples lost because the writer could not keep up
  kDroppedNoThread = 3,  // signals that arrived on a thread the preload does not track
  kUnwindStopped = 4,    // stacks that ended early
  kLeafOnly = 5,         // stacks reduced to the leaf pc
  kDroppedTransport = 6, // bytes not delivered because the collector was gone or too slow
  kStacks = 7,           // distinct stacks sent
  kThreads = 8,          // threads seen
  kTicks = 9,            // timer ticks represented (samples weighted by missed ticks)
  kTimerFailures = 10,   // threads for which no timer could be started (unsampled)
  kPerfThreads = 11,     // threads sampled by a perf task-clock event
  kPosixTimerThreads = 12,  // threads sampled by a POSIX CPU-time timer
  kPyWalkFailed = 13,    // samples whose Python frames could not all be read
  kPyCodes = 14,         // distinct code objects sent
  kWaitSamples = 15,     // wall mode: off-CPU wait samples sent
  kWallUnwinds = 16,     // wall mode: blocked stacks unwound (the others reused the previous tick's)
  // Since 1.2 (memory profiling).
  kMemSamples = 17,      // sampled allocations sent (ALLOC records)
  kMemFrees = 18,        // frees of sampled allocations sent (FREE records)
  kMemDropped = 19,      // memory events lost (ring full past the wait limit, or no ring for the thread)
  kCopySamples = 20,     // sampled copies sent (COPY records)
  kMemTableFull = 21,    // sampled allocations not tracked because the live-pointer table was full
  // Since 1.3 (GPU).
  kGpuLaunches = 22,     // GPU_LAUNCH records sent
  kGpuActivities = 23,   // GPU_ACTIVITY records sent
  kGpuDropped = 24,      // GPU events lost (the GPU ring was full)
  kGpuCuptiDropped = 25, // activity records CUPTI itself dropped (cuptiActivityGetNumDroppedRecords)
  kShortThreads = 26,    // threads that ended having used less than two sampling periods of CPU
  kWriterCycles = 27,    // cycles of the preload's writer thread (each drains every ring)
};

// Commands from the collector to the preload, one byte each on the same socket.
enum class Command : uint8_t {
  kFlush = 'F',   // drain rings, send counters, answer kFlushed
  kDetach = 'D',  // stop sampling, drain, end the stream with kProcessEnd(kDetached)
};

}  // namespace mlprof::wire
