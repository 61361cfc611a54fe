// The preload's settings, read once from MLPROF_* environment variables (docs/environment.md).
// Bad values are reported once on stderr (and in the profile) and replaced by the default.
#pragma once
#include <cstdint>

#include "preload/thread_timer.h"

namespace mlprof::preload {

// Mean allocated bytes between two sampled allocations (docs/how-it-works.md, "Memory", says
// how it was chosen), and between two sampled memcpy/memmove calls.
inline constexpr uint64_t kDefaultMemInterval = 1024 * 1024;
inline constexpr uint64_t kDefaultCopyInterval = 1024 * 1024;
inline constexpr uint64_t kMaxMemInterval = uint64_t{1} << 40;

enum class UnwinderKind : uint8_t { kCfi, kLibunwind };
// cpu: CPU-time sampling only. wall: also off-CPU waits of blocked threads (preload/wall_sampler.h).
enum class ProfileMode : uint8_t { kCpu, kWall };

// MLPROF_TIMER=auto (the default) uses POSIX CPU-time timers up to this rate and perf task-clock
// events above it: every Linux kernel ticks at least 100 times a second (CONFIG_HZ >= 100), so a
// tick-driven timer delivers this rate everywhere.
inline constexpr uint32_t kTickSafeRateHz = 100;

// What a CUDA launch callback captures (MLPROF_GPU_STACKS): nothing, the native stack, or the
// native stack and the Python frames (the default).
enum class GpuStacks : uint8_t { kNone, kNative, kFull };

struct Config {
  bool enabled = false;          // false: no MLPROF_SOCKET/MLPROF_OUTPUT_DIR, or MLPROF_DISABLE=1
  char socket_path[108] = {};    // MLPROF_SOCKET: the collector's Unix socket
  char output_dir[512] = {};     // MLPROF_OUTPUT_DIR: offline mode, one event file per process image
  uint32_t rate_hz = 100;        // MLPROF_RATE: 1..10000
  int signo = 0;                 // MLPROF_SIGNAL: sampling signal (default SIGRTMIN+5)
  UnwinderKind unwinder = UnwinderKind::kCfi;  // MLPROF_UNWINDER
  TimerSource timer = TimerSource::kThreadCpuTimer;  // MLPROF_TIMER: auto (default: by rate), perf or timer
  bool timer_forced = false;     // MLPROF_TIMER=perf or timer: no switch for short-lived threads
  bool quiet = false;            // MLPROF_QUIET=1: no stderr messages from the preload
  ProfileMode mode = ProfileMode::kCpu;  // MLPROF_MODE: cpu (default) or wall
  // Memory profiling (preload/mem_*.h, docs/usage.md).
  bool memory = true;                          // MLPROF_MEMORY: 0 turns it off
  uint64_t mem_interval = kDefaultMemInterval;  // MLPROF_MEM_INTERVAL: bytes; 1 = exact mode
  uint64_t copy_interval = kDefaultCopyInterval;  // MLPROF_COPY_INTERVAL: bytes; 0 = copies not sampled
  // GPU profiling through CUPTI (preload/gpu_*.h, docs/gpu.md).
  bool gpu = true;               // MLPROF_GPU: 0 turns it off
  char cupti_path[512] = {};     // MLPROF_CUPTI_PATH: the libcupti to load (file or directory)
  // MLPROF_GPU_STACKS: what a launch callback captures. A benchmark knob (docs/benchmarks.md):
  // less than full attributes GPU time to fewer or no lines.
  GpuStacks gpu_stacks = GpuStacks::kFull;
};

// Wall mode's tick: one wall-clock sampling period, 1/rate, but at least 1 ms.
inline int64_t wall_period_ns(const Config& cfg) {
  int64_t p = 1000000000LL / (cfg.rate_hz ? cfg.rate_hz : 100);
  return p < 1000000 ? 1000000 : p;
}

// Parses the environment into cfg. Problems are passed to report(msg) (static strings or
// formatted into a caller buffer), at most a few. Not signal-safe; called from the constructor.
void load_config(Config& cfg, void (*report)(const char* msg));

}  // namespace mlprof::preload
