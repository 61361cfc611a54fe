// The pprof export, decoded by an independent minimal protobuf reader (gunzip, then the wire
// format by hand) and checked against the hand-built report profile (test_report_fixture.cpp)
// and profiles built here: strings, sample types, per-metric sums, stacks, inlined lines,
// labels, mappings, and the references pprof itself validates (CheckValid).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "report/pprof_export.h"
#include "report_fixture.h"

namespace {

using mlprof::profile::Frame;
using mlprof::profile::FrameKind;
using mlprof::profile::Profile;
using mlprof::report::export_pprof;
using mlprof::report::pprof_proto;
using mlprof::report_test::kBig;
using mlprof::report_test::make_report_profile;

// ---- a minimal protobuf reader ------------------------------------------------------------

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;
  std::string bytes;
};

bool read_varint(std::string_view& in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    auto b = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// The fields of one message; ok=false on malformed input (unknown wire types included).
std::vector<Field> parse(std::string_view in, bool* ok) {
  std::vector<Field> out;
  *ok = true;
  while (!in.empty()) {
    uint64_t key;
    if (!read_varint(in, &key)) return *ok = false, out;
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.number == 0) return *ok = false, out;
    if (f.wire == 0) {
      if (!read_varint(in, &f.varint)) return *ok = false, out;
    } else if (f.wire == 2) {
      uint64_t len;
      if (!read_varint(in, &len) || len > in.size()) return *ok = false, out;
      f.bytes = std::string(in.substr(0, len));
      in.remove_prefix(len);
    } else {
      return *ok = false, out;
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Repeated varints: packed (wire 2) or one per field (wire 0).
void append_varints(const Field& f, std::vector<uint64_t>* out, bool* ok) {
  if (f.wire == 0) {
    out->push_back(f.varint);
    return;
  }
  std::string_view in = f.bytes;
  while (!in.empty()) {
    uint64_t v;
    if (!read_varint(in, &v)) {
      *ok = false;
      return;
    }
    out->push_back(v);
  }
}

struct PLine { uint64_t function = 0; int64_t line = 0; };
struct PLocation { uint64_t id = 0, mapping = 0, address = 0; std::vector<PLine> lines; };
struct PFunction { uint64_t id = 0; int64_t name = 0, system_name = 0, filename = 0, start_line = 0; };
struct PMapping {
  uint64_t id = 0, start = 0, limit = 0, offset = 0;
  int64_t filename = 0, build_id = 0;
  bool has_functions = false, has_filenames = false, has_line_numbers = false, has_inline_frames = false;
};
struct PLabel { int64_t key = 0, str = 0, num = 0; };
struct PSample { std::vector<uint64_t> locations; std::vector<int64_t> values; std::vector<PLabel> labels; };
struct PValueType { int64_t type = 0, unit = 0; };

struct PProfile {
  std::vector<PValueType> sample_types;
  std::vector<PSample> samples;
  std::vector<PMapping> mappings;
  std::vector<PLocation> locations;
  std::vector<PFunction> functions;
  std::vector<std::string> strings;
  int64_t time_nanos = 0, duration_nanos = 0, period = 0, default_sample_type = 0;
  PValueType period_type;
  std::vector<int64_t> comments;

  const std::string& s(int64_t i) const { return strings.at(static_cast<size_t>(i)); }
  const PFunction& function(uint64_t id) const {
    for (auto& f : functions) if (f.id == id) return f;
    throw std::runtime_error("no function " + std::to_string(id));
  }
  const PLocation& location(uint64_t id) const {
    for (auto& l : locations) if (l.id == id) return l;
    throw std::runtime_error("no location " + std::to_string(id));
  }
  const PMapping* mapping(uint64_t id) const {
    for (auto& m : mappings) if (m.id == id) return &m;
    return nullptr;
  }
  size_t sample_type(const std::string& name) const {
    for (size_t i = 0; i < sample_types.size(); ++i) if (s(sample_types[i].type) == name) return i;
    throw std::runtime_error("no sample type " + name);
  }
  // Function names of a sample, leaf first (inlined lines expanded innermost first).
  std::vector<std::string> names(const PSample& smp) const {
    std::vector<std::string> out;
    for (uint64_t id : smp.locations)
      for (const PLine& l : location(id).lines) out.push_back(s(function(l.function).name));
    return out;
  }
  std::string label_str(const PSample& smp, const std::string& key) const {
    for (auto& l : smp.labels) if (s(l.key) == key) return s(l.str);
    return "<none>";
  }
  int64_t label_num(const PSample& smp, const std::string& key) const {
    for (auto& l : smp.labels) if (s(l.key) == key) return l.num;
    return -1;
  }
};

std::string gunzip(const std::string& gz, bool* ok) {
  z_stream zs{};
  *ok = inflateInit2(&zs, 15 + 16) == Z_OK;  // gzip only
  std::string out;
  if (!*ok) return out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc == Z_OK);
  *ok = rc == Z_STREAM_END && zs.avail_in == 0;
  inflateEnd(&zs);
  return out;
}

// Decodes profile.proto; adds a test failure for every malformed part.
PProfile decode(const std::string& data) {
  PProfile p;
  bool ok = true;
  auto fields = parse(data, &ok);
  EXPECT_TRUE(ok) << "Profile message is malformed";
  auto sub = [&](const Field& f) {
    EXPECT_EQ(f.wire, 2u) << "field " << f.number << " should be a message";
    bool sok = true;
    auto r = parse(f.bytes, &sok);
    EXPECT_TRUE(sok) << "sub-message of field " << f.number << " is malformed";
    return r;
  };
  auto value_type = [&](const Field& f) {
    PValueType vt;
    for (auto& g : sub(f)) {
      if (g.number == 1) vt.type = static_cast<int64_t>(g.varint);
      if (g.number == 2) vt.unit = static_cast<int64_t>(g.varint);
    }
    return vt;
  };
  for (auto& f : fields) {
    switch (f.number) {
      case 1: p.sample_types.push_back(value_type(f)); break;
      case 2: {
        PSample smp;
        for (auto& g : sub(f)) {
          if (g.number == 1) append_varints(g, &smp.locations, &ok);
          if (g.number == 2) {
            std::vector<uint64_t> v;
            append_varints(g, &v, &ok);
            for (uint64_t x : v) smp.values.push_back(static_cast<int64_t>(x));
          }
          if (g.number == 3) {
            PLabel l;
            for (auto& h : sub(g)) {
              if (h.number == 1) l.key = static_cast<int64_t>(h.varint);
              if (h.number == 2) l.str = static_cast<int64_t>(h.varint);
              if (h.number == 3) l.num = static_cast<int64_t>(h.varint);
            }
            smp.labels.push_back(l);
          }
        }
        p.samples.push_back(std::move(smp));
        break;
      }
      case 3: {
        PMapping m;
        for (auto& g : sub(f)) {
          switch (g.number) {
            case 1: m.id = g.varint; break;
            case 2: m.start = g.varint; break;
            case 3: m.limit = g.varint; break;
            case 4: m.offset = g.varint; break;
            case 5: m.filename = static_cast<int64_t>(g.varint); break;
            case 6: m.build_id = static_cast<int64_t>(g.varint); break;
            case 7: m.has_functions = g.varint != 0; break;
            case 8: m.has_filenames = g.varint != 0; break;
            case 9: m.has_line_numbers = g.varint != 0; break;
            case 10: m.has_inline_frames = g.varint != 0; break;
          }
        }
        p.mappings.push_back(m);
        break;
      }
      case 4: {
        PLocation l;
        for (auto& g : sub(f)) {
          if (g.number == 1) l.id = g.varint;
          if (g.number == 2) l.mapping = g.varint;
          if (g.number == 3) l.address = g.varint;
          if (g.number == 4) {
            PLine line;
            for (auto& h : sub(g)) {
              if (h.number == 1) line.function = h.varint;
              if (h.number == 2) line.line = static_cast<int64_t>(h.varint);
            }
            l.lines.push_back(line);
          }
        }
        p.locations.push_back(std::move(l));
        break;
      }
      case 5: {
        PFunction fn;
        for (auto& g : sub(f)) {
          if (g.number == 1) fn.id = g.varint;
          if (g.number == 2) fn.name = static_cast<int64_t>(g.varint);
          if (g.number == 3) fn.system_name = static_cast<int64_t>(g.varint);
          if (g.number == 4) fn.filename = static_cast<int64_t>(g.varint);
          if (g.number == 5) fn.start_line = static_cast<int64_t>(g.varint);
        }
        p.functions.push_back(fn);
        break;
      }
      case 6: EXPECT_EQ(f.wire, 2u); p.strings.push_back(f.bytes); break;
      case 9: p.time_nanos = static_cast<int64_t>(f.varint); break;
      case 10: p.duration_nanos = static_cast<int64_t>(f.varint); break;
      case 11: p.period_type = value_type(f); break;
      case 12: p.period = static_cast<int64_t>(f.varint); break;
      case 13: {
        std::vector<uint64_t> v;
        append_varints(f, &v, &ok);
        for (uint64_t x : v) p.comments.push_back(static_cast<int64_t>(x));
        break;
      }
      case 14: p.default_sample_type = static_cast<int64_t>(f.varint); break;
      default: ADD_FAILURE() << "unexpected Profile field " << f.number;
    }
  }
  EXPECT_TRUE(ok) << "malformed packed field";
  return p;
}

// What pprof's Profile.CheckValid and its decoder insist on, plus string-index bounds.
void expect_valid(const PProfile& p) {
  ASSERT_FALSE(p.strings.empty());
  EXPECT_EQ(p.strings[0], "") << "string_table[0] must be empty";
  auto str_ok = [&](int64_t i) { return i >= 0 && static_cast<size_t>(i) < p.strings.size(); };
  for (auto& vt : p.sample_types) EXPECT_TRUE(str_ok(vt.type) && str_ok(vt.unit));
  std::set<uint64_t> mapping_ids, location_ids, function_ids;
  for (auto& m : p.mappings) {
    EXPECT_NE(m.id, 0u);
    EXPECT_TRUE(mapping_ids.insert(m.id).second) << "duplicate mapping " << m.id;
    EXPECT_TRUE(str_ok(m.filename) && str_ok(m.build_id));
  }
  for (auto& f : p.functions) {
    EXPECT_NE(f.id, 0u);
    EXPECT_TRUE(function_ids.insert(f.id).second) << "duplicate function " << f.id;
    EXPECT_TRUE(str_ok(f.name) && str_ok(f.system_name) && str_ok(f.filename));
  }
  for (auto& l : p.locations) {
    EXPECT_NE(l.id, 0u);
    EXPECT_TRUE(location_ids.insert(l.id).second) << "duplicate location " << l.id;
    if (l.mapping != 0) EXPECT_TRUE(mapping_ids.count(l.mapping)) << "location " << l.id << " mapping";
    EXPECT_FALSE(l.lines.empty()) << "location " << l.id << " has no function (pprof would re-symbolize it)";
    for (auto& line : l.lines) EXPECT_TRUE(function_ids.count(line.function)) << "location " << l.id;
    if (const PMapping* m = p.mapping(l.mapping)) {
      EXPECT_GE(l.address, m->start);
      EXPECT_LT(l.address, m->limit);
    }
  }
  for (auto& s : p.samples) {
    EXPECT_EQ(s.values.size(), p.sample_types.size()) << "one value per sample type";
    EXPECT_FALSE(s.locations.empty());
    for (uint64_t id : s.locations) EXPECT_TRUE(location_ids.count(id)) << "sample references location " << id;
    for (auto& l : s.labels) EXPECT_TRUE(str_ok(l.key) && str_ok(l.str));
  }
  for (int64_t c : p.comments) EXPECT_TRUE(str_ok(c));
  EXPECT_TRUE(str_ok(p.default_sample_type));
}

PProfile exported(const Profile& prof) {
  auto gz = export_pprof(prof);
  EXPECT_TRUE(gz.ok()) << gz.error();
  if (!gz.ok()) return {};
  EXPECT_GE(gz->size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>((*gz)[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<uint8_t>((*gz)[1]), 0x8b);
  bool ok = false;
  std::string raw = gunzip(*gz, &ok);
  EXPECT_TRUE(ok) << "not a complete gzip stream";
  auto plain = pprof_proto(prof);
  EXPECT_TRUE(plain.ok());
  if (plain.ok()) EXPECT_EQ(raw, *plain) << "export_pprof is pprof_proto gzipped";
  PProfile p = decode(raw);
  expect_valid(p);
  return p;
}

// The reference: each stack's function names, root first, as the model says (frames leaf first,
// "[truncated]" as a root of its own, module+0xoffset for unknown functions).
std::string model_stack(const Profile& prof, uint32_t stack) {
  const auto& st = prof.stacks.at(stack);
  std::string out = st.truncated ? "[truncated]" : "";
  for (auto it = st.frames.rbegin(); it != st.frames.rend(); ++it) {
    const Frame& f = prof.frames.at(*it);
    std::string name = prof.str(f.function);
    if (name.empty()) {
      std::string m = prof.str(f.module);
      char off[32];
      snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(f.module_offset));
      name = m.substr(m.rfind('/') + 1) + off;
    }
    out += out.empty() ? name : ";" + name;
  }
  return out;
}

std::string pprof_stack(const PProfile& p, const PSample& s) {
  auto names = p.names(s);
  std::string out;
  for (auto it = names.rbegin(); it != names.rend(); ++it) out += out.empty() ? *it : ";" + *it;
  return out;
}

// ---- tests ----------------------------------------------------------------------------------

// `mlprof export --format pprof --metric M`: M is the default sample type (what pprof shows first);
// a metric the profile lacks is an error that names the ones it has.
TEST(PprofExport, TheDefaultSampleTypeCanBeChosen) {
  Profile prof = make_report_profile();
  auto raw = pprof_proto(prof, "alloc");
  ASSERT_TRUE(raw) << raw.error();
  PProfile p = decode(*raw);
  EXPECT_EQ(p.s(p.default_sample_type), "alloc");
  auto none = pprof_proto(prof, "nosuch");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().find("no metric 'nosuch' (it has: cpu, alloc"), std::string::npos) << none.error();
}

TEST(PprofExport, SampleTypesFollowTheMetrics) {
  Profile prof = make_report_profile();
  PProfile p = exported(prof);
  ASSERT_EQ(p.sample_types.size(), prof.metrics.size());
  EXPECT_EQ(p.s(p.sample_types[0].type), "cpu");
  EXPECT_EQ(p.s(p.sample_types[0].unit), "microseconds");
  EXPECT_EQ(p.s(p.sample_types[1].type), "alloc");
  EXPECT_EQ(p.s(p.sample_types[1].unit), "bytes");
  EXPECT_EQ(p.s(p.default_sample_type), "cpu");
  // Run facts: 2.5 s, 99 Hz -> period 10101 us of cpu.
  EXPECT_EQ(p.duration_nanos, prof.run.end_ns - prof.run.start_ns);
  EXPECT_EQ(p.s(p.period_type.type), "cpu");
  EXPECT_EQ(p.s(p.period_type.unit), "microseconds");
  EXPECT_EQ(p.period, 1'000'000 / 99);
  std::vector<std::string> comments;
  for (int64_t c : p.comments) comments.push_back(p.s(c));
  EXPECT_NE(std::find(comments.begin(), comments.end(), "command: python3 train.py --epochs 3"), comments.end());
}

TEST(PprofExport, ValuesSumPerMetric) {
  Profile prof = make_report_profile();
  PProfile p = exported(prof);
  std::vector<int64_t> want(prof.metrics.size()), got(prof.metrics.size());
  for (auto& sv : prof.stack_values)
    for (size_t m = 0; m < want.size(); ++m) want[m] += sv.values[m];
  for (auto& s : p.samples)
    for (size_t m = 0; m < got.size(); ++m) got[m] += s.values[m];
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[0], 100000);  // the fixture's ground truth: 100 ms of cpu
  EXPECT_EQ(got[1], 4096);
  // One sample per (thread, stack) with a non-zero value: all 7 of the fixture.
  EXPECT_EQ(p.samples.size(), prof.stack_values.size());
}

TEST(PprofExport, StacksMatchTheModel) {
  Profile prof = make_report_profile();
  PProfile p = exported(prof);
  std::map<std::string, int64_t> want, got;
  for (auto& sv : prof.stack_values) want[model_stack(prof, sv.stack)] += sv.values[0];
  for (auto& s : p.samples) got[pprof_stack(p, s)] += s.values[0];
  EXPECT_EQ(got, want);
  EXPECT_EQ(got["main;compute;add_one"], 50000);
  EXPECT_EQ(got["[truncated];compute"], 10000);
  EXPECT_EQ(got["main;libfoo.so+0x1a2b"], 25000);
}

TEST(PprofExport, InlinedFramesAreLinesOfOneLocation) {
  PProfile p = exported(make_report_profile());
  // add_one (math.h:5) is inlined into compute (compute.cpp:20): one location, innermost first.
  int found = 0;
  for (auto& l : p.locations) {
    if (l.lines.size() < 2) continue;
    ++found;
    ASSERT_EQ(l.lines.size(), 2u);
    const PFunction& inner = p.function(l.lines[0].function);
    const PFunction& outer = p.function(l.lines[1].function);
    EXPECT_EQ(p.s(inner.name), "add_one");
    EXPECT_EQ(p.s(inner.filename), "/src/math.h");
    EXPECT_EQ(l.lines[0].line, 5);
    EXPECT_EQ(p.s(outer.name), "compute");
    EXPECT_EQ(p.s(outer.filename), "/src/compute.cpp");
    EXPECT_EQ(l.lines[1].line, 20);
    EXPECT_EQ(p.s(p.mapping(l.mapping)->filename), "/opt/app/app.bin");
  }
  EXPECT_EQ(found, 1);
  // compute is one Function, whether reached inlined-into or on its own.
  int compute = 0;
  for (auto& f : p.functions) compute += p.s(f.name) == "compute";
  EXPECT_EQ(compute, 1);
}

TEST(PprofExport, LabelsNameThreadAndProcess) {
  Profile prof = make_report_profile();
  PProfile p = exported(prof);
  std::map<int64_t, int64_t> cpu_by_tid, want;
  for (auto& sv : prof.stack_values) want[prof.threads[sv.thread].tid] += sv.values[0];
  for (auto& s : p.samples) {
    int64_t tid = p.label_num(s, "tid");
    cpu_by_tid[tid] += s.values[0];
    if (tid == 100) {
      EXPECT_EQ(p.label_str(s, "thread"), "python3");
      EXPECT_EQ(p.label_num(s, "pid"), 100);
      EXPECT_EQ(p.label_str(s, "process"), "python3");
    } else if (tid == 101) {
      EXPECT_EQ(p.label_str(s, "thread"), "loader");
      EXPECT_EQ(p.label_num(s, "pid"), 100);
    } else {
      EXPECT_EQ(tid, 200);
      EXPECT_EQ(p.label_str(s, "thread"), "<none>");  // unnamed: no thread label
      EXPECT_EQ(p.label_num(s, "pid"), 200);
      EXPECT_EQ(p.label_str(s, "process"), "worker");
    }
  }
  EXPECT_EQ(cpu_by_tid, want);
  EXPECT_EQ(cpu_by_tid[100], 50000);
}

TEST(PprofExport, MappingsPerModuleCarryTheProfilesBuildIds) {
  Profile prof = make_report_profile();
  // app.bin has a build id in the profile's modules section; libc has an empty one; libfoo none.
  auto index_of = [&](const std::string& s) {
    for (uint32_t i = 0; i < prof.strings.size(); ++i)
      if (prof.strings[i] == s) return i;
    ADD_FAILURE() << s << " not in the string table";
    return 0u;
  };
  prof.modules.push_back({index_of("/opt/app/app.bin"), "0123456789abcdef0123456789abcdef01234567"});
  prof.modules.push_back({index_of("/lib/x86_64-linux-gnu/libc.so.6"), ""});
  PProfile p = exported(prof);
  std::set<std::string> files;
  std::map<std::string, std::string> ids;
  for (auto& m : p.mappings) {
    files.insert(p.s(m.filename));
    ids[p.s(m.filename)] = p.s(m.build_id);
    EXPECT_TRUE(m.has_functions) << "every location carries its function";
  }
  EXPECT_EQ(ids["/opt/app/app.bin"], "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(ids["/lib/x86_64-linux-gnu/libc.so.6"], "") << "no build id is invented";
  EXPECT_EQ(ids["/lib/libfoo.so"], "");
  EXPECT_EQ(files, (std::set<std::string>{"/opt/app/app.bin", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/libfoo.so"}));
  // The unsymbolized frame keeps its file-relative address in its module's mapping.
  bool found = false;
  for (auto& l : p.locations) {
    if (p.s(p.function(l.lines[0].function).name) != "libfoo.so+0x1a2b") continue;
    found = true;
    EXPECT_EQ(l.address, 0x1a2bu);
    EXPECT_EQ(p.s(p.mapping(l.mapping)->filename), "/lib/libfoo.so");
    EXPECT_FALSE(p.mapping(l.mapping)->has_line_numbers);
  }
  EXPECT_TRUE(found);
}

TEST(PprofExport, PythonFramesKeepQualnameFileAndLine) {
  Profile prof = make_report_profile();
  auto intern = [&](const std::string& s) {
    prof.strings.push_back(s);
    return static_cast<uint32_t>(prof.strings.size() - 1);
  };
  Frame py;
  py.kind = FrameKind::kPython;
  py.function = intern("Model.forward");
  py.file = intern("/app/model.py");
  py.line = 42;
  prof.frames.push_back(py);
  uint32_t py_id = static_cast<uint32_t>(prof.frames.size() - 1);
  prof.stacks.push_back({{py_id, 0}, false});  // main -> Model.forward
  prof.stack_values.push_back({0, static_cast<uint32_t>(prof.stacks.size() - 1), {7000, 0}});
  PProfile p = exported(prof);
  bool found = false;
  for (auto& s : p.samples) {
    if (pprof_stack(p, s) != "main;Model.forward") continue;
    found = true;
    EXPECT_EQ(s.values[0], 7000);
    const PLocation& l = p.location(s.locations[0]);
    EXPECT_EQ(l.mapping, 0u) << "Python code has no ELF mapping";
    ASSERT_EQ(l.lines.size(), 1u);
    EXPECT_EQ(l.lines[0].line, 42);
    EXPECT_EQ(p.s(p.function(l.lines[0].function).filename), "/app/model.py");
  }
  EXPECT_TRUE(found);
}

TEST(PprofExport, StringsAreValidUtf8AndKeptWhole) {
  Profile prof = make_report_profile();
  prof.strings[prof.frames[1].function] = std::string("comp\xff" "ute");  // invalid UTF-8
  PProfile p = exported(prof);
  std::set<std::string> names;
  for (auto& f : p.functions) names.insert(p.s(f.name));
  EXPECT_TRUE(names.count("comp\xEF\xBF\xBDute")) << "invalid bytes become U+FFFD";
  EXPECT_TRUE(names.count("operator;weird\nname")) << "pprof names are not folded";
}

TEST(PprofExport, ZeroSamplesOmittedAndBrokenReferencesSurvive) {
  Profile prof = make_report_profile();
  prof.stack_values.push_back({0, 0, {0, 0}});        // nothing to say
  prof.stack_values.push_back({99, 0, {123, 0}});     // unknown thread: no labels
  prof.stack_values.push_back({0, 999, {456, 0}});    // unknown stack: "[unknown]"
  prof.stacks.push_back({{}, false});
  prof.stack_values.push_back({0, static_cast<uint32_t>(prof.stacks.size() - 1), {789, 0}});  // empty stack
  PProfile p = exported(prof);
  EXPECT_EQ(p.samples.size(), make_report_profile().stack_values.size() + 3);
  std::map<std::string, int64_t> got;
  for (auto& s : p.samples) got[pprof_stack(p, s)] += s.values[0];
  EXPECT_EQ(got["[unknown]"], 456 + 789);
  bool unlabeled = false;
  for (auto& s : p.samples) unlabeled |= s.labels.empty() && s.values[0] == 123;
  EXPECT_TRUE(unlabeled);
}

TEST(PprofExport, NoMetricsIsAnError) {
  Profile prof;
  auto r = export_pprof(prof);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no metrics"), std::string::npos) << r.error();
}

TEST(PprofExport, MillionSamplesInSeconds) {
  // kBig (thread, stack) values over 20,000 stacks of depth 30: linear work.
  Profile prof;
  prof.metrics = {{"cpu", "us"}};
  prof.processes.resize(1);
  prof.threads = {{0, 1, "main", 0, 0}};
  for (int i = 0; i < 1000; ++i) prof.strings.push_back("function_" + std::to_string(i));
  for (uint32_t i = 0; i < 1000; ++i) prof.frames.push_back({i + 1, 0, 0, 0, 0, FrameKind::kNative, false});
  for (uint32_t s = 0; s < 20000; ++s) {
    mlprof::profile::Stack st;
    for (uint32_t d = 0; d < 30; ++d) st.frames.push_back((s * 7 + d * 13) % 1000);
    prof.stacks.push_back(st);
  }
  for (uint32_t i = 0; i < kBig; ++i) prof.stack_values.push_back({0, i % 20000, {10000}});
  auto t0 = std::chrono::steady_clock::now();
  auto gz = export_pprof(prof);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(gz.ok());
  bool ok = false;
  PProfile p = decode(gunzip(*gz, &ok));
  ASSERT_TRUE(ok);
  ASSERT_EQ(p.samples.size(), kBig);
  int64_t sum = 0;
  for (auto& smp : p.samples) sum += smp.values[0];
  EXPECT_EQ(sum, int64_t{kBig} * 10000);
  EXPECT_EQ(p.functions.size(), 1000u);
  RecordProperty("export_seconds", std::to_string(s));
  // Speed is measured by bench/ (docs/benchmarks.md), not asserted here.
}

}  // namespace
