// Memory profiling: the per-thread state every allocation hook reads, and the reentrancy guard.
//
// One initial-exec thread-local struct, zero-initialised (in .tbss): reading it is one
// %fs-relative load, it needs no constructor and no allocation, and it exists before the
// preload's constructor runs (the loader and other libraries' constructors allocate already).
//
// THE GUARD. While t_mem.guard is non-zero the hooks only forward to the real functions: nothing
// is sampled, looked up or recorded. (The copy entries still charge the copy countdown, which
// saves them a test on every call; a countdown that comes due under the guard is redrawn without
// a sample: mem_profiler.h, copy_not_due.) It is held
//   - by a hook while it does its own work (sampling, unwinding, table, ring), and around every
//     call into the real allocator (an allocator's own mmap/memcpy, or a Python allocator's
//     nested malloc, is not the program's),
//   - by the writer thread for its whole life (it allocates with std::vector and friends: the
//     preload's operator new calls malloc, which is OUR malloc),
//   - by the sampling signal handler for its whole duration,
//   - by the preload's own entry points that run on application threads (constructor, thread
//     start/exit, fork/exec/exit handlers, the writer's drains on application threads), and
//   - by the forking thread from the fork prepare handler to the parent/child handler.
// signal-safe: a counter on the thread's own TLS.
#pragma once
#include <cstdint>

namespace mlprof::preload::mem {

struct ThreadState {
  int32_t guard;            // > 0: hooks only forward
  uint32_t tid;             // gettid(), cached (0 = not yet; reset in a fork child)
  int64_t countdown;        // allocated bytes left before the next sampled allocation
  int64_t copy_countdown;   // copied bytes left before the next sampled copy
  uint64_t rng;             // xorshift state (0 = not seeded yet)
  uint64_t next_id, end_id; // this thread's block of allocation ids [next_id, end_id)
  bool seeded, copy_seeded; // the countdowns were drawn
  bool ring_stuck;          // a wait for ring space timed out and no event got in since
  // The return address of this thread's latest call to a CPython allocator wrapper that went to
  // pymalloc WITHOUT the guard (mem_python.cpp's fast path). A malloc-hook sample whose stack still
  // returns there was made by pymalloc itself for its own bookkeeping and is dropped (record_alloc).
  uint64_t py_fast_ra;
};

extern __thread ThreadState t_mem __attribute__((tls_model("initial-exec")));

// RAII: the calling thread's hooks only forward while it lives.
struct Guard {
  Guard() { ++t_mem.guard; }
  ~Guard() { --t_mem.guard; }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

}  // namespace mlprof::preload::mem
