// The preload -> collector event stream (docs/wire-format.md): the varint codec, and streams built
// with the preload's own Encoder (preload/encoder.h) decoded by collector::StreamDecoder: whole,
// in small chunks, cut at every byte, with unknown records and with fields from a future minor
// version, and the documented errors for foreign, newer or corrupt streams.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "collector/stream_decoder.h"
#include "common/varint.h"
#include "common/wire_format.h"
#include "fmt/format.h"
#include "preload/encoder.h"

namespace mlprof {
namespace {

using collector::ProcessStream;
using collector::StreamDecoder;
using Bytes = std::vector<uint8_t>;

Bytes enc(uint64_t v) {
  uint8_t b[varint::kMaxBytes];
  size_t n = varint::encode(v, b);
  return Bytes(b, b + n);
}

std::string hex(const Bytes& b) {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Varint and zigzag

TEST(WireVarint, EncodesEdgeValues) {
  EXPECT_EQ(enc(0), (Bytes{0x00}));
  EXPECT_EQ(enc(1), (Bytes{0x01}));
  EXPECT_EQ(enc(127), (Bytes{0x7f}));
  EXPECT_EQ(enc(128), (Bytes{0x80, 0x01}));
  EXPECT_EQ(enc(300), (Bytes{0xac, 0x02}));
  EXPECT_EQ(enc(16383), (Bytes{0xff, 0x7f}));
  EXPECT_EQ(enc(16384), (Bytes{0x80, 0x80, 0x01}));
  EXPECT_EQ(enc(uint64_t{1} << 63), (Bytes{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}));
  EXPECT_EQ(enc(UINT64_MAX), (Bytes{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(WireVarint, RoundTripsAndSizes) {
  std::vector<uint64_t> values = {0, 1, 127, 128, 255, 256, 16383, 16384, UINT32_MAX, uint64_t{UINT32_MAX} + 1,
                                  (uint64_t{1} << 56) - 1, uint64_t{1} << 56, (uint64_t{1} << 63) - 1,
                                  uint64_t{1} << 63, UINT64_MAX - 1, UINT64_MAX};
  for (int bit = 0; bit < 64; ++bit) values.push_back(uint64_t{1} << bit);
  for (uint64_t v : values) {
    Bytes b = enc(v);
    EXPECT_EQ(b.size(), varint::encoded_size(v)) << v;
    // 7 payload bits per byte.
    size_t bits = 64 - static_cast<size_t>(v ? __builtin_clzll(v) : 63);
    EXPECT_EQ(b.size(), (bits + 6) / 7) << v;
    uint64_t out = 12345;
    ASSERT_EQ(varint::decode(b.data(), b.data() + b.size(), &out), b.size()) << v;
    EXPECT_EQ(out, v);
    // Bytes after the varint are not consumed.
    b.push_back(0xff);
    ASSERT_EQ(varint::decode(b.data(), b.data() + b.size(), &out), b.size() - 1) << v;
    EXPECT_EQ(out, v);
  }
}

TEST(WireVarint, Zigzag) {
  EXPECT_EQ(varint::zigzag(0), 0u);
  EXPECT_EQ(varint::zigzag(-1), 1u);
  EXPECT_EQ(varint::zigzag(1), 2u);
  EXPECT_EQ(varint::zigzag(-2), 3u);
  EXPECT_EQ(varint::zigzag(2), 4u);
  EXPECT_EQ(varint::zigzag(INT64_MAX), UINT64_MAX - 1);
  EXPECT_EQ(varint::zigzag(INT64_MIN), UINT64_MAX);
  EXPECT_EQ(varint::zigzag(INT64_MIN + 1), UINT64_MAX - 2);
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{63}, int64_t{-64}, int64_t{64}, INT64_MAX, INT64_MIN,
                    INT64_MIN + 1, INT64_MAX - 1, int64_t{-1234567890123}}) {
    EXPECT_EQ(varint::unzigzag(varint::zigzag(v)), v) << v;
  }
  // Small magnitudes of either sign stay one byte.
  EXPECT_EQ(varint::encoded_size(varint::zigzag(-64)), 1u);
  EXPECT_EQ(varint::encoded_size(varint::zigzag(63)), 1u);
  EXPECT_EQ(varint::encoded_size(varint::zigzag(64)), 2u);
  EXPECT_EQ(enc(varint::zigzag(INT64_MIN)).size(), 10u);
}

TEST(WireVarint, DecodeRejectsTruncatedInput) {
  uint64_t v = 777;
  const uint8_t empty[1] = {0};
  EXPECT_EQ(varint::decode(empty, empty, &v), 0u);
  const Bytes cont = {0x80};
  EXPECT_EQ(varint::decode(cont.data(), cont.data() + cont.size(), &v), 0u);
  const Bytes two = {0xff, 0xff};
  EXPECT_EQ(varint::decode(two.data(), two.data() + two.size(), &v), 0u);
  // Every proper prefix of a multi-byte varint is truncated.
  Bytes max = enc(UINT64_MAX);
  for (size_t n = 0; n < max.size(); ++n) EXPECT_EQ(varint::decode(max.data(), max.data() + n, &v), 0u) << n;
  EXPECT_EQ(v, 777u) << "a failed decode must not write the value";
}

TEST(WireVarint, DecodeRejectsOverLongInput) {
  uint64_t v = 777;
  // 10th byte with bits beyond 64.
  Bytes b = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
  EXPECT_EQ(varint::decode(b.data(), b.data() + b.size(), &v), 0u);
  b.back() = 0x7f;
  EXPECT_EQ(varint::decode(b.data(), b.data() + b.size(), &v), 0u);
  // 10th byte with a continuation bit: an 11th byte would be needed.
  Bytes eleven(10, 0x80);
  eleven.push_back(0x00);
  EXPECT_EQ(varint::decode(eleven.data(), eleven.data() + eleven.size(), &v), 0u);
  b.back() = 0x81;
  b.push_back(0x00);
  EXPECT_EQ(varint::decode(b.data(), b.data() + b.size(), &v), 0u);
  EXPECT_EQ(v, 777u);
  // A non-minimal encoding that still fits in 64 bits is accepted (the spec says readers accept it).
  const Bytes padded = {0x80, 0x80, 0x00};
  EXPECT_EQ(varint::decode(padded.data(), padded.data() + padded.size(), &v), 3u);
  EXPECT_EQ(v, 0u);
}

TEST(WireVarint, BoundedWriterAndReader) {
  uint8_t buf[4];
  varint::Writer w(buf, sizeof buf);
  w.u(300);  // 2 bytes
  w.u(1);    // 1 byte
  EXPECT_FALSE(w.overflow);
  w.u(128);  // needs 2, 1 left
  EXPECT_TRUE(w.overflow);
  EXPECT_EQ(w.size(), 3u) << "an overflowing write writes nothing";
  varint::Reader r(buf, w.size());
  EXPECT_EQ(r.u(), 300u);
  EXPECT_EQ(r.u(), 1u);
  EXPECT_FALSE(r.bad);
  EXPECT_EQ(r.u(), 0u);
  EXPECT_TRUE(r.bad);
}

// ---------------------------------------------------------------------------------------------
// A full stream

constexpr uint32_t kPid = 4242, kTid2 = 4243;
constexpr int64_t kStartMono = 5'000'000'000;
constexpr uint64_t kBias = 0x555555554000;

// One record per call of `add`; remembers where each record ends so tests can cut the stream.
struct StreamBuilder {
  preload::Encoder e;
  std::vector<std::pair<wire::Record, size_t>> ends;  // record type, offset just past it
  // Trailing fields a future minor version might append to every record (forward compatibility).
  bool future_fields = false;

  StreamBuilder() { e.header(); }
  template <typename Fn>
  void add(wire::Record type, Fn&& fields) {
    e.begin(type);
    fields(e);
    // 1.1 added the Python frames to the stack record; a newer minor's fields come after them.
    if (future_fields && type == wire::Record::kStack) e.u(0);
    if (future_fields) {
      e.u(UINT64_MAX);
      e.s(-5);
      e.str("a field from version 1.9");
    }
    e.end();
    ends.emplace_back(type, e.out().size());
  }
  const Bytes& bytes() { return e.out(); }
};

struct SampleSpec {
  uint32_t tid;
  uint64_t stack;
  int64_t t_ns;
  uint32_t weight;
};

const std::vector<uint64_t> kStack1 = {kBias + 0x1123, kBias + 0x1400, kBias + 0x1010, 0x7ffff7a3c123};
// Deltas that wrap around 2^64 in both directions.
const std::vector<uint64_t> kStack2 = {UINT64_MAX, 0, uint64_t{1} << 63, 1, 0x10};
const std::vector<SampleSpec> kSamples = {
    {kPid, 1, kStartMono + 1'000'000, 1},
    {kPid, 1, kStartMono + 11'000'000, 3},
    {kTid2, 2, kStartMono + 9'000'000, 1},  // earlier than the previous one: negative delta
    {kTid2, 3, kStartMono + 21'000'000, 70000},
    {kPid, 2, kStartMono + 21'000'000, 2},  // zero delta
};

void add_stack(StreamBuilder& b, uint64_t id, const std::vector<uint64_t>& pcs, uint8_t flags) {
  b.add(wire::Record::kStack, [&](preload::Encoder& e) {
    e.u(id);
    e.u(pcs.size());
    for (size_t i = 0; i < pcs.size(); ++i) {
      if (i == 0) e.u(pcs[0]);
      else e.s(static_cast<int64_t>(pcs[i] - pcs[i - 1]));
    }
    e.u(flags);
  });
}

// The stream every test below starts from: every record type, in the order a preload sends them.
Bytes full_stream(bool future_fields = false, bool unknown_records = false,
                  std::vector<std::pair<wire::Record, size_t>>* ends = nullptr) {
  StreamBuilder b;
  b.future_fields = future_fields;
  auto unknown = [&](uint8_t type, size_t len) {
    if (!unknown_records) return;
    b.e.begin(static_cast<wire::Record>(type));
    for (size_t i = 0; i < len; ++i) b.e.u(0x80 | (i & 0x7f));  // two-byte varints: looks like fields
    b.e.end();
  };
  unknown(200, 3);
  b.add(wire::Record::kProcessStart, [](preload::Encoder& e) {
    e.u(kPid);
    e.u(1);
    e.u(1'700'000'000'123'456'789ull);
    e.u(kStartMono);
    e.u(10'000'000);
    e.u(static_cast<uint8_t>(wire::TimerKind::kThreadCpuTimer));
    e.str("/usr/bin/python3.11");
    e.u(3);
    e.str("python");
    e.str("train.py");
    e.str("");
    e.u(1);
  });
  b.add(wire::Record::kModuleLoad, [](preload::Encoder& e) {
    e.u(1);
    e.u(kBias);
    e.str("/usr/bin/python3.11");
    e.str(std::string_view("\x01\x02\xab\x00\xff", 5));
    e.u(2);
    e.u(kBias + 0x1000);
    e.u(kBias + 0x2000);
    e.u(kBias + 0x9000);
    e.u(kBias + 0x9800);
  });
  unknown(20, 300);  // the next type number a minor version could add (1.2 took 15-19); 300 fields: 2-byte length
  b.add(wire::Record::kThreadStart, [](preload::Encoder& e) {
    e.u(kPid);
    e.u(kStartMono + 100);
    e.str("python");
  });
  b.add(wire::Record::kThreadStart, [](preload::Encoder& e) {
    e.u(kTid2);
    e.u(kStartMono + 200);
    e.str("");
  });
  add_stack(b, 1, kStack1, wire::kStackTruncated | wire::kStackUnwindStop);
  add_stack(b, 2, kStack2, 0);
  add_stack(b, 3, {}, wire::kStackLeafOnly);
  int64_t last = kStartMono;
  for (size_t i = 0; i < kSamples.size(); ++i) {
    const SampleSpec& s = kSamples[i];
    b.add(wire::Record::kSample, [&](preload::Encoder& e) {
      e.u(s.tid);
      e.u(s.stack);
      e.s(s.t_ns - last);
      e.u(s.weight);
    });
    last = s.t_ns;
    if (i == 2) unknown(0, 0);  // type 0, empty payload
  }
  b.add(wire::Record::kCounters, [](preload::Encoder& e) {
    e.u(3);
    e.u(static_cast<uint8_t>(wire::Counter::kSamples));
    e.u(5);
    e.u(static_cast<uint8_t>(wire::Counter::kDroppedRingFull));
    e.u(0);
    e.u(static_cast<uint8_t>(wire::Counter::kTicks));
    e.u(UINT64_MAX);
  });
  b.add(wire::Record::kMessage, [](preload::Encoder& e) {
    e.u(1);
    e.str(std::string_view("ring full \x00\xff", 12));
  });
  b.add(wire::Record::kFlushed, [](preload::Encoder& e) { e.u(0); });
  b.add(wire::Record::kThreadName, [](preload::Encoder& e) {
    e.u(kTid2);
    e.str("dataloader-0");
  });
  b.add(wire::Record::kThreadEnd, [](preload::Encoder& e) {
    e.u(kTid2);
    e.u(kStartMono + 30'000'000);
  });
  b.add(wire::Record::kModuleUnload, [](preload::Encoder& e) {
    e.u(1);
    e.u(kStartMono + 31'000'000);
  });
  unknown(255, 1);
  b.add(wire::Record::kProcessEnd, [](preload::Encoder& e) {
    e.u(kStartMono + 40'000'000);
    e.u(static_cast<uint8_t>(wire::EndReason::kExit));
    e.s(-3);
  });
  if (ends) *ends = b.ends;
  return b.bytes();
}

// Everything a decoded stream holds, as text, so two decodes can be compared in one assertion.
std::string describe(const StreamDecoder& d) {
  const ProcessStream& s = d.stream();
  std::string o = fmt::format("started={} pid={} ppid={} rt={} mono={} period={} timer={} exe={:?} flags={}\n", s.started,
                              s.pid, s.ppid, s.start_realtime_ns, s.start_mono_ns, s.period_ns, s.timer_kind, s.exe,
                              s.flags);
  for (auto& a : s.argv) o += fmt::format("argv {:?}\n", a);
  for (auto& m : s.modules) {
    o += fmt::format("module {} bias={:#x} {:?} id={} load@{} unload@{}", m.id, m.load_bias, m.path,
                     hex(Bytes(m.build_id.begin(), m.build_id.end())), m.loaded_seq, m.unloaded_seq);
    for (auto& [a, b] : m.ranges) o += fmt::format(" [{:#x},{:#x})", a, b);
    o += "\n";
  }
  std::map<uint64_t, const collector::RawStack*> stacks;
  for (auto& [id, st] : s.stacks) stacks[id] = &st;
  for (auto& [id, st] : stacks) {
    o += fmt::format("stack {} flags={} seq={}", id, st->flags, st->seq);
    for (uint64_t pc : st->pcs) o += fmt::format(" {:#x}", pc);
    o += "\n";
  }
  for (auto& t : s.threads) o += fmt::format("thread {} {:?} {}..{}\n", t.tid, t.name, t.start_ns, t.end_ns);
  for (auto& smp : s.samples) o += fmt::format("sample t{} s{} {} w{}\n", smp.thread, smp.stack, smp.t_ns, smp.weight);
  for (auto& [k, v] : s.counters) o += fmt::format("counter {}={}\n", static_cast<int>(k), v);
  for (auto& m : s.messages) o += fmt::format("message {:?}\n", m);
  o += fmt::format("ended={} reason={} end={} status={} error={:?} flushed={}\n", s.ended, static_cast<int>(s.end_reason),
                   s.end_ns, s.exit_status, s.error, d.flushed_replies());
  return o;
}

StreamDecoder decode_chunked(const Bytes& b, size_t chunk) {
  StreamDecoder d;
  for (size_t i = 0; i < b.size(); i += chunk) EXPECT_TRUE(d.feed(b.data() + i, std::min(chunk, b.size() - i))) << i;
  d.finish();
  return d;
}

TEST(WireStream, DecodesExactlyTheFieldsWritten) {
  Bytes b = full_stream();
  StreamDecoder d;
  ASSERT_TRUE(d.feed(b.data(), b.size()));
  d.finish();
  const ProcessStream& s = d.stream();
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.bytes, b.size());

  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.pid, kPid);
  EXPECT_EQ(s.ppid, 1u);
  EXPECT_EQ(s.start_realtime_ns, 1'700'000'000'123'456'789);
  EXPECT_EQ(s.start_mono_ns, kStartMono);
  EXPECT_EQ(s.period_ns, 10'000'000);
  EXPECT_EQ(s.timer_kind, 0);
  EXPECT_EQ(s.exe, "/usr/bin/python3.11");
  EXPECT_EQ(s.argv, (std::vector<std::string>{"python", "train.py", ""}));
  EXPECT_EQ(s.flags, 1u);

  ASSERT_EQ(s.modules.size(), 1u);
  EXPECT_EQ(s.modules[0].id, 1u);
  EXPECT_EQ(s.modules[0].load_bias, kBias);
  EXPECT_EQ(s.modules[0].path, "/usr/bin/python3.11");
  EXPECT_EQ(s.modules[0].build_id, std::string("\x01\x02\xab\x00\xff", 5));
  EXPECT_EQ(s.modules[0].ranges, (std::vector<std::pair<uint64_t, uint64_t>>{{kBias + 0x1000, kBias + 0x2000},
                                                                              {kBias + 0x9000, kBias + 0x9800}}));
  // Record sequence numbers count records from 1, unknown ones included (none here).
  EXPECT_EQ(s.modules[0].loaded_seq, 2u);
  EXPECT_EQ(s.modules[0].unloaded_seq, 18u);

  ASSERT_EQ(s.stacks.size(), 3u);
  EXPECT_EQ(s.stacks.at(1).pcs, kStack1);
  EXPECT_EQ(s.stacks.at(1).flags, wire::kStackTruncated | wire::kStackUnwindStop);
  EXPECT_EQ(s.stacks.at(1).seq, 5u);
  EXPECT_EQ(s.stacks.at(2).pcs, kStack2);
  EXPECT_EQ(s.stacks.at(2).flags, 0);
  EXPECT_TRUE(s.stacks.at(3).pcs.empty());
  EXPECT_EQ(s.stacks.at(3).flags, wire::kStackLeafOnly);

  ASSERT_EQ(s.threads.size(), 2u);
  EXPECT_EQ(s.threads[0].tid, kPid);
  EXPECT_EQ(s.threads[0].name, "python");
  EXPECT_EQ(s.threads[0].start_ns, kStartMono + 100);
  EXPECT_EQ(s.threads[0].end_ns, 0);
  EXPECT_EQ(s.threads[1].tid, kTid2);
  EXPECT_EQ(s.threads[1].name, "dataloader-0");
  EXPECT_EQ(s.threads[1].start_ns, kStartMono + 200);
  EXPECT_EQ(s.threads[1].end_ns, kStartMono + 30'000'000);

  ASSERT_EQ(s.samples.size(), kSamples.size());
  for (size_t i = 0; i < kSamples.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(s.threads[s.samples[i].thread].tid, kSamples[i].tid);
    EXPECT_EQ(s.samples[i].stack, kSamples[i].stack);
    EXPECT_EQ(s.samples[i].t_ns, kSamples[i].t_ns);
    EXPECT_EQ(s.samples[i].weight, kSamples[i].weight);
  }
  EXPECT_EQ(d.samples(), kSamples.size());

  EXPECT_EQ(s.counters, (std::map<wire::Counter, uint64_t>{{wire::Counter::kSamples, 5},
                                                           {wire::Counter::kDroppedRingFull, 0},
                                                           {wire::Counter::kTicks, UINT64_MAX}}));
  EXPECT_EQ(s.messages, std::vector<std::string>{std::string("ring full \x00\xff", 12)});
  EXPECT_EQ(d.flushed_replies(), 1u);

  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.end_reason, wire::EndReason::kExit);
  EXPECT_EQ(s.end_ns, kStartMono + 40'000'000);
  EXPECT_EQ(s.exit_status, -3);
}

TEST(WireStream, EveryChunkingDecodesTheSame) {
  Bytes b = full_stream();
  std::string whole = describe(decode_chunked(b, b.size()));
  for (size_t chunk = 1; chunk <= 7; ++chunk) EXPECT_EQ(describe(decode_chunked(b, chunk)), whole) << "chunk " << chunk;
  // Irregular chunks: every split into two parts.
  for (size_t cut = 0; cut <= b.size(); ++cut) {
    StreamDecoder d;
    ASSERT_TRUE(d.feed(b.data(), cut));
    ASSERT_TRUE(d.feed(b.data() + cut, b.size() - cut));
    d.finish();
    ASSERT_EQ(describe(d), whole) << "split at " << cut;
  }
}

TEST(WireStream, UnknownRecordTypesAreSkipped) {
  Bytes plain = full_stream();
  Bytes with_unknown = full_stream(false, true);
  ASSERT_GT(with_unknown.size(), plain.size() + 600);
  StreamDecoder a = decode_chunked(plain, plain.size());
  StreamDecoder b = decode_chunked(with_unknown, with_unknown.size());
  EXPECT_EQ(b.error(), "");
  EXPECT_TRUE(b.stream().ended);
  EXPECT_EQ(b.stream().samples.size(), kSamples.size());
  // Unknown records still count in the record sequence (it orders modules against stacks), so
  // compare everything else.
  for (auto* d : {&a, &b}) {
    for (auto& m : d->stream().modules) m.loaded_seq = m.unloaded_seq = 0;
    for (auto& [id, st] : d->stream().stacks) st.seq = 0;
  }
  EXPECT_EQ(describe(b), describe(a));
  EXPECT_EQ(describe(decode_chunked(with_unknown, 3)), describe(decode_chunked(full_stream(false, true), 1000)));
}

TEST(WireStream, TrailingFieldsOfANewerMinorVersionAreIgnored) {
  Bytes plain = full_stream();
  Bytes future = full_stream(true);
  ASSERT_GT(future.size(), plain.size() + 20 * 30);
  future[5] = 9;  // minor version 9: a newer minor is still read
  StreamDecoder a = decode_chunked(plain, plain.size());
  StreamDecoder b = decode_chunked(future, future.size());
  EXPECT_EQ(b.error(), "");
  EXPECT_EQ(describe(b), describe(a));
  EXPECT_EQ(describe(decode_chunked(future, 5)), describe(a));
}

TEST(WireStream, CutAtEveryByteKeepsTheCompleteRecords) {
  std::vector<std::pair<wire::Record, size_t>> ends;
  Bytes b = full_stream(false, false, &ends);
  ASSERT_EQ(ends.back().second, b.size());
  for (size_t cut = 0; cut <= b.size(); ++cut) {
    SCOPED_TRACE(fmt::format("cut at {} of {}", cut, b.size()));
    StreamDecoder d;
    ASSERT_TRUE(d.feed(b.data(), cut));
    d.finish();
    const ProcessStream& s = d.stream();
    // Records complete before the cut, by type.
    std::map<wire::Record, size_t> complete;
    size_t boundary = cut < wire::kHeaderSize ? 0 : wire::kHeaderSize;
    for (auto& [type, end] : ends)
      if (end <= cut) {
        ++complete[type];
        boundary = end;
      }
    EXPECT_EQ(s.started, complete[wire::Record::kProcessStart] == 1);
    EXPECT_EQ(s.modules.size(), complete[wire::Record::kModuleLoad]);
    EXPECT_EQ(s.stacks.size(), complete[wire::Record::kStack]);
    EXPECT_EQ(s.samples.size(), complete[wire::Record::kSample]);
    EXPECT_EQ(s.messages.size(), complete[wire::Record::kMessage]);
    EXPECT_EQ(s.counters.size(), complete[wire::Record::kCounters] ? 3u : 0u);
    EXPECT_EQ(s.ended, cut == b.size());
    if (cut > 0 && cut < wire::kHeaderSize)
      EXPECT_EQ(s.error, "event stream ended inside its header");
    else
      EXPECT_EQ(s.error, "");
    // The same as a stream that ended cleanly at the last record boundary before the cut.
    if (cut >= wire::kHeaderSize) {
      StreamDecoder at_boundary;
      ASSERT_TRUE(at_boundary.feed(b.data(), boundary));
      at_boundary.finish();
      at_boundary.stream().bytes = s.bytes;
      EXPECT_EQ(describe(d), describe(at_boundary));
    }
  }
}

TEST(WireStream, CorruptBytesNeverCrash) {
  // Not a format rule but a reader's duty: any bytes decode to some prefix and maybe an error.
  // (Run under MLPROF_SANITIZE=ON this also checks for out-of-bounds reads.)
  const Bytes good = full_stream(true, true);
  std::mt19937 rng(7);
  size_t failed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) b[wire::kHeaderSize + rng() % (b.size() - wire::kHeaderSize)] = static_cast<uint8_t>(rng());
    StreamDecoder d;
    size_t chunk = 1 + rng() % 64;
    bool ok = true;
    for (size_t i = 0; i < b.size() && ok; i += chunk) ok = d.feed(b.data() + i, std::min(chunk, b.size() - i));
    d.finish();
    EXPECT_EQ(ok, d.error().empty()) << "iteration " << iter;
    if (!ok) ++failed;
    EXPECT_LE(d.stream().samples.size(), 64u);
    EXPECT_LE(d.stream().stacks.size(), 64u);
  }
  EXPECT_GT(failed, 0u) << "some corruptions are detected";
}

// ---------------------------------------------------------------------------------------------
// Errors

Bytes header(uint8_t major, uint8_t minor) { return {'M', 'L', 'P', 'W', major, minor, 0, 0}; }

TEST(WireStreamErrors, BadMagic) {
  for (Bytes b : {Bytes{'M', 'L', 'P', 'R', 1, 0, 0, 0}, Bytes{'\x7f', 'E', 'L', 'F', 2, 1, 1, 0, 0, 0}}) {
    StreamDecoder d;
    EXPECT_FALSE(d.feed(b.data(), b.size()));
    EXPECT_EQ(d.error(), "not an mlprof event stream (bad magic)");
    EXPECT_FALSE(d.stream().started);
    Bytes more = full_stream();
    EXPECT_FALSE(d.feed(more.data(), more.size())) << "a failed decoder stays failed";
  }
  // The magic is checked once 8 bytes are there, however they arrive.
  StreamDecoder d;
  Bytes b = {'M', 'L', 'X', 'W', 1, 0, 0, 0};
  for (size_t i = 0; i < 7; ++i) EXPECT_TRUE(d.feed(&b[i], 1));
  EXPECT_FALSE(d.feed(&b[7], 1));
  EXPECT_EQ(d.error(), "not an mlprof event stream (bad magic)");
}

TEST(WireStreamErrors, NewerMajorVersion) {
  Bytes b = header(2, 5);
  Bytes rest = full_stream();
  b.insert(b.end(), rest.begin() + wire::kHeaderSize, rest.end());
  StreamDecoder d;
  EXPECT_FALSE(d.feed(b.data(), b.size()));
  EXPECT_EQ(d.error(),
            "event stream version 2.5 is not supported by this collector (version 1.4); use the mlprof-run and preload "
            "of the same release");
  EXPECT_FALSE(d.stream().started);
  StreamDecoder older;
  Bytes zero = header(0, 9);
  EXPECT_FALSE(older.feed(zero.data(), zero.size()));
  EXPECT_EQ(older.error(),
            "event stream version 0.9 is not supported by this collector (version 1.4); use the mlprof-run and preload "
            "of the same release");
}

TEST(WireStreamErrors, CutInsideTheHeader) {
  Bytes b = header(1, 0);
  StreamDecoder d;
  EXPECT_TRUE(d.feed(b.data(), 5));
  d.finish();
  EXPECT_EQ(d.error(), "event stream ended inside its header");
  StreamDecoder empty;
  empty.finish();
  EXPECT_EQ(empty.error(), "") << "no bytes at all is not an error of the stream";
}

TEST(WireStreamErrors, RecordLengthOver64MiB) {
  Bytes b = header(1, 0);
  b.push_back(static_cast<uint8_t>(wire::Record::kStack));
  Bytes len = enc((64u << 20) + 1);
  b.insert(b.end(), len.begin(), len.end());
  StreamDecoder d;
  EXPECT_FALSE(d.feed(b.data(), b.size())) << "rejected before the payload arrives";
  EXPECT_EQ(d.error(), "corrupt event stream (record larger than 64 MiB)");

  // Exactly 64 MiB is allowed: the decoder waits for the payload.
  Bytes ok = header(1, 0);
  ok.push_back(static_cast<uint8_t>(wire::Record::kStack));
  len = enc(64u << 20);
  ok.insert(ok.end(), len.begin(), len.end());
  StreamDecoder d2;
  EXPECT_TRUE(d2.feed(ok.data(), ok.size()));
  EXPECT_EQ(d2.error(), "");

  Bytes huge = header(1, 0);
  huge.push_back(200);  // unknown types are length-checked too
  len = enc(UINT64_MAX);
  huge.insert(huge.end(), len.begin(), len.end());
  StreamDecoder d3;
  EXPECT_FALSE(d3.feed(huge.data(), huge.size()));
  EXPECT_EQ(d3.error(), "corrupt event stream (record larger than 64 MiB)");
}

TEST(WireStreamErrors, BadRecordLength) {
  Bytes b = header(1, 0);
  b.push_back(static_cast<uint8_t>(wire::Record::kSample));
  for (int i = 0; i < 10; ++i) b.push_back(0xff);
  StreamDecoder d;
  EXPECT_FALSE(d.feed(b.data(), b.size()));
  EXPECT_EQ(d.error(), "corrupt event stream (bad record length)");
}

TEST(WireStreamErrors, RecordShorterThanItsFields) {
  const Bytes start = header(1, 0);
  // A SAMPLE whose payload holds only the tid.
  Bytes bad = start;
  bad.push_back(static_cast<uint8_t>(wire::Record::kSample));
  bad.push_back(1);
  bad.push_back(7);
  StreamDecoder d;
  EXPECT_FALSE(d.feed(bad.data(), bad.size()));
  EXPECT_EQ(d.error(), "corrupt event stream (record type 8 shorter than its fields)");
  EXPECT_TRUE(d.stream().samples.empty());
  // A string whose length runs past the payload.
  Bytes bad_str = start;
  bad_str.push_back(static_cast<uint8_t>(wire::Record::kThreadName));
  bad_str.push_back(3);
  bad_str.insert(bad_str.end(), {7, 9, 'x'});
  StreamDecoder d2;
  EXPECT_FALSE(d2.feed(bad_str.data(), bad_str.size()));
  EXPECT_EQ(d2.error(), "corrupt event stream (record type 5 shorter than its fields)");
}

TEST(WireStreamErrors, StackDeeperThan4096Frames) {
  auto stream_with_depth = [](uint64_t n) {
    preload::Encoder e;
    e.header();
    e.begin(wire::Record::kStack);
    e.u(1);
    e.u(n);
    for (uint64_t i = 0; i < n; ++i) i == 0 ? e.u(0x1000) : e.s(8);
    e.u(0);
    e.end();
    return e.out();
  };
  Bytes ok = stream_with_depth(4096);
  StreamDecoder d;
  EXPECT_TRUE(d.feed(ok.data(), ok.size()));
  ASSERT_EQ(d.stream().stacks.at(1).pcs.size(), 4096u);
  EXPECT_EQ(d.stream().stacks.at(1).pcs.back(), 0x1000u + 8 * 4095);
  Bytes deep = stream_with_depth(4097);
  StreamDecoder d2;
  EXPECT_FALSE(d2.feed(deep.data(), deep.size()));
  EXPECT_EQ(d2.error(), "corrupt event stream (stack deeper than 4096 frames)");
}

TEST(WireStream, LatestCountersWinAndThreadsRestart) {
  preload::Encoder e;
  e.header();
  auto counters = [&](uint64_t samples, uint64_t threads) {
    e.begin(wire::Record::kCounters);
    e.u(2);
    e.u(static_cast<uint8_t>(wire::Counter::kSamples));
    e.u(samples);
    e.u(static_cast<uint8_t>(wire::Counter::kThreads));
    e.u(threads);
    e.end();
  };
  counters(10, 1);
  counters(25, 3);
  // A tid reused after its thread ended is a new thread.
  for (int round = 0; round < 2; ++round) {
    e.begin(wire::Record::kThreadStart);
    e.u(77);
    e.u(100 + round);
    e.str(round ? "second" : "first");
    e.end();
    e.begin(wire::Record::kThreadEnd);
    e.u(77);
    e.u(200 + round);
    e.end();
  }
  // A sample from a thread never announced gets a thread of its own.
  e.begin(wire::Record::kSample);
  e.u(99);
  e.u(1);
  e.s(5);
  e.u(1);
  e.end();
  StreamDecoder d;
  ASSERT_TRUE(d.feed(e.out().data(), e.out().size()));
  d.finish();
  const ProcessStream& s = d.stream();
  EXPECT_EQ(s.counters.at(wire::Counter::kSamples), 25u);
  EXPECT_EQ(s.counters.at(wire::Counter::kThreads), 3u);
  ASSERT_EQ(s.threads.size(), 3u);
  EXPECT_EQ(s.threads[0].name, "first");
  EXPECT_EQ(s.threads[0].end_ns, 200);
  EXPECT_EQ(s.threads[1].name, "second");
  EXPECT_EQ(s.threads[1].start_ns, 101);
  EXPECT_EQ(s.threads[2].tid, 99u);
  ASSERT_EQ(s.samples.size(), 1u);
  EXPECT_EQ(s.samples[0].thread, 2u);
  EXPECT_EQ(s.samples[0].t_ns, 5) << "with no PROCESS_START the sample clock starts at 0";
  EXPECT_FALSE(s.started);
  EXPECT_FALSE(s.ended);
}

// ---------------------------------------------------------------------------------------------
// The worked example of docs/wire-format.md ("Worked example"), byte for byte.

TEST(WireStream, WorkedExampleOfTheSpec) {
  preload::Encoder e;
  e.header();
  e.begin(wire::Record::kProcessStart);
  e.u(1000);        // pid
  e.u(1);           // ppid
  e.u(0);           // start_realtime_ns (0 keeps the example short)
  e.u(2000000000);  // start_mono_ns
  e.u(10000000);    // period_ns: 100 Hz
  e.u(0);           // timer_kind
  e.str("/bin/a");  // exe
  e.u(1);           // argc
  e.str("a");
  e.u(0);           // flags
  e.end();
  e.begin(wire::Record::kModuleLoad);
  e.u(1);                 // module_id
  e.u(0x7f0000000000);    // load_bias
  e.str("/bin/a");
  e.str("\xbe\xef");      // build_id (2 bytes in this example; real ones are 20)
  e.u(1);                 // nranges
  e.u(0x7f0000001000);
  e.u(0x7f0000002000);
  e.end();
  e.begin(wire::Record::kThreadStart);
  e.u(1000);
  e.u(2000000100);
  e.str("a");
  e.end();
  e.begin(wire::Record::kStack);
  e.u(1);               // stack_id
  e.u(2);               // nframes
  e.u(0x7f0000001234);  // leaf pc
  e.s(-0x134);          // return address 0x7f0000001100
  e.u(0);               // flags
  e.u(0);               // npy: no Python frames (since 1.1)
  e.end();
  e.begin(wire::Record::kSample);
  e.u(1000);     // tid
  e.u(1);        // stack_id
  e.s(5000000);  // 5 ms after start_mono_ns
  e.u(1);        // weight
  e.end();
  e.begin(wire::Record::kProcessEnd);
  e.u(2010000000);
  e.u(0);  // kExit
  e.s(0);  // exit status 0
  e.end();
  const std::string expected =
      "4d 4c 50 57 01 04 00 00 "
      "01 19 e8 07 01 00 80 a8 d6 b9 07 80 ad e2 04 00 06 2f 62 69 6e 2f 61 01 01 61 00 "
      "02 21 01 80 80 80 80 80 e0 1f 06 2f 62 69 6e 2f 61 02 be ef 01 80 a0 80 80 80 e0 1f 80 c0 80 80 80 e0 1f "
      "04 09 e8 07 e4 a8 d6 b9 07 01 61 "
      "07 0d 01 02 b4 a4 80 80 80 e0 1f e7 04 00 00 "
      "08 08 e8 07 01 80 ad e2 04 01 "
      "0b 07 80 d5 b8 be 07 00 00";
  EXPECT_EQ(hex(e.out()), expected);
  EXPECT_EQ(e.out().size(), 115u);

  StreamDecoder d;
  ASSERT_TRUE(d.feed(e.out().data(), e.out().size()));
  d.finish();
  const ProcessStream& s = d.stream();
  EXPECT_EQ(s.pid, 1000u);
  EXPECT_EQ(s.modules.at(0).ranges.at(0).second, 0x7f0000002000u);
  EXPECT_EQ(s.stacks.at(1).pcs, (std::vector<uint64_t>{0x7f0000001234, 0x7f0000001100}));
  ASSERT_EQ(s.samples.size(), 1u);
  EXPECT_EQ(s.samples[0].t_ns, 2005000000);
  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.exit_status, 0);
}

}  // namespace
}  // namespace mlprof
