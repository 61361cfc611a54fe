// Per-request normalization of the profile over the serving workflow's steady window: the CPU of
// each source line inside the window (from the time-ordered samples), and a summary of where the
// window's CPU went that the advice uses. Allocation figures per site come from the collector's
// memory window (collector::MemWindow, BuildOptions::memory_window).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "profile/model.h"

namespace mlprof::tools {

// CPU of the window [s.window_start_ns, s.window_end_ns) in microseconds, split.
struct WindowCpu {
  int64_t total_us = 0, interpreter_us = 0, native_us = 0, system_us = 0;
  int64_t matmul_us = 0;  // samples with a BLAS / matmul frame (gemm, matmul, dot, ...)
  int64_t gc_us = 0;      // samples inside the Python garbage collector (profile::kGcFrameName, or its
                          // functions by name where the interpreter has symbols)
  int64_t gil_us = 0;     // samples handing the GIL over: a thread letting go of it or taking it back
                          // (is_gil_handoff_function), futex calls when another thread waits for it
  int64_t lock_wait_us = 0;  // wall mode: waits in locks / the GIL
  std::map<uint32_t, int64_t> per_thread_us;  // thread index -> CPU
  // Threads with window samples of a thread pool's workers (OpenMP, OpenBLAS, PyTorch's pools:
  // profile::is_thread_pool_module at the thread's start, or charged to a starting line through
  // profile::kPoolWorkersFrameName): a math library's threads, not the service's own.
  std::set<uint32_t> pool_threads;
  int64_t pool_wait_us = 0;  // a pool's threads waiting for work, spinning (profile::is_pool_wait_stack)
  std::map<std::string, int64_t> pool_wait_by_library;  // that CPU by the pool's file name (libgomp.so.1)
};

// A sample's CPU in microseconds: the (thread, stack) row's cpu value spread over its samples'
// weights, so window sums use exactly the figures of the whole profile.
WindowCpu window_cpu(const profile::Profile& p, int64_t from_ns, int64_t to_ns);

// Fills s.lines (CPU per line in the window, most total first, at most max_lines), and
// s.window_cpu_us / s.window_line_cpu_us (the window's CPU, and the part of it whose stacks have a
// line: what the lines' self figures add up to before the list is cut). A sample's
// "self" line is its innermost frame that has a line (native code without line information, a
// BLAS kernel, counts at the line that called it); "total" counts every line of its stack once.
// Frames of mlprof's preload (libmlprof_preload*.so: its allocator wrappers) are not lines of the
// service: they count at the line that called them.
void fill_window_lines(profile::Profile& p, profile::Serving& s, size_t max_lines = 300);

// Function names the advice counts as matrix products (BLAS, oneDNN, PyTorch, numpy).
bool is_matmul_function(const std::string& name);

// CPython's functions that let go of the GIL or take it back: the exported ones, named in every
// build (PyEval_SaveThread, PyEval_RestoreThread, PyEval_AcquireThread, PyEval_ReleaseThread,
// PyGILState_Ensure, PyGILState_Release), and take_gil / drop_gil where the interpreter has symbols
// (a compiler suffix such as ".constprop.0" allowed). Such a frame is on the stack only while the
// GIL changes hands, not while the code between them runs.
bool is_gil_handoff_function(const std::string& name);

}  // namespace mlprof::tools
