// preload/python.cpp against real interpreters. The test process itself has no Python (detect()
// finds none, walk() returns nothing); each pyenv CPython 3.8–3.13 is embedded by
// fixture_python_embed, whose probe compares walk()/read_code() with the stack Python reports
// (see tests/fixtures/python_embed_probe.cpp); Debian's static python3 gets the same probe by
// LD_PRELOAD. Interpreters that are not installed are skipped.
// Reproduce one by hand: build/fixtures/fixture_python_embed /root/.pyenv/versions/3.12.1
//   /root/.pyenv/versions/3.12.1/lib/libpython3.12.so
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "preload/python.h"

namespace mlprof::preload::python {
namespace {

const std::string kFixtures = MLPROF_FIXTURE_DIR;
const std::string kPyenv = "/root/.pyenv/versions/";

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  *status = pclose(f);
  return out;
}

// Every case the probe script and the embedding program report.
const std::vector<std::string> kScriptCases = {
    "nested", "nested_gil", "generator", "method", "classmethod", "coroutine", "via_map", "thread",
    "thread_gil", "listcomp", "deep", "deep_truncated", "bench", "native_thread", "stress"};

void expect_cases(const std::string& out, const std::vector<std::string>& cases) {
  for (const auto& c : cases)
    EXPECT_NE(out.find("RESULT " + c + " OK\n"), std::string::npos) << "case " << c << " did not pass";
  EXPECT_EQ(out.find(" FAIL "), std::string::npos);
}

// The fingerprint tells code objects apart by their filename and name objects and first line.
// Two functions of one file, compiled again and again (exec, reloads), can have the same filename
// object and first line and name objects a few dozen bytes apart: their fingerprints must still
// differ. The hash before session 15 gave them the same fingerprint every time.
TEST(Python, FingerprintsTellNamesApartInTheSameFile) {
  uint64_t state = 0x243f6a8885a308d3ull;
  auto next = [&state] {  // xorshift64
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int same = 0;
  constexpr int kPairs = 20000;
  for (int i = 0; i < kPairs; ++i) {
    const uint64_t file = 0x7f0000000000ull + (next() & 0xffffffff0ull);
    const uint64_t name = 0x7f0000000000ull + (next() & 0xffffffff0ull);
    const uint64_t delta = 16 * (1 + next() % 256);
    const int32_t line = static_cast<int32_t>(1 + next() % 2000);
    same += fingerprint24(identity_hash(file, name, line)) == fingerprint24(identity_hash(file, name + delta, line));
    same += fingerprint24(identity_hash(file, name, line)) == fingerprint24(identity_hash(file + delta, name, line));
    same += fingerprint24(identity_hash(file, name, line)) == fingerprint24(identity_hash(file, name, line + 1));
  }
  EXPECT_LE(same, 3) << "of " << 3 * kPairs << " pairs (24 bits: ~0.004 expected by chance)";
}

// The writer's table of named code objects, read by the walker to decide whether a cache miss
// needs the writer at once: an address is found under the fingerprint last named there only
// (a code object freed, another named at its address, then a third with the first one's
// fingerprint must wake the writer), a full probe run leaves an address out, and a new stream
// forgets them all.
TEST(Python, NamedCodeTable) {
  forget_named_codes();
  const uint64_t base = 0x7f0000100000;
  for (uint64_t i = 0; i < 1000; ++i) note_code_named(base + 64 * i, static_cast<uint32_t>(i * 7919) & 0xffffff);
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(code_was_named(base + 64 * i, static_cast<uint32_t>(i * 7919) & 0xffffff)) << i;
    ASSERT_FALSE(code_was_named(base + 64 * i, (static_cast<uint32_t>(i * 7919) + 1) & 0xffffff)) << i;
  }
  EXPECT_FALSE(code_was_named(base + 64 * 1000, 1));
  const uint32_t fp0 = 0, fp1 = 7919;
  note_code_named(base, fp1);  // another code object named at base's address
  EXPECT_TRUE(code_was_named(base, fp1));
  EXPECT_FALSE(code_was_named(base, fp0));
  note_code_named(base, fp0);
  note_code_named(base, fp0);  // naming twice adds nothing
  EXPECT_TRUE(code_was_named(base, fp0));
  EXPECT_FALSE(code_was_named(base, fp1));
  EXPECT_TRUE(code_was_named(base + 64, 7919));  // its neighbours keep theirs
  // Filled far past its 16,384 slots: whatever was kept is found, the rest is not, nothing else is.
  size_t kept = 0;
  for (uint64_t i = 0; i < 40000; ++i) note_code_named(0x7e0000000000 + 16 * i, 5);
  for (uint64_t i = 0; i < 40000; ++i) kept += code_was_named(0x7e0000000000 + 16 * i, 5);
  EXPECT_GT(kept, 10000u);
  EXPECT_LT(kept, 16384u);
  EXPECT_FALSE(code_was_named(0x7e0000000000 + 16 * 40000, 5));
  forget_named_codes();
  EXPECT_FALSE(code_was_named(base, fp0));
  EXPECT_FALSE(code_was_named(0x7e0000000000, 5));
}

TEST(Python, NoInterpreterInThisProcess) {
  const Interpreter& in = detect();
  EXPECT_FALSE(in.present);
  EXPECT_FALSE(in.supported);
  EXPECT_EQ(&detect(), &in);
  RawPyFrame frames[4];
  uint8_t flags = 0xff;
  EXPECT_EQ(walk(frames, 4, &flags), 0);
  EXPECT_EQ(flags, 0);
  CodeInfo info;
  EXPECT_FALSE(read_code(reinterpret_cast<uint64_t>(&info), &info));
}

class PythonEmbed : public ::testing::TestWithParam<const char*> {};

TEST_P(PythonEmbed, FramesMatchTheInterpreter) {
  const std::string version = GetParam();
  const std::string minor = version.substr(0, version.rfind('.'));
  const std::string prefix = kPyenv + version;
  const std::string lib = prefix + "/lib/libpython" + minor + ".so";
  if (!exists(lib)) GTEST_SKIP() << lib << " is not installed";
  int status = -1;
  const std::string out = run(kFixtures + "/fixture_python_embed " + prefix + " " + lib, &status);
  SCOPED_TRACE(out);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(out.find("DETECT present=1 supported=1"), std::string::npos);
  EXPECT_NE(out.find("description=CPython " + version), std::string::npos);
  std::vector<std::string> cases = kScriptCases;
  for (const char* c : {"no_python", "detect_again", "before_init", "main_thread_outside_python", "after_finalize"})
    cases.push_back(c);
  expect_cases(out, cases);
  if (minor == "3.13") EXPECT_NE(out.find("(layout from _Py_DebugOffsets)"), std::string::npos);
  const size_t b = out.find("BENCH ");
  if (b != std::string::npos) std::printf("[ CPython %s ] %s", version.c_str(), out.substr(b, out.find('\n', b) - b + 1).c_str());
}

INSTANTIATE_TEST_SUITE_P(Python, PythonEmbed, ::testing::Values("3.8.18", "3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

// Versions mlprof does not read: detected, refused with a clear description, no frames.
TEST(Python, OlderVersionIsRefused) {
  const std::string prefix = kPyenv + "3.7.16";
  const std::string lib = prefix + "/lib/libpython3.7m.so";
  if (!exists(lib)) GTEST_SKIP() << lib << " is not installed";
  int status = -1;
  const std::string out = run(kFixtures + "/fixture_python_embed " + prefix + " " + lib, &status);
  SCOPED_TRACE(out);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(out.find("DETECT present=1 supported=0 version=0x030710f0 description=CPython 3.7.16 is too old "
                     "(mlprof reads 3.8 to 3.13): Python frames are not shown, native profiling goes on"),
            std::string::npos);
  expect_cases(out, {"no_python", "detect_again", "before_init", "main_thread_outside_python", "after_finalize"});
}

// Debian's python3 links libpython statically and exports its symbols: the probe comes in by
// LD_PRELOAD and fetches the script with ctypes.
TEST(Python, StaticDebianPython) {
  const std::string python = "/usr/bin/python3";
  if (!exists(python)) GTEST_SKIP() << python << " is not installed";
  int status = -1;
  const std::string cmd = "env -u PYTHONPATH -u PYTHONHOME LD_PRELOAD=" + kFixtures + "/libfixture_python_probe.so " + python +
                          " -c 'import ctypes; s = ctypes.CDLL(None).mlprof_test_script; s.restype = ctypes.c_char_p; "
                          "exec(compile(s().decode(), \"<mlprof>\", \"exec\")); ctypes.CDLL(None).mlprof_test_report()'";
  const std::string out = run(cmd, &status);
  SCOPED_TRACE(out);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  expect_cases(out, kScriptCases);
  const size_t b = out.find("BENCH ");
  if (b != std::string::npos) std::printf("[ %s ] %s", python.c_str(), out.substr(b, out.find('\n', b) - b + 1).c_str());
}

}  // namespace
}  // namespace mlprof::preload::python
