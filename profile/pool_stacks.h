// What a thread pool's thread is doing, read from one of its stacks (frames leaf first, as
// profile::Stack holds them). Shared by the collector's worker attribution
// (collector/pool_attribution.h) and the serving advice (tools/serving_window.h).
#pragma once
#include <string_view>

#include "profile/model.h"

namespace mlprof::profile {

// Modules whose code is nobody's work in a pool's stack: the C runtime's (the thread start, futex,
// sched_yield), libstdc++'s (std::thread's routine), "[unknown]" (outside every module).
bool is_nobodys_module(std::string_view path);
// A native frame in such a module, or in none (module 0, or past the strings).
bool is_pool_runtime_frame(const Profile& p, uint32_t frame);

// A pool's thread: a stack that starts at the C runtime's thread start whose next frame is in a
// thread-pool runtime (profile::is_thread_pool_module), or a worker's sample charged to the line
// that started its work (it holds kPoolWorkersFrameName).
bool is_pool_thread_stack(const Profile& p, const Stack& s);

// A pool waiting for work: a stack of a pool's thread in nothing but the pool runtime's own code and
// runtime frames (is_pool_runtime_frame), at least one frame of the pool's: libgomp's spin before
// its futex wait (GOMP_SPINCOUNT), pthreadpool's; for a pool whose file also holds its work
// (OpenBLAS, MKL's threading layers) only its thread routine calling the C runtime (OpenBLAS's
// sched_yield loop).
bool is_pool_wait_stack(const Profile& p, const Stack& s);

// The module (string index) of a pool's stack's thread routine: its first frame above the C
// runtime's thread start; 0 when the stack has none.
uint32_t pool_routine_module(const Profile& p, const Stack& s);

}  // namespace mlprof::profile
