// Symbolizer against ground truth: the fixture code (tests/fixtures/symbolizer_code.cpp) reports
// its real runtime addresses, from a dlopen'd shared library and from PIE / non-PIE executables
// run as subprocesses; expected lines come from MARK comments in the fixture sources.
#include "collector/symbolizer.h"

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/fixtures/symbolizer_fixture.h"

namespace fs = std::filesystem;
using mlprof::collector::ModuleInfo;
using mlprof::collector::Symbolizer;
using mlprof::collector::SymResult;

namespace {

const std::string kFixtures = MLPROF_FIXTURE_DIR;
const std::string kCode = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/symbolizer_code.cpp";
const std::string kInline = std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/symbolizer_inline.h";
const std::string kApp = kFixtures + "/fixture_sym_app";
const std::string kLib = kFixtures + "/libfixture_sym_lib.so";

// 1-based line of the only line in `file` containing "MARK:<marker>".
uint32_t marker_line(const std::string& file, const std::string& marker) {
  std::ifstream in(file);
  std::string text;
  uint32_t n = 0, found = 0;
  while (std::getline(in, text)) {
    ++n;
    if (text.find("MARK:" + marker) != std::string::npos) {
      EXPECT_EQ(found, 0u) << "marker " << marker << " twice in " << file;
      found = n;
    }
  }
  EXPECT_NE(found, 0u) << "marker " << marker << " not in " << file;
  return found;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return !a.empty() && fs::equivalent(a, b, ec);
}

std::string unhex(const std::string& s) {
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) out += static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16));
  return out;
}

int elf_type(const std::string& path) {
  Elf64_Ehdr eh{};
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&eh), sizeof eh);
  return eh.e_type;
}

// What one copy of the fixture code reported: its load bias, build id and probe addresses.
struct Truth {
  uint64_t bias = 0;
  std::string build_id;
  SymProbe probe;
};

// Runs an executable fixture, which prints "key hex" lines.
Truth run_app(const std::string& exe) {
  Truth t;
  std::map<std::string, std::string> kv;
  FILE* p = popen(exe.c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (p == nullptr) return t;
  char key[64], value[256];
  while (std::fscanf(p, "%63s %255s", key, value) == 2) kv[key] = value;
  EXPECT_EQ(pclose(p), 0) << exe;
  auto num = [&](const char* k) { return kv.count(k) ? std::stoull(kv[k], nullptr, 16) : 0ull; };
  t.bias = num("bias");
  t.build_id = unhex(kv["build_id"]);
  t.probe.plain = num("plain");
  t.probe.plain_ret = num("plain_ret");
  t.probe.chain_ret = num("chain_ret");
  t.probe.hidden = num("hidden");
  t.probe.hidden_ret = num("hidden_ret");
  EXPECT_NE(t.probe.chain_ret, 0u) << exe << " printed no probe";
  return t;
}

// dlopens a fixture library in this process (once per path); its bias and build id as
// dl_iterate_phdr shows them, and the vaddr of its first PT_LOAD.
struct LibTruth : Truth {
  uint64_t first_vaddr = ~0ull;
};
LibTruth load_lib(const std::string& path = kLib) {
  static std::map<std::string, LibTruth> loaded;
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  LibTruth r;
  void* h = dlopen(path.c_str(), RTLD_NOW);
  EXPECT_NE(h, nullptr) << dlerror();
  if (h == nullptr) return r;
  auto probe = reinterpret_cast<void (*)(SymProbe*)>(dlsym(h, "symfix_probe"));
  EXPECT_NE(probe, nullptr);
  probe(&r.probe);
  std::pair<const std::string*, LibTruth*> ctx{&path, &r};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        auto [want, tr] = *static_cast<std::pair<const std::string*, LibTruth*>*>(out);
        if (info->dlpi_name == nullptr || *want != info->dlpi_name) return 0;
        tr->bias = info->dlpi_addr;
        tr->build_id = symfix::build_id_in_memory(info);
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_LOAD)
            tr->first_vaddr = std::min<uint64_t>(tr->first_vaddr, info->dlpi_phdr[i].p_vaddr);
        return 1;
      },
      &ctx);
  return loaded[path] = r;
}

void expect_frame(const SymResult& r, size_t i, const std::string& function, const std::string& file,
                  uint32_t line, bool inlined) {
  ASSERT_LT(i, r.frames.size());
  const auto& f = r.frames[i];
  EXPECT_EQ(f.function, function) << "frame " << i;
  if (file.empty()) EXPECT_EQ(f.file, "") << "frame " << i;
  else EXPECT_TRUE(same_file(f.file, file)) << "frame " << i << ": " << f.file << " vs " << file;
  EXPECT_EQ(f.line, line) << "frame " << i;
  EXPECT_EQ(f.inlined, inlined) << "frame " << i;
}

std::string dump(const SymResult& r) {
  std::string out = "at offset " + std::to_string(r.module_offset) + ":";
  for (const auto& f : r.frames)
    out += "\n  " + f.function + " " + f.file + ":" + std::to_string(f.line) + (f.inlined ? " (inlined)" : "");
  return out;
}

void expect_empty(const SymResult& r) {
  ASSERT_EQ(r.frames.size(), 1u);
  EXPECT_EQ(r.frames[0].function, "");
  EXPECT_EQ(r.frames[0].file, "");
  EXPECT_EQ(r.frames[0].line, 0u);
}

bool has_warning(const Symbolizer& s, const std::string& a, const std::string& b) {
  for (const auto& w : s.warnings())
    if (w.find(a) != std::string::npos && w.find(b) != std::string::npos) return true;
  return false;
}

// Everything full debug info gives: names, files, lines, return-address adjustment and the
// inlined chain across a header, for fixture code loaded at `t.bias` from `path`.
void expect_full_truth(Symbolizer& s, const std::string& path, const Truth& t) {
  int m = s.add_module({path, t.bias, t.build_id});
  const std::string plain = "symfix::plain(unsigned long)";

  // The entry of plain: its name, a line within it, no inlined frames.
  const SymResult& entry = s.symbolize(m, t.probe.plain, false);
  EXPECT_EQ(entry.module_offset, t.probe.plain - t.bias);
  ASSERT_EQ(entry.frames.size(), 1u);
  EXPECT_EQ(entry.frames[0].function, plain);
  EXPECT_TRUE(same_file(entry.frames[0].file, kCode)) << entry.frames[0].file;
  EXPECT_GE(entry.frames[0].line, marker_line(kCode, "plain_begin"));
  EXPECT_LE(entry.frames[0].line, marker_line(kCode, "plain_end"));
  EXPECT_FALSE(entry.frames[0].inlined);

  // A return address: the line of the call, offset one before it.
  const SymResult& ret = s.symbolize(m, t.probe.plain_ret, true);
  EXPECT_EQ(ret.module_offset, t.probe.plain_ret - t.bias - 1);
  ASSERT_EQ(ret.frames.size(), 1u);
  expect_frame(ret, 0, plain, kCode, marker_line(kCode, "plain_call"), false);

  // Inlined chain, innermost first: each outer frame is at its call site of the inner one.
  const SymResult& chain = s.symbolize(m, t.probe.chain_ret, true);
  ASSERT_EQ(chain.frames.size(), 3u) << dump(chain);
  expect_frame(chain, 0, "symfix::inl_inner(unsigned long)", kInline, marker_line(kInline, "inner_call"), true);
  expect_frame(chain, 1, "symfix::inl_outer(unsigned long)", kInline, marker_line(kInline, "outer_call"), true);
  expect_frame(chain, 2, "symfix::chain(unsigned long)", kCode, marker_line(kCode, "chain_call"), false);

  // A static function, with an inlined anonymous-namespace function that DWARF names without
  // a linkage name (so no parameters), by its position in the DIE tree.
  const SymResult& hidden = s.symbolize(m, t.probe.hidden_ret, true);
  ASSERT_EQ(hidden.frames.size(), 2u) << dump(hidden);
  expect_frame(hidden, 0, "symfix::(anonymous namespace)::anon_inline", kCode, marker_line(kCode, "anon_call"), true);
  expect_frame(hidden, 1, "symfix::hidden(unsigned long)", kCode, marker_line(kCode, "hidden_call"), false);
}

TEST(SymbolizerFixtures, AreWhatTheTestsAssume) {
  EXPECT_EQ(elf_type(kLib), ET_DYN);
  EXPECT_EQ(elf_type(kApp), ET_DYN);  // PIE
  EXPECT_EQ(elf_type(kApp + "_nopie"), ET_EXEC);
  EXPECT_EQ(load_lib().build_id.size(), 20u);  // --build-id=sha1
}

TEST(SymbolizerDwarf, SharedLibraryLoadedByDlopen) {
  Symbolizer s;
  LibTruth t = load_lib();
  EXPECT_EQ(t.first_vaddr, 0u);
  EXPECT_NE(t.bias, 0u);
  expect_full_truth(s, kLib, t);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
}

TEST(SymbolizerDwarf, SharedLibraryWithNonZeroFirstSegment) {
  const std::string path = kFixtures + "/libfixture_sym_lib_highbase.so";
  LibTruth t = load_lib(path);
  EXPECT_EQ(t.first_vaddr, 0x200000u);  // ld.so may honour it (bias 0) or not; either way
                                        // file vaddr = pc - bias, not pc - load address
  Symbolizer s;
  expect_full_truth(s, path, t);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
}

TEST(SymbolizerDwarf, PieExecutable) {
  Truth t = run_app(kApp);
  EXPECT_NE(t.bias, 0u);  // a PIE is always relocated, so this proves pc - bias is applied
  Symbolizer s;
  expect_full_truth(s, kApp, t);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
}

TEST(SymbolizerDwarf, NonPieExecutable) {
  Truth t = run_app(kApp + "_nopie");
  EXPECT_EQ(t.bias, 0u);  // ET_EXEC: runtime address == file vaddr
  EXPECT_GE(t.probe.plain, 0x400000u);
  Symbolizer s;
  expect_full_truth(s, kApp + "_nopie", t);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
}

TEST(SymbolizerSplitDebug, FoundByGnuDebuglink) {
  // .split has no DWARF of its own, only a debuglink to fixture_sym_app.debug next to it.
  Truth t = run_app(kApp);
  Symbolizer s;
  expect_full_truth(s, kApp + ".split", t);
  EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
}

TEST(SymbolizerSplitDebug, FoundByBuildIdInExtraDebugDir) {
  Truth t = run_app(kApp);
  ASSERT_EQ(t.build_id.size(), 20u);
  // <dir>/.build-id/xx/rest.debug, the layout of /usr/lib/debug.
  fs::path dir = fs::temp_directory_path() / ("mlprof_symtest_" + std::to_string(getpid()));
  std::string hexid;
  for (unsigned char c : t.build_id) hexid += "0123456789abcdef"[c >> 4], hexid += "0123456789abcdef"[c & 15];
  fs::path debug = dir / ".build-id" / hexid.substr(0, 2) / (hexid.substr(2) + ".debug");
  fs::create_directories(debug.parent_path());
  fs::copy_file(kApp + ".debug", debug, fs::copy_options::overwrite_existing);

  {
    Symbolizer s({dir.string()});
    expect_full_truth(s, kApp + ".stripdebug", t);  // no debuglink: only the build id leads there
    EXPECT_TRUE(s.warnings().empty()) << s.warnings()[0];
  }
  {
    // Control: without the directory the same file has names only.
    Symbolizer s;
    int m = s.add_module({kApp + ".stripdebug", t.bias, t.build_id});
    EXPECT_EQ(s.symbolize(m, t.probe.plain_ret, true).frames[0].line, 0u);
  }
  fs::remove_all(dir);
}

TEST(SymbolizerStripped, StripDebugGivesFunctionNamesOnly) {
  Truth t = run_app(kApp);
  Symbolizer s;
  const std::string path = kApp + ".stripdebug";
  int m = s.add_module({path, t.bias, t.build_id});
  const SymResult& r = s.symbolize(m, t.probe.plain_ret, true);
  EXPECT_EQ(r.module_offset, t.probe.plain_ret - t.bias - 1);
  ASSERT_EQ(r.frames.size(), 1u);
  expect_frame(r, 0, "symfix::plain(unsigned long)", "", 0, false);
  // No DWARF, no inlined chain: just the containing function.
  const SymResult& chain = s.symbolize(m, t.probe.chain_ret, true);
  ASSERT_EQ(chain.frames.size(), 1u);
  expect_frame(chain, 0, "symfix::chain(unsigned long)", "", 0, false);
  // .symtab still names static functions.
  expect_frame(s.symbolize(m, t.probe.hidden, false), 0, "symfix::hidden(unsigned long)", "", 0, false);
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_EQ(s.warnings()[0], "no debug info for " + path + ": functions only (rebuild it with -g)");
}

TEST(SymbolizerStripped, StripAllExecutableHasNoNames) {
  // A PIE's .dynsym has none of its functions, so nothing names them; the offset still lets
  // the report print module+0xOFFSET.
  Truth t = run_app(kApp);
  Symbolizer s;
  int m = s.add_module({kApp + ".stripall", t.bias, t.build_id});
  const SymResult& r = s.symbolize(m, t.probe.plain, false);
  expect_empty(r);
  EXPECT_EQ(r.module_offset, t.probe.plain - t.bias);
  EXPECT_TRUE(has_warning(s, "no debug info for " + kApp + ".stripall", "functions only"));
}

TEST(SymbolizerStripped, StripAllLibraryKeepsExportedNames) {
  Truth t = load_lib();
  Symbolizer s;
  int m = s.add_module({kFixtures + "/libfixture_sym_lib.stripall.so", t.bias, t.build_id});
  // Exported: named from .dynsym.
  expect_frame(s.symbolize(m, t.probe.plain_ret, true), 0, "symfix::plain(unsigned long)", "", 0, false);
  // Static: gone with .symtab.
  const SymResult& hidden = s.symbolize(m, t.probe.hidden_ret, true);
  expect_empty(hidden);
  EXPECT_EQ(hidden.module_offset, t.probe.hidden_ret - t.bias - 1);
}

TEST(SymbolizerStripped, StripDebugLibrary) {
  Truth t = load_lib();
  Symbolizer s;
  int m = s.add_module({kFixtures + "/libfixture_sym_lib.stripdebug.so", t.bias, t.build_id});
  expect_frame(s.symbolize(m, t.probe.hidden_ret, true), 0, "symfix::hidden(unsigned long)", "", 0, false);
}

TEST(SymbolizerErrors, MissingFileGivesEmptyFrameAndOneWarning) {
  Symbolizer s;
  int m = s.add_module({"/nonexistent/gone.so", 0x7f0000000000, "\x01\x02"});
  const SymResult& r = s.symbolize(m, 0x7f0000001234, true);
  expect_empty(r);
  EXPECT_EQ(r.module_offset, 0x1233u);
  s.symbolize(m, 0x7f0000005678, false);
  s.symbolize(s.add_module({"/nonexistent/gone.so", 0x7f0000000000, "\x01\x02"}), 0x7f0000000010, false);
  ASSERT_EQ(s.warnings().size(), 1u);  // deduplicated
  EXPECT_EQ(s.warnings()[0], "/nonexistent/gone.so not found: its frames are shown as module+offset");
}

TEST(SymbolizerErrors, WrongBuildIdIsNotTrusted) {
  Truth t = load_lib();
  Symbolizer s;
  std::string wrong = t.build_id;
  wrong[0] = static_cast<char>(wrong[0] ^ 0xff);
  int bad = s.add_module({kLib, t.bias, wrong});
  const SymResult& r = s.symbolize(bad, t.probe.plain_ret, true);
  expect_empty(r);
  EXPECT_EQ(r.module_offset, t.probe.plain_ret - t.bias - 1);
  EXPECT_TRUE(has_warning(s, kLib + " changed on disk since it was profiled (build id differs", "module+offset"));
  // The same file with its real build id is separate state, and fine.
  int good = s.add_module({kLib, t.bias, t.build_id});
  EXPECT_NE(good, bad);
  EXPECT_EQ(s.symbolize(good, t.probe.plain_ret, true).frames[0].function, "symfix::plain(unsigned long)");
  // An empty recorded build id means "unknown": the file is trusted.
  int unknown = s.add_module({kLib, t.bias, ""});
  EXPECT_EQ(s.symbolize(unknown, t.probe.plain_ret, true).frames[0].function, "symfix::plain(unsigned long)");
  EXPECT_EQ(s.warnings().size(), 1u);
}

TEST(SymbolizerErrors, PseudoModulesAndBadHandlesAreSilent) {
  Symbolizer s;
  expect_empty(s.symbolize(s.add_module({"[vdso]", 0x7fff0000, ""}), 0x7fff0100, false));
  expect_empty(s.symbolize(s.add_module({"linux-vdso.so.1", 0x7fff0000, ""}), 0x7fff0100, false));
  expect_empty(s.symbolize(s.add_module({"", 0, ""}), 0x1000, false));
  expect_empty(s.symbolize(12345, 0x1000, false));
  expect_empty(s.symbolize(-1, 0x1000, false));
  EXPECT_TRUE(s.warnings().empty());
}

TEST(SymbolizerCache, SharedAcrossProcessesAtDifferentBiases) {
  Truth t = load_lib();
  Symbolizer s;
  const uint64_t other_bias = t.bias + 0x10000000;  // the same library elsewhere in another process
  int a = s.add_module({kLib, t.bias, t.build_id});
  int b = s.add_module({kLib, other_bias, t.build_id});
  EXPECT_NE(a, b);
  EXPECT_EQ(s.add_module({kLib, t.bias, t.build_id}), a);  // same process layout: same handle
  const SymResult& ra = s.symbolize(a, t.probe.plain_ret, true);
  const SymResult& rb = s.symbolize(b, t.probe.plain_ret - t.bias + other_bias, true);
  EXPECT_EQ(&ra, &rb);  // one cache entry, keyed by file offset
  EXPECT_EQ(rb.frames[0].function, "symfix::plain(unsigned long)");
}

// Distinct pcs spread over the executable segments of loaded modules whose name contains `part`.
struct Text {
  std::string path;
  uint64_t bias = 0, start = 0, end = 0;  // runtime addresses
  std::string build_id;
};
Text find_text(const std::string& part) {
  std::pair<std::string, Text> ctx{part, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        auto* c = static_cast<std::pair<std::string, Text>*>(out);
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (c->first == "self" ? !name.empty() : name.find(c->first) == std::string::npos) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          c->second = {name.empty() ? fs::read_symlink("/proc/self/exe").string() : name, info->dlpi_addr,
                       info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz,
                       symfix::build_id_in_memory(info)};
          return 1;
        }
        return 0;
      },
      &ctx);
  return ctx.second;
}

TEST(SymbolizerPerf, HundredThousandDistinctPcs) {
  Symbolizer s;
  size_t named = 0, total = 0;
  // CPU time, so that a loaded machine does not fail the test.
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  const double t0 = cpu_seconds();
  // System libraries (symbol tables only, unless their -dbgsym is installed) and this test
  // binary (full DWARF, many CUs).
  for (const char* part : {"libc.so", "libstdc++", "self"}) {
    Text text = find_text(part);
    ASSERT_FALSE(text.path.empty()) << part;
    int m = s.add_module({text.path, text.bias, text.build_id});
    const uint64_t n = 40000, step = std::max<uint64_t>(1, (text.end - text.start) / n);
    for (uint64_t pc = text.start; pc < text.end && pc < text.start + n * step; pc += step, ++total)
      named += !s.symbolize(m, pc, false).frames[0].function.empty();
  }
  const double secs = cpu_seconds() - t0;
  std::printf("symbolized %zu pcs (%zu named) in %.3f s CPU\n", total, named, secs);
  EXPECT_GE(total, 100000u);
  EXPECT_GT(named, total / 2);  // most of the text of these modules is named functions
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(secs, 20.0);
#else
  EXPECT_LT(secs, 5.0);  // about 1 s on a developer machine, with libc's debug info installed
#endif
}

}  // namespace
