// Golden test of the collector: event streams written by hand with the preload's Encoder, whose
// MODULE_LOAD records point at a real fixture binary (tests/fixtures/cpu_ratio.cpp), decoded by
// StreamDecoder and turned into a Profile by build_profile(). The expected functions, source lines,
// CPU values, threads and process links follow from the streams by construction; the pcs come
// from the fixture's own symbol table and line table, read here with libelf/libdw.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collector/profile_builder.h"
#include "collector/stream_decoder.h"
#include "common/wire_format.h"
#include "preload/encoder.h"

namespace mlprof {
namespace {

using profile::kNone;
using profile::Profile;

const std::string kFixture = std::string(MLPROF_FIXTURE_DIR) + "/fixture_cpu_ratio";
const std::string kSource = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/cpu_ratio.cpp";

uint32_t marker_line(const std::string& marker) {
  std::ifstream f(kSource);
  std::string line;
  for (uint32_t n = 1; std::getline(f, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  ADD_FAILURE() << "'" << marker << "' not in " << kSource;
  return 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What the test needs from the fixture ELF: file vaddrs, not runtime addresses.
struct FixtureElf {
  bool pie = false;
  std::string build_id;
  std::vector<std::pair<uint64_t, uint64_t>> exec_segments;  // [vaddr, vaddr + memsz) of R+X PT_LOADs
  std::map<std::string, std::pair<uint64_t, uint64_t>> functions;  // symbol -> [start, end)
  struct Row {
    uint64_t addr;
    int line;
    std::string file;
  };
  std::vector<Row> rows;  // the line table, every CU

  // An address inside `function` whose line-table rows all say `file_suffix`:`line`, so any
  // lookup of exactly that address must give that line. last: the highest such address.
  uint64_t line_addr(const std::string& function, int line, bool last = false) const {
    auto f = functions.at(function);
    std::map<uint64_t, std::set<std::pair<std::string, int>>> at;
    for (auto& r : rows)
      if (r.addr >= f.first && r.addr < f.second) at[r.addr].insert({r.file, r.line});
    uint64_t found = 0;
    for (auto& [addr, set] : at) {
      if (set.size() == 1 && set.begin()->second == line && ends_with(set.begin()->first, "cpu_ratio.cpp")) {
        found = addr;
        if (!last) break;
      }
    }
    EXPECT_NE(found, 0u) << "no line-table row for line " << line << " in " << function;
    return found;
  }
};

FixtureElf read_fixture() {
  FixtureElf out;
  elf_version(EV_CURRENT);
  int fd = open(kFixture.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << kFixture;
  if (fd < 0) return out;
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  GElf_Ehdr eh;
  EXPECT_NE(gelf_getehdr(elf, &eh), nullptr);
  out.pie = eh.e_type == ET_DYN;
  size_t nph = 0;
  elf_getphdrnum(elf, &nph);
  for (size_t i = 0; i < nph; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      out.exec_segments.emplace_back(ph.p_vaddr, ph.p_vaddr + ph.p_memsz);
  }
  const void* id = nullptr;
  ssize_t id_len = dwelf_elf_gnu_build_id(elf, &id);
  if (id_len > 0) out.build_id.assign(static_cast<const char*>(id), static_cast<size_t>(id_len));
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_value)
        continue;
      if (const char* name = elf_strptr(elf, sh.sh_link, sym.st_name))
        out.functions[name] = {sym.st_value, sym.st_value + sym.st_size};
    }
  }
  elf_end(elf);

  Dwarf* dw = dwarf_begin(fd, DWARF_C_READ);
  EXPECT_NE(dw, nullptr) << "the fixture is built with -g";
  Dwarf_CU* cu = nullptr;
  Dwarf_Die cudie;
  uint8_t unit_type = 0;
  while (dw && dwarf_get_units(dw, cu, &cu, nullptr, &unit_type, &cudie, nullptr) == 0) {
    Dwarf_Lines* lines = nullptr;
    size_t n = 0;
    if (dwarf_getsrclines(&cudie, &lines, &n) != 0) continue;
    for (size_t i = 0; i < n; ++i) {
      Dwarf_Line* l = dwarf_onesrcline(lines, i);
      Dwarf_Addr a = 0;
      int lineno = 0;
      bool end = false;
      dwarf_lineaddr(l, &a);
      dwarf_lineno(l, &lineno);
      dwarf_lineendsequence(l, &end);
      const char* src = dwarf_linesrc(l, nullptr, nullptr);
      if (!end) out.rows.push_back({a, lineno, src ? src : ""});
    }
  }
  if (dw) dwarf_end(dw);
  close(fd);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Stream construction

struct Stack {
  uint64_t id;
  std::vector<uint64_t> pcs;  // runtime addresses, leaf first
};
struct Sample {
  uint32_t tid;
  uint64_t stack;
  int64_t t_ns;
  uint32_t weight;
};
struct Thread {
  uint32_t tid;
  int64_t start_ns;
  std::string name;
  std::string rename;  // THREAD_NAME, if not empty
  int64_t end_ns = 0;  // THREAD_END, if not 0
};
struct StreamSpec {
  uint32_t pid, ppid;
  int64_t start_ns;
  std::vector<std::string> argv;
  uint64_t bias;
  std::string build_id;
  std::vector<Thread> threads;
  std::vector<Stack> stacks;
  std::vector<Sample> samples;
  std::map<wire::Counter, uint64_t> counters;
  std::vector<std::string> messages;
  bool end = true;
  wire::EndReason reason = wire::EndReason::kExit;
  int64_t end_ns = 0;
  int status = 0;
};

constexpr int64_t kPeriodNs = 10'000'000;  // 100 Hz: one tick is 10,000 us of CPU

collector::ProcessStream make_stream(const StreamSpec& spec, const FixtureElf& elf) {
  preload::Encoder e;
  e.header();
  e.begin(wire::Record::kProcessStart);
  e.u(spec.pid);
  e.u(spec.ppid);
  e.u(1'700'000'000'000'000'000ull + static_cast<uint64_t>(spec.start_ns));
  e.u(static_cast<uint64_t>(spec.start_ns));
  e.u(kPeriodNs);
  e.u(static_cast<uint8_t>(wire::TimerKind::kThreadCpuTimer));
  e.str(kFixture);
  e.u(spec.argv.size());
  for (auto& a : spec.argv) e.str(a);
  e.u(0);
  e.end();

  e.begin(wire::Record::kModuleLoad);
  e.u(1);
  e.u(spec.bias);
  e.str(kFixture);
  e.str(spec.build_id);
  e.u(elf.exec_segments.size());
  for (auto& [start, end] : elf.exec_segments) {
    e.u(spec.bias + start);
    e.u(spec.bias + end);
  }
  e.end();

  for (auto& t : spec.threads) {
    e.begin(wire::Record::kThreadStart);
    e.u(t.tid);
    e.u(static_cast<uint64_t>(t.start_ns));
    e.str(t.name);
    e.end();
  }
  for (auto& st : spec.stacks) {
    e.begin(wire::Record::kStack);
    e.u(st.id);
    e.u(st.pcs.size());
    for (size_t i = 0; i < st.pcs.size(); ++i) i == 0 ? e.u(st.pcs[0]) : e.s(static_cast<int64_t>(st.pcs[i] - st.pcs[i - 1]));
    e.u(0);
    e.end();
  }
  int64_t last = spec.start_ns;
  for (auto& s : spec.samples) {
    e.begin(wire::Record::kSample);
    e.u(s.tid);
    e.u(s.stack);
    e.s(s.t_ns - last);
    e.u(s.weight);
    e.end();
    last = s.t_ns;
  }
  for (auto& m : spec.messages) {
    e.begin(wire::Record::kMessage);
    e.u(1);
    e.str(m);
    e.end();
  }
  for (auto& t : spec.threads) {
    if (!t.rename.empty()) {
      e.begin(wire::Record::kThreadName);
      e.u(t.tid);
      e.str(t.rename);
      e.end();
    }
    if (t.end_ns) {
      e.begin(wire::Record::kThreadEnd);
      e.u(t.tid);
      e.u(static_cast<uint64_t>(t.end_ns));
      e.end();
    }
  }
  if (!spec.counters.empty()) {
    e.begin(wire::Record::kCounters);
    e.u(spec.counters.size());
    for (auto& [k, v] : spec.counters) {
      e.u(static_cast<uint8_t>(k));
      e.u(v);
    }
    e.end();
  }
  if (spec.end) {
    e.begin(wire::Record::kProcessEnd);
    e.u(static_cast<uint64_t>(spec.end_ns));
    e.u(static_cast<uint8_t>(spec.reason));
    e.s(spec.status);
    e.end();
  }
  collector::StreamDecoder d;
  EXPECT_TRUE(d.feed(e.out().data(), e.out().size())) << d.error();
  d.finish();
  EXPECT_EQ(d.error(), "");
  return std::move(d.stream());
}

// ---------------------------------------------------------------------------------------------

class CollectorGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    elf_ = read_fixture();
    ASSERT_FALSE(elf_.exec_segments.empty());
    ASSERT_FALSE(elf_.build_id.empty()) << "the fixture is linked with a build id";
    for (const char* f : {"_Z9hot_fiftymm", "_Z10hot_thirtymm", "main"})
      ASSERT_TRUE(elf_.functions.count(f)) << f << " not in the symbol table of " << kFixture;
    fifty_line_ = marker_line("hot-line: fifty");
    thirty_line_ = marker_line("hot-line: thirty");
    call_fifty_line_ = marker_line("acc = hot_fifty(");
    call_thirty_line_ = marker_line("acc = hot_thirty(");
    // File-relative addresses: the leaf pcs sit on the hot lines; the return addresses are one
    // byte past an address of the calling line, as the collector looks up return address - 1.
    leaf_fifty_ = elf_.line_addr("_Z9hot_fiftymm", static_cast<int>(fifty_line_));
    leaf_thirty_ = elf_.line_addr("_Z10hot_thirtymm", static_cast<int>(thirty_line_));
    ret_fifty_ = elf_.line_addr("main", static_cast<int>(call_fifty_line_), true) + 1;
    ret_thirty_ = elf_.line_addr("main", static_cast<int>(call_thirty_line_), true) + 1;
  }

  // A PIE's vaddrs are file-relative: place it where the kernel would (and elsewhere after exec).
  uint64_t bias(uint64_t pie_bias) const { return elf_.pie ? pie_bias : 0; }

  FixtureElf elf_;
  uint32_t fifty_line_ = 0, thirty_line_ = 0, call_fifty_line_ = 0, call_thirty_line_ = 0;
  uint64_t leaf_fifty_ = 0, leaf_thirty_ = 0, ret_fifty_ = 0, ret_thirty_ = 0;
};

TEST_F(CollectorGolden, BuildsTheExpectedProfile) {
  const uint64_t b1 = bias(0x555555554000), b2 = bias(0x561234560000), b3 = bias(0x7f00aa000000);
  constexpr uint64_t kOutside = 0x10;  // no module maps page 0

  // Image 1 of pid 100: two threads, replaced by execve.
  StreamSpec s1;
  s1.pid = 100;
  s1.ppid = 1;
  s1.start_ns = 1'000'000'000;
  s1.argv = {"launcher", "--exec"};
  s1.bias = b1;
  s1.build_id = elf_.build_id;
  s1.threads = {{100, 1'000'000'100, "fixture_cpu_rat", "trainer", 0}, {101, 1'000'000'200, "worker", "", 1'900'000'000}};
  s1.stacks = {{1, {b1 + leaf_fifty_, b1 + ret_fifty_}}, {2, {b1 + leaf_thirty_, b1 + ret_thirty_}}};
  s1.samples = {{100, 1, 1'010'000'000, 1}, {101, 2, 1'020'000'000, 3}, {100, 1, 1'030'000'000, 1},
                {100, 1, 1'040'000'000, 2}, {100, 1, 1'050'000'000, 1}};
  s1.counters = {{wire::Counter::kSamples, 5}, {wire::Counter::kTicks, 8}, {wire::Counter::kDroppedRingFull, 2}};
  s1.reason = wire::EndReason::kExec;
  s1.end_ns = 2'000'000'000;

  // Image 2 of pid 100 (after execve): the same code at another address, the same stack.
  StreamSpec s2;
  s2.pid = 100;
  s2.ppid = 1;
  s2.start_ns = 2'000'000'001;
  s2.argv = {"fixture_cpu_ratio", "100", "10"};
  s2.bias = b2;
  s2.build_id = "";  // an unknown build id is allowed
  s2.threads = {{100, 2'000'000'010, "fixture_cpu_rat", "", 0}};
  s2.stacks = {{7, {b2 + leaf_fifty_, b2 + ret_fifty_}}};
  s2.samples = {{100, 7, 2'100'000'000, 2}};
  s2.counters = {{wire::Counter::kSamples, 1}, {wire::Counter::kTicks, 2}};
  s2.reason = wire::EndReason::kExit;
  s2.end_ns = 2'500'000'000;
  s2.status = 7;

  // A child of image 2, killed: no PROCESS_END. Its leaf pc is in no module.
  StreamSpec s3;
  s3.pid = 200;
  s3.ppid = 100;
  s3.start_ns = 2'200'000'000;
  s3.argv = {"child"};
  s3.bias = b3;
  s3.build_id = elf_.build_id;
  s3.threads = {{200, 2'200'000'010, "child", "", 0}};
  s3.stacks = {{1, {kOutside, b3 + ret_fifty_}}};
  s3.samples = {{200, 1, 2'300'000'000, 1}};
  s3.messages = {"the program replaced mlprof's handler"};
  s3.end = false;

  // Out of start order on purpose: build_profile orders processes by start time.
  std::vector<collector::ProcessStream> streams;
  streams.push_back(make_stream(s3, elf_));
  streams.push_back(make_stream(s1, elf_));
  streams.push_back(make_stream(s2, elf_));
  profile::RunInfo run;
  run.rate_hz = 100;
  Profile p = collector::build_profile(streams, run);

  const uint32_t cpu = p.metric("cpu");
  ASSERT_NE(cpu, kNone);
  EXPECT_EQ(p.metrics[cpu].unit, "us");

  // Processes, links, fields.
  ASSERT_EQ(p.processes.size(), 3u);
  const auto& p0 = p.processes[0];
  const auto& p1 = p.processes[1];
  const auto& p2 = p.processes[2];
  EXPECT_EQ(p0.pid, 100u);
  EXPECT_EQ(p0.ppid, 1u);
  EXPECT_EQ(p0.exe, kFixture);
  EXPECT_EQ(p0.argv, s1.argv);
  EXPECT_EQ(p0.start_ns, s1.start_ns);
  EXPECT_EQ(p0.end_ns, s1.end_ns);
  EXPECT_EQ(p0.end_reason, profile::EndReason::kExec);
  EXPECT_EQ(p0.exit_status, -1) << "an image replaced by exec has no exit status";
  EXPECT_EQ(p0.counters, (std::map<std::string, uint64_t>{{"samples", 5}, {"ticks", 8}, {"dropped_ring_full", 2}}));
  EXPECT_EQ(p0.parent, kNone);
  EXPECT_EQ(p0.exec_prev, kNone);

  EXPECT_EQ(p1.pid, 100u);
  EXPECT_EQ(p1.argv, s2.argv);
  EXPECT_EQ(p1.end_reason, profile::EndReason::kExit);
  EXPECT_EQ(p1.exit_status, 7);
  EXPECT_EQ(p1.end_ns, s2.end_ns);
  EXPECT_EQ(p1.exec_prev, 0u) << "image 2 of pid 100 replaced image 1";
  EXPECT_EQ(p1.parent, kNone) << "ppid 1 was not profiled";

  EXPECT_EQ(p2.pid, 200u);
  EXPECT_EQ(p2.ppid, 100u);
  EXPECT_EQ(p2.parent, 1u) << "the parent is the image of pid 100 that was running when the child started";
  EXPECT_EQ(p2.exec_prev, kNone);
  EXPECT_EQ(p2.end_reason, profile::EndReason::kTruncated);
  EXPECT_EQ(p2.exit_status, -1);
  EXPECT_EQ(p2.end_ns, 2'300'000'000) << "a cut stream ends at its last event";
  EXPECT_EQ(p2.messages, s3.messages);
  // No counters came from it; the one sample that did is counted as taken.
  EXPECT_EQ(p2.counters, (std::map<std::string, uint64_t>{{"samples_received", 1}}));
  EXPECT_NE(std::find(p.warnings.begin(), p.warnings.end(),
                      "process 200 (child) ended without a clean end of its event stream (killed or crashed): its "
                      "profile holds what was collected until then"),
            p.warnings.end());
  for (auto& w : p.warnings) EXPECT_EQ(w.find("changed on disk"), std::string::npos) << w;

  // Threads, in stream order within each process.
  ASSERT_EQ(p.threads.size(), 4u);
  EXPECT_EQ(p.threads[0].process, 0u);
  EXPECT_EQ(p.threads[0].tid, 100u);
  EXPECT_EQ(p.threads[0].name, "trainer") << "THREAD_NAME renames";
  EXPECT_EQ(p.threads[0].start_ns, 1'000'000'100);
  EXPECT_EQ(p.threads[0].end_ns, 0);
  EXPECT_EQ(p.threads[1].process, 0u);
  EXPECT_EQ(p.threads[1].name, "worker");
  EXPECT_EQ(p.threads[1].end_ns, 1'900'000'000);
  EXPECT_EQ(p.threads[2].process, 1u);
  EXPECT_EQ(p.threads[2].name, "fixture_cpu_rat");
  EXPECT_EQ(p.threads[3].process, 2u);
  EXPECT_EQ(p.threads[3].tid, 200u);
  EXPECT_EQ(p.threads[3].name, "child");

  // Frames: 2 functions of each hot stack, and the unknown leaf of the child.
  auto frame_str = [&](uint32_t id) {
    const auto& f = p.frames.at(id);
    return p.str(f.function) + " @ " + p.str(f.file) + ":" + std::to_string(f.line) + " in " + p.str(f.module) +
           (f.inlined ? " (inlined)" : "");
  };
  ASSERT_EQ(p.stacks.size(), 3u) << "identical stacks of two processes share one Stack";
  // Stack indexes depend on hash-map order inside a stream: find each stack by its leaf.
  auto stack_with_leaf = [&](const std::string& function, const std::string& module) -> uint32_t {
    for (uint32_t i = 0; i < p.stacks.size(); ++i) {
      if (p.stacks[i].frames.empty()) continue;
      const auto& f = p.frames.at(p.stacks[i].frames[0]);
      if (p.str(f.function) == function && p.str(f.module) == module) return i;
    }
    ADD_FAILURE() << "no stack with leaf " << function << " in " << module;
    return 0;
  };
  const uint32_t sfifty = stack_with_leaf("hot_fifty(unsigned long, unsigned long)", kFixture);
  const uint32_t sthirty = stack_with_leaf("hot_thirty(unsigned long, unsigned long)", kFixture);
  const uint32_t schild = stack_with_leaf("", "[unknown]");
  const auto& fifty = p.stacks[sfifty];
  ASSERT_EQ(fifty.frames.size(), 2u);
  EXPECT_FALSE(fifty.truncated);
  const auto& f_fifty = p.frames[fifty.frames[0]];
  const auto& f_main = p.frames[fifty.frames[1]];
  EXPECT_TRUE(ends_with(p.str(f_fifty.file), "tests/fixtures/cpu_ratio.cpp")) << frame_str(fifty.frames[0]);
  EXPECT_EQ(f_fifty.line, fifty_line_) << frame_str(fifty.frames[0]);
  EXPECT_FALSE(f_fifty.inlined);
  EXPECT_EQ(p.str(f_main.function), "main") << frame_str(fifty.frames[1]);
  EXPECT_EQ(f_main.line, call_fifty_line_) << "a return address is looked up at pc-1: the line of the call";
  EXPECT_TRUE(ends_with(p.str(f_main.file), "tests/fixtures/cpu_ratio.cpp"));
  EXPECT_EQ(p.str(f_main.module), kFixture);

  const auto& thirty = p.stacks[sthirty];
  ASSERT_EQ(thirty.frames.size(), 2u);
  EXPECT_EQ(p.frames[thirty.frames[0]].line, thirty_line_) << frame_str(thirty.frames[0]);
  EXPECT_EQ(p.str(p.frames[thirty.frames[1]].function), "main");
  EXPECT_EQ(p.frames[thirty.frames[1]].line, call_thirty_line_) << frame_str(thirty.frames[1]);

  const auto& child = p.stacks[schild];
  ASSERT_EQ(child.frames.size(), 2u);
  const auto& unknown = p.frames[child.frames[0]];
  EXPECT_EQ(p.str(unknown.module), "[unknown]");
  EXPECT_EQ(unknown.module_offset, kOutside) << "an unmapped pc keeps its address";
  EXPECT_EQ(unknown.function, 0u);
  EXPECT_EQ(unknown.file, 0u);
  EXPECT_EQ(unknown.line, 0u);
  EXPECT_EQ(child.frames[1], fifty.frames[1]) << "the same main frame, from another process at another address";
  EXPECT_EQ(p.frames.size(), 5u);
  for (uint32_t i = 0; i < p.frames.size(); ++i) EXPECT_FALSE(p.frames[i].inlined) << frame_str(i);

  // CPU: weight x period, per (thread, stack); the hot_fifty stack is shared by images 1 and 2.
  std::map<std::pair<uint32_t, uint32_t>, int64_t> values;
  for (auto& sv : p.stack_values) values[{sv.thread, sv.stack}] = sv.values.at(cpu);
  EXPECT_EQ(values, (std::map<std::pair<uint32_t, uint32_t>, int64_t>{{{0, sfifty}, 5 * 10'000},
                                                                      {{1, sthirty}, 3 * 10'000},
                                                                      {{2, sfifty}, 2 * 10'000},
                                                                      {{3, schild}, 1 * 10'000}}));

  // Per-function and per-line tables.
  auto fn = [&](const std::string& name) -> const profile::FunctionStat* {
    for (auto& f : p.functions)
      if (p.str(f.function) == name) return &f;
    return nullptr;
  };
  auto* hf = fn("hot_fifty(unsigned long, unsigned long)");
  auto* ht = fn("hot_thirty(unsigned long, unsigned long)");
  auto* mn = fn("main");
  ASSERT_TRUE(hf && ht && mn);
  EXPECT_EQ(hf->self.at(cpu), 70'000);
  EXPECT_EQ(hf->total.at(cpu), 70'000);
  EXPECT_EQ(hf->first_line, fifty_line_);
  EXPECT_EQ(ht->self.at(cpu), 30'000);
  EXPECT_EQ(mn->self.at(cpu), 0);
  EXPECT_EQ(mn->total.at(cpu), 110'000);
  EXPECT_EQ(p.str(hf->module), kFixture);
  auto line = [&](uint32_t l) -> const profile::LineStat* {
    for (auto& s : p.lines)
      if (s.line == l && ends_with(p.str(s.file), "tests/fixtures/cpu_ratio.cpp")) return &s;
    return nullptr;
  };
  ASSERT_TRUE(line(fifty_line_) && line(thirty_line_) && line(call_fifty_line_));
  EXPECT_EQ(line(fifty_line_)->self.at(cpu), 70'000);
  EXPECT_EQ(line(thirty_line_)->self.at(cpu), 30'000);
  EXPECT_EQ(line(call_fifty_line_)->self.at(cpu), 0);
  EXPECT_EQ(line(call_fifty_line_)->total.at(cpu), 80'000);
  EXPECT_EQ(line(call_thirty_line_)->total.at(cpu), 30'000);

  // Time-ordered sample events over all processes.
  ASSERT_EQ(p.samples.size(), 7u);
  for (size_t i = 1; i < p.samples.size(); ++i) EXPECT_LE(p.samples[i - 1].t_ns, p.samples[i].t_ns);
  EXPECT_EQ(p.samples[0].t_ns, 1'010'000'000);
  EXPECT_EQ(p.samples[0].thread, 0u);
  EXPECT_EQ(p.samples[0].stack, sfifty);
  EXPECT_EQ(p.samples[3].weight, 2u);
  EXPECT_EQ(p.samples.back().t_ns, 2'300'000'000);
  EXPECT_EQ(p.samples.back().thread, 3u);

  // 6 samples for 10 ticks at 100 Hz requested: 60 Hz achieved, and a warning says why.
  EXPECT_EQ(p.run.extra["achieved_rate_hz"], "60");
}

TEST_F(CollectorGolden, StackRecordedAfterItsModuleWasUnloadedStillResolves) {
  // A library unloaded before the writer drained its last samples (preload/writer.cpp sends
  // MODULE_UNLOAD, then stacks may still name its addresses until ids restart).
  const uint64_t b = bias(0x555555554000);
  preload::Encoder e;
  e.header();
  e.begin(wire::Record::kProcessStart);
  for (uint64_t v : {uint64_t{300}, uint64_t{1}, uint64_t{0}, uint64_t{5}, uint64_t{kPeriodNs}, uint64_t{0}}) e.u(v);
  e.str(kFixture);
  e.u(0);
  e.u(0);
  e.end();
  e.begin(wire::Record::kModuleLoad);
  e.u(4);
  e.u(b);
  e.str(kFixture);
  e.str("");
  e.u(elf_.exec_segments.size());
  for (auto& [s, end] : elf_.exec_segments) {
    e.u(b + s);
    e.u(b + end);
  }
  e.end();
  e.begin(wire::Record::kModuleUnload);
  e.u(4);
  e.u(6);
  e.end();
  e.begin(wire::Record::kStack);
  e.u(1);
  e.u(1);
  e.u(b + leaf_thirty_);
  e.u(0);
  e.end();
  e.begin(wire::Record::kSample);
  e.u(300);
  e.u(1);
  e.s(10);
  e.u(4);
  e.end();
  collector::StreamDecoder d;
  ASSERT_TRUE(d.feed(e.out().data(), e.out().size()));
  d.finish();
  std::vector<collector::ProcessStream> streams;
  streams.push_back(std::move(d.stream()));
  Profile p = collector::build_profile(streams, {});
  ASSERT_EQ(p.stacks.size(), 1u);
  ASSERT_EQ(p.stacks[0].frames.size(), 1u);
  EXPECT_EQ(p.str(p.frames[p.stacks[0].frames[0]].function), "hot_thirty(unsigned long, unsigned long)");
  ASSERT_EQ(p.stack_values.size(), 1u);
  EXPECT_EQ(p.stack_values[0].values.at(0), 40'000);
  EXPECT_EQ(p.processes.at(0).end_reason, profile::EndReason::kTruncated);
}

}  // namespace
}  // namespace mlprof
