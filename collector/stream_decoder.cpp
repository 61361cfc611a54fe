#include "collector/stream_decoder.h"

#include <algorithm>
#include <cstring>

#include "common/varint.h"
#include "fmt/format.h"

namespace mlprof::collector {

using varint::Reader;

bool StreamDecoder::feed(const uint8_t* data, size_t n) {
  if (failed_) return false;
  s_.bytes += n;
  buf_.insert(buf_.end(), data, data + n);
  size_t pos = 0;
  if (!header_ok_) {
    if (buf_.size() < wire::kHeaderSize) return true;
    if (memcmp(buf_.data(), wire::kMagic, 4) != 0) {
      s_.error = "not an mlprof event stream (bad magic)";
      failed_ = true;
      return false;
    }
    if (buf_[4] != wire::kMajor) {
      s_.error = fmt::format("event stream version {}.{} is not supported by this collector (version {}.{}); "
                             "use the mlprof-run and preload of the same release", buf_[4], buf_[5], wire::kMajor, wire::kMinor);
      failed_ = true;
      return false;
    }
    header_ok_ = true;
    minor_ = buf_[5];
    pos = wire::kHeaderSize;
  }
  while (pos < buf_.size()) {
    uint8_t type = buf_[pos];
    uint64_t len = 0;
    size_t n_len = varint::decode(buf_.data() + pos + 1, buf_.data() + buf_.size(), &len);
    if (n_len == 0) {
      if (buf_.size() - pos - 1 >= varint::kMaxBytes) {
        s_.error = "corrupt event stream (bad record length)";
        failed_ = true;
        return false;
      }
      break;  // length not complete yet
    }
    size_t start = pos + 1 + n_len;
    if (len > (64u << 20)) {
      s_.error = "corrupt event stream (record larger than 64 MiB)";
      failed_ = true;
      return false;
    }
    if (buf_.size() - start < len) break;  // payload not complete yet
    ++seq_;
    if (!record(type, buf_.data() + start, static_cast<size_t>(len))) {
      failed_ = true;
      buf_.clear();
      return false;
    }
    pos = start + static_cast<size_t>(len);
  }
  buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(pos));
  return true;
}

void StreamDecoder::finish() {
  if (!failed_ && !header_ok_ && !buf_.empty() && s_.error.empty())
    s_.error = "event stream ended inside its header";
  buf_.clear();
}

uint32_t StreamDecoder::thread_index(uint32_t tid) {
  auto it = live_threads_.find(tid);
  if (it != live_threads_.end()) return it->second;
  // After its THREAD_END: memory events of the thread's last moments (TLS destructors free and
  // allocate after the preload retired its slot) still belong to it.
  auto ended = ended_threads_.find(tid);
  if (ended != ended_threads_.end()) return ended->second;
  // A record from a thread whose start record was not seen (an ALLOC of a thread the preload has
  // no slot for yet): invent one; its THREAD_START, if it comes, completes this entry.
  RawThread t;
  t.tid = tid;
  s_.threads.push_back(t);
  uint32_t idx = static_cast<uint32_t>(s_.threads.size() - 1);
  live_threads_[tid] = idx;
  invented_.insert(idx);
  return idx;
}

bool StreamDecoder::record(uint8_t type, const uint8_t* p, size_t n) {
  Reader r(p, n);
  auto str = [&r]() {
    uint64_t len = r.u();
    const uint8_t* b = r.bytes(static_cast<size_t>(len));
    return b ? std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(len)) : std::string();
  };
  switch (static_cast<wire::Record>(type)) {
    case wire::Record::kProcessStart: {
      s_.pid = static_cast<uint32_t>(r.u());
      s_.ppid = static_cast<uint32_t>(r.u());
      s_.start_realtime_ns = static_cast<int64_t>(r.u());
      s_.start_mono_ns = static_cast<int64_t>(r.u());
      s_.period_ns = static_cast<int64_t>(r.u());
      s_.timer_kind = static_cast<uint8_t>(r.u());
      s_.exe = str();
      uint64_t argc = r.u();
      for (uint64_t i = 0; i < argc && !r.bad; ++i) s_.argv.push_back(str());
      s_.flags = r.u();
      // Wall mode appends its tick; a stream without it weighs wait samples by period_ns.
      if ((s_.flags & wire::kProcessWallMode) && r.left() > 0) s_.wall_period_ns = static_cast<int64_t>(r.u());
      s_.started = true;
      last_sample_ns_ = last_mem_ns_ = s_.start_mono_ns;
      break;
    }
    case wire::Record::kModuleLoad: {
      RawModule m;
      m.id = static_cast<uint32_t>(r.u());
      m.load_bias = r.u();
      m.path = str();
      m.build_id = str();
      uint64_t nr = r.u();
      for (uint64_t i = 0; i < nr && !r.bad; ++i) {
        uint64_t a = r.u(), b = r.u();
        m.ranges.emplace_back(a, b);
      }
      m.loaded_seq = seq_;
      if (!r.bad) s_.modules.push_back(std::move(m));
      break;
    }
    case wire::Record::kModuleUnload: {
      uint32_t id = static_cast<uint32_t>(r.u());
      for (auto& m : s_.modules)
        if (m.id == id && m.unloaded_seq == UINT64_MAX) m.unloaded_seq = seq_;
      break;
    }
    case wire::Record::kThreadStart: {
      RawThread t;
      t.tid = static_cast<uint32_t>(r.u());
      t.start_ns = static_cast<int64_t>(r.u());
      t.name = str();
      if (r.bad) break;
      ended_threads_.erase(t.tid);  // a new thread with a reused tid
      auto live = live_threads_.find(t.tid);
      if (live != live_threads_.end() && invented_.erase(live->second)) {
        s_.threads[live->second] = std::move(t);  // records came first; this is the same thread
        break;
      }
      s_.threads.push_back(std::move(t));
      live_threads_[s_.threads.back().tid] = static_cast<uint32_t>(s_.threads.size() - 1);
      break;
    }
    case wire::Record::kThreadName: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      std::string name = str();
      if (!r.bad) s_.threads[thread_index(tid)].name = std::move(name);
      break;
    }
    case wire::Record::kThreadEnd: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      int64_t t = static_cast<int64_t>(r.u());
      if (!r.bad) {
        const uint32_t idx = thread_index(tid);
        s_.threads[idx].end_ns = t;
        live_threads_.erase(tid);
        invented_.erase(idx);
        ended_threads_[tid] = idx;
      }
      break;
    }
    case wire::Record::kStack: {
      uint64_t id = r.u();
      uint64_t nf = r.u();
      if (nf > 4096) {
        s_.error = "corrupt event stream (stack deeper than 4096 frames)";
        return false;
      }
      RawStack st;
      st.pcs.reserve(static_cast<size_t>(nf));
      uint64_t prev = 0;
      for (uint64_t i = 0; i < nf && !r.bad; ++i) {
        uint64_t pc = i == 0 ? r.u() : prev + static_cast<uint64_t>(r.s());
        st.pcs.push_back(pc);
        prev = pc;
      }
      st.flags = static_cast<uint8_t>(r.u());
      st.seq = seq_;
      if (minor_ >= 1 && r.left() > 0) {  // 1.1: Python frames
        uint64_t npy = r.u();
        if (npy > 4096) {
          s_.error = "corrupt event stream (more than 4096 Python frames)";
          return false;
        }
        for (uint64_t i = 0; i < npy && !r.bad; ++i) {
          RawPyFrame f;
          f.code_id = r.u();
          uint64_t off = r.u();
          f.offset = off == 0 || off > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(off - 1);
          f.flags = static_cast<uint8_t>(r.u());
          st.py.push_back(f);
        }
      }
      if (!r.bad) s_.stacks[id] = std::move(st);
      break;
    }
    case wire::Record::kSample: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      RawSample smp;
      smp.stack = r.u();
      last_sample_ns_ += r.s();
      smp.t_ns = last_sample_ns_;
      smp.weight = static_cast<uint32_t>(r.u());
      if (r.bad) break;
      smp.thread = thread_index(tid);
      s_.samples.push_back(smp);
      break;
    }
    case wire::Record::kCounters: {
      uint64_t nk = r.u();
      for (uint64_t i = 0; i < nk && !r.bad; ++i) {
        uint64_t key = r.u(), value = r.u();
        if (!r.bad) s_.counters[static_cast<wire::Counter>(key)] = value;
      }
      break;
    }
    case wire::Record::kMessage: {
      r.u();  // severity
      std::string text = str();
      if (!r.bad) s_.messages.push_back(std::move(text));
      break;
    }
    case wire::Record::kProcessEnd: {
      s_.end_ns = static_cast<int64_t>(r.u());
      s_.end_reason = static_cast<wire::EndReason>(r.u());
      s_.exit_status = static_cast<int32_t>(r.s());
      s_.ended = !r.bad;
      break;
    }
    case wire::Record::kFlushed:
      ++flushed_;
      break;
    case wire::Record::kPython: {
      s_.python.version_hex = static_cast<uint32_t>(r.u());
      s_.python.supported = r.u() != 0;
      s_.python.description = str();
      s_.python.present = !r.bad;
      break;
    }
    case wire::Record::kPyCode: {
      uint64_t id = r.u();
      RawPyCode c;
      c.filename = str();
      c.qualname = str();
      c.firstlineno = static_cast<uint32_t>(r.u());
      c.format = static_cast<uint8_t>(r.u());
      c.table = str();
      if (!r.bad) s_.py_codes[id] = std::move(c);
      break;
    }
    case wire::Record::kMemConfig: {
      uint64_t interval = r.u(), copy_interval = r.u(), flags = r.u();
      if (!r.bad) s_.memory.config(interval, copy_interval, flags);
      break;
    }
    case wire::Record::kAlloc: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      uint64_t stack = r.u();
      int64_t dt = r.s();
      uint64_t id = r.u(), size = r.u(), weight = r.u();
      r.u();  // kind (wire::AllocKind): not accounted separately yet
      if (r.bad) break;
      last_mem_ns_ = static_cast<int64_t>(static_cast<uint64_t>(last_mem_ns_) + static_cast<uint64_t>(dt));
      s_.memory.alloc(thread_index(tid), stack, last_mem_ns_, id, size, weight);
      break;
    }
    case wire::Record::kFree: {
      uint64_t id = r.u();
      int64_t dt = r.s();
      if (r.bad) break;
      last_mem_ns_ = static_cast<int64_t>(static_cast<uint64_t>(last_mem_ns_) + static_cast<uint64_t>(dt));
      s_.memory.free(id, last_mem_ns_);
      break;
    }
    case wire::Record::kCopy: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      uint64_t stack = r.u();
      int64_t dt = r.s();
      uint64_t weight = r.u();
      r.u();  // size of the sampled call
      if (r.bad) break;
      last_mem_ns_ = static_cast<int64_t>(static_cast<uint64_t>(last_mem_ns_) + static_cast<uint64_t>(dt));
      s_.memory.copy(thread_index(tid), stack, last_mem_ns_, weight);
      break;
    }
    case wire::Record::kMemUsage: {
      int64_t t = static_cast<int64_t>(r.u());
      uint64_t rss = r.u();
      const uint64_t hwm = r.left() ? r.u() : 0;  // 1.4
      if (!r.bad)
        s_.memory.usage(t, static_cast<int64_t>(std::min<uint64_t>(rss, INT64_MAX)),
                        static_cast<int64_t>(std::min<uint64_t>(hwm, INT64_MAX)));
      break;
    }
    case wire::Record::kGpuConfig: {
      uint64_t clock = r.u();
      int64_t offset = r.s();
      uint64_t version = r.u();
      if (!r.bad) s_.gpu.config(static_cast<uint8_t>(clock), offset, static_cast<uint32_t>(version));
      break;
    }
    case wire::Record::kGpuLaunch: {
      uint32_t tid = static_cast<uint32_t>(r.u());
      uint64_t stack = r.u();
      int64_t t = static_cast<int64_t>(r.u());
      uint64_t corr = r.u(), api = r.u(), cbid = r.u();
      if (!r.bad) s_.gpu.launch(thread_index(tid), stack, t, corr, static_cast<uint8_t>(api), static_cast<uint32_t>(cbid));
      break;
    }
    case wire::Record::kGpuCorrelation: {
      uint64_t inner = r.u(), outer = r.u();
      if (!r.bad) s_.gpu.alias(inner, outer);
      break;
    }
    case wire::Record::kGpuName: {
      uint64_t id = r.u();
      std::string name = str();
      if (!r.bad) s_.gpu.name(id, std::move(name));
      break;
    }
    case wire::Record::kGpuActivity: {
      GpuActivityIn a;
      a.kind = static_cast<uint8_t>(r.u());
      a.correlation = r.u();
      a.start = r.u();
      a.end = r.u();
      a.device = static_cast<uint32_t>(r.u());
      a.stream = static_cast<uint32_t>(r.u());
      a.bytes = r.u();
      a.copy_kind = static_cast<uint8_t>(r.u());
      a.name_id = r.u();
      for (uint32_t& v : a.grid) v = static_cast<uint32_t>(r.u());
      for (uint32_t& v : a.block) v = static_cast<uint32_t>(r.u());
      a.address = r.u();
      if (!r.bad) s_.gpu.activity(a);
      break;
    }
    default:
      break;  // a record type from a newer minor version: skip it
  }
  if (r.bad) {
    s_.error = fmt::format("corrupt event stream (record type {} shorter than its fields)", type);
    return false;
  }
  return true;
}

}  // namespace mlprof::collector
