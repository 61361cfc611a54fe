// The sampling signal: installing the handler, and the record it writes into the thread's ring.
#pragma once
#include <atomic>
#include <cstdint>

#include "preload/config.h"
#include "preload/python.h"

namespace mlprof::preload {

inline constexpr int kMaxFrames = 192;
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

// Installs the handler for signo (SA_SIGINFO | SA_RESTART | SA_ONSTACK). Fails, with a message in
// *why, when the application already handles that signal.
bool install_sample_handler(int signo, const char** why);
// True while signo's disposition is still our handler (the application may replace it later).
bool sample_handler_installed(int signo);

}  // namespace mlprof::preload
