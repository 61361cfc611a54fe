// Builds synthetic wire streams with memory records (docs/wire-format.md, records 15-19) for the
// memory unit tests, with the preload's own Encoder. Stacks are Python-only (no native pcs), so
// they symbolize without modules to a known function, file and line (from a PY_CODE record).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "collector/profile_builder.h"
#include "collector/stream_decoder.h"
#include "common/wire_format.h"
#include "preload/encoder.h"

namespace mlprof::testing {

class MemStream {
 public:
  static constexpr int64_t kStart = 1'000'000'000;  // CLOCK_MONOTONIC of the process start

  explicit MemStream(uint32_t pid = 100, uint64_t interval = 1, uint64_t flags = 0, bool send_config = true)
      : pid_(pid) {
    e_.header();
    e_.begin(wire::Record::kProcessStart);
    for (uint64_t v : {uint64_t{pid}, uint64_t{1}, uint64_t{1000}, uint64_t(kStart), uint64_t{10'000'000}, uint64_t{0}})
      e_.u(v);
    e_.str("/bin/fake");
    e_.u(1);
    e_.str("fake");
    e_.u(0);
    e_.end();
    thread(pid, "main");
    if (send_config) config(interval, 1 << 20, flags);
    last_ = kStart;
  }
  void config(uint64_t interval, uint64_t copy_interval, uint64_t flags) {
    e_.begin(wire::Record::kMemConfig);
    e_.u(interval);
    e_.u(copy_interval);
    e_.u(flags);
    e_.end();
  }
  void thread(uint32_t tid, const std::string& name) {
    e_.begin(wire::Record::kThreadStart);
    e_.u(tid);
    e_.u(static_cast<uint64_t>(kStart));
    e_.str(name);
    e_.end();
  }
  void thread_end(uint32_t tid, int64_t t) {
    e_.begin(wire::Record::kThreadEnd);
    e_.u(tid);
    e_.u(static_cast<uint64_t>(t));
    e_.end();
  }
  // A stack whose only frame is Python function `fn` in `file` at `line` (code id = stack id).
  void stack(uint64_t id, const std::string& fn, const std::string& file, uint32_t line) {
    e_.begin(wire::Record::kPyCode);
    e_.u(id);
    e_.str(file);
    e_.str(fn);
    e_.u(line);
    e_.u(2);
    e_.str("");
    e_.end();
    e_.begin(wire::Record::kStack);
    e_.u(id);
    e_.u(0);  // no native frames
    e_.u(wire::kStackHasPython);
    e_.u(1);
    e_.u(id);
    e_.u(0);  // not started: the first line
    e_.u(1);
    e_.end();
  }
  void alloc(uint64_t stack, int64_t t, uint64_t id, uint64_t size, uint64_t weight, uint32_t tid = 0) {
    e_.begin(wire::Record::kAlloc);
    e_.u(tid ? tid : pid_);
    e_.u(stack);
    e_.s(t - last_);
    e_.u(id);
    e_.u(size);
    e_.u(weight);
    e_.u(0);
    e_.end();
    last_ = t;
  }
  void free(int64_t t, uint64_t id) {
    e_.begin(wire::Record::kFree);
    e_.u(id);
    e_.s(t - last_);
    e_.end();
    last_ = t;
  }
  void copy(uint64_t stack, int64_t t, uint64_t weight, uint64_t size, uint32_t tid = 0) {
    e_.begin(wire::Record::kCopy);
    e_.u(tid ? tid : pid_);
    e_.u(stack);
    e_.s(t - last_);
    e_.u(weight);
    e_.u(size);
    e_.end();
    last_ = t;
  }
  // hwm < 0: a 1.3 record, without the high-water mark.
  void usage(int64_t t, uint64_t rss, int64_t hwm = -1) {
    e_.begin(wire::Record::kMemUsage);
    e_.u(static_cast<uint64_t>(t));
    e_.u(rss);
    if (hwm >= 0) e_.u(static_cast<uint64_t>(hwm));
    e_.end();
  }
  void counters(std::vector<std::pair<wire::Counter, uint64_t>> kv) {
    e_.begin(wire::Record::kCounters);
    e_.u(kv.size());
    for (auto& [k, v] : kv) e_.u(static_cast<uint64_t>(k)), e_.u(v);
    e_.end();
  }
  void end(int64_t t, wire::EndReason reason = wire::EndReason::kExit) {
    e_.begin(wire::Record::kProcessEnd);
    e_.u(static_cast<uint64_t>(t));
    e_.u(static_cast<uint8_t>(reason));
    e_.s(0);
    e_.end();
  }
  const std::vector<uint8_t>& bytes() { return e_.out(); }

  collector::ProcessStream decode() {
    collector::StreamDecoder d;
    d.feed(bytes().data(), bytes().size());
    d.finish();
    return std::move(d.stream());
  }

 private:
  preload::Encoder e_;
  uint32_t pid_;
  int64_t last_ = kStart;
};

inline profile::Profile build(std::vector<MemStream*> streams, const std::string& mode = "cpu") {
  std::vector<collector::ProcessStream> decoded;
  for (auto* s : streams) decoded.push_back(s->decode());
  profile::RunInfo run;
  run.mode = mode;
  return collector::build_profile(decoded, run);
}

}  // namespace mlprof::testing
