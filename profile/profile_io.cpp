// Profile file writer and reader. The byte layout is specified in docs/profile-format.md; this
// file follows that document section by section.
//
// Reader robustness: every count is checked against the bytes left in its section before anything
// is allocated or looped over, every index is checked against its table (validate_profile), and
// all integer arithmetic on file values is done in unsigned (wrapping) form, so damaged or hostile
// input yields an error message, never a crash or undefined behaviour.
#include "profile/profile_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "common/varint.h"

namespace mlprof::profile {
namespace {

// ------------------------------------------------------------------------------------------------
// Encoding

// A growable output buffer of varints, strings and fixed-width little-endian integers.
struct Buf {
  std::vector<uint8_t> data;
  size_t len = 0;

  uint8_t* room(size_t n) {
    if (len + n > data.size()) data.resize(std::max(data.size() * 2, len + n + 4096));
    return data.data() + len;
  }
  void u(uint64_t v) { len += varint::encode(v, room(varint::kMaxBytes)); }
  void s(int64_t v) { u(varint::zigzag(v)); }
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    memcpy(room(n), p, n);
    len += n;
  }
  void str(std::string_view s) { u(s.size()); raw(s.data(), s.size()); }
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) *room(1) = static_cast<uint8_t>(v >> (8 * i)), ++len;
  }
  // Optional index: 0 = none (kNone), otherwise index + 1.
  void opt(uint32_t i) { u(i == kNone ? 0 : uint64_t{i} + 1); }
  void values(const std::vector<int64_t>& v) {
    u(v.size());
    for (int64_t x : v) s(x);
  }
  void strs(const std::vector<std::string>& v) {
    u(v.size());
    for (const auto& x : v) str(x);
  }
};

// Zigzag delta of two 64-bit values in wrapping arithmetic (never overflows).
inline uint64_t delta(uint64_t value, uint64_t prev) { return varint::zigzag(static_cast<int64_t>(value - prev)); }

void put_run(const RunInfo& r, Buf& b) {
  b.strs(r.command);
  b.str(r.cwd);
  b.str(r.hostname);
  b.str(r.mlprof_version);
  b.s(r.start_realtime_ns);
  b.s(r.start_ns);
  b.s(r.end_ns);
  b.u(r.rate_hz);
  b.str(r.timer);
  b.str(r.mode);
  b.s(r.exit_status);
  b.s(r.collector_cpu_ns);
  b.u(r.extra.size());
  for (const auto& [k, v] : r.extra) b.str(k), b.str(v);
}

void put_metrics(const Profile& p, Buf& b) {
  b.u(p.metrics.size());
  for (const auto& m : p.metrics) b.str(m.name);
  for (const auto& m : p.metrics) b.str(m.unit);
}

void put_frames(const Profile& p, Buf& b) {
  b.u(p.frames.size());
  for (const auto& f : p.frames) b.u(f.function);
  for (const auto& f : p.frames) b.u(f.file);
  for (const auto& f : p.frames) b.u(f.line);
  for (const auto& f : p.frames) b.u(f.module);
  for (const auto& f : p.frames) b.u(f.module_offset);
  for (const auto& f : p.frames) b.u(static_cast<uint8_t>(f.kind));
  for (const auto& f : p.frames) b.u(f.inlined ? 1 : 0);
}

void put_stacks(const Profile& p, Buf& b) {
  b.u(p.stacks.size());
  for (const auto& s : p.stacks) b.u(s.frames.size());
  for (const auto& s : p.stacks) {
    uint64_t prev = 0;  // first frame: delta from 0 == zigzag of the id itself
    for (uint32_t f : s.frames) b.u(delta(f, prev)), prev = f;
  }
  for (const auto& s : p.stacks) b.u(s.truncated ? 1 : 0);
}

void put_processes(const Profile& p, Buf& b) {
  const auto& ps = p.processes;
  b.u(ps.size());
  for (const auto& x : ps) b.u(x.pid);
  for (const auto& x : ps) b.u(x.ppid);
  for (const auto& x : ps) b.opt(x.parent);
  for (const auto& x : ps) b.opt(x.exec_prev);
  for (const auto& x : ps) b.str(x.exe);
  for (const auto& x : ps) b.strs(x.argv);
  for (const auto& x : ps) b.s(x.start_ns);
  for (const auto& x : ps) b.s(x.end_ns);
  for (const auto& x : ps) b.u(static_cast<uint8_t>(x.end_reason));
  for (const auto& x : ps) b.s(x.exit_status);
  for (const auto& x : ps) {
    b.u(x.counters.size());
    for (const auto& [k, v] : x.counters) b.str(k), b.u(v);
  }
  for (const auto& x : ps) b.strs(x.messages);
}

void put_threads(const Profile& p, Buf& b) {
  b.u(p.threads.size());
  for (const auto& t : p.threads) b.u(t.process);
  for (const auto& t : p.threads) b.u(t.tid);
  for (const auto& t : p.threads) b.str(t.name);
  for (const auto& t : p.threads) b.s(t.start_ns);
  for (const auto& t : p.threads) b.s(t.end_ns);
}

void put_stack_values(const Profile& p, Buf& b) {
  b.u(p.stack_values.size());
  for (const auto& v : p.stack_values) b.u(v.thread);
  for (const auto& v : p.stack_values) b.u(v.stack);
  for (const auto& v : p.stack_values) b.values(v.values);
}

// An integer column of n values: varint mode, then for mode 0 (runs) (run length >= 1, value)
// pairs that cover the n rows, for mode 1 (plain) one varint per row. The writer picks the
// smaller encoding: runs for mostly-constant columns, plain for rapidly changing ones.
template <typename Get>
void put_int_column(size_t n, Buf& b, Get get) {
  size_t runs_size = 0, plain_size = 0;
  for (size_t i = 0; i < n; ++i) {
    plain_size += varint::encoded_size(get(i));
    if (i == 0 || get(i) != get(i - 1)) runs_size += 1 + varint::encoded_size(get(i));  // ~1 byte run length
  }
  if (plain_size < runs_size) {
    b.u(1);
    for (size_t i = 0; i < n; ++i) b.u(get(i));
    return;
  }
  b.u(0);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && get(j) == get(i)) ++j;
    b.u(j - i);
    b.u(get(i));
    i = j;
  }
}

// Samples: thread (int column), stack (zigzag delta from the previous sample of the same thread,
// 0 before its first), time (zigzag delta from the previous sample of any thread, 0 before the
// first), weight (int column). Consecutive samples of a thread mostly repeat a stack, and
// samples are stored in time order, so most rows take 4-6 bytes.
void put_samples(const Profile& p, Buf& b) {
  const auto& s = p.samples;
  b.u(s.size());
  put_int_column(s.size(), b, [&](size_t i) { return s[i].thread; });
  std::unordered_map<uint32_t, uint64_t> prev_stack;
  uint64_t* cur = nullptr;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 0 || s[i].thread != s[i - 1].thread) cur = &prev_stack[s[i].thread];
    b.u(delta(s[i].stack, *cur));
    *cur = s[i].stack;
  }
  uint64_t prev_t = 0;
  for (const auto& x : s) b.u(delta(static_cast<uint64_t>(x.t_ns), prev_t)), prev_t = static_cast<uint64_t>(x.t_ns);
  put_int_column(s.size(), b, [&](size_t i) { return s[i].weight; });
}

void put_functions(const Profile& p, Buf& b) {
  b.u(p.functions.size());
  for (const auto& f : p.functions) b.u(f.function);
  for (const auto& f : p.functions) b.u(f.module);
  for (const auto& f : p.functions) b.u(f.file);
  for (const auto& f : p.functions) b.u(f.first_line);
  for (const auto& f : p.functions) b.values(f.self);
  for (const auto& f : p.functions) b.values(f.total);
}

void put_lines(const Profile& p, Buf& b) {
  b.u(p.lines.size());
  for (const auto& l : p.lines) b.u(l.file);
  for (const auto& l : p.lines) b.u(l.line);
  for (const auto& l : p.lines) b.u(l.function);
  for (const auto& l : p.lines) b.values(l.self);
  for (const auto& l : p.lines) b.values(l.total);
}

// Memory (1.1): per process with memory profiling, its figures and its timeline. A timeline is
// varint k, then k time deltas (from the previous point of the same timeline, the first from 0),
// k svarint RSS values, k svarint heap values.
void put_memory(const Profile& p, Buf& b) {
  const auto& m = p.memory;
  b.u(m.size());
  for (const auto& x : m) b.u(x.process);
  for (const auto& x : m) b.u(x.interval_bytes);
  for (const auto& x : m) b.u(x.copy_interval_bytes);
  for (const auto& x : m) b.u(x.python_allocator ? 1 : 0);
  for (const auto& x : m) b.s(x.peak_heap_bytes);
  for (const auto& x : m) b.s(x.peak_heap_t_ns);
  for (const auto& x : m) b.s(x.peak_rss_bytes);
  for (const auto& x : m) b.s(x.peak_rss_t_ns);
  for (const auto& x : m) b.s(x.end_heap_bytes);
  for (const auto& x : m) {
    b.u(x.timeline.size());
    uint64_t prev = 0;
    for (const auto& pt : x.timeline) b.u(delta(static_cast<uint64_t>(pt.t_ns), prev)), prev = static_cast<uint64_t>(pt.t_ns);
    for (const auto& pt : x.timeline) b.s(pt.rss_bytes);
    for (const auto& pt : x.timeline) b.s(pt.heap_bytes);
  }
}

// Leak candidates (1.1), most important first.
void put_leaks(const Profile& p, Buf& b) {
  const auto& l = p.leaks;
  b.u(l.size());
  for (const auto& x : l) b.u(x.process);
  for (const auto& x : l) b.u(x.stack);
  for (const auto& x : l) b.u(static_cast<uint8_t>(x.kind));
  for (const auto& x : l) b.s(x.bytes);
  for (const auto& x : l) b.s(x.count);
  for (const auto& x : l) b.s(x.growth_bytes_per_s);
  for (const auto& x : l) b.u(x.confidence_permille);
}
void put_modules(const Profile& p, Buf& b) {
  b.u(p.modules.size());
  for (const auto& m : p.modules) b.u(m.path);
  for (const auto& m : p.modules) b.str(m.build_id);
}

// Serving (1.2, section 15; written only when present). Scalars, then column-wise tables.
void put_serving(const Profile& p, Buf& b) {
  const Serving& v = p.serving;
  b.str(v.url);
  b.str(v.requests_file);
  b.str(v.content_type);
  b.str(v.load_mode);
  b.u(v.concurrency);
  b.s(v.rps_milli);
  b.u(v.warmup);
  b.s(v.timeout_ns);
  b.str(v.outcome);
  b.str(v.error);
  for (int64_t x : {v.ready_ns, v.load_start_ns, v.load_end_ns, v.window_start_ns, v.window_end_ns}) b.s(x);
  b.u(v.window_requests);
  b.u(v.late_starts);
  b.u(v.total_queries);
  b.u(v.success_queries);
  for (int64_t x : {v.average_latency_ns, v.p50_ns, v.p90_ns, v.p95_ns, v.p99_ns, v.p999_ns, v.measured_qps_milli,
                    v.max_utilized_millicores, v.max_utilized_memory_bytes, v.requested_millicores,
                    v.requested_memory_bytes, v.available_millicores})
    b.s(x);
  b.u(v.thread_env.size());
  for (const auto& [k, x] : v.thread_env) b.str(k), b.str(x);
  b.strs(v.advice);
  b.u(v.requests.size());
  int64_t prev = 0;
  for (const auto& r : v.requests) b.s(r.start_ns - prev), prev = r.start_ns;
  for (const auto& r : v.requests) b.s(r.latency_ns);
  for (const auto& r : v.requests) b.s(r.status);
  b.u(v.resources.size());
  prev = 0;
  for (const auto& r : v.resources) b.s(r.t_ns - prev), prev = r.t_ns;
  for (const auto& r : v.resources) b.s(r.cpu_ns);
  for (const auto& r : v.resources) b.s(r.rss_bytes);
  for (const auto& r : v.resources) b.u(r.processes);
  for (const auto& r : v.resources) b.u(r.threads);
  b.u(v.lines.size());
  for (const auto& l : v.lines) b.u(l.file);
  for (const auto& l : v.lines) b.u(l.line);
  for (const auto& l : v.lines) b.u(l.function);
  for (const auto& l : v.lines) b.s(l.self_us);
  for (const auto& l : v.lines) b.s(l.total_us);
  b.u(v.sites.size());
  for (const auto& x : v.sites) b.u(x.stack);
  for (const auto& x : v.sites) b.s(x.alloc_bytes);
  for (const auto& x : v.sites) b.s(x.alloc_count);
  for (const auto& x : v.sites) b.s(x.retained_bytes);
  b.s(v.window_copy_bytes);  // since 1.3
  for (const auto& x : v.sites) b.s(x.retained_samples);  // since 1.4
  b.s(v.window_cpu_us);                                    // since 1.4
  b.s(v.window_line_cpu_us);
}

// GPU (1.2, section 16; written only when a process had GPU activity, docs/profile-format.md 6.16).
// Per process: scalars, totals (key/value), kernels column-wise, devices (each: utilization and
// memory timelines as time deltas + values, peak, holders), operations column-wise.
void put_gpu(const Profile& p, Buf& b) {
  b.u(p.gpu.size());
  for (const ProcessGpu& g : p.gpu) {
    b.u(g.process);
    b.u(g.cupti_version);
    b.str(g.clock);
    b.u(g.ops_truncated ? 1 : 0);
    b.u(g.totals.size());
    for (const auto& [k, v] : g.totals) b.str(k), b.s(v);
    b.u(g.kernels.size());
    for (const auto& k : g.kernels) b.u(k.name);
    for (const auto& k : g.kernels) b.u(k.demangled);
    for (const auto& k : g.kernels) b.opt(k.stack);
    for (const auto& k : g.kernels) b.u(k.calls);
    for (const auto& k : g.kernels) b.s(k.total_ns);
    for (const auto& k : g.kernels) b.s(k.max_ns);
    for (const auto& k : g.kernels)
      for (int i = 0; i < 3; ++i) b.u(k.grid[i]), b.u(k.block[i]);
    b.u(g.devices.size());
    for (const GpuDevice& d : g.devices) {
      b.u(d.device);
      b.s(d.bucket_ns);
      b.s(d.peak_bytes);
      b.s(d.peak_t_ns);
      for (const auto* tl : {&d.utilization, &d.memory}) {
        b.u(tl->size());
        int64_t prev = 0;
        for (const auto& pt : *tl) b.s(pt.t_ns - prev), prev = pt.t_ns;
        for (const auto& pt : *tl) b.s(pt.value);
      }
      b.u(d.peak_holders.size());
      for (const auto& h : d.peak_holders) b.opt(h.stack), b.s(h.bytes);
    }
    b.u(g.ops.size());
    int64_t prev = 0;
    for (const auto& o : g.ops) b.s(o.start_ns - prev), prev = o.start_ns;
    for (const auto& o : g.ops) b.s(o.end_ns - o.start_ns);
    for (const auto& o : g.ops) b.s(o.launch_ns ? o.start_ns - o.launch_ns : INT64_MIN);
    for (const auto& o : g.ops) b.opt(o.thread);
    for (const auto& o : g.ops) b.u(o.device);
    for (const auto& o : g.ops) b.u(o.stream);
    for (const auto& o : g.ops) b.u(static_cast<uint8_t>(o.kind));
    for (const auto& o : g.ops) b.u(o.copy_kind);
    for (const auto& o : g.ops) b.u(o.name);
    for (const auto& o : g.ops) b.u(o.bytes);
    for (const auto& o : g.ops) b.u(o.correlation);
  }
}

// ------------------------------------------------------------------------------------------------
// Decoding

// Reads one section payload. The first problem is kept in `err`; afterwards every read returns 0
// immediately, so decoders can run to completion and be checked once at the end.
struct In {
  varint::Reader r;
  std::string err;

  In(const uint8_t* p, size_t n) : r(p, n) {}
  bool ok() const { return err.empty() && !r.bad; }
  void fail(std::string m) {
    if (err.empty()) err = std::move(m);
    r.bad = true;
    r.pos = r.end;
  }
  uint64_t u() { return r.u(); }
  int64_t s() { return r.s(); }
  uint32_t u32(const char* field) {
    uint64_t v = r.u();
    if (v > UINT32_MAX) fail(fmt::format("{} {} does not fit in 32 bits", field, v));
    return static_cast<uint32_t>(v);
  }
  int32_t i32(const char* field) {
    int64_t v = r.s();
    if (v < INT32_MIN || v > INT32_MAX) fail(fmt::format("{} {} does not fit in 32 bits", field, v));
    return static_cast<int32_t>(v);
  }
  uint32_t opt(const char* field) {
    uint64_t v = r.u();
    if (v == 0) return kNone;
    if (v - 1 >= kNone) fail(fmt::format("{} {} does not fit in 32 bits", field, v - 1));
    return static_cast<uint32_t>(v - 1);
  }
  // A count of items that each take at least one byte: never more than the bytes left.
  size_t count(const char* what) {
    uint64_t n = r.u();
    if (n > r.left()) {
      fail(fmt::format("it declares {} {} but only {} bytes remain", n, what, r.left()));
      return 0;
    }
    return static_cast<size_t>(n);
  }
  std::string str() {
    uint64_t n = r.u();
    const uint8_t* p = r.bytes(static_cast<size_t>(n));
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }
  std::vector<std::string> strs(const char* what) {
    std::vector<std::string> v(count(what));
    for (auto& x : v) x = str();
    return v;
  }
  std::vector<int64_t> values() {
    std::vector<int64_t> v(count("values"));
    for (auto& x : v) x = s();
    return v;
  }
};

FrameKind to_kind(uint64_t v) { return v <= 3 ? static_cast<FrameKind>(v) : FrameKind::kUnknown; }
EndReason to_end(uint64_t v) { return v <= 4 ? static_cast<EndReason>(v) : EndReason::kTruncated; }

void get_run(In& in, RunInfo& r) {
  r.command = in.strs("command arguments");
  r.cwd = in.str();
  r.hostname = in.str();
  r.mlprof_version = in.str();
  r.start_realtime_ns = in.s();
  r.start_ns = in.s();
  r.end_ns = in.s();
  r.rate_hz = in.u32("rate_hz");
  r.timer = in.str();
  r.mode = in.str();
  r.exit_status = in.i32("exit_status");
  r.collector_cpu_ns = in.s();
  for (size_t i = 0, n = in.count("extra entries"); i < n; ++i) {
    std::string k = in.str();
    r.extra[std::move(k)] = in.str();
  }
}

void get_strings(In& in, Profile& p) { p.strings = in.strs("strings"); }

void get_metrics(In& in, Profile& p) {
  p.metrics.resize(in.count("metrics"));
  for (auto& m : p.metrics) m.name = in.str();
  for (auto& m : p.metrics) m.unit = in.str();
}

void get_frames(In& in, Profile& p) {
  p.frames.resize(in.count("frames"));
  for (auto& f : p.frames) f.function = in.u32("function");
  for (auto& f : p.frames) f.file = in.u32("file");
  for (auto& f : p.frames) f.line = in.u32("line");
  for (auto& f : p.frames) f.module = in.u32("module");
  for (auto& f : p.frames) f.module_offset = in.u();
  for (auto& f : p.frames) f.kind = to_kind(in.u());
  for (auto& f : p.frames) f.inlined = in.u() & 1;
}

void get_stacks(In& in, Profile& p) {
  p.stacks.resize(in.count("stacks"));
  uint64_t total = 0;  // all frame ids follow the depths; each takes at least one byte
  for (auto& s : p.stacks) {
    uint64_t d = in.u();
    total += d;
    if (d > in.r.left() || total > in.r.left()) return in.fail("its stack depths add up to more frames than bytes remain");
    s.frames.resize(static_cast<size_t>(d));
  }
  for (auto& s : p.stacks) {
    uint64_t prev = 0;
    for (auto& f : s.frames) {
      prev += static_cast<uint64_t>(varint::unzigzag(in.u()));
      if (prev > UINT32_MAX) return in.fail(fmt::format("frame id {} does not fit in 32 bits", static_cast<int64_t>(prev)));
      f = static_cast<uint32_t>(prev);
    }
  }
  for (auto& s : p.stacks) s.truncated = in.u() & 1;
}

void get_processes(In& in, Profile& p) {
  auto& ps = p.processes;
  ps.resize(in.count("processes"));
  for (auto& x : ps) x.pid = in.u32("pid");
  for (auto& x : ps) x.ppid = in.u32("ppid");
  for (auto& x : ps) x.parent = in.opt("parent");
  for (auto& x : ps) x.exec_prev = in.opt("exec_prev");
  for (auto& x : ps) x.exe = in.str();
  for (auto& x : ps) x.argv = in.strs("arguments");
  for (auto& x : ps) x.start_ns = in.s();
  for (auto& x : ps) x.end_ns = in.s();
  for (auto& x : ps) x.end_reason = to_end(in.u());
  for (auto& x : ps) x.exit_status = in.i32("exit_status");
  for (auto& x : ps) {
    for (size_t i = 0, n = in.count("counters"); i < n; ++i) {
      std::string k = in.str();
      x.counters[std::move(k)] = in.u();
    }
  }
  for (auto& x : ps) x.messages = in.strs("messages");
}

void get_threads(In& in, Profile& p) {
  p.threads.resize(in.count("threads"));
  for (auto& t : p.threads) t.process = in.u32("process");
  for (auto& t : p.threads) t.tid = in.u32("tid");
  for (auto& t : p.threads) t.name = in.str();
  for (auto& t : p.threads) t.start_ns = in.s();
  for (auto& t : p.threads) t.end_ns = in.s();
}

void get_stack_values(In& in, Profile& p) {
  p.stack_values.resize(in.count("stack values"));
  for (auto& v : p.stack_values) v.thread = in.u32("thread");
  for (auto& v : p.stack_values) v.stack = in.u32("stack");
  for (auto& v : p.stack_values) v.values = in.values();
}

// Reads an int column (see put_int_column) of out.size() values into field of each row.
template <typename Row>
void get_int_column(In& in, std::vector<Row>& out, uint32_t Row::*field, const char* what) {
  const uint64_t mode = in.u();
  if (mode == 1) {
    for (auto& x : out) x.*field = in.u32(what);
    return;
  }
  if (mode != 0) return in.fail(fmt::format("unknown {} column encoding {}", what, mode));
  for (size_t i = 0; i < out.size() && in.ok();) {
    const uint64_t run = in.u();
    const uint32_t v = in.u32(what);
    if (run == 0 || run > out.size() - i)
      return in.fail(fmt::format("{} run of {} samples at sample {} is out of range", what, run, i));
    for (size_t end = i + static_cast<size_t>(run); i < end; ++i) out[i].*field = v;
  }
}

void get_samples(In& in, Profile& p) {
  auto& s = p.samples;
  s.resize(in.count("samples"));
  get_int_column(in, s, &SampleEvent::thread, "thread");
  std::unordered_map<uint32_t, uint64_t> prev_stack;
  uint64_t* cur = nullptr;
  for (size_t i = 0; i < s.size() && in.ok(); ++i) {
    if (i == 0 || s[i].thread != s[i - 1].thread) cur = &prev_stack[s[i].thread];
    *cur += static_cast<uint64_t>(varint::unzigzag(in.u()));
    if (*cur > UINT32_MAX) return in.fail(fmt::format("sample {}: stack id does not fit in 32 bits", i));
    s[i].stack = static_cast<uint32_t>(*cur);
  }
  uint64_t t = 0;
  for (auto& x : s) t += static_cast<uint64_t>(varint::unzigzag(in.u())), x.t_ns = static_cast<int64_t>(t);
  get_int_column(in, s, &SampleEvent::weight, "weight");
}

void get_functions(In& in, Profile& p) {
  p.functions.resize(in.count("functions"));
  for (auto& f : p.functions) f.function = in.u32("function");
  for (auto& f : p.functions) f.module = in.u32("module");
  for (auto& f : p.functions) f.file = in.u32("file");
  for (auto& f : p.functions) f.first_line = in.u32("first_line");
  for (auto& f : p.functions) f.self = in.values();
  for (auto& f : p.functions) f.total = in.values();
}

void get_lines(In& in, Profile& p) {
  p.lines.resize(in.count("lines"));
  for (auto& l : p.lines) l.file = in.u32("file");
  for (auto& l : p.lines) l.line = in.u32("line");
  for (auto& l : p.lines) l.function = in.u32("function");
  for (auto& l : p.lines) l.self = in.values();
  for (auto& l : p.lines) l.total = in.values();
}

void get_warnings(In& in, Profile& p) { p.warnings = in.strs("warnings"); }

void get_memory(In& in, Profile& p) {
  auto& m = p.memory;
  m.resize(in.count("process memory rows"));
  for (auto& x : m) x.process = in.u32("process");
  for (auto& x : m) x.interval_bytes = in.u();
  for (auto& x : m) x.copy_interval_bytes = in.u();
  for (auto& x : m) x.python_allocator = in.u() & 1;
  for (auto& x : m) x.peak_heap_bytes = in.s();
  for (auto& x : m) x.peak_heap_t_ns = in.s();
  for (auto& x : m) x.peak_rss_bytes = in.s();
  for (auto& x : m) x.peak_rss_t_ns = in.s();
  for (auto& x : m) x.end_heap_bytes = in.s();
  for (auto& x : m) {
    x.timeline.resize(in.count("timeline points"));
    uint64_t t = 0;
    for (auto& pt : x.timeline) t += static_cast<uint64_t>(varint::unzigzag(in.u())), pt.t_ns = static_cast<int64_t>(t);
    for (auto& pt : x.timeline) pt.rss_bytes = in.s();
    for (auto& pt : x.timeline) pt.heap_bytes = in.s();
    if (!in.ok()) return;
  }
}

void get_leaks(In& in, Profile& p) {
  auto& l = p.leaks;
  l.resize(in.count("leak candidates"));
  std::vector<uint64_t> kinds(l.size());
  for (auto& x : l) x.process = in.u32("process");
  for (auto& x : l) x.stack = in.u32("stack");
  for (auto& k : kinds) k = in.u();
  for (auto& x : l) x.bytes = in.s();
  for (auto& x : l) x.count = in.s();
  for (auto& x : l) x.growth_bytes_per_s = in.s();
  for (auto& x : l) x.confidence_permille = in.u32("confidence");
  // A kind from a newer minor version: this reader cannot say what the row means, so drops it.
  size_t kept = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (kinds[i] > static_cast<uint8_t>(LeakKind::kGrowth)) continue;
    l[i].kind = static_cast<LeakKind>(kinds[i]);
    l[kept++] = l[i];
  }
  l.resize(kept);
}
void get_modules(In& in, Profile& p) {
  auto& m = p.modules;
  m.resize(in.count("modules"));
  for (auto& x : m) x.path = in.u32("module path");
  for (auto& x : m) x.build_id = in.str();
}

void get_serving(In& in, Profile& p) {
  Serving& v = p.serving;
  v.present = true;
  v.url = in.str();
  v.requests_file = in.str();
  v.content_type = in.str();
  v.load_mode = in.str();
  v.concurrency = in.u32("concurrency");
  v.rps_milli = in.s();
  v.warmup = in.u();
  v.timeout_ns = in.s();
  v.outcome = in.str();
  v.error = in.str();
  for (int64_t* x : {&v.ready_ns, &v.load_start_ns, &v.load_end_ns, &v.window_start_ns, &v.window_end_ns}) *x = in.s();
  v.window_requests = in.u();
  v.late_starts = in.u();
  v.total_queries = in.u();
  v.success_queries = in.u();
  for (int64_t* x : {&v.average_latency_ns, &v.p50_ns, &v.p90_ns, &v.p95_ns, &v.p99_ns, &v.p999_ns,
                     &v.measured_qps_milli, &v.max_utilized_millicores, &v.max_utilized_memory_bytes,
                     &v.requested_millicores, &v.requested_memory_bytes, &v.available_millicores})
    *x = in.s();
  for (size_t i = 0, n = in.count("thread environment entries"); i < n; ++i) {
    std::string k = in.str();
    v.thread_env[std::move(k)] = in.str();
  }
  v.advice = in.strs("advice");
  v.requests.resize(in.count("requests"));
  int64_t t = 0;
  for (auto& r : v.requests) t += in.s(), r.start_ns = t;
  for (auto& r : v.requests) r.latency_ns = in.s();
  for (auto& r : v.requests) r.status = in.i32("status");
  v.resources.resize(in.count("resource points"));
  t = 0;
  for (auto& r : v.resources) t += in.s(), r.t_ns = t;
  for (auto& r : v.resources) r.cpu_ns = in.s();
  for (auto& r : v.resources) r.rss_bytes = in.s();
  for (auto& r : v.resources) r.processes = in.u32("processes");
  for (auto& r : v.resources) r.threads = in.u32("threads");
  v.lines.resize(in.count("serving lines"));
  for (auto& l : v.lines) l.file = in.u32("file");
  for (auto& l : v.lines) l.line = in.u32("line");
  for (auto& l : v.lines) l.function = in.u32("function");
  for (auto& l : v.lines) l.self_us = in.s();
  for (auto& l : v.lines) l.total_us = in.s();
  v.sites.resize(in.count("serving sites"));
  for (auto& x : v.sites) x.stack = in.u32("stack");
  for (auto& x : v.sites) x.alloc_bytes = in.s();
  for (auto& x : v.sites) x.alloc_count = in.s();
  for (auto& x : v.sites) x.retained_bytes = in.s();
  if (in.r.left() > 0) v.window_copy_bytes = in.s();  // since 1.3
  const bool since_1_4 = in.r.left() > 0;
  for (auto& x : v.sites) x.retained_samples = since_1_4 ? in.s() : kRetainedSamplesUnknown;
  if (since_1_4) {
    v.window_cpu_us = in.s();
    v.window_line_cpu_us = in.s();
  }
}

void get_gpu(In& in, Profile& p) {
  p.gpu.resize(in.count("gpu processes"));
  for (ProcessGpu& g : p.gpu) {
    g.process = in.u32("process");
    g.cupti_version = in.u32("cupti version");
    g.clock = in.str();
    g.ops_truncated = in.u() & 1;
    const uint64_t nt = in.count("gpu totals");
    for (uint64_t i = 0; i < nt && in.ok(); ++i) {
      std::string k = in.str();
      g.totals[std::move(k)] = in.s();
    }
    g.kernels.resize(in.count("gpu kernels"));
    for (auto& k : g.kernels) k.name = in.u32("name");
    for (auto& k : g.kernels) k.demangled = in.u32("demangled");
    for (auto& k : g.kernels) k.stack = in.opt("stack");
    for (auto& k : g.kernels) k.calls = in.u();
    for (auto& k : g.kernels) k.total_ns = in.s();
    for (auto& k : g.kernels) k.max_ns = in.s();
    for (auto& k : g.kernels)
      for (int i = 0; i < 3; ++i) k.grid[i] = in.u32("grid"), k.block[i] = in.u32("block");
    g.devices.resize(in.count("gpu devices"));
    for (GpuDevice& d : g.devices) {
      d.device = in.u32("device");
      d.bucket_ns = in.s();
      d.peak_bytes = in.s();
      d.peak_t_ns = in.s();
      for (auto* tl : {&d.utilization, &d.memory}) {
        tl->resize(in.count("gpu timeline points"));
        int64_t t = 0;
        for (auto& pt : *tl) t += in.s(), pt.t_ns = t;
        for (auto& pt : *tl) pt.value = in.s();
      }
      d.peak_holders.resize(in.count("gpu peak holders"));
      for (auto& h : d.peak_holders) h.stack = in.opt("stack"), h.bytes = in.s();
      if (!in.ok()) return;
    }
    g.ops.resize(in.count("gpu operations"));
    int64_t t = 0;
    for (auto& o : g.ops) t += in.s(), o.start_ns = t;
    for (auto& o : g.ops) o.end_ns = o.start_ns + in.s();
    for (auto& o : g.ops) {
      const int64_t lag = in.s();
      o.launch_ns = lag == INT64_MIN ? 0 : o.start_ns - lag;
    }
    for (auto& o : g.ops) o.thread = in.opt("thread");
    for (auto& o : g.ops) o.device = in.u32("device");
    for (auto& o : g.ops) o.stream = in.u32("stream");
    for (auto& o : g.ops) o.kind = static_cast<GpuOpKind>(in.u32("kind") & 0xff);
    for (auto& o : g.ops) o.copy_kind = static_cast<uint8_t>(in.u32("copy kind") & 0xff);
    for (auto& o : g.ops) o.name = in.u32("name");
    for (auto& o : g.ops) o.bytes = in.u();
    for (auto& o : g.ops) o.correlation = in.u();
    if (!in.ok()) return;
  }
}

struct SectionDesc {
  uint64_t tag;
  const char* name;
  void (*put)(const Profile&, Buf&);
  void (*get)(In&, Profile&);
};

// The known sections, in the order the writer emits them.
constexpr SectionDesc kSections[] = {
    {section::kRunInfo, "run info", [](const Profile& p, Buf& b) { put_run(p.run, b); },
     [](In& in, Profile& p) { get_run(in, p.run); }},
    {section::kStrings, "strings", [](const Profile& p, Buf& b) { b.strs(p.strings); }, get_strings},
    {section::kMetrics, "metrics", put_metrics, get_metrics},
    {section::kFrames, "frames", put_frames, get_frames},
    {section::kStacks, "stacks", put_stacks, get_stacks},
    {section::kProcesses, "processes", put_processes, get_processes},
    {section::kThreads, "threads", put_threads, get_threads},
    {section::kStackValues, "stack values", put_stack_values, get_stack_values},
    {section::kSamples, "samples", put_samples, get_samples},
    {section::kFunctions, "functions", put_functions, get_functions},
    {section::kLines, "lines", put_lines, get_lines},
    {section::kWarnings, "warnings", [](const Profile& p, Buf& b) { b.strs(p.warnings); }, get_warnings},
    {section::kMemory, "memory", put_memory, get_memory},
    {section::kLeaks, "leaks", put_leaks, get_leaks},
    {section::kServing, "serving", put_serving, get_serving},
    {section::kGpu, "gpu", put_gpu, get_gpu},
    {section::kModules, "modules", put_modules, get_modules},
};

uint32_t crc_of(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), p, n));
}
uint64_t le_at(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// The first bytes of a file, printable ASCII as is and everything else as \xNN.
std::string describe_start(const uint8_t* data, size_t size) {
  std::string out = "\"";
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    uint8_t c = data[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  return out + (size > 8 ? "...\"" : "\"");
}

std::string not_a_profile(const uint8_t* data, size_t size, const std::string& name) {
  std::string hint;
  size_t ws = 0;
  while (ws < size && ws < 64 && strchr(" \t\r\n", data[ws]) && data[ws]) ++ws;
  if (size >= 4 && memcmp(data, "MLPW", 4) == 0)
    hint = "this is a raw event stream from the mlprof preload; convert it with `mlprof collect`";
  else if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b)
    hint = "it is gzip-compressed; if it is a pprof profile (.pb.gz) open it with pprof, otherwise "
           "decompress it (gunzip) and try again";
  else if (ws < size && (data[ws] == '{' || data[ws] == '['))
    hint = "it looks like JSON (an exported report or trace?); mlprof reads the .mlprof files that "
           "`mlprof-run` writes";
  else if (data[0] == 0x0a)
    hint = "it may be an uncompressed pprof (protobuf) profile; open it with pprof";
  return fmt::format("{} is not an mlprof profile (it starts with {}){}{}", name, describe_start(data, size),
                     hint.empty() ? "" : ": ", hint);
}

std::string truncated(const std::string& name, size_t at, std::string_view of) {
  return fmt::format("{} is truncated at byte {} {}: the profile was not completely written (was the "
                     "copy or the write interrupted?)",
                     name, at, of);
}

}  // namespace

// ------------------------------------------------------------------------------------------------

std::vector<uint8_t> encode_profile(const Profile& p) {
  Buf out;
  out.raw(kFileMagic, sizeof kFileMagic);
  out.le(kFormatMajor, 2);
  out.le(kFormatMinor, 2);
  out.le(0, 8);  // total size, patched below
  Buf payload;
  uint64_t count = 0;
  for (const auto& d : kSections) {
    if (d.tag == section::kServing && !p.serving.present) continue;  // optional: only serving runs have it
    if (d.tag == section::kGpu && p.gpu.empty()) continue;             // optional: only GPU runs have it
    payload.len = 0;
    d.put(p, payload);
    out.u(d.tag);
    out.u(payload.len);
    out.raw(payload.data.data(), payload.len);
    ++count;
  }
  // End section: tag 0, length, varint section count, u32 LE CRC32 of every byte before the tag.
  const size_t end_payload = varint::encoded_size(count) + 4;
  const size_t total = out.len + 1 + varint::encoded_size(end_payload) + end_payload;
  for (int i = 0; i < 8; ++i) out.data[12 + i] = static_cast<uint8_t>(uint64_t{total} >> (8 * i));
  const uint32_t crc = crc_of(out.data.data(), out.len);
  out.u(section::kEnd);
  out.u(end_payload);
  out.u(count);
  out.le(crc, 4);
  out.data.resize(out.len);
  return std::move(out.data);
}

Result<Profile> decode_profile(const uint8_t* data, size_t size, const std::string& name) {
  auto corrupted = [&](const std::string& what) {
    return Error{fmt::format("{} is corrupted: {}", name, what)};
  };
  if (size == 0) return Error{fmt::format("{} is empty (0 bytes): it is not an mlprof profile (was the profile never written?)", name)};
  if (memcmp(data, kFileMagic, std::min(size, sizeof kFileMagic)) != 0) return Error{not_a_profile(data, size, name)};
  const std::string in_header = fmt::format("(inside the {}-byte header)", kFileHeaderSize);
  if (size < 12) return Error{truncated(name, size, in_header)};
  const auto major = static_cast<uint16_t>(le_at(data + 8, 2)), minor = static_cast<uint16_t>(le_at(data + 10, 2));
  if (major > kFormatMajor)
    return Error{fmt::format("{} was written by a newer mlprof (profile format {}.{}); this mlprof reads profile "
                             "format {}.x up to {}.{}. Upgrade mlprof to read it.",
                             name, major, minor, kFormatMajor, kFormatMajor, kFormatMinor)};
  if (major < kFormatMajor)
    return Error{fmt::format("{} uses profile format {}.{}, which this mlprof (format {}.{}) does not read", name,
                             major, minor, kFormatMajor, kFormatMinor)};
  if (size < kFileHeaderSize) return Error{truncated(name, size, in_header)};
  const uint64_t declared = le_at(data + 12, 8);
  if (declared < kFileHeaderSize) return corrupted(fmt::format("its header declares an impossible size of {} bytes", declared));
  if (size < declared) return Error{truncated(name, size, fmt::format("of {}", declared))};
  if (size > declared)
    return corrupted(fmt::format("{} unexpected bytes follow the end of the profile at byte {} (were two files "
                                 "concatenated?)", size - declared, declared));

  // Walk the section framing up to the end section.
  struct Span { uint64_t tag; const uint8_t* p; size_t n; };
  std::vector<Span> spans;
  size_t pos = kFileHeaderSize;
  const uint8_t* trailer = nullptr;
  size_t trailer_at = 0, trailer_len = 0;
  while (pos < size) {
    varint::Reader r(data + pos, size - pos);
    const uint64_t tag = r.u(), len = r.u();
    if (r.bad || len > r.left())
      return corrupted(fmt::format("the section at byte {} runs past the end of the file", pos));
    if (tag == section::kEnd) {
      trailer = r.pos, trailer_at = pos, trailer_len = static_cast<size_t>(len);
      if (r.pos + len != data + size)
        return corrupted(fmt::format("{} bytes follow its end section", size - (r.pos + len - data)));
      break;
    }
    spans.push_back({tag, r.pos, static_cast<size_t>(len)});
    pos = static_cast<size_t>(r.pos + len - data);
  }
  if (!trailer) return Error{truncated(name, size, "(its end section is missing)")};
  In end(trailer, trailer_len);
  const uint64_t count = end.u();
  const uint8_t* crc_bytes = end.r.bytes(4);
  if (!end.ok()) return corrupted("its end section is too short");
  const uint32_t stored = static_cast<uint32_t>(le_at(crc_bytes, 4)), computed = crc_of(data, trailer_at);
  if (stored != computed)
    return corrupted(fmt::format("its checksum does not match (stored {:#010x}, computed {:#010x}); the file "
                                 "was damaged after it was written (disk or transfer error?)", stored, computed));
  if (count != spans.size())
    return corrupted(fmt::format("its end section counts {} sections but the file has {}", count, spans.size()));

  Profile p;
  uint64_t seen = 0;  // bit per known tag
  for (const Span& s : spans) {
    const SectionDesc* d = nullptr;
    for (const auto& k : kSections)
      if (k.tag == s.tag) d = &k;
    if (!d) continue;  // a section from a newer minor version: skip
    if (seen & (uint64_t{1} << d->tag)) return corrupted(fmt::format("the {} section appears twice", d->name));
    seen |= uint64_t{1} << d->tag;
    In in(s.p, s.n);
    d->get(in, p);
    // Bytes left in `in` are fields appended by a newer minor version: ignored.
    if (!in.ok())
      return corrupted(fmt::format("{} section: {}", d->name,
                                   in.err.empty() ? fmt::format("it ends early ({} bytes)", s.n) : in.err));
  }
  if (Status v = validate_profile(p); !v.ok()) return corrupted(v.error);
  p.version_major = major;
  p.version_minor = minor;
  return p;
}

std::string write_file(const std::string& path, const void* data, size_t n) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("{}: {}", path, strerror(errno));
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, bytes + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      close(fd);
      return fmt::format("{}: {}", path, strerror(err));
    }
    off += static_cast<size_t>(w);
  }
  if (close(fd) != 0) return fmt::format("{}: {}", path, strerror(errno));
  return "";
}

Status write_profile(const Profile& p, const std::string& path) {
  if (Status v = validate_profile(p); !v.ok())
    return Status{fmt::format("cannot write profile {}: the profile is inconsistent ({}); this is a bug in mlprof",
                              path, v.error)};
  const std::vector<uint8_t> bytes = encode_profile(p);
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  // No fsync: the rename already makes readers see the old file or the complete new one whatever
  // happens to the writing process; fsync would only add an OS-crash guarantee, at 20-50 ms per
  // profile (measured: most of mlprof-run's fixed cost on short runs).
  if (std::string err = write_file(tmp, bytes.data(), bytes.size()); !err.empty()) {
    unlink(tmp.c_str());
    return Status{fmt::format("cannot write profile {}: writing {}", path, err)};
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status{fmt::format("cannot write profile {}: renaming {} to it: {}", path, tmp, strerror(err))};
  }
  return Status::Ok();
}

Result<Profile> read_profile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{fmt::format("cannot open profile {}: {}", path, strerror(errno))};
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    return Error{fmt::format("cannot read profile {}: it is a directory", path)};
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0);
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Error{fmt::format("cannot read profile {}: {}", path, strerror(err))};
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  close(fd);
  return decode_profile(bytes.data(), bytes.size(), path);
}

}  // namespace mlprof::profile
