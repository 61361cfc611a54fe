#include "preload/config.h"

#include <signal.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mlprof::preload {
namespace {

// Parses a whole decimal number in [lo, hi]; false on anything else ("100x", "", overflow).
bool parse_uint(const char* s, unsigned long lo, unsigned long hi, unsigned long* out) {
  if (!s || *s < '0' || *s > '9') return false;  // no sign, no leading space, not empty
  char* end = nullptr;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end != '\0' || s[0] == '-' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

void load_config(Config& cfg, void (*report)(const char* msg)) {
  static char buf[8][768];
  int nbuf = 0;
  auto complain = [&](const char* fmt, const char* name, const char* value) {
    if (nbuf >= 8) return;
    snprintf(buf[nbuf], sizeof buf[nbuf], fmt, name, value);
    report(buf[nbuf++]);
  };

  // 1 or 0 (or unset, or empty); anything else is said, and taken as 0.
  auto flag = [&](const char* name) {
    const char* v = getenv(name);
    if (v && *v && strcmp(v, "1") != 0 && strcmp(v, "0") != 0)
      complain("%s=%s is not 1 or 0; taken as 0", name, v);
    return v && strcmp(v, "1") == 0;
  };
  cfg.quiet = flag("MLPROF_QUIET");
  if (flag("MLPROF_DISABLE")) return;

  const char* sock = getenv("MLPROF_SOCKET");
  const char* dir = getenv("MLPROF_OUTPUT_DIR");
  if (sock && *sock) {
    if (strlen(sock) >= sizeof cfg.socket_path) {
      complain("%s=%s is longer than a Unix socket path may be; not profiling", "MLPROF_SOCKET", sock);
      return;
    }
    strcpy(cfg.socket_path, sock);
  } else if (dir && *dir) {
    if (strlen(dir) >= sizeof cfg.output_dir - 64) {
      complain("%s=%s is too long; not profiling", "MLPROF_OUTPUT_DIR", dir);
      return;
    }
    strcpy(cfg.output_dir, dir);
  } else {
    return;  // preloaded without a destination: stay out of the way silently
  }
  cfg.enabled = true;

  unsigned long v = 0;
  if (const char* rate = getenv("MLPROF_RATE")) {
    if (parse_uint(rate, 1, 10000, &v))
      cfg.rate_hz = static_cast<uint32_t>(v);
    else
      complain("%s=%s is not a sampling rate in Hz (1..10000); using 100", "MLPROF_RATE", rate);
  }

  cfg.signo = SIGRTMIN + 5;
  if (const char* sig = getenv("MLPROF_SIGNAL")) {
    if (parse_uint(sig, 1, static_cast<unsigned long>(SIGRTMAX), &v) && v != SIGKILL && v != SIGSTOP &&
        v != SIGSEGV && v != SIGBUS && v != SIGFPE && v != SIGILL)
      cfg.signo = static_cast<int>(v);
    else
      complain("%s=%s is not a usable signal number; using SIGRTMIN+5", "MLPROF_SIGNAL", sig);
  }

  // auto: POSIX CPU-time timers up to kTickSafeRateHz, perf events above (why: thread_timer.h).
  cfg.timer = cfg.rate_hz <= kTickSafeRateHz ? TimerSource::kThreadCpuTimer : TimerSource::kPerfTaskClock;
  if (const char* tm = getenv("MLPROF_TIMER")) {
    if (strcmp(tm, "perf") == 0)
      cfg.timer = TimerSource::kPerfTaskClock, cfg.timer_forced = true;
    else if (strcmp(tm, "timer") == 0)
      cfg.timer = TimerSource::kThreadCpuTimer, cfg.timer_forced = true;
    else if (strcmp(tm, "auto") != 0)
      complain("%s=%s is not a timer source (auto, perf or timer); using auto", "MLPROF_TIMER", tm);
  }

  if (const char* mode = getenv("MLPROF_MODE")) {
    if (strcmp(mode, "cpu") == 0)
      cfg.mode = ProfileMode::kCpu;
    else if (strcmp(mode, "wall") == 0)
      cfg.mode = ProfileMode::kWall;
    else
      complain("%s=%s is not a profiling mode (cpu or wall); using cpu", "MLPROF_MODE", mode);
  }

  if (const char* unw = getenv("MLPROF_UNWINDER")) {
    if (strcmp(unw, "cfi") == 0)
      cfg.unwinder = UnwinderKind::kCfi;
    else if (strcmp(unw, "libunwind") == 0)
      cfg.unwinder = UnwinderKind::kLibunwind;
    else
      complain("%s=%s is not an unwinder (cfi or libunwind); using cfi", "MLPROF_UNWINDER", unw);
  }

  if (const char* mem = getenv("MLPROF_MEMORY")) {
    if (strcmp(mem, "0") == 0)
      cfg.memory = false;
    else if (strcmp(mem, "1") == 0)
      cfg.memory = true;
    else
      complain("%s=%s is not 0 (memory profiling off) or 1 (on); memory profiling stays on", "MLPROF_MEMORY", mem);
  }

  if (const char* iv = getenv("MLPROF_MEM_INTERVAL")) {
    if (parse_uint(iv, 1, kMaxMemInterval, &v))
      cfg.mem_interval = v;
    else
      complain("%s=%s is not a sampling interval in bytes (1 = every allocation, up to 2^40); "
               "using 1048576", "MLPROF_MEM_INTERVAL", iv);
  }

  if (const char* iv = getenv("MLPROF_COPY_INTERVAL")) {
    if (parse_uint(iv, 0, kMaxMemInterval, &v))
      cfg.copy_interval = v;
    else
      complain("%s=%s is not a sampling interval in bytes (0 = copies not sampled, up to 2^40); "
               "using 1048576", "MLPROF_COPY_INTERVAL", iv);
  }

  if (const char* g = getenv("MLPROF_GPU")) {
    if (strcmp(g, "0") == 0)
      cfg.gpu = false;
    else if (strcmp(g, "1") == 0)
      cfg.gpu = true;
    else
      complain("%s=%s is not 0 (GPU profiling off) or 1 (on, the default); GPU profiling stays on", "MLPROF_GPU", g);
  }
  if (const char* cp = getenv("MLPROF_CUPTI_PATH")) snprintf(cfg.cupti_path, sizeof cfg.cupti_path, "%s", cp);
  if (const char* gs = getenv("MLPROF_GPU_STACKS")) {
    if (strcmp(gs, "full") == 0)
      cfg.gpu_stacks = GpuStacks::kFull;
    else if (strcmp(gs, "native") == 0)
      cfg.gpu_stacks = GpuStacks::kNative;
    else if (strcmp(gs, "none") == 0)
      cfg.gpu_stacks = GpuStacks::kNone;
    else
      complain("%s=%s is not full (the default), native or none; using full", "MLPROF_GPU_STACKS", gs);
  }
}

}  // namespace mlprof::preload
