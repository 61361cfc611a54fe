// The writer thread: drains every thread's ring, deduplicates stacks, encodes wire records and
// hands them to the transport. It is the only code of the preload that does real work, and it
// runs on its own thread with every signal blocked.
#pragma once
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/wire_format.h"
#include "preload/encoder.h"
#include "preload/modules.h"
#include "preload/owned_fd.h"
#include "preload/python.h"
#include "preload/threads.h"
#include "preload/transport.h"
#include "preload/wall_sampler.h"

namespace mlprof::preload {

struct Config;

class Writer : private WallSink {
 public:
  Writer(const Config& cfg, ThreadRegistry& threads) : cfg_(cfg), threads_(threads) {}

  // Opens the stream (socket or file), sends PROCESS_START and the module map, starts the thread.
  bool start(int64_t start_realtime_ns, int64_t start_mono_ns, int64_t period_ns);
  // Stops the thread, drains everything and ends the stream with PROCESS_END.
  // Safe to call from any application thread (exit, _exit, exec hooks); idempotent.
  void finish(wire::EndReason reason, int status);
  // Queues a message for the collector (and the report). Any thread, not signal context.
  void message(int severity, const char* text);
  // Asks the writer to rescan modules at its next cycle (after dlopen/dlclose).
  void modules_changed() { modules_dirty_.store(true, std::memory_order_release); }

  // fork support: prepare takes the writer's lock so the child never inherits a half-done cycle.
  void fork_prepare();
  void fork_parent();
  // In the child: abandon the parent's stream and thread, open a new stream, start a new thread.
  void fork_child(int64_t start_realtime_ns, int64_t start_mono_ns);

  // Drains rings and rescans modules now, from an application thread (before dlclose, so samples
  // in the closing library reach the collector before its unload record).
  void sync_cycle();
  // After finish(kExec) when the exec failed: open a new stream and go on.
  bool restart(int64_t start_realtime_ns, int64_t start_mono_ns);

  bool running() const { return running_.load(std::memory_order_acquire); }

 private:
  static void* thread_main(void* self);
  void loop();
  void cycle(bool final);          // one drain of everything; caller holds mu_
  void finish_wall(int64_t now);   // wall mode's held-back periods of every thread, sent; caller holds mu_
  void refresh_tables();           // the CFI tables, when a cycle found the modules changed; mu_ not held
  void send_process_start();
  void send_modules(bool force);
  void send_counters();
  void drain_slot(ThreadSlot* s);
  // Memory profiling (preload/mem_*.h).
  void drain_mem(Ring& ring);
  void send_mem_config();
  void send_mem_usage(int64_t now);
  uint64_t rss_high_water();
  void check_memory(int64_t now, bool final);
  // GPU profiling (preload/gpu.h): defined in gpu_writer.cpp.
  void drain_gpu(int64_t now);
  // mu_ held. flush_gpu: gpu::flush, draining the GPU ring as the flush fills it; drain_gpu_ring:
  // the GPU ring into wire records (gpu_writer.cpp).
  void flush_gpu(bool forced);
  void drain_gpu_ring();
  void announce_thread(ThreadSlot* s);
  void flush_out();
  // Says once on stderr that the program took the event stream's descriptor (the stream cannot
  // carry it any more).
  void check_transport();
  void end_stream(wire::EndReason reason, int status);
  void reset_stream_state();
  bool open_transport(int64_t mono_ns);
  uint64_t stack_id(const uint64_t* pcs, uint16_t n, uint8_t flags, const python::RawPyFrame* py, uint8_t npy);
  uint64_t code_id(uint64_t code, uint32_t fingerprint);
  uint64_t freed_code_id();  // the code record that names frames whose code object is gone
  void send_code(uint64_t id, const python::CodeInfo& info);
  void check_python();
  void emit_sample(uint32_t tid, uint64_t stack_id, int64_t t_ns, uint32_t weight);
  bool wall_mode() const;
  int cycle_timeout_ms();
  void adapt_cycle(int64_t now, double fill);
  int cycle_ms_ = 10;                // CPU mode: the current drain interval (adapt_cycle; kCycleMs at start)
  int64_t modules_changed_ns_ = 0;   // the last cycle that found new or removed modules
  uint64_t cycles_ = 0;              // counter writer_cycles
  int wait(int timeout_ms);  // until the next cycle: timeout, a collector command, or wake_writer()
  int poll_command();        // the collector's command byte if one waits, else -1 (takes mu_)
  // WallSink
  uint64_t wall_stack(const uint64_t* pcs, uint16_t n, uint8_t flags, const python::RawPyFrame* py,
                      uint8_t npy) override {
    return stack_id(pcs, n, flags, py, npy);
  }
  void wall_sample(uint32_t tid, uint64_t id, int64_t t_ns, uint32_t weight) override {
    emit_sample(tid, id, t_ns, weight);
  }
  uint64_t stack_generation() const override { return stack_gen_; }

  const Config& cfg_;
  ThreadRegistry& threads_;
  Transport transport_;
  Encoder enc_;
  ModuleMap modules_;
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_t thread_{};
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> modules_dirty_{true};
  // Modules came or went: the CFI tables are rebuilt AFTER the cycle (refresh_tables, mu_
  // released), once the rings were drained (building them for a large new library takes tens of
  // ms, during which the code objects that pending Python samples point at, e.g. an imported
  // module's <module> code, die).
  bool cfi_refresh_due_ = false;
  bool ended_ = false;
  int64_t start_realtime_ns_ = 0, start_mono_ns_ = 0, period_ns_ = 0;
  int64_t last_sample_ns_ = 0;
  int64_t last_slow_check_ns_ = 0;

  // Stacks are identified by a 128-bit hash of (flags, pcs): a collision between two distinct
  // stacks has probability ~n^2/2^129, far below any other source of error.
  struct Key {
    uint64_t a, b;
    bool operator==(const Key& o) const { return a == o.a && b == o.b; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.a); }
  };
  std::unordered_map<Key, uint64_t, KeyHash> stacks_;
  uint64_t next_stack_id_ = 1;
  uint64_t stack_gen_ = 1;  // bumped whenever stacks_ is cleared (cached wall stack ids expire)

  // Wall mode (MLPROF_MODE=wall): the off-CPU sampler and the cycle's schedule.
  WallSampler wall_;
  int64_t next_tick_ns_ = 0;
  // Code objects sent so far, by address, with their identity (code_id() checks it against the
  // fingerprint each sampled frame carries).
  struct CodeEntry {
    uint64_t id, identity;
  };
  std::unordered_map<uint64_t, CodeEntry> codes_;
  uint64_t next_code_id_ = 1;
  uint64_t freed_code_id_ = 0;
  bool python_announced_ = false;
  uint64_t py_walk_failed_ = 0;

  // Memory profiling: the delta chain of ALLOC/FREE/COPY times, MEM_USAGE's schedule and
  // /proc/self/statm (kept open; reopened in a fork child), and what this stream sent.
  int64_t last_mem_ns_ = 0;
  int64_t last_usage_ns_ = 0;
  int statm_fd_ = -1;
  FdId statm_id_;  // what statm_fd_ names (preload/owned_fd.h)
  int status_fd_ = -1;  // /proc/self/status: VmHWM, the RSS peak between two statm reads
  FdId status_id_;
  bool mem_python_sent_ = false;  // MEM_CONFIG with kMemPythonAllocator went out on this stream
  uint64_t mem_samples_ = 0, mem_frees_ = 0, copy_samples_ = 0;

  // GPU profiling: kernel names sent on this stream, GPU_CONFIG sent, the periodic flush.
  std::unordered_map<std::string, uint64_t> gpu_names_;
  std::vector<std::string> gpu_ref_names_;  // the preload's kernel name references (not per stream)
  std::vector<uint64_t> gpu_ref_ids_;       // reference -> this stream's name id (0: not sent yet)
  uint64_t gpu_name_id(uint32_t ref, const uint8_t* name, uint32_t name_len);
  bool gpu_config_sent_ = false;
  bool gpu_attach_due_ = false;  // modules came in while GPU profiling waits for libcuda (writer thread only)
  int64_t gpu_last_flush_ns_ = 0;
  uint64_t gpu_launches_ = 0, gpu_activities_ = 0;

  // Counters of threads that ended (their slots are reused).
  uint64_t retired_samples_ = 0, retired_dropped_ = 0, retired_stopped_ = 0, retired_leaf_ = 0, retired_ticks_ = 0;
  uint64_t threads_seen_ = 0;

  pthread_mutex_t msg_mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::vector<std::pair<int, std::string>> pending_messages_;
  bool handler_lost_reported_ = false;
  bool transport_lost_reported_ = false;
};

}  // namespace mlprof::preload
