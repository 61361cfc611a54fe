// The sampling signal: installing the handler, and the record it writes into the thread's ring.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/wire_format.h"
#include "preload/config.h"
#include "preload/python.h"
#include "preload/unwinder.h"

namespace mlprof::preload {

inline constexpr int kMaxFrames = 192;
// The hooks' stack memo (unwinder.h) holds a whole hook stack; one of fewer frames would be skipped.
static_assert(UnwindMemo::kFrames >= kMaxFrames, "UnwindMemo::kFrames must cover kMaxFrames");
inline constexpr int kMaxPyFrames = 128;

// One sample as the handler leaves it in the ring (in-memory only, never on the wire).
struct RawSample {
  int64_t t_ns;       // CLOCK_MONOTONIC
  uint32_t weight;    // 1 + timer overruns
  uint16_t nframes;
  uint8_t flags;      // wire::StackFlags
  uint8_t npy;        // Python frames
  // followed by nframes uint64_t pcs, leaf first, then npy python::RawPyFrame, innermost first
};

// Global switches read by the handler. Plain atomics with static storage: no initialization order.
struct SamplerState {
  std::atomic<bool> sampling{false};
  std::atomic<uint64_t> dropped_no_thread{0};
  UnwinderKind unwinder = UnwinderKind::kCfi;
  std::atomic<bool> python{false};  // a supported CPython is present: walk its frames
};
extern SamplerState g_sampler;

// signal-safe. The calling thread's Python frames (innermost first, at most kMaxPyFrames) when a
// supported CPython is present, with their wire flags (kStackHasPython, kStackGilHeld,
// kStackPyWalkFailed) added to *flags; how many were written (0 without Python). Every stack
// capture (signal handler, memory hooks, GPU callbacks) puts them right after its native pcs.
// *new_code (when given) is set when a code object the walker had not seen is among the frames:
// the caller then calls wake_writer() once its event is committed. ctx: python::WalkContext.
// own_stack: python::walk's own_stack_lo/hi (hooks: the calling thread's stack; the signal
// handler: the interrupted code's live stack; or null).
inline int python_frames(python::RawPyFrame* out, uint8_t* flags, bool* new_code = nullptr,
                         python::WalkContext ctx = python::WalkContext::kSignal, const StackBounds* own_stack = nullptr) {
  if (!g_sampler.python.load(std::memory_order_relaxed)) return 0;
  uint8_t pyflags = 0;
  const int n = python::walk(out, kMaxPyFrames, &pyflags, ctx, own_stack ? own_stack->lo : 0, own_stack ? own_stack->hi : 0);
  if (pyflags & python::kSampleHasPython) *flags |= wire::kStackHasPython;
  if (pyflags & python::kSampleGilHeld) *flags |= wire::kStackGilHeld;
  if (pyflags & python::kSampleWalkFailed) *flags |= wire::kStackPyWalkFailed;
  if (new_code && (pyflags & python::kSampleNewCode)) *new_code = true;
  return n;
}

// signal-safe. Asks the writer for a cycle now rather than at its next 10 ms tick: a sample just
// committed names a code object the writer has not read, and short-lived code (an imported
// module's <module> code, an exec'd string) is freed within milliseconds; read after that, the
// frame could only be named "<code object freed before it was read>". A futex word, no file
// descriptor (a program that closes every descriptor cannot make us write into its files);
// one FUTEX_WAKE syscall when the writer is not already due; errno kept.
void wake_writer();

// Installs the handler for signo (SA_SIGINFO | SA_RESTART | SA_ONSTACK). Fails, with a message in
// *why, when the application already handles that signal.
bool install_sample_handler(int signo, const char** why);
// True while signo's disposition is still our handler (the application may replace it later).
bool sample_handler_installed(int signo);

}  // namespace mlprof::preload
