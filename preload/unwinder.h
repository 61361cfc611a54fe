// Stack unwinding from a signal's ucontext. Two implementations:
//  - unwind_cfi.cpp: mlprof's own DWARF CFI unwinder over tables built outside signal context
//    (no loader lock, no allocation, reads only inside the thread's stack bounds);
//  - unwind_libunwind.cpp: libunwind, loaded with dlopen(RTLD_LOCAL) so that its _Unwind_*
//    symbols never enter the host's global scope.
// MLPROF_UNWINDER=cfi|libunwind selects one (docs/environment.md).
#pragma once
#include <cstdint>
#include <cstring>

#include "common/wire_format.h"

namespace mlprof::preload {

// The range of the interrupted thread's stack; reads outside it are never made.
struct StackBounds {
  uintptr_t lo = 0;
  uintptr_t hi = 0;
};

struct UnwindResult {
  int nframes = 0;    // pcs written: pcs[0] is the interrupted pc, the rest are return addresses
  uint8_t flags = 0;  // mlprof::wire::StackFlags
};

// signal-safe
UnwindResult unwind_cfi(const void* ucontext, const StackBounds& bounds, uint64_t* pcs, int max_frames);
// NOT signal context: the writer thread, unwinding ANOTHER thread of this process that is blocked
// in the kernel, from the registers /proc/self/task/TID/syscall shows (rip, rsp; rbp unknown: 0).
// Frames whose CFA or rbp rule needs an unknown rbp end the stack with kStackUnwindStop (an rbp
// saved by a callee on the way becomes known). The stack is copied with process_vm_readv, a page
// at a time, only inside bounds: the thread may run, return or exit meanwhile without harm (the
// stack is then garbage, never a fault).
UnwindResult unwind_cfi_regs(uint64_t rip, uint64_t rsp, uint64_t rbp, const StackBounds& bounds, uint64_t* pcs,
                             int max_frames);
// NOT signal context: a hook (malloc...) unwinding the CALLING thread's own stack, from the point
// where this function is called (its own frame is pcs[0], then the frames of its callers: the
// caller cuts off its own frames). Reads only inside bounds (the thread's slot->bounds). Always
// the CFI tables, whatever MLPROF_UNWINDER says: the writer builds them when memory profiling is
// on. Until the first table is built only the first frame (and one frame-pointer step) is found.
// memo: the calling thread's stack memo (below), or nullptr.
struct UnwindMemo;
UnwindResult unwind_cfi_here(const StackBounds& bounds, uint64_t* pcs, int max_frames, UnwindMemo* memo = nullptr);
// NOT signal context: the stack of an interposed function's CALLER, for the memory hooks. The
// preload is built with frame pointers, so its own frames (this function's, then its callers' up
// to the hook) are skipped by following the rbp chain until a frame whose return address is
// `caller` (at most kMaxOwnFrames); the CFI walk starts there, pcs[0] = caller. n = 0 with
// kStackUnwindStop when no such frame was found or the tables are not built yet (the caller then
// falls back on unwind_here_after). About 5 CFI lookups fewer per sampled allocation.
inline constexpr int kMaxOwnFrames = 16;
UnwindResult unwind_cfi_caller(const StackBounds& bounds, uint64_t caller, uint64_t* pcs, int max_frames,
                               UnwindMemo* memo = nullptr);
// A thread's stack memo: the frames (pc and CFA) its last hook unwind found. A thread's allocations
// come from the same outer frames again and again (a server thread's connection loop, a model's
// forward): when a frame of a hook unwind has the CFA and pc of a remembered frame, the remembered
// frames above it are taken instead of unwound, once the stack still holds each one's return
// address where that unwind read it (at each remembered frame's CFA - 8). A stack that changed
// above the matching frame (the same function at the same depth, called from elsewhere) fails
// that check there and is unwound up to the next frame it shares with the memo. Written at the
// end of each hook unwind that uses it; never by a signal handler (which could interrupt a hook's
// unwind on the same thread). Lives in memory the thread's slot maps with its memory-event ring
// (not thread-local storage, which every thread's stack pays for), zeroed = empty.
struct UnwindMemo {
  static constexpr int kFrames = 192;  // sampler.h's kMaxFrames: the hooks' stacks
  uint64_t serial;                     // the CFI snapshot it was written under
  int n;                               // frames remembered (0: none)
  int ncfa;                            // the leading frames whose CFA is known (n or n - 1)
  uint8_t flags;                       // how that unwind ended (kStackUnwindStop, kStackTruncated)
  uint64_t hits, rejects;              // unwinds that took a remembered tail; refused matches
  uint64_t pc[kFrames];
  uint64_t cfa[kFrames];               // increasing
  uint64_t scratch[kFrames];           // the CFAs of the unwind in progress
};
// NOT signal context: the stack of a hook's point of interest, for the memory hooks and the GPU
// callbacks. unwind_cfi_here, then the leading frames for which skip(pc) holds (the preload's own,
// above that point) are dropped: pcs[0..n) is what is left, leaf first, with the unwinder's flags.
// n = 0 when bounds is null or empty (*flags = kStackLeafOnly) or no frame was left
// (kStackUnwindStop: our own frames could not be unwound, e.g. no tables yet).
template <class Skip>
int unwind_here_after(const StackBounds* bounds, uint64_t* pcs, int max_frames, Skip skip, uint8_t* flags) {
  if (!bounds || bounds->hi <= bounds->lo) {
    *flags = wire::kStackLeafOnly;
    return 0;
  }
  const UnwindResult r = unwind_cfi_here(*bounds, pcs, max_frames);
  int i = 0;
  while (i < r.nframes && skip(pcs[i])) ++i;
  if (i == r.nframes) {
    *flags = wire::kStackUnwindStop;
    return 0;
  }
  const int n = r.nframes - i;
  if (i) memmove(pcs, pcs + i, static_cast<size_t>(n) * sizeof(uint64_t));
  *flags = r.flags;
  return n;
}
// Whether the CFI tables have been built once (the writer does it first thing). signal-safe
bool cfi_ready();
// The hooks' per-thread row cache and stack memo (unwind_cfi.cpp): on by default; off for tests
// and A/B benches.
void cfi_set_row_cache(bool on);
// signal-safe (as far as libunwind's local unwinding is; see unwind_libunwind.cpp)
UnwindResult unwind_libunwind(const void* ucontext, uint64_t* pcs, int max_frames);

// Not signal-safe. Build/refresh CFI tables for all loaded modules (at start, and after
// dlopen/dlclose from the writer thread). Returns false if no module could be parsed.
bool cfi_refresh_modules();
// Not signal-safe. With true, a refresh in progress (and any later one) stops parsing soon and
// publishes what it has: at exit nothing more will be unwound, and the exiting thread, which joins
// the writer, must not wait for a large module's parse. false allows refreshes again.
void cfi_cancel_refresh(bool cancel);
// atfork: prepare waits for a refresh's short locked phases (listing and copying modules,
// publishing), never for a parse; done releases (parent) or re-initialises (child) its locks.
void cfi_fork_prepare();
void cfi_fork_done(bool child);
// Not signal-safe. dlopen libunwind and warm it up. Returns false (and a static message) on failure.
bool libunwind_load(const char** error);

}  // namespace mlprof::preload
