// The Chrome trace export. Per thread, samples in time order are turned into a flame chart:
// a sample at t with weight w stands for the w timer periods before t; consecutive samples
// extend the slices of the frames their stacks share (same function, root first) and start new
// slices below that. Names and arguments are JSON-encoded once per function by nlohmann-json
// and events are written as they are produced, so the work is linear in samples + slices.
#include "report/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "report/format.h"
#include "report/gpu_json.h"
#include "report/report.h"

namespace mlprof::report {

using profile::Frame;
using profile::Profile;

namespace {

using nlohmann::json;

// JSON text of a value; invalid UTF-8 from the profiled program becomes U+FFFD instead of throwing.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// ns -> microseconds with up to 3 decimals ("1234", "1234.5", "-0.25").
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = ns == INT64_MIN ? INT64_MAX : -ns;
  }
  fmt::format_to(std::back_inserter(out), "{}", ns / 1000);
  int64_t frac = ns % 1000;
  if (frac == 0) return;
  std::string f = fmt::format(".{:03}", frac);
  while (f.back() == '0') f.pop_back();
  out += f;
}

// A slice name and its arguments, JSON-encoded once per function.
struct SpanKind {
  std::string name;  // a JSON string
  std::string args;  // a JSON object without its closing '}' ("{" when empty)
};

class TraceWriter {
 public:
  TraceWriter(const Profile& p, std::ostream& out) : p_(p), os_(out) {
    base_ns_ = p.run.start_ns;
    if (base_ns_ == 0 && !p.samples.empty()) base_ns_ = p.samples.front().t_ns;
    period_ns_ = p.run.rate_hz > 0 ? 1'000'000'000 / static_cast<int64_t>(p.run.rate_hz) : 10'000'000;
    kinds_.push_back({dump("[unknown]"), "{"});    // kUnknownSpan
    kinds_.push_back({dump("[truncated]"), "{"});  // kTruncatedSpan
    kinds_.push_back({dump("[invalid frame]"), "{"});
  }

  Status write() {
    buf_ = "{\"traceEvents\":[\n";
    metadata();
    samples();
    memory();
    gpu();
    // No "displayTimeUnit": Perfetto (some versions) reads it as the unit of "ts"; ours is always us.
    buf_ += "\n],\"otherData\":";
    buf_ += dump(other_data());
    buf_ += "}\n";
    flush();
    if (!os_) return Status{"cannot write the trace (output stream failed; disk full?)"};
    return Status::Ok();
  }

 private:
  static constexpr uint32_t kUnknownSpan = 0, kTruncatedSpan = 1, kInvalidSpan = 2;

  // Perfetto's tokenizer scans each event's keys up to "ts" with a reader that rejects \uXXXX
  // escapes, so "ts" comes before any program-provided string ("name", "args").
  void begin_event() {
    if (!first_event_) buf_ += ",\n";
    first_event_ = false;
  }
  void flush(bool force = true) {
    if (!force && buf_.size() < (1u << 20)) return;
    os_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }
  uint32_t pid_of_thread(uint32_t thread) const {
    if (thread >= p_.threads.size()) return 0;
    uint32_t proc = p_.threads[thread].process;
    return proc < p_.processes.size() ? p_.processes[proc].pid : 0;
  }

  void metadata() {
    // Images that share a pid (execve) share a process track: its name lists them in order.
    std::map<uint32_t, std::vector<const profile::Process*>> by_pid;
    for (const auto& proc : p_.processes) by_pid[proc.pid].push_back(&proc);
    for (const auto& [pid, procs] : by_pid) {
      std::string name, labels;
      for (const auto* proc : procs) {
        std::string n = detail::process_name(*proc);
        if (n.empty()) continue;
        if (!name.empty()) name += " -> ";
        name += n;
        if (!labels.empty()) labels += " -> ";
        labels += detail::shell_join(proc->argv);
      }
      if (name.empty()) continue;
      begin_event();
      fmt::format_to(std::back_inserter(buf_), R"({{"ph":"M","pid":{},"name":"process_name","args":{}}})", pid,
                     dump(json{{"name", name}}));
      begin_event();
      fmt::format_to(std::back_inserter(buf_), R"({{"ph":"M","pid":{},"name":"process_labels","args":{}}})", pid,
                     dump(json{{"labels", labels}}));
    }
    std::map<std::pair<uint32_t, uint32_t>, std::string> thread_names;
    for (uint32_t i = 0; i < p_.threads.size(); ++i) {
      const auto& t = p_.threads[i];
      std::string& n = thread_names[{pid_of_thread(i), t.tid}];
      if (!t.name.empty()) n = t.name;
    }
    for (const auto& [ids, name] : thread_names) {
      if (name.empty()) continue;
      begin_event();
      fmt::format_to(std::back_inserter(buf_), R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{}}})",
                     ids.first, ids.second, dump(json{{"name", name}}));
    }
  }

  // The slice kind of a frame: one per function (name, file, module), or per address when the
  // function is unknown. Lines do not split slices: a flame chart over time is per function.
  uint32_t frame_kind(uint32_t frame_id) {
    if (frame_id >= p_.frames.size()) return kInvalidSpan;
    if (frame_kind_.empty()) frame_kind_.assign(p_.frames.size(), UINT32_MAX);
    uint32_t& k = frame_kind_[frame_id];
    if (k != UINT32_MAX) return k;
    const Frame& f = p_.frames[frame_id];
    std::string key = fmt::format("{}/{}/{}/{}/{}", static_cast<int>(f.kind), f.function, f.file, f.module,
                                  f.function == 0 ? f.module_offset : 0);
    auto [it, inserted] = kind_of_key_.try_emplace(std::move(key), static_cast<uint32_t>(kinds_.size()));
    if (inserted) {
      const std::string& fn = p_.str(f.function);
      std::string module = p_.str(f.module);
      std::string name = !fn.empty() ? fn
                                     : fmt::format("{}+{:#x}", module.empty() ? "[unknown]" : detail::basename(module),
                                                   f.module_offset);
      json args = json::object();
      if (f.file != 0) args["file"] = p_.str(f.file);
      if (!module.empty()) args["module"] = module;
      if (f.kind == profile::FrameKind::kPython) args["python"] = true;
      if (f.inlined) args["inlined"] = true;
      std::string a = dump(args);
      a.pop_back();  // '}': "samples" is appended per slice
      kinds_.push_back({dump(name), std::move(a)});
    }
    k = it->second;
    return k;
  }

  // Slice kinds of a stack, root first; computed once per stack.
  const std::vector<uint32_t>& stack_kinds(uint32_t stack) {
    if (stack_kinds_.empty()) stack_kinds_.resize(p_.stacks.size() + 1);
    if (stack >= p_.stacks.size()) stack = static_cast<uint32_t>(p_.stacks.size());  // shared "[unknown]"
    auto& ks = stack_kinds_[stack];
    if (!ks.empty()) return ks;
    if (stack == p_.stacks.size()) {
      ks.push_back(kUnknownSpan);
      return ks;
    }
    const profile::Stack& st = p_.stacks[stack];
    if (st.truncated) ks.push_back(kTruncatedSpan);
    if (st.frames.empty()) ks.push_back(kUnknownSpan);
    for (auto it = st.frames.rbegin(); it != st.frames.rend(); ++it) ks.push_back(frame_kind(*it));
    return ks;
  }

  struct Span {
    uint32_t kind;
    int64_t start, end;
    uint64_t first_sample, samples;
  };

  void samples() {
    // Sample indexes grouped by thread (a counting sort keeps each thread's time order).
    size_t nthreads = p_.threads.size();
    std::vector<size_t> offset(nthreads + 2, 0);
    for (const auto& s : p_.samples) ++offset[std::min<size_t>(s.thread, nthreads) + 1];
    for (size_t i = 1; i < offset.size(); ++i) offset[i] += offset[i - 1];
    std::vector<uint32_t> order(p_.samples.size());
    {
      std::vector<size_t> fill(offset.begin(), offset.end() - 1);
      for (uint32_t i = 0; i < p_.samples.size(); ++i)
        order[fill[std::min<size_t>(p_.samples[i].thread, nthreads)]++] = i;
    }
    for (size_t t = 0; t < nthreads; ++t) {
      auto b = order.begin() + static_cast<ptrdiff_t>(offset[t]), e = order.begin() + static_cast<ptrdiff_t>(offset[t + 1]);
      auto by_time = [&](uint32_t x, uint32_t y) { return p_.samples[x].t_ns < p_.samples[y].t_ns; };
      if (!std::is_sorted(b, e, by_time)) std::stable_sort(b, e, by_time);
      thread_slices(static_cast<uint32_t>(t), b, e);
    }
    // Samples of threads the profile does not list have no track to go to; they are left out.
  }

  void thread_slices(uint32_t thread, std::vector<uint32_t>::iterator b, std::vector<uint32_t>::iterator e) {
    if (b == e) return;
    spans_.clear();
    open_.clear();
    int64_t prev_end = 0;
    uint64_t n = 0;
    auto close_from = [&](size_t depth, int64_t at) {
      while (open_.size() > depth) {
        Span& s = spans_[open_.back()];
        s.end = at;
        s.samples = n - s.first_sample;
        open_.pop_back();
      }
    };
    for (auto it = b; it != e; ++it, ++n) {
      const profile::SampleEvent& s = p_.samples[*it];
      int64_t dur = period_ns_ * std::max<int64_t>(1, s.weight);
      int64_t start = s.t_ns - dur, end = s.t_ns;
      const auto& ks = stack_kinds(s.stack);
      size_t common = 0;
      if (n > 0) {
        if (start <= prev_end + period_ns_ / 2) {
          start = prev_end;  // contiguous with the previous sample (or overlapping it)
          while (common < open_.size() && common < ks.size() && spans_[open_[common]].kind == ks[common]) ++common;
        }
        close_from(common, prev_end);
      }
      if (end <= start) end = start + dur;  // equal timestamps: keep slices ordered and non-empty
      for (size_t d = common; d < ks.size(); ++d) {
        open_.push_back(spans_.size());
        spans_.push_back({ks[d], start, 0, n, 0});
      }
      prev_end = end;
    }
    close_from(0, prev_end);

    // Slices in the order they opened: by start time, parents before their children.
    uint32_t pid = pid_of_thread(thread), tid = p_.threads[thread].tid;
    for (const Span& s : spans_) {
      const SpanKind& k = kinds_[s.kind];
      begin_event();
      fmt::format_to(std::back_inserter(buf_), R"({{"ph":"X","cat":"{}","pid":{},"tid":{},"ts":)", category(), pid,
                     tid);
      append_us(buf_, s.start - base_ns_);
      buf_ += ",\"dur\":";
      append_us(buf_, s.end - s.start);
      buf_ += ",\"name\":";
      buf_ += k.name;
      buf_ += ",\"args\":";
      buf_ += k.args;
      if (k.args.size() > 1) buf_ += ',';
      fmt::format_to(std::back_inserter(buf_), "\"samples\":{}}}}}", s.samples);
      flush(false);
    }
  }

  const char* category() const { return p_.run.mode == "wall" ? "wall" : "cpu"; }

  void memory() {
    for (const auto& pm : p_.memory) {
      uint32_t pid = pm.process < p_.processes.size() ? p_.processes[pm.process].pid : 0;
      for (const auto& pt : pm.timeline) {
        if (pt.rss_bytes >= 0) counter(pid, "RSS", pt.t_ns, pt.rss_bytes);
        counter(pid, "Heap", pt.t_ns, pt.heap_bytes);
      }
      flush(false);
    }
  }

  // GPU (docs/gpu.md): one track per CUDA stream in the launching process, a slice per kernel /
  // copy / memset, and a flow from the launching thread at the API call to the GPU work.
  void gpu() {
    uint64_t flow_id = 1;
    for (const auto& g : p_.gpu) {
      const uint32_t pid = g.process < p_.processes.size() ? p_.processes[g.process].pid : 0;
      std::map<std::pair<uint32_t, uint32_t>, uint32_t> tracks;  // (device, stream) -> tid
      for (const auto& o : g.ops) tracks.emplace(std::make_pair(o.device, o.stream), 0);
      uint32_t next = 0x40000000;  // above any real tid (pid_max <= 2^22)
      for (auto& [ids, tid] : tracks) {
        tid = next++;
        begin_event();
        fmt::format_to(std::back_inserter(buf_), R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{}}})", pid,
                       tid, dump({{"name", fmt::format("CUDA stream {} (device {})", ids.second, ids.first)}}));
      }
      for (const auto& o : g.ops) {
        const uint32_t tid = tracks[{o.device, o.stream}];
        std::string name;
        if (o.kind == profile::GpuOpKind::kKernel) name = p_.str(o.name).empty() ? "kernel" : p_.str(o.name);
        else if (o.kind == profile::GpuOpKind::kMemcpy) name = fmt::format("Memcpy {}", gpu_copy_kind_name(o.copy_kind));
        else if (o.kind == profile::GpuOpKind::kMemset) name = "Memset";
        else name = "Synchronization";
        begin_event();
        fmt::format_to(std::back_inserter(buf_), R"({{"ph":"X","cat":"gpu","pid":{},"tid":{},"ts":)", pid, tid);
        append_us(buf_, o.start_ns - base_ns_);
        buf_ += ",\"dur\":";
        append_us(buf_, o.end_ns > o.start_ns ? o.end_ns - o.start_ns : 0);
        fmt::format_to(std::back_inserter(buf_), R"(,"name":{},"args":{{"bytes":{},"correlation":{}}}}})", dump(name),
                       o.bytes, o.correlation);
        if (o.thread != profile::kNone && o.thread < p_.threads.size() && o.launch_ns) {
          begin_event();
          fmt::format_to(std::back_inserter(buf_), R"({{"ph":"s","cat":"gpu-launch","pid":{},"tid":{},"ts":)",
                         pid_of_thread(o.thread), p_.threads[o.thread].tid);
          append_us(buf_, o.launch_ns - base_ns_);
          fmt::format_to(std::back_inserter(buf_), R"(,"id":{},"name":"launch"}})", flow_id);
          begin_event();
          fmt::format_to(std::back_inserter(buf_), R"({{"ph":"f","bp":"e","cat":"gpu-launch","pid":{},"tid":{},"ts":)",
                         pid, tid);
          append_us(buf_, o.start_ns - base_ns_);
          fmt::format_to(std::back_inserter(buf_), R"(,"id":{},"name":"launch"}})", flow_id);
          ++flow_id;
        }
        flush(false);
      }
    }
  }

  void counter(uint32_t pid, const char* name, int64_t t_ns, int64_t bytes) {
    begin_event();
    fmt::format_to(std::back_inserter(buf_), R"({{"ph":"C","pid":{},"name":"{}","ts":)", pid, name);
    append_us(buf_, t_ns - base_ns_);
    fmt::format_to(std::back_inserter(buf_), R"(,"args":{{"bytes":{}}}}})", bytes);
  }

  json other_data() const {
    json o = json::object();
    o["command"] = detail::shell_join(p_.run.command);
    o["mlprof_version"] = p_.run.mlprof_version;
    o["hostname"] = p_.run.hostname;
    o["mode"] = p_.run.mode;
    o["timer"] = p_.run.timer;
    o["rate_hz"] = p_.run.rate_hz;
    o["start_realtime_ns"] = p_.run.start_realtime_ns;
    o["sample_period_us"] = static_cast<double>(period_ns_) / 1000.0;
    return o;
  }

  const Profile& p_;
  std::ostream& os_;
  std::string buf_;
  bool first_event_ = true;
  int64_t base_ns_ = 0, period_ns_ = 0;
  std::vector<SpanKind> kinds_;
  std::unordered_map<std::string, uint32_t> kind_of_key_;
  std::vector<uint32_t> frame_kind_;
  std::vector<std::vector<uint32_t>> stack_kinds_;
  std::vector<Span> spans_;
  std::vector<size_t> open_;
};

}  // namespace

Status write_chrome_trace(const Profile& p, std::ostream& out) { return TraceWriter(p, out).write(); }

std::string chrome_trace(const Profile& p) {
  std::ostringstream out;
  write_chrome_trace(p, out);
  return std::move(out).str();
}

}  // namespace mlprof::report
