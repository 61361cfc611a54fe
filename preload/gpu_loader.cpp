// GPU profiling: activation (libcuda in the process) and finding libcupti. See preload/gpu.h.
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "preload/config.h"
#include "preload/gpu.h"
#include "preload/gpu_events.h"
#include "preload/mem_thread.h"

namespace mlprof::preload::gpu {

State g_gpu;

namespace {

const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

struct Found {
  const char* prefix;  // file name prefix to look for
  char path[512];      // the first match's path
};

int find_module(struct dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<Found*>(data);
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  if (strncmp(base_name(info->dlpi_name), f->prefix, strlen(f->prefix)) != 0) return 0;
  snprintf(f->path, sizeof f->path, "%s", info->dlpi_name);
  return 1;
}

bool loaded_path(const char* prefix, char* out, size_t n) {
  Found f{prefix, {}};
  if (!dl_iterate_phdr(find_module, &f)) return false;
  snprintf(out, n, "%s", f.path);
  return true;
}

bool is_dir(const char* p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

constexpr const char* kSonames[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11"};

// Tries every soname in dir; appends dir to the list of places looked at.
void* try_dir(const char* dir, char* looked, size_t n) {
  if (!dir || !dir[0]) return nullptr;
  size_t used = strlen(looked);
  if (used + strlen(dir) + 3 < n) snprintf(looked + used, n - used, "%s%s", used ? ", " : "", dir);
  if (!is_dir(dir)) return nullptr;
  char path[768];
  for (const char* so : kSonames) {
    snprintf(path, sizeof path, "%s/%s", dir, so);
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

// The directory of a path (in place).
void dir_of(char* p) {
  char* slash = strrchr(p, '/');
  if (slash) *slash = 0;
  else p[0] = 0;
}

}  // namespace

bool libcuda_loaded() {
  char p[512];
  return loaded_path("libcuda.so", p, sizeof p);
}

void module_text_range(const void* addr, uint64_t* lo, uint64_t* hi) {
  *lo = *hi = 0;
  struct Q {
    uintptr_t a;
    uint64_t lo, hi;
  } q{reinterpret_cast<uintptr_t>(addr), 0, 0};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Q*>(data);
        bool mine = false;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          uint64_t s = info->dlpi_addr + ph.p_vaddr, e = s + ph.p_memsz;
          if (q->a >= s && q->a < e) mine = true;
          if (s < lo) lo = s;
          if (e > hi) hi = e;
        }
        if (!mine) return 0;
        q->lo = lo;
        q->hi = hi;
        return 1;
      },
      &q);
  *lo = q.lo;
  *hi = q.hi;
}

void named_text_range(const char* prefix, uint64_t* lo, uint64_t* hi) {
  *lo = *hi = 0;
  struct Q {
    const char* prefix;
    uint64_t lo, hi;
  } q{prefix, 0, 0};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Q*>(data);
        if (!info->dlpi_name || strncmp(base_name(info->dlpi_name), q->prefix, strlen(q->prefix)) != 0) return 0;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          uint64_t s = info->dlpi_addr + ph.p_vaddr, e = s + ph.p_memsz;
          if (s < lo) lo = s;
          if (e > hi) hi = e;
        }
        if (hi == 0) return 0;
        q->lo = lo;
        q->hi = hi;
        return 1;
      },
      &q);
  *lo = q.lo;
  *hi = q.hi;
}

void* open_cupti(const char* override_path, char* why, unsigned n) {
  why[0] = 0;
  // 1. An already loaded copy (the application's, or torch's): reuse it.
  char path[768];
  if (loaded_path("libcupti.so", path, sizeof path))
    if (void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) return h;
  for (const char* so : kSonames)
    if (void* h = dlopen(so, RTLD_NOW | RTLD_NOLOAD)) return h;
  // 2. MLPROF_CUPTI_PATH: the only place tried when set.
  char looked[1024] = "";
  if (override_path && override_path[0]) {
    if (is_dir(override_path)) {
      if (void* h = try_dir(override_path, looked, sizeof looked)) return h;
    } else if (void* h = dlopen(override_path, RTLD_NOW | RTLD_LOCAL)) {
      return h;
    }
    const char* err = dlerror();
    snprintf(why, n,
             "MLPROF_CUPTI_PATH=%s: no usable libcupti there (%s); GPU profiling off (CPU and memory profiling go on). "
             "Point MLPROF_CUPTI_PATH at libcupti.so or its directory",
             override_path, err ? err : "not found");
    return nullptr;
  }
  // 3. CUDA toolkit prefixes.
  const char* prefixes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  const char* subdirs[] = {"extras/CUPTI/lib64", "lib64", "lib", "targets/x86_64-linux/lib"};
  for (const char* pre : prefixes) {
    if (!pre || !pre[0]) continue;
    for (const char* sub : subdirs) {
      snprintf(path, sizeof path, "%s/%s", pre, sub);
      if (void* h = try_dir(path, looked, sizeof looked)) return h;
    }
  }
  // 4. Next to the loaded CUDA runtime / driver, and pip's nvidia packages beside them.
  for (const char* lib : {"libcudart.so", "libcuda.so"}) {
    if (!loaded_path(lib, path, sizeof path)) continue;
    dir_of(path);
    if (void* h = try_dir(path, looked, sizeof looked)) return h;
    // .../site-packages/nvidia/cuda_runtime/lib -> .../site-packages/nvidia/cuda_cupti/lib
    char* nv = strstr(path, "/nvidia/");
    if (nv) {
      nv[8] = 0;
      char pip[900];
      snprintf(pip, sizeof pip, "%scuda_cupti/lib", path);
      if (void* h = try_dir(pip, looked, sizeof looked)) return h;
      snprintf(pip, sizeof pip, "%scu13/lib", path);
      if (void* h = try_dir(pip, looked, sizeof looked)) return h;
    }
  }
  // 5. The loader's own search (LD_LIBRARY_PATH, ld.so.cache).
  for (const char* so : kSonames)
    if (void* h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) return h;
  snprintf(why, n,
           "libcuda is loaded but no libcupti was found (looked in: %s; and the loader's path for libcupti.so[.13/.12/"
           ".11]); GPU profiling off (CPU and memory profiling go on). Set MLPROF_CUPTI_PATH to libcupti.so or its "
           "directory (it ships with the CUDA toolkit in extras/CUPTI/lib64, and in pip's nvidia-cuda-cupti)",
           looked);
  return nullptr;
}

bool init(const Config& cfg, void (*report)(const char*)) {
  g_gpu.cfg = &cfg;
  g_gpu.report = report;
  if (!cfg.gpu) return false;
  g_gpu.phase.store(Phase::kWaiting, std::memory_order_release);
  return true;
}

namespace {
void* g_cupti_handle = nullptr;  // opened by prepare_attach, used by finish_attach
}

bool prepare_attach() {
  Phase expected = Phase::kWaiting;
  // Never while the stream is ending (the exit handler's last cycle runs after the libraries'
  // destructors: no CUPTI start-up then).
  if (!g_gpu.recording.load(std::memory_order_acquire)) return false;
  if (g_gpu.phase.load(std::memory_order_acquire) != expected || !libcuda_loaded()) return false;
  if (!g_gpu.phase.compare_exchange_strong(expected, Phase::kAttaching)) return false;
  mem::Guard guard;  // our dlopen and CUPTI's set-up are not the program's allocations
  if (!cupti_compiled()) {
    g_gpu.report("libcuda is loaded but this mlprof was built without CUPTI headers; GPU profiling off (CPU and "
                 "memory profiling go on). Rebuild with the CUDA toolkit present (MLPROF_CUDA_ROOT or CUDA_HOME)");
    g_gpu.phase.store(Phase::kFailed, std::memory_order_release);
    return false;
  }
  // The ring is mapped only now: processes without CUDA never pay for it. The writer drains it only
  // once the phase says kOn (published after this).
  if (!g_gpu.ring.init(kRingBytes)) {
    g_gpu.report("cannot map memory for the GPU event ring; GPU profiling off");
    g_gpu.phase.store(Phase::kFailed, std::memory_order_release);
    return false;
  }
  char why[1536];
  void* h = open_cupti(g_gpu.cfg->cupti_path, why, sizeof why);
  if (!h) {
    g_gpu.report(why);
    g_gpu.phase.store(Phase::kFailed, std::memory_order_release);
    return false;
  }
  g_cupti_handle = h;
  return true;
}

bool finish_attach() {
  if (g_gpu.phase.load(std::memory_order_acquire) != Phase::kAttaching || !g_cupti_handle) return false;
  mem::Guard guard;
  const bool ok = attach_cupti(g_cupti_handle);
  g_gpu.phase.store(ok ? Phase::kOn : Phase::kFailed, std::memory_order_release);
  return ok;
}

void fork_child() {
  if (g_gpu.phase.load(std::memory_order_relaxed) == Phase::kOff) return;
  g_gpu.phase.store(Phase::kOff, std::memory_order_relaxed);
  g_gpu.recording.store(false, std::memory_order_relaxed);
  g_gpu.ring.reset_in_child();
}

void flush(bool forced, void (*drain)(void*), void* arg) {
  if (!attached()) return;
  mem::Guard guard;
  flush_cupti(forced, drain, arg);
}

}  // namespace mlprof::preload::gpu
