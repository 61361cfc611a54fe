// Decodes one preload event stream (docs/wire-format.md) incrementally into a ProcessStream:
// bytes arrive in arbitrary chunks from a socket or a file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector/gpu_tracker.h"
#include "collector/memory_tracker.h"
#include "common/wire_format.h"

namespace mlprof::collector {

struct RawModule {
  uint32_t id = 0;
  uint64_t load_bias = 0;
  std::string path;
  std::string build_id;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // executable [start, end)
  uint64_t loaded_seq = 0;                // record sequence number of the load
  uint64_t unloaded_seq = UINT64_MAX;     // of the unload, if seen
};

struct RawPyFrame {
  uint64_t code_id = 0;
  uint32_t offset = 0;   // byte offset of the instruction; UINT32_MAX: not started (first line)
  uint8_t flags = 0;     // 1 = entry frame of an eval-loop invocation; 2 = in the garbage collector
};

struct RawStack {
  std::vector<uint64_t> pcs;    // leaf first
  uint8_t flags = 0;            // wire::StackFlags
  uint64_t seq = 0;             // record sequence number (to pick the modules loaded then)
  std::vector<RawPyFrame> py;   // innermost first
};

struct RawPyCode {
  std::string filename, qualname;
  uint32_t firstlineno = 0;
  uint8_t format = 0;     // 0 lnotab, 1 linetable 3.10, 2 locations 3.11+
  std::string table;
};

struct PythonInfo {
  bool present = false, supported = false;
  uint32_t version_hex = 0;
  std::string description;
};

struct RawThread {
  uint32_t tid = 0;
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct RawSample {
  uint32_t thread = 0;  // index into ProcessStream::threads
  uint64_t stack = 0;   // stream-local stack id
  int64_t t_ns = 0;
  uint32_t weight = 1;
};

struct ProcessStream {
  bool started = false;  // PROCESS_START seen
  uint32_t pid = 0, ppid = 0;
  int64_t start_realtime_ns = 0, start_mono_ns = 0, period_ns = 0;
  uint8_t timer_kind = 0;
  std::string exe;
  std::vector<std::string> argv;
  uint64_t flags = 0;             // wire::ProcessFlags
  int64_t wall_period_ns = 0;     // wall mode (flags & kProcessWallMode): the wall tick; 0 if not sent
  std::vector<RawModule> modules;
  std::unordered_map<uint64_t, RawStack> stacks;
  PythonInfo python;
  std::unordered_map<uint64_t, RawPyCode> py_codes;
  std::vector<RawThread> threads;
  std::vector<RawSample> samples;
  // Memory profiling (wire 1.2): fed record by record, never stored per event. memory.active()
  // once any memory record arrived.
  MemoryTracker memory;
  // GPU profiling (wire 1.3): joined and aggregated as records arrive. gpu.active() once any GPU
  // record arrived.
  GpuTracker gpu;
  std::map<wire::Counter, uint64_t> counters;
  std::vector<std::string> messages;
  bool ended = false;  // PROCESS_END seen (clean end)
  // Without a PROCESS_END, the connection closed while the process still ran (not exiting): it
  // closed mlprof's descriptor (Server::poll_once looks when the connection closes).
  bool closed_while_running = false;
  wire::EndReason end_reason = wire::EndReason::kExit;
  int64_t end_ns = 0;
  int32_t exit_status = -1;
  std::string error;   // why decoding stopped early, if it did
  uint64_t bytes = 0;
};

class StreamDecoder {
 public:
  // Feeds the next chunk. Returns false once the stream is unusable (error() says why); what was
  // decoded before stays in stream().
  bool feed(const uint8_t* data, size_t n);
  // End of input: a partial trailing record means the stream was cut (process killed).
  void finish();
  ProcessStream& stream() { return s_; }
  const ProcessStream& stream() const { return s_; }
  const std::string& error() const { return s_.error; }
  uint64_t flushed_replies() const { return flushed_; }
  uint64_t samples() const { return s_.samples.size(); }

 private:
  bool record(uint8_t type, const uint8_t* p, size_t n);
  uint32_t thread_index(uint32_t tid);

  ProcessStream s_;
  std::vector<uint8_t> buf_;
  bool header_ok_ = false;
  uint8_t minor_ = 0;  // the stream's minor version: which optional trailing fields exist
  bool failed_ = false;
  uint64_t seq_ = 0;
  int64_t last_sample_ns_ = 0;
  int64_t last_mem_ns_ = 0;  // time of the previous ALLOC/FREE/COPY (their delta chain)
  uint64_t flushed_ = 0;
  std::unordered_map<uint32_t, uint32_t> live_threads_;  // tid -> index of its current thread
  std::unordered_map<uint32_t, uint32_t> ended_threads_;  // tid -> index of its last ended thread
  std::unordered_set<uint32_t> invented_;  // thread indexes created by a record before THREAD_START
};

}  // namespace mlprof::collector
