// The profile file format: round trips, files on disk, truncation, foreign inputs, corruption,
// forward compatibility (newer minor), newer major, out-of-range indexes and hostile counts.
// The framing helpers below re-implement the section framing from docs/profile-format.md
// independently of profile_io.cpp, so they also check that the writer follows the document.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "common/varint.h"
#include "profile/profile_io.h"
#include "profile/string_table.h"

using namespace mlprof::profile;
using mlprof::Status;
namespace fs = std::filesystem;

namespace {

Profile rich_profile() {
  Profile p;
  p.run.command = {"python3", "train.py", "--lr=0.1", ""};
  p.run.cwd = "/home/ünïcødé/☃ project";
  p.run.hostname = "host-日本語";
  p.run.mlprof_version = "0.1.0";
  p.run.start_realtime_ns = 1700000000123456789;
  p.run.start_ns = -5;
  p.run.end_ns = INT64_MAX;
  p.run.rate_hz = 997;
  p.run.timer = "thread-cpu-timer";
  p.run.mode = "cpu";
  p.run.exit_status = -1;
  p.run.collector_cpu_ns = INT64_MIN;
  p.run.extra = {{"key", "value"}, {"emoji 🎉", std::string("nul\0inside", 10)}, {"", ""}};
  {
    StringTable st(p.strings);
    for (const char* s : {"main", "/usr/bin/python3", "a.cc", "ƒünction<τ>", "libc.so.6", "b.h"}) st.intern(s);
  }
  p.metrics = {{"cpu", "us"}, {"alloc-bytes", "bytes"}};
  p.frames = {
      {1, 3, 10, 2, 0x401000, FrameKind::kNative, false},
      {4, 6, UINT32_MAX, 5, UINT64_MAX, FrameKind::kPython, true},
      {0, 0, 0, 0, 0, FrameKind::kUnknown, false},
      {4, 3, 7, 2, 12345, FrameKind::kKernel, false},
  };
  p.stacks = {{{0}, false}, {{1, 0, 3, 3, 2}, true}, {{}, true}, {{3, 0}, false}};
  Process parent;
  parent.pid = 100;
  parent.ppid = 1;
  parent.exe = "/usr/bin/python3";
  parent.argv = {"python3", "-c", "print('hé')"};
  parent.start_ns = 10;
  parent.end_ns = 20;
  parent.end_reason = EndReason::kExec;
  parent.exit_status = 0;
  parent.counters = {{"samples", 12}, {"dropped_ring_full", UINT64_MAX}};
  parent.messages = {"warning: something", ""};
  Process child;
  child.pid = UINT32_MAX;
  child.ppid = 100;
  child.parent = 0;
  child.exec_prev = 0;
  child.end_reason = EndReason::kTruncated;
  child.exit_status = INT32_MIN;  // argv, counters, messages empty
  Process third;
  third.end_reason = EndReason::kDetached;
  third.exit_status = INT32_MAX;
  third.parent = 1;
  p.processes = {parent, child, third};
  p.threads = {{0, 100, "main", 10, 20}, {1, 101, "wörker", -3, 0}, {2, 7, "", 0, 0}};
  p.stack_values = {{0, 0, {10, -20}}, {1, 1, {INT64_MAX, INT64_MIN}}, {2, 2, {0, 0}}, {0, 3, {1, 1}}};
  p.samples = {
      {0, 0, 1000, 1}, {0, 0, 2000, 1}, {1, 1, 1500, 3},     {0, 3, 900, 1},  // time going backwards
      {2, 2, INT64_MIN, UINT32_MAX}, {2, 1, INT64_MAX, 0}, {1, 0, -7, 1},  {0, 3, 0, 2},
  };
  p.functions = {{1, 2, 3, 10, {5, -5}, {6, 7}}, {4, 5, 6, 0, {0, 0}, {INT64_MAX, INT64_MIN}}};
  p.lines = {{3, 10, 1, {1, 2}, {3, 4}}, {6, UINT32_MAX, 4, {0, 0}, {0, 0}}};
  p.warnings = {"missing debug info for libc.so.6", "ünïcødé ⚠", ""};
  // Memory (1.1): extreme values, an empty timeline, unmeasured RSS, time going backwards.
  ProcessMemory mem;
  mem.process = 1;
  mem.interval_bytes = UINT64_MAX;
  mem.copy_interval_bytes = 1;
  mem.python_allocator = true;
  mem.peak_heap_bytes = INT64_MAX;
  mem.peak_heap_t_ns = INT64_MIN;
  mem.peak_rss_bytes = 12345;
  mem.peak_rss_t_ns = -1;
  mem.end_heap_bytes = -7;
  mem.timeline = {{100, -1, 0}, {50, INT64_MAX, INT64_MIN}, {INT64_MAX, 4096, 1}};
  ProcessMemory other;
  other.process = 0;
  p.memory = {mem, other};
  p.leaks = {{1, 3, LeakKind::kGrowth, 1 << 30, 1000, 12345, 1000},
             {0, 0, LeakKind::kUnfreedAtExit, INT64_MIN, INT64_MAX, -5, 0}};
  p.modules = {{1, "0123456789abcdef"}, {2, ""}};
  return p;
}

// What decode_profile sets: the file's version.
Profile as_read(Profile p, uint16_t minor = kFormatMinor) {
  p.version_major = kFormatMajor;
  p.version_minor = minor;
  return p;
}

mlprof::Result<Profile> decode(const std::vector<uint8_t>& b, const std::string& name = "run.mlprof") {
  // Copy into an exactly sized heap buffer so ASan catches any read past the end.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[b.size() + 1]);
  if (!b.empty()) memcpy(copy.get(), b.data(), b.size());
  return decode_profile(copy.get(), b.size(), name);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- Independent framing helpers (docs/profile-format.md) ----
struct Framed {
  uint16_t major = 0, minor = 0;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> sections;  // without the end section
};

Framed parse(const std::vector<uint8_t>& f) {
  Framed out;
  EXPECT_GE(f.size(), kFileHeaderSize);
  EXPECT_EQ(memcmp(f.data(), kFileMagic, 8), 0);
  out.major = static_cast<uint16_t>(f[8] | f[9] << 8);
  out.minor = static_cast<uint16_t>(f[10] | f[11] << 8);
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= uint64_t{f[12 + i]} << (8 * i);
  EXPECT_EQ(size, f.size());
  mlprof::varint::Reader r(f.data() + kFileHeaderSize, f.size() - kFileHeaderSize);
  for (;;) {
    const uint8_t* at = r.pos;
    uint64_t tag = r.u(), len = r.u();
    const uint8_t* p = r.bytes(len);
    EXPECT_FALSE(r.bad);
    if (r.bad) break;
    if (tag == section::kEnd) {
      mlprof::varint::Reader t(p, len);
      EXPECT_EQ(t.u(), out.sections.size());
      const uint8_t* c = t.bytes(4);
      uint32_t crc = c[0] | c[1] << 8 | c[2] << 16 | uint32_t{c[3]} << 24;
      EXPECT_EQ(crc, crc32(0, f.data(), static_cast<uInt>(at - f.data())));
      EXPECT_EQ(r.left(), 0u);
      break;
    }
    out.sections.emplace_back(tag, std::vector<uint8_t>(p, p + len));
  }
  return out;
}

void put_u(std::vector<uint8_t>& b, uint64_t v) {
  uint8_t tmp[10];
  b.insert(b.end(), tmp, tmp + mlprof::varint::encode(v, tmp));
}

std::vector<uint8_t> build(const Framed& fr) {
  std::vector<uint8_t> b(kFileMagic, kFileMagic + 8);
  for (uint16_t v : {fr.major, fr.minor}) b.push_back(v & 0xff), b.push_back(v >> 8);
  b.resize(kFileHeaderSize, 0);
  for (const auto& [tag, payload] : fr.sections) {
    put_u(b, tag);
    put_u(b, payload.size());
    b.insert(b.end(), payload.begin(), payload.end());
  }
  std::vector<uint8_t> end;
  put_u(end, fr.sections.size());
  end.resize(end.size() + 4);
  const uint64_t total = b.size() + 1 + mlprof::varint::encoded_size(end.size()) + end.size();
  for (int i = 0; i < 8; ++i) b[12 + i] = static_cast<uint8_t>(total >> (8 * i));
  const uint32_t crc = crc32(0, b.data(), static_cast<uInt>(b.size()));
  for (int i = 0; i < 4; ++i) end[end.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  put_u(b, section::kEnd);
  put_u(b, end.size());
  b.insert(b.end(), end.begin(), end.end());
  EXPECT_EQ(b.size(), total);
  return b;
}

std::vector<uint8_t>& payload(Framed& fr, uint64_t tag) {
  for (auto& [t, p] : fr.sections)
    if (t == tag) return p;
  ADD_FAILURE() << "no section " << tag;
  static std::vector<uint8_t> none;
  return none;
}

}  // namespace

TEST(ProfileIo, RoundTripRichProfile) {
  const Profile p = rich_profile();
  ASSERT_TRUE(validate_profile(p).ok()) << validate_profile(p).error;
  const auto bytes = encode_profile(p);
  auto back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->version_major, kFormatMajor);
  EXPECT_EQ(back->version_minor, kFormatMinor);
  EXPECT_EQ(back->run, p.run);
  EXPECT_EQ(back->strings, p.strings);
  EXPECT_EQ(back->frames, p.frames);
  EXPECT_EQ(back->stacks, p.stacks);
  EXPECT_EQ(back->processes, p.processes);
  EXPECT_EQ(back->samples, p.samples);
  EXPECT_TRUE(back.value() == as_read(p));
  // Deterministic output, and re-encoding what was read gives the same bytes.
  EXPECT_EQ(encode_profile(p), bytes);
  EXPECT_EQ(encode_profile(back.value()), bytes);
}

TEST(ProfileIo, RoundTripEmptyProfile) {
  const Profile p;
  const auto bytes = encode_profile(p);
  auto back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_TRUE(back.value() == as_read(p));
}

TEST(ProfileIo, FramingFollowsTheDocument) {
  const auto bytes = encode_profile(rich_profile());
  Framed fr = parse(bytes);
  EXPECT_EQ(fr.major, kFormatMajor);
  EXPECT_EQ(fr.minor, kFormatMinor);
  std::vector<uint64_t> tags;
  for (const auto& s : fr.sections) tags.push_back(s.first);
  EXPECT_EQ(tags, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17}));
  EXPECT_EQ(build(fr), bytes);  // an independent re-framing produces identical bytes
}

TEST(ProfileIo, WriteAndReadFile) {
  const fs::path dir = fs::temp_directory_path() / ("mlprof_io_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "run.mlprof").string();
  const Profile p = rich_profile();
  ASSERT_TRUE(write_profile(p, path).ok());
  auto back = read_profile(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_TRUE(back.value() == as_read(p));
  // Overwrite atomically; no temporary file left behind.
  Profile q = rich_profile();
  q.warnings.push_back("second write");
  ASSERT_TRUE(write_profile(q, path).ok());
  EXPECT_TRUE(read_profile(path).value() == as_read(q));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "run.mlprof");
  }
  EXPECT_EQ(files, 1u);

  // Errors name the path.
  auto missing = read_profile((dir / "nope.mlprof").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error(), "nope.mlprof")) << missing.error();
  EXPECT_TRUE(contains(missing.error(), "No such file")) << missing.error();
  auto is_dir = read_profile(dir.string());
  ASSERT_FALSE(is_dir.ok());
  Status bad_dir = write_profile(p, (dir / "no/such/dir/x.mlprof").string());
  ASSERT_FALSE(bad_dir.ok());
  EXPECT_TRUE(contains(bad_dir.error, "x.mlprof")) << bad_dir.error;
  Profile invalid = rich_profile();
  invalid.samples[0].stack = 99;
  Status inv = write_profile(invalid, path);
  ASSERT_FALSE(inv.ok());
  EXPECT_TRUE(contains(inv.error, "samples")) << inv.error;
  EXPECT_TRUE(read_profile(path).value() == as_read(q));  // the old file is untouched
  fs::remove_all(dir);
}

TEST(ProfileIo, TruncatedAtEveryOffsetIsRejected) {
  Profile p = rich_profile();
  const auto bytes = encode_profile(p);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = decode(std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    if (cut > 0) {
      EXPECT_TRUE(contains(r.error(), "run.mlprof is truncated at byte " + std::to_string(cut))) << r.error();
      EXPECT_TRUE(contains(r.error(), "interrupted")) << r.error();
    }
    if (cut >= kFileHeaderSize) {
      EXPECT_TRUE(contains(r.error(), fmt::format("at byte {} of {}:", cut, bytes.size()))) << r.error();
    }
  }
  EXPECT_TRUE(contains(decode({}).error(), "empty"));
}

TEST(ProfileIo, ForeignInputsGetSpecificErrors) {
  auto err = [](std::vector<uint8_t> b) {
    auto r = decode(b, "x");
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error();
  };
  auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  EXPECT_TRUE(contains(err({}), "x is empty"));
  std::string e = err(bytes(std::string("MLPW\x01\x00\x00\x00\x01\x02", 10)));
  EXPECT_TRUE(contains(e, "x is not an mlprof profile (it starts with \"MLPW\\x01")) << e;
  EXPECT_TRUE(contains(e, "raw event stream")) << e;
  EXPECT_TRUE(contains(e, "mlprof collect")) << e;
  e = err({0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0});
  EXPECT_TRUE(contains(e, "not an mlprof profile")) << e;
  EXPECT_TRUE(contains(e, "gzip")) << e;
  e = err(bytes("\n  {\"traceEvents\": []}"));
  EXPECT_TRUE(contains(e, "JSON")) << e;
  e = err(bytes("[1,2,3]"));
  EXPECT_TRUE(contains(e, "JSON")) << e;
  e = err({0x0a, 0x04, 0x08, 0x01, 0x10, 0x02});
  EXPECT_TRUE(contains(e, "pprof")) << e;
  e = err(bytes("hello world, plain text"));
  EXPECT_TRUE(contains(e, "x is not an mlprof profile (it starts with \"hello wo...\")")) << e;
  std::mt19937 rng(42);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> b(1 + rng() % 300);
    for (auto& c : b) c = static_cast<uint8_t>(rng());
    if (b[0] == 'M') b[0] = 'm';
    EXPECT_TRUE(contains(err(b), "is not an mlprof profile"));
  }
}

TEST(ProfileIo, EveryByteFlipIsRejected) {
  Profile p = rich_profile();
  p.samples.resize(2);
  const auto bytes = encode_profile(p);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      auto b = bytes;
      b[i] ^= mask;
      auto r = decode(b);
      ASSERT_FALSE(r.ok()) << "byte " << i << " mask " << int(mask);
    }
  }
  auto b = bytes;
  b[bytes.size() / 2] ^= 0x10;
  auto r = decode(b);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "run.mlprof is corrupted")) << r.error();
  EXPECT_TRUE(contains(r.error(), "checksum")) << r.error();
}

TEST(ProfileIo, TrailingGarbageIsRejected) {
  auto b = encode_profile(rich_profile());
  b.push_back(0);
  auto r = decode(b);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "corrupted")) << r.error();
  EXPECT_TRUE(contains(r.error(), "1 unexpected bytes")) << r.error();
}

TEST(ProfileIo, NewerMinorWithUnknownSectionAndAppendedFieldsIsRead) {
  const Profile p = rich_profile();
  Framed fr = parse(encode_profile(p));
  fr.minor = kFormatMinor + 3;
  // Unknown sections (before, between and after known ones), fields appended to known sections.
  fr.sections.insert(fr.sections.begin(), {1000, {1, 2, 3}});
  fr.sections.insert(fr.sections.begin() + 5, {77, {}});
  fr.sections.push_back({uint64_t{1} << 40, std::vector<uint8_t>(300, 0xff)});
  for (uint64_t tag = section::kRunInfo; tag <= section::kLeaks; ++tag) {
    auto& pl = payload(fr, tag);
    for (uint8_t extra : {0x05, 0xff, 0xff, 0x00, 0x80}) pl.push_back(extra);
  }
  auto r = decode(build(fr));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->version_minor, kFormatMinor + 3);
  EXPECT_TRUE(r.value() == as_read(p, kFormatMinor + 3));
}

// 1.4 appended the serving sites' sample counts and the window's CPU (after window_copy_bytes): a
// 1.3 file's sites read with kRetainedSamplesUnknown and the window's CPU as 0 (not known),
// everything else as written.
TEST(ProfileIo, ServingSitesOfA13FileHaveUnknownSampleCounts) {
  Profile p = rich_profile();
  p.serving.present = true;
  p.serving.url = "http://127.0.0.1:1/";
  p.serving.window_copy_bytes = 4096;
  p.serving.sites = {{0, 100, 1, 100, 7}};
  p.serving.window_cpu_us = 5;
  p.serving.window_line_cpu_us = 3;
  ASSERT_TRUE(validate_profile(p).ok()) << validate_profile(p).error;
  Framed fr = parse(encode_profile(p));
  auto& pl = payload(fr, section::kServing);
  ASSERT_GE(pl.size(), 3u);
  // The last fields, svarints (zigzag): the site's 7, then the window's CPU 5 and its lines' 3.
  ASSERT_EQ(std::vector<uint8_t>(pl.end() - 3, pl.end()), (std::vector<uint8_t>{14, 10, 6}));
  pl.resize(pl.size() - 3);
  fr.minor = 3;
  auto r = decode(build(fr));
  ASSERT_TRUE(r.ok()) << r.error();
  Profile expect = as_read(p, 3);
  expect.serving.sites[0].retained_samples = kRetainedSamplesUnknown;
  expect.serving.window_cpu_us = expect.serving.window_line_cpu_us = 0;
  EXPECT_TRUE(r.value() == expect);
  EXPECT_EQ(r->serving.window_copy_bytes, 4096);
  // And the 1.4 file itself keeps the count.
  auto now = decode(encode_profile(p));
  ASSERT_TRUE(now.ok()) << now.error();
  EXPECT_EQ(now->serving.sites[0].retained_samples, 7);
}

TEST(ProfileIo, MissingSectionsReadAsEmptyTables) {
  const Profile p = rich_profile();
  Framed fr = parse(encode_profile(p));
  std::erase_if(fr.sections, [](const auto& s) { return s.first == section::kWarnings || s.first == section::kLines; });
  auto r = decode(build(fr));
  ASSERT_TRUE(r.ok()) << r.error();
  Profile expect = as_read(p);
  expect.warnings.clear();
  expect.lines.clear();
  EXPECT_TRUE(r.value() == expect);
}

// A 1.0 reader knows neither section 13 nor 14: it skips them like any unknown section. Simulated
// by renumbering them to tags this reader does not know either.
TEST(ProfileIo, ReaderWithoutTheMemorySectionsSkipsThem) {
  const Profile p = rich_profile();
  Framed fr = parse(encode_profile(p));
  for (auto& [tag, pl] : fr.sections)
    if (tag == section::kMemory || tag == section::kLeaks) tag += 1000;
  fr.minor = 0;
  auto r = decode(build(fr));
  ASSERT_TRUE(r.ok()) << r.error();
  Profile expect = as_read(p, 0);
  expect.memory.clear();
  expect.leaks.clear();
  EXPECT_TRUE(r.value() == expect);
  // And a 1.0 file (no memory sections at all) reads as a profile without memory.
  std::erase_if(fr.sections, [](const auto& s) { return s.first > 1000; });
  auto old = decode(build(fr));
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_TRUE(old.value() == expect);
}

TEST(ProfileIo, LeakKindsFromANewerMinorAreDropped) {
  Profile p = rich_profile();
  p.leaks.push_back(p.leaks[0]);
  p.leaks.back().kind = static_cast<LeakKind>(7);
  p.leaks.push_back(p.leaks[1]);
  auto r = decode(encode_profile(p));
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->leaks.size(), 3u);
  EXPECT_EQ(r->leaks[0], p.leaks[0]);
  EXPECT_EQ(r->leaks[1], p.leaks[1]);
  EXPECT_EQ(r->leaks[2], p.leaks[3]);
}

TEST(ProfileIo, DuplicateSectionIsRejected) {
  Framed fr = parse(encode_profile(rich_profile()));
  fr.sections.push_back(fr.sections[3]);
  auto r = decode(build(fr));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "frames section appears twice")) << r.error();
}

TEST(ProfileIo, NewerMajorIsRejectedOlderMajorToo) {
  auto b = encode_profile(rich_profile());
  b[8] = 2, b[9] = 0, b[10] = 7, b[11] = 0;
  auto r = decode(b);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "run.mlprof was written by a newer mlprof (profile format 2.7)")) << r.error();
  EXPECT_TRUE(contains(r.error(), fmt::format("{}.{}", kFormatMajor, kFormatMinor))) << r.error();
  EXPECT_TRUE(contains(r.error(), "Upgrade mlprof")) << r.error();
  // Even when truncated right after the version, the version is what gets reported.
  r = decode(std::vector<uint8_t>(b.begin(), b.begin() + 12));
  EXPECT_TRUE(contains(r.error(), "newer mlprof")) << r.error();
  b[8] = 0;
  r = decode(b);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "format 0.7")) << r.error();
}

TEST(ProfileIo, OutOfRangeIndexesAreRejected) {
  struct Case {
    const char* section;
    void (*mutate)(Profile&);
  };
  const Case cases[] = {
      {"frames section: frame 1: function", [](Profile& p) { p.frames[1].function = p.strings.size(); }},
      {"frames section: frame 0: file", [](Profile& p) { p.frames[0].file = UINT32_MAX; }},
      {"frames section: frame 3: module", [](Profile& p) { p.frames[3].module = p.strings.size() + 5; }},
      {"stacks section: stack 1", [](Profile& p) { p.stacks[1].frames[2] = p.frames.size(); }},
      {"processes section: process 1: parent", [](Profile& p) { p.processes[1].parent = 3; }},
      {"processes section: process 2: exec_prev", [](Profile& p) { p.processes[2].exec_prev = 100; }},
      {"threads section: thread 2: process", [](Profile& p) { p.threads[2].process = 3; }},
      {"stack values section: row 0: thread", [](Profile& p) { p.stack_values[0].thread = 3; }},
      {"stack values section: row 3: stack", [](Profile& p) { p.stack_values[3].stack = 4; }},
      {"stack values section: row 1: values has 3 values, but the profile has 2 metrics",
       [](Profile& p) { p.stack_values[1].values.push_back(1); }},
      {"samples section: sample 5: thread", [](Profile& p) { p.samples[5].thread = 3; }},
      {"samples section: sample 7: stack", [](Profile& p) { p.samples[7].stack = 4; }},
      {"functions section: function 0: file", [](Profile& p) { p.functions[0].file = 1000; }},
      {"functions section: function 1: total has 1", [](Profile& p) { p.functions[1].total.pop_back(); }},
      {"lines section: line 1: function", [](Profile& p) { p.lines[1].function = p.strings.size(); }},
      {"lines section: line 0: self has 0", [](Profile& p) { p.lines[0].self.clear(); }},
      {"strings section: string 0", [](Profile& p) { p.strings[0] = "x"; }},
      {"strings section: string 0", [](Profile& p) { p.strings.clear(); }},
      {"memory section: row 0: process", [](Profile& p) { p.memory[0].process = 3; }},
      {"leaks section: candidate 1: process", [](Profile& p) { p.leaks[1].process = 3; }},
      {"leaks section: candidate 0: stack", [](Profile& p) { p.leaks[0].stack = 4; }},
      {"leaks section: candidate 0: confidence 1001", [](Profile& p) { p.leaks[0].confidence_permille = 1001; }},
      {"modules section: module 1: path", [](Profile& p) { p.modules[1].path = p.strings.size(); }},
  };
  for (const auto& c : cases) {
    Profile p = rich_profile();
    c.mutate(p);
    EXPECT_FALSE(validate_profile(p).ok()) << c.section;
    auto r = decode(encode_profile(p));
    ASSERT_FALSE(r.ok()) << c.section;
    EXPECT_TRUE(contains(r.error(), "run.mlprof is corrupted: ")) << r.error();
    EXPECT_TRUE(contains(r.error(), c.section)) << r.error();
  }
}

TEST(ProfileIo, HostileCountsAndValuesAreRejected) {
  const Framed good = parse(encode_profile(rich_profile()));
  auto with = [&](uint64_t tag, std::vector<uint8_t> pl) {
    Framed fr = good;
    payload(fr, tag) = std::move(pl);
    return decode(build(fr));
  };
  auto u = [](std::initializer_list<uint64_t> vs) {
    std::vector<uint8_t> b;
    for (uint64_t v : vs) put_u(b, v);
    return b;
  };
  struct Case {
    uint64_t tag;
    std::vector<uint8_t> payload;
    const char* expect;
  };
  const Case cases[] = {
      {section::kSamples, u({uint64_t{1} << 40}), "samples section: it declares"},
      {section::kStrings, u({UINT64_MAX}), "strings section"},
      {section::kStacks, u({2, 1u << 30, 1u << 30, 0, 0}), "stacks section"},
      {section::kStacks, u({1, 1, 0x200000000ull, 0}), "frame id"},
      {section::kSamples, u({3, 0, 5, 0}), "thread run of 5"},  // run overflows the count
      {section::kSamples, u({1, 0, 0, 0}), "thread run of 0"},  // empty run
      {section::kSamples, u({1, 7, 0, 0}), "unknown thread column encoding 7"},
      {section::kSamples, u({2, 1, 0, 0, 2, 0x1fffffffeull}), "sample 1: stack id"},
      {section::kFrames, u({1, 0x100000000ull}), "does not fit in 32 bits"},
      {section::kFrames, u({2, 1, 2}), "frames section: it ends early"},
      {section::kProcesses, u({1, 1, 1, 0x1ffffffffull}), "parent"},
      {section::kRunInfo, {0x80}, "run info section"},  // varint cut inside the payload
      {section::kMetrics, u({1, 50, 1}), "metrics section"},
      {section::kMemory, u({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1000}), "memory section: it declares 1000 timeline points"},
      {section::kLeaks, u({1, 0, 0, 0, 0, 0, 0, 0x100000000ull}), "leaks section: confidence"},
  };
  for (const auto& c : cases) {
    auto r = with(c.tag, c.payload);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_TRUE(contains(r.error(), "run.mlprof is corrupted")) << r.error();
    EXPECT_TRUE(contains(r.error(), c.expect)) << r.error();
  }
}

TEST(ProfileIo, RandomPayloadMutationsNeverCrash) {
  // Mutate payload bytes and re-frame (valid size and checksum) so the section decoders and the
  // validator see the damage. Any outcome but a crash is fine; most must be rejected.
  const Framed good = parse(encode_profile(rich_profile()));
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    Framed fr = good;
    auto& pl = fr.sections[rng() % fr.sections.size()].second;
    if (pl.empty()) continue;
    switch (rng() % 3) {
      case 0: pl[rng() % pl.size()] = static_cast<uint8_t>(rng()); break;
      case 1: pl.resize(rng() % pl.size()); break;
      default: pl.insert(pl.begin() + rng() % pl.size(), static_cast<uint8_t>(rng())); break;
    }
    auto r = decode(build(fr));
    if (!r.ok()) {
      ++rejected;
      EXPECT_TRUE(contains(r.error(), "run.mlprof is corrupted: ")) << r.error();
    }
  }
  EXPECT_GT(rejected, 500);
}

TEST(ProfileIo, SamplesAreCompact) {
  Profile p;
  p.metrics = {{"cpu", "us"}};
  p.processes.resize(1);
  p.threads.resize(4);
  p.stacks.resize(5000);
  std::mt19937 rng(1);
  std::vector<int64_t> t(4, 1'000'000'000);
  for (int i = 0; i < 100000; ++i) {
    uint32_t th = static_cast<uint32_t>(i / 7 % 4);  // short runs per thread, interleaved
    t[th] += 10'000'000 + rng() % 200'000;          // ~100 Hz with jitter
    p.samples.push_back({th, static_cast<uint32_t>(rng() % 5000), t[th], 1});
  }
  const auto bytes = encode_profile(p);
  EXPECT_LT(bytes.size(), 100000u * 7) << "bytes per sample: " << bytes.size() / 100000.0;
  auto back = decode(bytes);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->samples, p.samples);
}

TEST(ProfileStringTable, InternsAndKeepsIndexZeroEmpty) {
  std::vector<std::string> strings;
  StringTable st(strings);
  ASSERT_EQ(strings, std::vector<std::string>{""});
  EXPECT_EQ(st.intern(""), 0u);
  const uint32_t a = st.intern("alpha");
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(st.intern("alpha"), a);
  EXPECT_EQ(st.intern(std::string("al\0pha", 6)), 2u);
  EXPECT_EQ(st.find("beta"), kNone);
  EXPECT_EQ(st.find("alpha"), a);
  // Many strings force reallocation of the vector; lookups must still work.
  for (int i = 0; i < 5000; ++i) EXPECT_EQ(st.intern("s" + std::to_string(i)), 3u + i);
  for (int i = 0; i < 5000; ++i) EXPECT_EQ(st.intern("s" + std::to_string(i)), 3u + i);
  EXPECT_EQ(strings.size(), 5003u);
  EXPECT_EQ(st.size(), strings.size());
  EXPECT_EQ(st[1], "alpha");

  // Existing strings are indexed; the first of duplicates wins.
  std::vector<std::string> existing{"", "x", "y", "x"};
  StringTable st2(existing);
  EXPECT_EQ(st2.intern("x"), 1u);
  EXPECT_EQ(st2.intern("y"), 2u);
  EXPECT_EQ(st2.intern("z"), 4u);
  EXPECT_EQ(existing.size(), 5u);
}

TEST(ProfileIo, EmptyProfileIsTheDocumentedExample) {
  // docs/profile-format.md, section 8.
  const std::vector<uint8_t> expect = {
      0x4d, 0x4c, 0x50, 0x52, 0x4f, 0x46, 0x00, 0x1a, 0x01, 0x00, 0x04, 0x00, 0x57, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x01, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x02,
      0x02, 0x01, 0x00, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x05, 0x01, 0x00, 0x06, 0x01, 0x00, 0x07, 0x01, 0x00,
      0x08, 0x01, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x00, 0x0b, 0x01, 0x00, 0x0c, 0x01, 0x00, 0x0d,
      0x01, 0x00, 0x0e, 0x01, 0x00, 0x11, 0x01, 0x00, 0x00, 0x05, 0x0f, 0x87, 0x15, 0xb8, 0xea};
  EXPECT_EQ(encode_profile(Profile{}), expect);
}
