// The libunwind unwinder, loaded at start with dlopen(RTLD_LOCAL): the preload has no link-time
// dependency on it, and its _Unwind_* exports (libunwind.so.8 defines 18 of them) never enter the
// host's global symbol scope, where they would replace libgcc_s's C++ exception unwinder.
//
// unwind_libunwind() runs in SIGNAL CONTEXT (see sampler.cpp for the rules). libunwind's local
// unwinding calls dl_iterate_phdr (which takes the loader's recursive lock) and, with the global
// cache policy chosen here, its own cache lock with signals blocked; that is why the sampler never
// calls it while the same thread is inside dlopen/dlclose, and why cfi is the default.
#include <dlfcn.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>

#include "common/wire_format.h"
#include "preload/unwinder.h"

namespace mlprof::preload {
namespace {

// Opaque storage sized generously for libunwind's x86-64 cursor (UNW_TDEP_CURSOR_LEN = 127 words).
struct Cursor { uint64_t opaque[140]; };
enum { kCachePolicyGlobal = 1, kInitSignalFrame = 1, kRegIp = 16 /* UNW_X86_64_RIP */ };

using InitLocal2Fn = int (*)(Cursor*, void* ucontext, int flags);
using StepFn = int (*)(Cursor*);
using GetRegFn = int (*)(Cursor*, int reg, uint64_t* value);
using SetCachingFn = int (*)(void* addr_space, int policy);

InitLocal2Fn s_init_local2 = nullptr;
StepFn s_step = nullptr;
GetRegFn s_get_reg = nullptr;

}  // namespace

bool libunwind_load(const char** error) {
  if (s_step) return true;
  void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    *error = "libunwind.so.8 not found (install libunwind8); MLPROF_UNWINDER=libunwind unavailable";
    return false;
  }
  auto init = reinterpret_cast<InitLocal2Fn>(dlsym(h, "_ULx86_64_init_local2"));
  auto step = reinterpret_cast<StepFn>(dlsym(h, "_ULx86_64_step"));
  auto get_reg = reinterpret_cast<GetRegFn>(dlsym(h, "_ULx86_64_get_reg"));
  auto set_caching = reinterpret_cast<SetCachingFn>(dlsym(h, "_ULx86_64_set_caching_policy"));
  void** addr_space = static_cast<void**>(dlsym(h, "_ULx86_64_local_addr_space"));
  if (!init || !step || !get_reg) {
    *error = "libunwind.so.8 lacks unw_init_local2 (libunwind >= 1.3 needed)";
    return false;
  }
  // Per-thread caching would touch libunwind's dynamic TLS, whose first use in a thread may
  // allocate: not allowed in a signal handler. The global cache is guarded by a lock libunwind
  // takes with signals blocked.
  if (set_caching && addr_space) set_caching(*addr_space, kCachePolicyGlobal);
  s_init_local2 = init;
  s_get_reg = get_reg;
  // Warm up (libunwind initializes itself lazily) outside signal context.
  ucontext_t uc;
  getcontext(&uc);
  Cursor c;
  if (init(&c, &uc, 0) == 0) {
    for (int i = 0; i < 4 && step(&c) > 0; ++i) {}
  }
  s_step = step;
  return true;
}

// signal-safe (see the file comment)
UnwindResult unwind_libunwind(const void* ucontext, uint64_t* pcs, int max_frames) {
  UnwindResult r;
  const ucontext_t* uc = static_cast<const ucontext_t*>(ucontext);
  pcs[0] = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
  r.nframes = 1;
  if (!s_step) {
    r.flags = wire::kStackUnwindStop;
    return r;
  }
  Cursor c;
  if (s_init_local2(&c, const_cast<void*>(ucontext), kInitSignalFrame) != 0) {
    r.flags = wire::kStackUnwindStop;
    return r;
  }
  while (r.nframes < max_frames) {
    int st = s_step(&c);
    if (st == 0) return r;  // outermost frame reached
    if (st < 0) {
      r.flags |= wire::kStackUnwindStop;
      return r;
    }
    uint64_t ip = 0;
    if (s_get_reg(&c, kRegIp, &ip) != 0 || ip == 0) return r;
    pcs[r.nframes++] = ip;
  }
  r.flags |= wire::kStackTruncated;
  return r;
}

}  // namespace mlprof::preload
