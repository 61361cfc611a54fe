#include "preload/writer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "preload/config.h"
#include "preload/mem_events.h"
#include "preload/gpu.h"
#include "preload/mem_profiler.h"
#include "preload/mem_python.h"
#include "preload/sampler.h"
#include "preload/unwinder.h"

namespace mlprof::preload {
namespace {

constexpr int kCycleMs = 10;           // ring drain interval while there is work (CPU mode)
// CPU mode, when the rings were nearly empty: the interval doubles up to this. 100 wake-ups a
// second of a thread that finds one sample to send cost the example HTTP service ~1.9% of its CPU
// (mostly the kernel's wake-up path), and on a VM whose vCPUs slow each other down, the profiled
// program pays for them too (docs/benchmarks.md, *Noise on this machine*). 80 ms, the spacing of
// the memory timeline's records (kUsageNs), so that with memory profiling on an idle cycle and a
// timeline record are one wake-up (~12 a second, not ~25 with one every 40 ms and the record
// every other one). A thread sampled at 100 Hz fills ~1/10 of its 64 KiB sample ring in 80 ms.
constexpr int kIdleCycleMs = 80;
constexpr double kBusyFill = 1.0 / 8;   // a ring this full at a cycle: back to kCycleMs
constexpr double kIdleFill = 1.0 / 32;  // every ring below this: the interval may double
// Cycles stay at kCycleMs this long after the start and after a module change: a library's
// unwind tables are read on the cycle after it appears, and imports come in bursts.
constexpr int64_t kBusyAfterChangeNs = 1000000000;
constexpr int64_t kSlowNs = 1000000000;  // names, counters, handler check: once a second
// MEM_USAGE: at least 10 Hz. Sent by the first cycle at least kUsageNs after the previous one;
// the loop wakes a cycle when it is due (whatever the CPU-mode interval or the wall period), so
// the spacing stays within kUsageNs + scheduling delays: below 100 ms unless the machine is
// overloaded.
constexpr int64_t kUsageNs = 80'000'000;

// The preload's own threads must not go through its pthread_create hook.
using PthreadCreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
PthreadCreateFn real_pthread_create() {
  static PthreadCreateFn fn = reinterpret_cast<PthreadCreateFn>(dlsym(RTLD_NEXT, "pthread_create"));
  return fn ? fn : &pthread_create;
}

std::string read_file(const char* path, size_t limit) {
  std::string s;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[4096];
  ssize_t n;
  while (s.size() < limit && (n = read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  close(fd);
  if (s.size() > limit) s.resize(limit);
  return s;
}

std::string thread_comm(uint32_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%u/comm", tid);
  std::string s = read_file(path, 64);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// Two independent 64-bit FNV-1a/Murmur-style mixes give a 128-bit stack identity.
inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

}  // namespace

bool Writer::open_transport(int64_t mono) {
  if (cfg_.socket_path[0]) return transport_.open_socket(cfg_.socket_path);
  return transport_.open_file(cfg_.output_dir, getpid(), mono);
}

namespace {
std::atomic<uint32_t> g_wake{0};  // 1: a cycle was asked for (wake_writer); the futex word
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
uint32_t* wake_word() { return reinterpret_cast<uint32_t*>(&g_wake); }
}  // namespace

// signal-safe
void wake_writer() {
  if (g_wake.exchange(1, std::memory_order_acq_rel) != 0) return;  // already asked for
  const int saved = errno;
  syscall(SYS_futex, wake_word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  errno = saved;
}

// Until the next cycle is due: timeout_ms, or wake_writer() (a new Python code object, or
// finish(): an exiting program must not wait out the cycle, up to 80 ms, before its writer ends).
// Returns the collector's command byte, or -1.
int Writer::wait(int timeout_ms) {
  // A futex cannot wait for the socket too: commands are looked at before and after, and the
  // wait is at most one idle cycle (a flush from the collector is answered within kIdleCycleMs).
  int cmd = poll_command();
  if (cmd >= 0) return cmd;
  if (timeout_ms > kIdleCycleMs) timeout_ms = kIdleCycleMs;
  if (g_wake.load(std::memory_order_acquire) == 0) {
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, wake_word(), FUTEX_WAIT_PRIVATE, 0, &ts, nullptr, 0);
  }
  g_wake.store(0, std::memory_order_release);
  return poll_command();
}

// Under mu_: an application thread's sync_cycle (dlclose) may be sending, or ending the transport,
// at the same time.
int Writer::poll_command() {
  pthread_mutex_lock(&mu_);
  const int cmd = transport_.poll_command();
  check_transport();
  pthread_mutex_unlock(&mu_);
  return cmd;
}

bool Writer::start(int64_t start_realtime_ns, int64_t start_mono_ns, int64_t period_ns) {
  start_realtime_ns_ = start_realtime_ns;
  start_mono_ns_ = start_mono_ns;
  period_ns_ = period_ns;
  last_sample_ns_ = start_mono_ns;
  last_mem_ns_ = start_mono_ns;
  last_usage_ns_ = 0;
  cycle_ms_ = kCycleMs;      // a new image or a fork child: busy again for its first second
  modules_changed_ns_ = 0;
  wall_.set_period(wall_period_ns(cfg_));
  next_tick_ns_ = start_mono_ns + wall_.period_ns();
  ended_ = false;
  stop_.store(false);
  if (!open_transport(start_mono_ns)) return false;
  enc_.clear();
  enc_.header();
  send_process_start();
  if (mem::enabled()) send_mem_config();
  flush_out();
  // The module map (and with it the CFI tables and the Python detection) comes first thing on the
  // writer thread, off the program's start-up path; samples taken before then unwind as far as
  // the tables allow and are flagged, never lost.
  modules_dirty_.store(true, std::memory_order_release);

  // The writer runs with every signal blocked: the application's signals go to its own threads,
  // and the sampling signal is never delivered here.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = real_pthread_create()(&thread_, nullptr, &Writer::thread_main, this);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    transport_.close();
    return false;
  }
  running_.store(true, std::memory_order_release);
  return true;
}

void* Writer::thread_main(void* self) {
  // The writer allocates (std::vector, std::string): never sampled, for its whole life.
  ++mem::t_mem.guard;
  prctl(PR_SET_NAME, "mlprof-writer", 0, 0, 0);
  static_cast<Writer*>(self)->loop();
  return nullptr;
}

void Writer::loop() {
  pthread_mutex_lock(&mu_);
  if (!ended_) {
    send_modules(true);
    flush_out();
  }
  pthread_mutex_unlock(&mu_);
  refresh_tables();  // the first tables
  while (!stop_.load(std::memory_order_acquire)) {
    // GPU: CUPTI is attached here, with no lock of the writer held (its start-up loads libcupti and
    // talks to the driver). Between loading libcupti and subscribing, the modules are rescanned,
    // so that launch stacks unwind through libcupti's frames from the first callback.
    // (Not before the constructor switched recording on: the attempt waits for it.)
    if (gpu_attach_due_ && gpu::g_gpu.recording.load(std::memory_order_acquire)) {
      gpu_attach_due_ = false;
      if (gpu::prepare_attach()) {
        pthread_mutex_lock(&mu_);
        if (!ended_) {
          send_modules(true);
          flush_out();
        }
        pthread_mutex_unlock(&mu_);
        refresh_tables();
        gpu::finish_attach();
      }
    }
    int timeout = cycle_timeout_ms();
    // A long wall period (low MLPROF_RATE) or a long idle cycle must not space MEM_USAGE records
    // more than 100 ms apart: the cycle is woken when the next one is due (a wall tick that is
    // not due does nothing).
    if (mem::enabled()) {
      const int64_t due_ms = (last_usage_ns_ + kUsageNs - clock_ns() + 999999) / 1000000;
      if (timeout > due_ms) timeout = due_ms < 1 ? 1 : static_cast<int>(due_ms);
    }
    int cmd = wait(timeout);
    pthread_mutex_lock(&mu_);
    if (ended_ || stop_.load(std::memory_order_acquire)) {
      pthread_mutex_unlock(&mu_);
      break;
    }
    // The collector's flush and detach commands: CUPTI's buffered activity goes out with them.
    if (cmd == static_cast<int>(wire::Command::kFlush) || cmd == static_cast<int>(wire::Command::kDetach))
      flush_gpu(true);
    cycle(false);
    if (cmd == static_cast<int>(wire::Command::kFlush)) {
      finish_wall(clock_ns());
      send_counters();
      enc_.begin(wire::Record::kFlushed);
      enc_.u(0);
      enc_.end();
      flush_out();
    } else if (cmd == static_cast<int>(wire::Command::kDetach)) {
      g_sampler.sampling.store(false, std::memory_order_release);
      mem::set_recording(false);
      gpu::set_recording(false);
      threads_.stop_all_timers();
      cycle(true);
      end_stream(wire::EndReason::kDetached, -1);
    }
    pthread_mutex_unlock(&mu_);
    refresh_tables();
  }
}

bool Writer::wall_mode() const { return cfg_.mode == ProfileMode::kWall; }

// CPU mode: the interval adapt_cycle chose (10-80 ms). Wall mode: one cycle per wall period, on a fixed schedule (a late
// cycle does not shift the next ones; the samples' weights count the periods that really passed).
int Writer::cycle_timeout_ms() {
  if (!wall_mode()) return cycle_ms_;
  const int64_t now = clock_ns(), period = wall_.period_ns();
  if (next_tick_ns_ <= now) {
    next_tick_ns_ += period;
    if (next_tick_ns_ <= now) next_tick_ns_ = now + period;  // fell behind: start afresh
  }
  return static_cast<int>((next_tick_ns_ - now + 999999) / 1000000);
}

void Writer::finish(wire::EndReason reason, int status) {
  mem::Guard guard;  // on an application thread: the final cycle allocates
  bool was_running = running_.exchange(false, std::memory_order_acq_rel);
  stop_.store(true, std::memory_order_release);
  // A program that ends soon after it started (or after loading a large library) must not wait
  // for the writer to finish parsing unwind tables that nothing will use any more.
  cfi_cancel_refresh(true);
  wake_writer();
  if (was_running && !pthread_equal(pthread_self(), thread_)) pthread_join(thread_, nullptr);
  // CUPTI's buffered activity records, before the last drain, drained as they come (a
  // launch-bound program's last buffers can hold more than the ring). Not under mu_: another
  // thread may hold a CUDA lock while it waits for mu_ (fork_prepare in an atfork handler run
  // after CUDA's); the drain takes mu_ for each drain.
  gpu::flush(true, [](void* w) {
    auto* self = static_cast<Writer*>(w);
    pthread_mutex_lock(&self->mu_);
    if (!self->ended_) self->drain_gpu_ring();
    pthread_mutex_unlock(&self->mu_);
  }, this);
  gpu::set_recording(false);
  pthread_mutex_lock(&mu_);
  if (!ended_) {
    cycle(true);
    end_stream(reason, status);
  }
  pthread_mutex_unlock(&mu_);
}

void Writer::end_stream(wire::EndReason reason, int status) {
  if (mem::enabled()) send_mem_usage(clock_ns());  // the last point of the timeline
  send_counters();
  enc_.begin(wire::Record::kProcessEnd);
  enc_.u(static_cast<uint64_t>(clock_ns()));
  enc_.u(static_cast<uint8_t>(reason));
  enc_.s(status);
  enc_.end();
  flush_out();
  transport_.close();
  ended_ = true;
}

void Writer::message(int severity, const char* text) {
  pthread_mutex_lock(&msg_mu_);
  pending_messages_.emplace_back(severity, text);
  pthread_mutex_unlock(&msg_mu_);
}

void Writer::send_process_start() {
  std::string cmdline = read_file("/proc/self/cmdline", 32 * 1024);
  std::vector<std::string_view> argv;
  for (size_t i = 0; i < cmdline.size();) {
    size_t z = cmdline.find('\0', i);
    if (z == std::string::npos) z = cmdline.size();
    argv.emplace_back(cmdline.data() + i, z - i);
    i = z + 1;
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  enc_.begin(wire::Record::kProcessStart);
  enc_.u(static_cast<uint64_t>(getpid()));
  enc_.u(static_cast<uint64_t>(getppid()));
  enc_.u(static_cast<uint64_t>(start_realtime_ns_));
  enc_.u(static_cast<uint64_t>(start_mono_ns_));
  enc_.u(static_cast<uint64_t>(period_ns_));
  // The clock the main thread got (threads fall back one by one; the counters tell).
  enc_.u(static_cast<uint8_t>(t_slot && t_slot->timer.source == TimerSource::kPerfTaskClock
                                  ? wire::TimerKind::kPerfTaskClock
                                  : wire::TimerKind::kThreadCpuTimer));
  enc_.str(std::string_view(exe, n > 0 ? static_cast<size_t>(n) : 0));
  enc_.u(argv.size());
  for (auto a : argv) enc_.str(a);
  uint64_t flags = cfg_.output_dir[0] ? uint64_t{wire::kProcessOffline} : 0;
  if (wall_mode()) flags |= wire::kProcessWallMode;
  enc_.u(flags);
  if (wall_mode()) enc_.u(static_cast<uint64_t>(wall_.period_ns()));  // the wall tick
  enc_.end();
}

void Writer::send_modules(bool force) {
  bool dirty = modules_dirty_.exchange(false, std::memory_order_acq_rel);
  if (!force && !dirty && !modules_.changed()) return;
  std::vector<ModuleRecord> added;
  std::vector<uint32_t> removed;
  modules_.rescan(added, removed);
  if (!added.empty() || !removed.empty()) {
    // Wall mode unwinds blocked threads, and the memory hooks their own thread, with the CFI
    // tables whatever the handler's unwinder is.
    // GPU launch callbacks too, once CUPTI is being attached.
    const gpu::Phase gp = gpu::g_gpu.phase.load(std::memory_order_acquire);
    if (cfg_.unwinder == UnwinderKind::kCfi || wall_mode() || mem::enabled() || gp == gpu::Phase::kAttaching ||
        gp == gpu::Phase::kOn) {
      cfi_refresh_due_ = true;  // refresh_tables(), once mu_ is released
    }
  }
  // Another library may now occupy the addresses of an unloaded one: the same pcs would then mean
  // other code, so stack ids start afresh.
  if (!removed.empty()) {
    finish_wall(clock_ns());  // held wait goes out under the ids it was counted with
    stacks_.clear();
    ++stack_gen_;
  }
  if (!added.empty()) check_python();
  // libcuda may have come in: the loop attaches CUPTI after this cycle, outside the writer's lock
  // (gpu::prepare_attach checks for libcuda itself).
  if (!added.empty() && gpu::g_gpu.phase.load(std::memory_order_relaxed) == gpu::Phase::kWaiting)
    gpu_attach_due_ = true;
  int64_t now = clock_ns();
  for (uint32_t id : removed) {
    enc_.begin(wire::Record::kModuleUnload);
    enc_.u(id);
    enc_.u(static_cast<uint64_t>(now));
    enc_.end();
  }
  for (const auto& m : added) {
    enc_.begin(wire::Record::kModuleLoad);
    enc_.u(m.id);
    enc_.u(m.load_bias);
    enc_.str(m.path);
    enc_.str(m.build_id);
    enc_.u(m.exec_ranges.size());
    for (auto& r : m.exec_ranges) {
      enc_.u(r.first);
      enc_.u(r.second);
    }
    enc_.end();
  }
}

// Detects an embedded or preloaded CPython (at start, and when libraries are loaded) and turns on
// Python frame walking in the handler when mlprof can read that interpreter.
void Writer::check_python() {
  if (python_announced_) return;
  const python::Interpreter& py = python::detect();
  if (!py.present) return;
  python_announced_ = true;
  enc_.begin(wire::Record::kPython);
  enc_.u(py.version_hex);
  enc_.u(py.supported ? 1 : 0);
  enc_.str(py.description);
  enc_.end();
  if (py.supported) g_sampler.python.store(true, std::memory_order_release);
}

void Writer::announce_thread(ThreadSlot* s) {
  std::string name = thread_comm(s->tid);
  enc_.begin(wire::Record::kThreadStart);
  enc_.u(s->tid);
  enc_.u(static_cast<uint64_t>(s->start_ns));
  enc_.str(name);
  enc_.end();
  snprintf(s->sent_name, sizeof s->sent_name, "%s", name.c_str());
  s->announced = true;
  ++threads_seen_;
}

uint64_t Writer::code_id(uint64_t code, uint32_t fp) {
  // A code object freed and another allocated at its address (a module's <module> code after its
  // import, then a function) must not lend its name: the handler stored the sampled code object's
  // fingerprint with the frame (0: not checked), and the code object now at the address must
  // still have it. When it does not, the sampled one is gone and the frame is named as unknown.
  auto it = codes_.find(code);
  if (it != codes_.end() && (fp == 0 || python::fingerprint24(it->second.identity) == fp)) return it->second.id;
  const uint64_t identity = python::code_identity(code);
  if (fp != 0 && (identity == 0 || python::fingerprint24(identity) != fp)) return freed_code_id();
  if (it != codes_.end() && identity == 0) return it->second.id;
  const uint64_t id = next_code_id_++;
  codes_[code] = CodeEntry{id, identity};
  if (identity != 0) python::note_code_named(code, python::fingerprint24(identity));
  python::CodeInfo info;
  if (!python::read_code(code, &info)) {
    info = python::CodeInfo{};
    info.qualname = "<unreadable code object>";
  }
  send_code(id, info);
  return id;
}

uint64_t Writer::freed_code_id() {
  if (freed_code_id_ == 0) {
    freed_code_id_ = next_code_id_++;
    python::CodeInfo info;
    info.qualname = "<code object freed before it was read>";
    send_code(freed_code_id_, info);
  }
  return freed_code_id_;
}

void Writer::send_code(uint64_t id, const python::CodeInfo& info) {
  enc_.begin(wire::Record::kPyCode);
  enc_.u(id);
  enc_.str(info.filename);
  enc_.str(info.qualname);
  enc_.u(info.firstlineno);
  enc_.u(static_cast<uint8_t>(info.format));
  enc_.str(info.linetable);
  enc_.end();
}

uint64_t Writer::stack_id(const uint64_t* pcs, uint16_t n, uint8_t flags, const python::RawPyFrame* py,
                          uint8_t npy) {
  Key k{0x243f6a8885a308d3ull ^ flags, 0x13198a2e03707344ull ^ n ^ (static_cast<uint64_t>(npy) << 16)};
  for (uint16_t i = 0; i < n; ++i) {
    k.a = mix(k.a, pcs[i]);
    k.b = mix(k.b ^ 0xa4093822299f31d0ull, pcs[i] * 0x9e3779b97f4a7c15ull);
  }
  for (uint8_t i = 0; i < npy; ++i) {
    uint64_t v = py[i].code ^ (static_cast<uint64_t>(py[i].instr_offset) << 40) ^ (static_cast<uint64_t>(py[i].flags) << 36) ^
                 (static_cast<uint64_t>(python::frame_fingerprint(py[i])) << 12);
    k.a = mix(k.a, v);
    k.b = mix(k.b ^ 0x082efa98ec4e6c89ull, v * 0x9e3779b97f4a7c15ull + py[i].instr_offset);
  }
  auto [it, inserted] = stacks_.try_emplace(k, next_stack_id_);
  if (!inserted) return it->second;
  ++next_stack_id_;
  // Code records must precede the stack that refers to them.
  uint64_t code_ids[kMaxPyFrames];
  for (uint8_t i = 0; i < npy; ++i) code_ids[i] = code_id(py[i].code, python::frame_fingerprint(py[i]));
  enc_.begin(wire::Record::kStack);
  enc_.u(it->second);
  enc_.u(n);
  uint64_t prev = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (i == 0) enc_.u(pcs[0]);
    else enc_.s(static_cast<int64_t>(pcs[i] - prev));
    prev = pcs[i];
  }
  enc_.u(flags);
  enc_.u(npy);
  for (uint8_t i = 0; i < npy; ++i) {
    enc_.u(code_ids[i]);
    enc_.u(py[i].instr_offset == python::kBeforeStart ? 0 : static_cast<uint64_t>(py[i].instr_offset) + 1);
    enc_.u(py[i].flags);
  }
  enc_.end();
  return it->second;
}

void Writer::drain_slot(ThreadSlot* s) {
  if (!s->ring.valid()) return;
  s->ring.drain([&](const uint8_t* data, uint32_t len) {
    if (len < sizeof(RawSample)) return;
    RawSample h;
    memcpy(&h, data, sizeof h);
    if (sizeof(RawSample) + h.nframes * sizeof(uint64_t) + h.npy * sizeof(python::RawPyFrame) > len) return;
    const uint64_t* pcs = reinterpret_cast<const uint64_t*>(data + sizeof(RawSample));
    const auto* py = reinterpret_cast<const python::RawPyFrame*>(pcs + h.nframes);
    if (h.flags & wire::kStackPyWalkFailed) ++py_walk_failed_;
    emit_sample(s->tid, stack_id(pcs, h.nframes, h.flags, py, h.npy), h.t_ns, h.weight);
  });
}

void Writer::emit_sample(uint32_t tid, uint64_t id, int64_t t_ns, uint32_t weight) {
  enc_.begin(wire::Record::kSample);
  enc_.u(tid);
  enc_.u(id);
  enc_.s(t_ns - last_sample_ns_);
  enc_.u(weight);
  enc_.end();
  last_sample_ns_ = t_ns;
  if (enc_.out().size() > (256u << 10)) flush_out();
}

void Writer::finish_wall(int64_t now) {
  if (!wall_mode()) return;
  const uint32_t hw = threads_.high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = threads_.slot(i);
    const uint32_t st = s->state.load(std::memory_order_acquire);
    if (st == kSlotActive || st == kSlotRetired) wall_.finish(s, now, *this);
  }
}

void Writer::cycle(bool final) {
  ++cycles_;
  send_modules(false);
  int64_t now = clock_ns();
  double fill = 0;  // the fullest ring found this cycle
  bool slow = final || now - last_slow_check_ns_ >= kSlowNs;
  const bool wall = wall_mode() && g_sampler.sampling.load(std::memory_order_relaxed);
  const bool python = g_sampler.python.load(std::memory_order_relaxed);
  uint32_t hw = threads_.high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = threads_.slot(i);
    uint32_t st = s->state.load(std::memory_order_acquire);
    if (st == kSlotActive) {
      if (!s->announced) announce_thread(s);
      fill = std::max(fill, s->ring.fill());
      drain_slot(s);
      if (s->mem_ring_ready.load(std::memory_order_acquire)) {
        fill = std::max(fill, s->mem_ring.fill());
        drain_mem(s->mem_ring);
      }
      if (wall) wall_.tick(s, now, python, *this);
      if (final) wall_.finish(s, now, *this);
      if (slow) {
        std::string name = thread_comm(s->tid);
        if (!name.empty() && name != s->sent_name) {
          enc_.begin(wire::Record::kThreadName);
          enc_.u(s->tid);
          enc_.str(name);
          enc_.end();
          snprintf(s->sent_name, sizeof s->sent_name, "%s", name.c_str());
        }
      }
    } else if (st == kSlotRetired) {
      if (!s->announced) announce_thread(s);
      drain_slot(s);
      if (s->mem_ring_ready.load(std::memory_order_acquire)) drain_mem(s->mem_ring);
      wall_.finish(s, now, *this);
      if (s->end_name[0] && strcmp(s->end_name, s->sent_name) != 0) {
        enc_.begin(wire::Record::kThreadName);
        enc_.u(s->tid);
        enc_.str(s->end_name);
        enc_.end();
      }
      enc_.begin(wire::Record::kThreadEnd);
      enc_.u(s->tid);
      enc_.u(static_cast<uint64_t>(s->end_ns.load(std::memory_order_relaxed)));
      enc_.end();
      retired_samples_ += s->samples.load(std::memory_order_relaxed);
      retired_dropped_ += s->dropped.load(std::memory_order_relaxed);
      retired_stopped_ += s->unwind_stopped.load(std::memory_order_relaxed);
      retired_leaf_ += s->leaf_only.load(std::memory_order_relaxed);
      retired_ticks_ += s->ticks.load(std::memory_order_relaxed);
      threads_.release(s);
    }
  }
  if (mem::enabled() && mem::g_fallback.valid()) fill = std::max(fill, mem::g_fallback.ring().fill());
  check_memory(now, final);
  drain_gpu(now);
  adapt_cycle(now, fill);
  if (slow) {
    last_slow_check_ns_ = now;
    if (!final) send_counters();
    if (!handler_lost_reported_ && g_sampler.sampling.load(std::memory_order_relaxed) &&
        !sample_handler_installed(cfg_.signo)) {
      handler_lost_reported_ = true;
      message(1, "the program replaced mlprof's handler for the sampling signal; sampling stopped "
                 "(set MLPROF_SIGNAL to a signal number the program does not use)");
    }
  }
  pthread_mutex_lock(&msg_mu_);
  for (auto& [sev, text] : pending_messages_) {
    enc_.begin(wire::Record::kMessage);
    enc_.u(static_cast<uint64_t>(sev));
    enc_.str(text);
    enc_.end();
  }
  pending_messages_.clear();
  pthread_mutex_unlock(&msg_mu_);
  flush_out();
}

// Writer thread, mu_ not held: parsing a large library's tables takes up to tenths of a second,
// and an application thread must not wait for it in fork() (fork_prepare takes mu_), in dlclose
// (sync_cycle) or at exit (finish). The tables are refreshed after the cycle that found the
// modules changed; until then new modules' frames end their stacks (flagged), as before.
void Writer::refresh_tables() {
  pthread_mutex_lock(&mu_);
  const bool due = cfi_refresh_due_ && !ended_;
  cfi_refresh_due_ = false;
  pthread_mutex_unlock(&mu_);
  if (due) cfi_refresh_modules();
}

// CPU mode: kCycleMs while a ring was at least kBusyFill full, in the first second and a second
// after a module change, in exact memory mode and with GPU profiling on; doubling up to
// kIdleCycleMs while every ring stays below kIdleFill. The rings hold 64 KiB (samples) and
// 256 KiB (memory events) a thread: at 1/32 full after 80 ms they would fill in over 2.5 seconds.
void Writer::adapt_cycle(int64_t now, double fill) {
  if (cfi_refresh_due_ || modules_changed_ns_ == 0) modules_changed_ns_ = now;
  const bool busy = fill >= kBusyFill || now - modules_changed_ns_ < kBusyAfterChangeNs ||
                    (mem::enabled() && mem::exact()) || gpu::attached();
  if (busy)
    cycle_ms_ = kCycleMs;
  else if (fill < kIdleFill && cycle_ms_ < kIdleCycleMs)
    cycle_ms_ = std::min(cycle_ms_ * 2, kIdleCycleMs);
}

void Writer::send_counters() {
  uint64_t samples = retired_samples_, dropped = retired_dropped_, stopped = retired_stopped_,
           leaf = retired_leaf_, ticks = retired_ticks_;
  uint32_t hw = threads_.high_water();
  for (uint32_t i = 0; i < hw; ++i) {
    ThreadSlot* s = threads_.slot(i);
    uint32_t st = s->state.load(std::memory_order_acquire);
    if (st != kSlotActive && st != kSlotRetired) continue;
    samples += s->samples.load(std::memory_order_relaxed);
    dropped += s->dropped.load(std::memory_order_relaxed);
    stopped += s->unwind_stopped.load(std::memory_order_relaxed);
    leaf += s->leaf_only.load(std::memory_order_relaxed);
    ticks += s->ticks.load(std::memory_order_relaxed);
  }
  const std::pair<wire::Counter, uint64_t> counters[] = {
      {wire::Counter::kSamples, samples},
      {wire::Counter::kDroppedRingFull, dropped},
      {wire::Counter::kDroppedNoThread,
       g_sampler.dropped_no_thread.load(std::memory_order_relaxed) + threads_.no_slot.load(std::memory_order_relaxed)},
      {wire::Counter::kUnwindStopped, stopped},
      {wire::Counter::kLeafOnly, leaf},
      {wire::Counter::kDroppedTransport, transport_.dropped_bytes()},
      {wire::Counter::kStacks, next_stack_id_ - 1},
      {wire::Counter::kThreads, threads_seen_},
      {wire::Counter::kTicks, ticks},
      {wire::Counter::kTimerFailures, threads_.timer_failures.load(std::memory_order_relaxed)},
      {wire::Counter::kPerfThreads, threads_.perf_threads.load(std::memory_order_relaxed)},
      {wire::Counter::kPosixTimerThreads, threads_.posix_timer_threads.load(std::memory_order_relaxed)},
      {wire::Counter::kShortThreads, threads_.short_threads.load(std::memory_order_relaxed)},
      {wire::Counter::kWriterCycles, cycles_},
      {wire::Counter::kPyWalkFailed, py_walk_failed_},
      {wire::Counter::kPyCodes, next_code_id_ - 1},
      {wire::Counter::kWaitSamples, wall_.wait_samples},  // these two: wall mode only
      {wire::Counter::kWallUnwinds, wall_.unwinds},
      {wire::Counter::kMemSamples, mem_samples_},  // these five: memory profiling only
      {wire::Counter::kMemFrees, mem_frees_},
      {wire::Counter::kMemDropped, mem::g_mem.dropped.load(std::memory_order_relaxed)},
      {wire::Counter::kCopySamples, copy_samples_},
      {wire::Counter::kMemTableFull, mem::g_mem.table_full.load(std::memory_order_relaxed)},
      {wire::Counter::kGpuLaunches, gpu_launches_},  // these four: GPU profiling attached only
      {wire::Counter::kGpuActivities, gpu_activities_},
      {wire::Counter::kGpuDropped, gpu::g_gpu.dropped.load(std::memory_order_relaxed)},
      {wire::Counter::kGpuCuptiDropped, gpu::g_gpu.cupti_dropped.load(std::memory_order_relaxed)},
  };
  const bool wall = wall_mode(), memory = mem::enabled(), gpu_on = gpu::attached();
  auto sent = [&](wire::Counter c) {
    if (c == wire::Counter::kWaitSamples || c == wire::Counter::kWallUnwinds) return wall;
    if (c >= wire::Counter::kMemSamples && c <= wire::Counter::kMemTableFull) return memory;
    if (c >= wire::Counter::kGpuLaunches && c <= wire::Counter::kGpuCuptiDropped) return gpu_on;
    return true;
  };
  size_t n = 0;
  for (const auto& [c, v] : counters) n += sent(c);
  enc_.begin(wire::Record::kCounters);
  enc_.u(n);
  for (const auto& [c, v] : counters) {
    if (!sent(c)) continue;
    enc_.u(static_cast<uint8_t>(c));
    enc_.u(v);
  }
  enc_.end();
}

void Writer::flush_out() {
  auto& out = enc_.out();
  if (out.empty()) return;
  transport_.send(out.data(), out.size());
  out.clear();
  check_transport();
}

void Writer::check_transport() {
  const int fd = transport_.lost_descriptor();
  if (fd < 0 || transport_lost_reported_) return;
  transport_lost_reported_ = true;
  if (cfg_.quiet) return;
  const int saved = errno;
  char line[400];
  const int n = snprintf(line, sizeof line,
                         "mlprof: process %d closed mlprof's %s (descriptor %d: a closerange(), a close-all loop "
                         "or a dup2() over it); its profile ends here, and the rest of its run is not recorded\n",
                         static_cast<int>(getpid()),
                         transport_.is_socket() ? "connection to the collector" : "event file", fd);
  if (n > 0) {
    ssize_t w = write(STDERR_FILENO, line, static_cast<size_t>(n < static_cast<int>(sizeof line) ? n : sizeof line - 1));
    (void)w;
  }
  errno = saved;
}

void Writer::fork_prepare() {
  cfi_fork_prepare();
  pthread_mutex_lock(&mu_);
}

void Writer::sync_cycle() {
  mem::Guard guard;  // on an application thread
  pthread_mutex_lock(&mu_);
  if (!ended_) cycle(false);
  pthread_mutex_unlock(&mu_);
}

// What a new stream must not inherit from the previous one: its stack and code ids, the modules
// and interpreter it announced, and unsent bytes. Caller holds mu_ (or is the only thread).
void Writer::reset_stream_state() {
  stacks_.clear();
  ++stack_gen_;
  next_stack_id_ = 1;
  python::forget_named_codes();
  codes_.clear();
  next_code_id_ = 1;
  freed_code_id_ = 0;
  python_announced_ = false;
  mem_python_sent_ = false;
  gpu_names_.clear();
  gpu_ref_ids_.clear();
  gpu_config_sent_ = false;
  last_mem_ns_ = 0;  // start() sets the new stream's base
  modules_.reset();
  modules_dirty_.store(true);
  enc_.clear();
}

bool Writer::restart(int64_t start_realtime_ns, int64_t start_mono_ns) {
  mem::Guard guard;  // on an application thread
  pthread_mutex_lock(&mu_);
  reset_stream_state();  // the new stream's modules are rescanned, and their tables refreshed
  transport_lost_reported_ = false;  // a new stream: a new connection to lose
  pthread_mutex_unlock(&mu_);
  cfi_cancel_refresh(false);
  return start(start_realtime_ns, start_mono_ns, period_ns_);
}

void Writer::fork_parent() {
  pthread_mutex_unlock(&mu_);
  cfi_fork_done(false);
}

void Writer::fork_child(int64_t start_realtime_ns, int64_t start_mono_ns) {
  // Only this thread exists in the child; the lock is ours (taken in fork_prepare). The message
  // lock may have been held by a thread that does not exist here: start it afresh.
  pthread_mutex_unlock(&mu_);
  cfi_fork_done(true);
  pthread_mutex_init(&msg_mu_, nullptr);
  running_.store(false);
  transport_.abandon();
  reset_stream_state();
  // The child's counters start at zero: its threads are new.
  py_walk_failed_ = 0;
  wall_.wait_samples = wall_.unwinds = wall_.reads = 0;
  retired_samples_ = retired_dropped_ = retired_stopped_ = retired_leaf_ = retired_ticks_ = 0;
  threads_seen_ = 0;
  mem_samples_ = mem_frees_ = copy_samples_ = 0;
  cycles_ = 0;
  // The parent's /proc/self/statm: /proc/self was resolved when it was opened.
  if (statm_fd_ >= 0) fd_close_if(statm_fd_, statm_id_);
  statm_fd_ = -1;
  if (status_fd_ >= 0) fd_close_if(status_fd_, status_id_);
  status_fd_ = -1;
  handler_lost_reported_ = false;
  transport_lost_reported_ = false;
  pending_messages_.clear();
  start(start_realtime_ns, start_mono_ns, period_ns_);
}

// ---- memory profiling -----------------------------------------------------------------------

void Writer::send_mem_config() {
  enc_.begin(wire::Record::kMemConfig);
  enc_.u(mem::g_mem.interval);
  enc_.u(mem::g_mem.copy_interval);
  const uint64_t flags = mem::wire_flags();
  enc_.u(flags);
  enc_.end();
  mem_python_sent_ = (flags & wire::kMemPythonAllocator) != 0;
}

void Writer::send_mem_usage(int64_t now) {
  if (statm_fd_ < 0) statm_fd_ = open_owned("/proc/self/statm", O_RDONLY, &statm_id_);
  // A number the program took over (it closed ours) is forgotten, not closed or read, and the file
  // opened again next time.
  if (statm_fd_ >= 0 && !fd_still(statm_fd_, statm_id_)) statm_fd_ = -1;
  if (statm_fd_ < 0) return;
  char buf[128];
  const ssize_t n = pread(statm_fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return;
  buf[n] = 0;
  // "size resident shared text lib data dt", in pages
  unsigned long long size = 0, resident = 0;
  if (sscanf(buf, "%llu %llu", &size, &resident) != 2) return;
  static const long page = sysconf(_SC_PAGESIZE);
  enc_.begin(wire::Record::kMemUsage);
  enc_.u(static_cast<uint64_t>(now));
  enc_.u(static_cast<uint64_t>(resident) * static_cast<uint64_t>(page > 0 ? page : 4096));
  enc_.u(rss_high_water());
  enc_.end();
  last_usage_ns_ = now;
}

// The kernel's RSS high-water mark (VmHWM of /proc/self/status, bytes; 0 when unknown): a spike
// shorter than the 80 ms between two statm reads is seen there (a 200 MiB block held 20 ms was
// read as 154-204 MiB).
uint64_t Writer::rss_high_water() {
  if (status_fd_ < 0) status_fd_ = open_owned("/proc/self/status", O_RDONLY, &status_id_);
  if (status_fd_ >= 0 && !fd_still(status_fd_, status_id_)) status_fd_ = -1;
  if (status_fd_ < 0) return 0;
  char buf[4096];
  const ssize_t n = pread(status_fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* hwm = strstr(buf, "\nVmHWM:");
  unsigned long long kib = 0;
  if (!hwm || sscanf(hwm + 7, " %llu", &kib) != 1) return 0;
  return static_cast<uint64_t>(kib) * 1024;
}

// Once per cycle: the memory events of threads without a slot, the Python allocator hook (once
// the interpreter runs), and the RSS timeline.
void Writer::check_memory(int64_t now, bool final) {
  if (!mem::enabled()) return;
  if (mem::g_fallback.valid()) drain_mem(mem::g_fallback.ring());
  if (!mem_python_sent_ && g_sampler.python.load(std::memory_order_relaxed) && mem::python_try_hook())
    send_mem_config();  // again, now with kMemPythonAllocator
  else if (mem_python_sent_ && mem::python_check_hook() == mem::HookCheck::kLost)
    message(1, "the Python allocator was replaced more than 8 times (tracemalloc started and stopped, or "
               "another tool); Python objects are no longer profiled in this process (malloc blocks still are)");
  if (!final && now - last_usage_ns_ >= kUsageNs) send_mem_usage(now);
}

void Writer::drain_mem(Ring& ring) {
  ring.drain([&](const uint8_t* data, uint32_t len) {
    mem::RawMemEvent ev;
    if (len < sizeof ev) return;
    memcpy(&ev, data, sizeof ev);
    const int64_t delta = ev.t_ns - last_mem_ns_;
    if (ev.kind == static_cast<uint8_t>(mem::EventKind::kFree)) {
      enc_.begin(wire::Record::kFree);
      enc_.u(ev.alloc_id);
      enc_.s(delta);
      enc_.end();
      ++mem_frees_;
    } else {
      if (sizeof ev + ev.nframes * sizeof(uint64_t) + ev.npy * sizeof(python::RawPyFrame) > len) return;
      const auto* pcs = reinterpret_cast<const uint64_t*>(data + sizeof ev);
      const auto* py = reinterpret_cast<const python::RawPyFrame*>(pcs + ev.nframes);
      const uint64_t id = stack_id(pcs, ev.nframes, ev.flags, py, ev.npy);
      if (ev.kind == static_cast<uint8_t>(mem::EventKind::kAlloc)) {
        enc_.begin(wire::Record::kAlloc);
        enc_.u(ev.tid);
        enc_.u(id);
        enc_.s(delta);
        enc_.u(ev.alloc_id);
        enc_.u(ev.size);
        enc_.u(ev.weight);
        enc_.u(ev.alloc_kind);
        enc_.end();
        ++mem_samples_;
      } else if (ev.kind == static_cast<uint8_t>(mem::EventKind::kCopy)) {
        enc_.begin(wire::Record::kCopy);
        enc_.u(ev.tid);
        enc_.u(id);
        enc_.s(delta);
        enc_.u(ev.weight);
        enc_.u(ev.size);
        enc_.end();
        ++copy_samples_;
      } else {
        return;
      }
    }
    last_mem_ns_ = ev.t_ns;
    if (enc_.out().size() > (256u << 10)) flush_out();
  });
}

}  // namespace mlprof::preload
