// Python line tables (against the real interpreters) and the merge of Python frames into native stacks.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collector/python_frames.h"

namespace py = mlprof::collector::python;
using py::FrameRef;
using py::kBeforeStart;
using py::line_for_offset;
using py::TableFormat;

namespace {

// ---------------------------------------------------------------------------------------------
// Ground truth from the interpreters: tests/unit/data/python_lines_dump.py prints, for every code
// object of its corpus, the raw table and CPython's own line for every 2-byte code unit.

struct CodeDump {
  int format = -1;
  uint32_t firstlineno = 0;
  std::string table;  // raw bytes
  std::string name;
  std::vector<int32_t> positions;  // 'P': -1 = no line
  std::vector<int32_t> co_lines;   // 'L' (3.11+)
};

struct Dump {
  std::vector<CodeDump> codes;
  uint64_t declared_codes = 0, declared_units = 0;
  bool saw_end = false;
  std::string other;  // unexpected output (warnings, tracebacks)
};

std::string unhex(const std::string& hex) {
  std::string out;
  if (hex == "-") return out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::vector<int32_t> parse_lines(std::istringstream& in) {
  std::vector<int32_t> out;
  std::string tok;
  while (in >> tok) out.push_back(tok == "N" ? -1 : tok == "?" ? -2 : static_cast<int32_t>(std::stol(tok)));
  return out;
}

bool run_dump(const std::string& python, Dump* dump, std::string* error) {
  const std::string script = std::string(MLPROF_SOURCE_DIR) + "/tests/unit/data/python_lines_dump.py";
  const std::string cmd = "'" + python + "' -I -W ignore '" + script + "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    *error = "popen failed: " + cmd;
    return false;
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int status = pclose(f);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = cmd + " failed (status " + std::to_string(status) + "): " + text.substr(0, 4000);
    return false;
  }
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "C") {
      CodeDump c;
      std::string hex;
      in >> c.format >> c.firstlineno >> hex >> c.name;
      c.table = unhex(hex);
      dump->codes.push_back(std::move(c));
    } else if (tag == "P" && !dump->codes.empty()) {
      dump->codes.back().positions = parse_lines(in);
    } else if (tag == "L" && !dump->codes.empty()) {
      dump->codes.back().co_lines = parse_lines(in);
    } else if (tag == "E") {
      in >> dump->declared_codes >> dump->declared_units;
      dump->saw_end = true;
    } else {
      dump->other += line + "\n";
    }
  }
  return true;
}

struct Compared {
  uint64_t offsets = 0, no_line = 0, mismatches = 0;
  std::string first_mismatches;
};

void compare(const CodeDump& c, const std::vector<int32_t>& expected, const char* what, Compared* r) {
  const auto format = static_cast<TableFormat>(c.format);
  for (size_t u = 0; u < expected.size(); ++u) {
    if (expected[u] == -2) continue;  // not covered by co_lines() (never seen; not compared)
    const int32_t got = line_for_offset(format, c.firstlineno, c.table, static_cast<uint32_t>(2 * u));
    ++r->offsets;
    if (expected[u] == -1) ++r->no_line;
    if (got != expected[u]) {
      if (++r->mismatches <= 10) {
        r->first_mismatches += std::string(what) + " " + c.name + " first=" + std::to_string(c.firstlineno) +
                               " offset=" + std::to_string(2 * u) + " cpython=" + std::to_string(expected[u]) +
                               " ours=" + std::to_string(got) + "\n";
      }
    }
  }
}

void check_interpreter(const std::string& python, int expected_format) {
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  Dump dump;
  std::string error;
  ASSERT_TRUE(run_dump(python, &dump, &error)) << error;
  ASSERT_TRUE(dump.saw_end) << "incomplete output from " << python << ":\n" << dump.other;
  EXPECT_TRUE(dump.other.empty()) << "unexpected output from " << python << ":\n" << dump.other;
  ASSERT_EQ(dump.codes.size(), dump.declared_codes);
  ASSERT_GT(dump.codes.size(), 500u) << "the corpus shrank";

  Compared positions, co_lines;
  uint64_t units = 0;
  for (const CodeDump& c : dump.codes) {
    ASSERT_EQ(c.format, expected_format) << c.name;
    units += c.positions.size();
    compare(c, c.positions, "positions", &positions);
    if (expected_format == 2) {
      ASSERT_EQ(c.co_lines.size(), c.positions.size()) << c.name;
      compare(c, c.co_lines, "co_lines", &co_lines);
    }
    EXPECT_EQ(line_for_offset(static_cast<TableFormat>(c.format), c.firstlineno, c.table, kBeforeStart),
              static_cast<int32_t>(c.firstlineno))
        << c.name;
  }
  EXPECT_EQ(units, dump.declared_units);
  EXPECT_EQ(positions.mismatches, 0u) << positions.first_mismatches;
  EXPECT_EQ(co_lines.mismatches, 0u) << co_lines.first_mismatches;
  // From 3.10 on some instructions have no line: the corpus must exercise that path.
  if (expected_format >= 1) EXPECT_GT(positions.no_line, 0u);
  std::printf("[ python    ] %s: %zu code objects, %llu offsets compared (%llu without a line)%s\n", python.c_str(),
              dump.codes.size(), static_cast<unsigned long long>(positions.offsets),
              static_cast<unsigned long long>(positions.no_line),
              expected_format == 2
                  ? (", plus " + std::to_string(co_lines.offsets) + " against co_lines()").c_str()
                  : "");
}

const std::string kPyenv = "/root/.pyenv/versions/";

}  // namespace

TEST(PythonLinesGroundTruth, Python38) { check_interpreter(kPyenv + "3.8.18/bin/python3", 0); }
TEST(PythonLinesGroundTruth, Python39) { check_interpreter(kPyenv + "3.9.18/bin/python3", 0); }
TEST(PythonLinesGroundTruth, Python310) { check_interpreter(kPyenv + "3.10.13/bin/python3", 1); }
TEST(PythonLinesGroundTruth, Python311) { check_interpreter(kPyenv + "3.11.7/bin/python3", 2); }
TEST(PythonLinesGroundTruth, Python312) { check_interpreter(kPyenv + "3.12.1/bin/python3", 2); }
TEST(PythonLinesGroundTruth, Python313) { check_interpreter(kPyenv + "3.13.0/bin/python3", 2); }
TEST(PythonLinesGroundTruth, SystemPython311) { check_interpreter("/usr/bin/python3", 2); }

// ---------------------------------------------------------------------------------------------
// Hand-made tables: each branch of each format.

namespace {
std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}
}  // namespace

TEST(PythonLines, LnotabByHand) {
  // addr 0..5 line 10; +6 bytes: line +3 (13); +0 bytes, +127 and +1 (a jump of 128 lines); +4: -2.
  const std::string t = bytes({6, 3, 0, 127, 4, 1, 4, 0xfe});
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 0), 10);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 5), 10);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 6), 140);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 9), 140);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 10), 141);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 14), 139);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, 1000), 139);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, t, kBeforeStart), 10);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, "", 4), 10);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 10, bytes({6, 3, 2}), 100), 13);  // odd byte ignored
}

TEST(PythonLines, Linetable310ByHand) {
  // [0,4) line 5; [4,8) no line; zero-length +1, then [8,10) +2 (line 8); [10,264) +1; [264,266) +0.
  const std::string t = bytes({4, 0, 4, 0x80, 0, 1, 2, 2, 254, 1, 2, 0});
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 0), 5);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 3), 5);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 4), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 7), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 8), 8);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 10), 9);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 264), 9);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 265), 9);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, 266), -1);  // past the table
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, t, kBeforeStart), 5);
  EXPECT_EQ(line_for_offset(TableFormat::kLinetable310, 5, "", 0), -1);
}

TEST(PythonLines, Locations311ByHand) {
  const std::string t = bytes({
      0x80 | (0 << 3) | 1, 0x12,              // short form, 2 units: line 100 (no change), [0,4)
      0x80 | (11 << 3) | 0, 4, 9,             // one-line +1, 1 unit: 101, [4,6)
      0x80 | (12 << 3) | 2, 0, 0,             // one-line +2, 3 units: 103, [6,12)
      0x80 | (13 << 3) | 0, 0x40 | 0, 0x02,   // no column, svarint 128 (two chunks) -> +64: 167, [12,14)
      0x80 | (14 << 3) | 0, 7, 0, 5, 6,       // long, svarint 7 -> -3: 164 (+end line, cols), [14,16)
      0x80 | (15 << 3) | 7,                   // no location, 8 units: [16,32)
      0x80 | (13 << 3) | 0, 4,                // +2 from 164 (no-location entries do not move the line)
  });
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 0), 100);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 3), 100);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 4), 101);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 6), 103);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 11), 103);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 12), 167);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 14), 164);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 16), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 31), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 32), 166);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, 34), -1);  // past the table
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, t, kBeforeStart), 100);
  // A varint cut off by the end of the table, and a delta that would leave int32: no crash.
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, bytes({0x80 | (13 << 3), 0x42}), 0), 101);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 100, bytes({0x80 | (13 << 3), 0x43}), 0), 99);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 1, bytes({0x80 | (13 << 3), 0x43}), 0), 0);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 1, bytes({0x80 | (13 << 3), 0x45}), 0), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 1,
                            bytes({0x80 | (13 << 3), 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f,
                                   0x7f, 0x3f}),
                            0),
            -1);
  // Leading payload bytes (hostile) are skipped up to the first entry byte.
  EXPECT_EQ(line_for_offset(TableFormat::kLocations311, 7, bytes({0x12, 0x34, 0x80}), 0), 7);
}

TEST(PythonLines, FirstLineLimits) {
  // firstlineno is unsigned: above INT32_MAX it cannot be a line.
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 0x7fffffffu, "", 0), INT32_MAX);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 0x80000000u, "", 0), -1);
  EXPECT_EQ(line_for_offset(TableFormat::kLnotab, 0x7fffffffu, bytes({0, 1}), 0), -1);
}

// ---------------------------------------------------------------------------------------------
// Fuzz: random tables placed right against PROT_NONE guard pages (so that even without ASan an
// out-of-bounds read faults), at the start and at the end of the readable page.

TEST(PythonLinesFuzz, RandomTablesNeverReadOutside) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* base = static_cast<char*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  ASSERT_EQ(mprotect(base, page, PROT_NONE), 0);
  ASSERT_EQ(mprotect(base + 2 * page, page, PROT_NONE), 0);
  char* data = base + page;

  std::mt19937_64 rng(0x6d6c70726f66ull);
  std::vector<char> heap;
  uint64_t calls = 0, no_line = 0;
  for (int iter = 0; iter < 30000; ++iter) {
    const auto format = static_cast<TableFormat>(iter % 3);
    size_t len = rng() % 16 == 0 ? rng() % page : rng() % 48;
    const int flavour = static_cast<int>(rng() % 4);
    // Random bytes; for the location table also mostly-valid entries with long varint runs.
    std::string t(len, '\0');
    for (size_t i = 0; i < len; ++i) {
      uint8_t b = static_cast<uint8_t>(rng());
      if (flavour == 1) b = (i % 3 == 0) ? static_cast<uint8_t>(0x80 | (13 + rng() % 3) << 3 | (b & 7)) : (b | 0x40) & 0x7f;
      if (flavour == 2) b |= 0x40;  // continuation bits everywhere
      t[i] = static_cast<char>(b);
    }
    const bool at_end = rng() & 1;
    char* where = at_end ? data + page - len : data;
    std::memcpy(where, t.data(), len);
    heap.assign(t.begin(), t.end());  // an exact-size heap copy too, for ASan
    const uint32_t first = rng() % 3 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % 100000);
    for (int k = 0; k < 8; ++k) {
      uint32_t offset;
      switch (k) {
        case 0: offset = 0; break;
        case 1: offset = kBeforeStart; break;
        case 2: offset = kBeforeStart - 1; break;
        default: offset = static_cast<uint32_t>(rng() % (4 * len + 8)); break;
      }
      const int32_t a = line_for_offset(format, first, std::string_view(where, len), offset);
      const int32_t b = line_for_offset(format, first, std::string_view(heap.data(), heap.size()), offset);
      ASSERT_EQ(a, b);
      ASSERT_GE(a, -1);
      if (offset == kBeforeStart) ASSERT_EQ(a, first <= INT32_MAX ? static_cast<int32_t>(first) : -1);
      // Pairs move the line by at most 128 each: the result stays near firstlineno.
      if (format != TableFormat::kLocations311 && a != -1)
        ASSERT_LE(std::llabs(static_cast<long long>(a) - first), static_cast<long long>(len / 2) * 128 + 1);
      ++calls;
      no_line += a == -1;
    }
  }
  munmap(base, 3 * page);
  EXPECT_GT(calls, 0u);
  EXPECT_GT(no_line, 0u);
  EXPECT_LT(no_line, calls);
}

// ---------------------------------------------------------------------------------------------
// Merging.

namespace {
struct Merge {
  bool ok;
  std::string order;  // e.g. "N0 P0 P1 N3"
};

Merge merge(std::vector<bool> native_is_eval, std::vector<bool> py_entry) {
  std::vector<FrameRef> out = {{true, 99}, {false, 98}};  // must be replaced, not appended to
  const bool ok = py::merge_stacks(native_is_eval, py_entry, &out);
  std::string s;
  for (const FrameRef& f : out) s += (s.empty() ? "" : " ") + std::string(f.python ? "P" : "N") + std::to_string(f.index);
  return {ok, s};
}
}  // namespace

TEST(PythonMerge, EveryFrameIsEntryUpTo310) {
  // native: C leaf, eval, builtin call helper, eval, eval, main. Python: three frames, each its own eval.
  const Merge m = merge({false, true, false, true, true, false}, {true, true, true});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "N0 P0 N2 P1 P2 N5");
}

TEST(PythonMerge, Groups311) {
  // Python: f <- g <- h(entry) | k <- main(entry); native: eval, PyObject_Call, eval, Py_RunMain.
  const Merge m = merge({true, false, true, false}, {false, false, true, false, true});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "P0 P1 P2 N1 P3 P4 N3");
}

TEST(PythonMerge, NativeLeafAboveInnermostEval) {
  // A numpy-like leaf: BLAS kernel, ufunc loop, then the eval loop running three Python frames.
  const Merge m = merge({false, false, true, false, false}, {false, false, true});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "N0 N1 P0 P1 P2 N3 N4");
}

TEST(PythonMerge, CCallingBackIntoPython) {
  // Python callback (entry) run by a ctypes/qsort-like C function, called from two Python frames.
  const Merge m = merge({false, true, false, false, true, false}, {true, false, true});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "N0 P0 N2 N3 P1 P2 N5");
}

TEST(PythonMerge, MismatchFallsBack) {
  // Two eval frames, one group: inner natives, all Python, outer natives (the middle and evals dropped).
  Merge m = merge({false, true, false, true, false}, {false, true});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.order, "N0 P0 P1 N4");
  // One eval frame, three groups.
  m = merge({false, false, true, false}, {true, true, true});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.order, "N0 N1 P0 P1 P2 N3");
  // Eval frames but no Python frames (the Python stack could not be read).
  m = merge({false, true, false}, {});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.order, "N0 N2");
}

TEST(PythonMerge, NoEvalFramesGivesPythonAlone) {
  const Merge m = merge({false, false, false}, {false, true, true});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.order, "P0 P1 P2");
}

TEST(PythonMerge, NoPythonAtAll) {
  Merge m = merge({false, false}, {});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "N0 N1");
  m = merge({}, {});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "");
}

TEST(PythonMerge, TrailingFramesWithoutEntryFormAGroup) {
  // A torn/truncated Python stack whose outermost frame is not an entry: its frames still need an
  // eval frame of their own.
  Merge m = merge({true, true, false}, {true, false});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.order, "P0 P1 N2");
  m = merge({true, false}, {true, false});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.order, "P0 P1 N1");
}

TEST(PythonMerge, RandomConsistentStacksKeepEveryFrameInOrder) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 2000; ++iter) {
    // Build the true interleaving, outermost last, then derive the inputs from it.
    std::vector<FrameRef> truth;
    std::vector<bool> native_is_eval, py_entry;
    const int groups = static_cast<int>(rng() % 5);
    auto natives = [&](int n) {
      for (int i = 0; i < n; ++i) {
        truth.push_back({false, static_cast<uint32_t>(native_is_eval.size())});
        native_is_eval.push_back(false);
      }
    };
    natives(static_cast<int>(rng() % 4));
    for (int g = 0; g < groups; ++g) {
      const int size = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < size; ++i) {
        truth.push_back({true, static_cast<uint32_t>(py_entry.size())});
        py_entry.push_back(i == size - 1);
      }
      native_is_eval.push_back(true);
      natives(static_cast<int>(rng() % 3));
    }
    std::vector<FrameRef> merged;
    ASSERT_TRUE(py::merge_stacks(native_is_eval, py_entry, &merged));
    ASSERT_EQ(merged.size(), truth.size());
    for (size_t i = 0; i < truth.size(); ++i) {
      ASSERT_EQ(merged[i].python, truth[i].python) << iter << " " << i;
      ASSERT_EQ(merged[i].index, truth[i].index) << iter << " " << i;
    }
  }
}
