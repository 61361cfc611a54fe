// The preload's constructor and lifecycle: reads the configuration, installs the sampling
// handler, starts the writer, registers the main thread, and handles fork/exec/exit.
// Everything here runs in normal (not signal) context.
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "common/clock.h"
#include "common/wire_format.h"
#include "preload/config.h"
#include "preload/gpu.h"
#include "preload/mem_profiler.h"
#include "preload/python.h"
#include "preload/runtime.h"
#include "preload/sampler.h"
#include "preload/threads.h"
#include "preload/unwinder.h"
#include "preload/writer.h"

extern char** environ;

namespace mlprof::preload {
namespace {

Config g_cfg;
ThreadRegistry g_threads;
// Never destroyed: threads may still be running while static destructors run at exit.
alignas(Writer) unsigned char g_writer_storage[sizeof(Writer)];
Writer* g_writer = nullptr;
pthread_key_t g_thread_key;
int64_t g_period_ns = 0;
pid_t g_pid = 0;
bool g_active = false;
char g_preload_path[4096];
char** g_saved_env = nullptr;  // the MLPROF_* and LD_PRELOAD entries at start, for exec
constexpr int kMaxEarly = 8;
char g_early[kMaxEarly][512];
int g_early_count = 0;


// Says a problem once on stderr ("mlprof: ...") unless MLPROF_QUIET=1, and sends it to the
// collector so the report shows it too.
void report(const char* msg) {
  int saved = errno;
  if (!g_cfg.quiet) {
    char line[512];
    int n = snprintf(line, sizeof line, "mlprof: %s\n", msg);
    if (n > 0) {
      ssize_t w = write(STDERR_FILENO, line, static_cast<size_t>(n < (int)sizeof line ? n : (int)sizeof line - 1));
      (void)w;
    }
  }
  if (g_writer) {
    g_writer->message(1, msg);
  } else if (g_early_count < kMaxEarly) {
    // Said before the stream exists (configuration problems): sent once the writer starts.
    snprintf(g_early[g_early_count++], sizeof g_early[0], "%s", msg);
  }
  errno = saved;
}

void on_thread_exit(void*) {
  mem::Guard guard;
  g_threads.retire_current(clock_ns(CLOCK_MONOTONIC));
}

void register_thread() {
  mem::Guard guard;  // pthread_setspecific may allocate
  ThreadSlot* s = g_threads.register_current(g_cfg.signo, g_period_ns, clock_ns(CLOCK_MONOTONIC));
  if (s) pthread_setspecific(g_thread_key, s);
}

// The forking thread holds the memory hooks' guard from prepare to parent/child: other atfork
// handlers may allocate while the table's locks are held.
void fork_prepare() {
  ++mem::t_mem.guard;
  if (g_active) g_writer->fork_prepare();
  mem::fork_prepare();
}
void fork_parent() {
  mem::fork_parent();
  if (g_active) g_writer->fork_parent();
  --mem::t_mem.guard;
}
void fork_child() {
  mem::fork_child();
  gpu::fork_child();
  if (g_active) {
    g_pid = getpid();
    g_threads.reset_after_fork(g_cfg.signo, g_period_ns, clock_ns(CLOCK_MONOTONIC));
    if (t_slot) pthread_setspecific(g_thread_key, t_slot);
    g_writer->fork_child(clock_ns(CLOCK_REALTIME), clock_ns(CLOCK_MONOTONIC));
  }
  --mem::t_mem.guard;
}

void on_process_exit(int status, void*) {
  if (!g_active || getpid() != g_pid) return;
  mem::Guard guard;
  g_sampler.sampling.store(false, std::memory_order_release);
  mem::set_recording(false);  // allocations from here on (atexit, destructors) are not recorded
  g_threads.stop_all_timers();
  g_writer->finish(wire::EndReason::kExit, status);
  g_active = false;
}

void save_env() {
  size_t n = 0;
  for (char** e = environ; e && *e; ++e)
    if (strncmp(*e, "MLPROF_", 7) == 0) ++n;
  g_saved_env = static_cast<char**>(calloc(n + 1, sizeof(char*)));
  if (!g_saved_env) return;
  size_t i = 0;
  for (char** e = environ; e && *e && i < n; ++e)
    if (strncmp(*e, "MLPROF_", 7) == 0) g_saved_env[i++] = strdup(*e);
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&save_env), &info) && info.dli_fname)
    snprintf(g_preload_path, sizeof g_preload_path, "%s", info.dli_fname);
}

bool init_unwinder() {
  const char* err = nullptr;
  // The CFI tables are built by the writer thread as its first act (Writer::loop), not here:
  // parsing a large binary's .eh_frame took ~15 ms of every process start (python3.11).
  if (g_cfg.unwinder == UnwinderKind::kCfi) return true;
  if (libunwind_load(&err)) return true;
  report(err);
  return false;
}

// Memory profiling stays off unless the constructor got as far as turning it on.
struct SettleMemory {
  ~SettleMemory() { mem::settle_off(); }
};

__attribute__((constructor)) void mlprof_preload_init() {
  mem::Guard guard;  // the preload's own allocations are not the program's
  SettleMemory settle;
  mem::hooks_init();  // even when nothing is profiled: the hooks forward fastest once it ran
  load_config(g_cfg, report);
  if (!g_cfg.enabled) return;
  g_pid = getpid();
  g_period_ns = 1000000000LL / g_cfg.rate_hz;
  if (!g_threads.init()) {
    report("cannot map memory for thread slots; not profiling");
    return;
  }
  if (!init_unwinder()) report("no unwinder available: stacks hold the interrupted pc only");
  if (g_cfg.memory && !mem::alloc_hooks_present()) {
    report("this preload (libmlprof_preload_cpu.so) has no allocation hooks; memory profiling is off");
    g_cfg.memory = false;
  }
  if (g_cfg.memory) {
    if (mem::init(g_cfg.mem_interval, g_cfg.copy_interval))
      mem::exclude_own_allocations();
    else
      report("cannot map memory for the memory profiler's tables; memory profiling is off");
  }
  g_sampler.unwinder = g_cfg.unwinder;
  const char* why = nullptr;
  if (!install_sample_handler(g_cfg.signo, &why)) {
    report(why);
    return;
  }
  if (pthread_key_create(&g_thread_key, on_thread_exit) != 0) {
    report("cannot create a thread key; not profiling");
    return;
  }
  save_env();
  g_threads.set_timer_source(g_cfg.timer, !g_cfg.timer_forced);
  // The main thread first, so the stream's start record names the clock it really got; its
  // samples are dropped until sampling is switched on below.
  register_thread();
  // GPU profiling waits for libcuda; the writer thread attaches CUPTI when its module scans see it
  // (the first one, when libcuda is linked in), never this constructor (the loader's lock is held
  // here). Decided before the writer starts, so that its first scan knows.
  gpu::init(g_cfg, report);
  g_writer = new (g_writer_storage) Writer(g_cfg, g_threads);
  if (!g_writer->start(clock_ns(CLOCK_REALTIME), clock_ns(CLOCK_MONOTONIC), g_period_ns)) {
    g_threads.retire_current(clock_ns(CLOCK_MONOTONIC));
    pthread_setspecific(g_thread_key, nullptr);
    report("cannot reach the collector (MLPROF_SOCKET) or write MLPROF_OUTPUT_DIR; the program runs unprofiled");
    g_writer = nullptr;
    return;
  }
  for (int i = 0; i < g_early_count; ++i) g_writer->message(1, g_early[i]);
  // The writer detected the interpreter while announcing modules; an unsupported one is said here
  // once on stderr (and in the report): native profiling goes on without Python frames.
  if (const python::Interpreter& py = python::detect(); py.present && !py.supported) report(py.description.c_str());
  if (g_threads.timer_failures.load() > 0)
    report("no sampling clock could be started for the main thread (perf events and POSIX timers both failed)");
  g_active = true;
  g_sampler.sampling.store(true, std::memory_order_release);
  mem::set_recording(true);
  gpu::set_recording(true);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  on_exit(on_process_exit, nullptr);
}

}  // namespace

namespace runtime {

bool active() { return g_active; }
int sample_signal() { return g_cfg.signo; }
bool in_original_process() { return getpid() == g_pid; }

void thread_begin() {
  if (g_active) register_thread();
}

void before_dlclose() {
  if (g_active && in_original_process()) g_writer->sync_cycle();  // guarded inside
  ++t_in_loader;
}

void after_dlclose() {
  --t_in_loader;
  if (g_active) g_writer->modules_changed();
}

void before_exec() {
  if (!g_active || !in_original_process()) return;
  mem::Guard guard;
  g_sampler.sampling.store(false, std::memory_order_release);
  mem::set_recording(false);
  gpu::set_recording(false);
  // Every sampling clock must be stopped before the exec: a tick during or after it would leave
  // a sampling signal pending for the new image, whose default action for it is to terminate.
  // A signal already pending is delivered to our handler when stopping returns to user space.
  g_threads.stop_all_timers();
  g_writer->finish(wire::EndReason::kExec, -1);
}

void after_exec_failed() {
  if (!g_active || !in_original_process()) return;
  mem::Guard guard;
  // The exec failed and we go on: this thread gets a clock again (other threads stay unsampled).
  g_threads.restart_current_timer(g_cfg.signo, g_period_ns);
  if (g_writer->restart(clock_ns(CLOCK_REALTIME), clock_ns(CLOCK_MONOTONIC))) {
    g_sampler.sampling.store(true, std::memory_order_release);
    mem::set_recording(true);
    gpu::set_recording(true);
  }
}

void before_exit(int status) {
  if (!g_active || !in_original_process()) return;
  on_process_exit(status, nullptr);
}

char* const* env_for_exec(char* const* envp) {
  if (!g_active || !in_original_process() || !g_saved_env) return envp;
  mem::Guard guard;
  bool has_ours = false, has_preload = false;
  size_t n = 0;
  const char* key = g_cfg.socket_path[0] ? "MLPROF_SOCKET=" : "MLPROF_OUTPUT_DIR=";
  for (char* const* e = envp; e && *e; ++e, ++n) {
    if (strncmp(*e, key, strlen(key)) == 0) has_ours = true;
    if (strncmp(*e, "LD_PRELOAD=", 11) == 0 && strstr(*e, g_preload_path)) has_preload = true;
  }
  if (has_ours && has_preload) return envp;
  size_t extra = 1;
  for (char** s = g_saved_env; *s; ++s) ++extra;
  char** out = static_cast<char**>(calloc(n + extra + 1, sizeof(char*)));
  if (!out) return envp;
  size_t i = 0;
  bool preload_done = false;
  for (char* const* e = envp; e && *e; ++e) {
    if (strncmp(*e, "MLPROF_", 7) == 0) continue;  // replaced by ours below
    if (strncmp(*e, "LD_PRELOAD=", 11) == 0 && !has_preload) {
      size_t len = strlen(*e) + strlen(g_preload_path) + 2;
      char* v = static_cast<char*>(malloc(len));
      if (!v) continue;
      snprintf(v, len, "%s:%s", *e, g_preload_path);
      out[i++] = v;
      preload_done = true;
      continue;
    }
    out[i++] = *e;
  }
  if (!has_preload && !preload_done) {
    size_t len = strlen(g_preload_path) + 12;
    char* v = static_cast<char*>(malloc(len));
    if (v) {
      snprintf(v, len, "LD_PRELOAD=%s", g_preload_path);
      out[i++] = v;
    }
  }
  for (char** s = g_saved_env; *s; ++s) out[i++] = *s;
  out[i] = nullptr;
  return out;
}

}  // namespace runtime
}  // namespace mlprof::preload
