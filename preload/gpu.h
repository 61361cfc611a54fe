// GPU profiling in the preload (docs/gpu.md): CUDA kernels, copies, memsets and device memory,
// seen through CUPTI, attributed to the CPU stack (native + Python) that launched them.
//
//   gpu_loader.cpp  finds libcuda in the process and the libcupti to load (no CUPTI headers needed)
//   gpu_cupti.cpp   attaches CUPTI: subscribe, enable callbacks and activity kinds, the ENTER
//                   callback (captures the stack) and the activity buffers (built only with the
//                   CUPTI headers; without them attach() says so once)
//   gpu_writer.cpp  the writer's side: drains the GPU ring into wire records 20-24
//
// Nothing happens unless libcuda is in the process. Every failure is said once (stderr and the
// report) and leaves CPU and memory profiling as they are.
// Not signal context.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/mem_events.h"

namespace mlprof::preload {
struct Config;
}

namespace mlprof::preload::gpu {

enum class Phase : int {
  kOff = 0,        // not wanted (MLPROF_GPU=0, or profiling off)
  kWaiting = 1,    // wanted; libcuda not loaded yet
  kAttaching = 2,  // one thread is attaching CUPTI
  kOn = 3,         // CUPTI attached: callbacks and activity records flow
  kFailed = 4,     // attaching failed (said once); never tried again in this image
};

struct State {
  std::atomic<Phase> phase{Phase::kOff};
  std::atomic<bool> recording{false};   // callbacks record (the writer's stream is open)
  std::atomic<bool> yielded{false};     // the program took CUPTI for its own client: never (re)attach, flush
  std::atomic<uint64_t> dropped{0};     // events lost: the ring was full
  std::atomic<uint64_t> cupti_dropped{0};  // records CUPTI says it dropped
  mem::FallbackRing ring;
  // Set when attached: how CUPTI timestamps map to CLOCK_MONOTONIC (wire::GpuClock), CUPTI's version.
  uint8_t clock = 0;
  int64_t clock_offset_ns = 0;
  uint32_t cupti_version = 0;
  const Config* cfg = nullptr;
  void (*report)(const char*) = nullptr;
};
extern State g_gpu;

// Constructor: remembers the configuration; true when GPU profiling is wanted (it then waits for
// libcuda: the writer calls prepare_attach / finish_attach after module scans that found new
// modules, the first one included).
bool init(const Config& cfg, void (*report)(const char*));
// Attaching, in two steps, by the writer thread outside its lock. prepare_attach: once libcuda is
// loaded (and the stream records), maps the GPU ring and loads libcupti; true when that worked
// (each failure is said once and ends GPU profiling in this image). The writer then rescans
// modules, so that libcupti's unwind tables exist before the first callback, and calls
// finish_attach: subscribe, callbacks, activity; true when GPU profiling is on.
bool prepare_attach();
bool finish_attach();
// Whether a module whose file name starts with "libcuda.so" is loaded.
bool libcuda_loaded();
// Hands CUPTI's completed activity buffers to the ring (forced: also the ones still filling).
// At exit, on the collector's flush/detach command, and periodically. A flush delivers every
// buffer CUPTI holds at once (tens of thousands of records each in a launch-bound program), while
// launches keep filling the ring: `drain` (when given) is called on the flushing thread whenever
// the ring is over half full between two records, and must empty it (the writer's lock held).
void flush(bool forced, void (*drain)(void*) = nullptr, void* arg = nullptr);
// The stream opened / ended: callbacks record or only pass through.
inline void set_recording(bool on) { g_gpu.recording.store(on, std::memory_order_release); }
// fork child: CUDA cannot be used after fork without exec, so GPU profiling is off in the child;
// the ring (whose lock another parent thread may have held) is emptied.
void fork_child();
inline bool attached() { return g_gpu.phase.load(std::memory_order_acquire) == Phase::kOn; }

// ---- gpu_loader.cpp --------------------------------------------------------------------------
// Opens libcupti: an already loaded copy (RTLD_NOLOAD), else MLPROF_CUPTI_PATH (a file or a
// directory; when set, the only place tried), else the usual places (docs/gpu.md). On failure
// writes into why (size n) where it looked. Returns the dlopen handle or nullptr.
void* open_cupti(const char* override_path, char* why, unsigned n);
// The executable [lo, hi) range of the module that contains addr (0,0 if none): frames of
// libcupti, libcuda and the preload are cut from launch stacks.
void module_text_range(const void* addr, uint64_t* lo, uint64_t* hi);
// The same for the first loaded module whose file name starts with prefix.
void named_text_range(const char* prefix, uint64_t* lo, uint64_t* hi);

// ---- gpu_cupti.cpp ---------------------------------------------------------------------------
// Whether this preload was built with the CUPTI headers (else attaching says so and gives up).
bool cupti_compiled();
// Attaches CUPTI from handle; false (after saying why) when it cannot.
bool attach_cupti(void* handle);
void flush_cupti(bool forced, void (*drain)(void*), void* arg);
// The program's own CUPTI client takes CUPTI (gpu_interpose.cpp: its cuptiSubscribe or
// cuptiActivityRegisterCallbacks): if attached, mlprof's activity is disabled and flushed into the
// ring, mlprof unsubscribes and restores CUPTI's default clock, and says so once. Never attaches
// afterwards. On the program's thread.
void yield_to_program();
// The real CUPTI function `name` (not the preload's export), or nullptr.
void* real_cupti(const char* name);
// Whether this thread is inside mlprof's own CUPTI set-up or yield (then an export is not yielding).
bool own_cupti_call();

}  // namespace mlprof::preload::gpu
