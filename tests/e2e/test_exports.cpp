// The exports of a real profile of fixture_cpu_ratio (hot_fifty/hot_thirty/hot_twenty burn CPU
// 50/30/20 on the main thread, one after the other in rounds):
//   * pprof: `go tool pprof -top` (golang-go, scripts/install-deps.sh) reads the export and lists
//     hot_fifty first, then hot_thirty, then hot_twenty;
//   * chrome-trace: valid trace-event JSON with the process and thread tracks, every sample
//     under a root slice of its thread, and slice time split like the CPU;
//   * collapsed: the values sum to the samples taken (weight x period).
#include <glob.h>

#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace {

using namespace e2e;
using nlohmann::json;

class Exports : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // 10 rounds of 100 ms at 100 Hz: about 100 samples.
    run_ = new Profiled(profile_run({fixture("fixture_cpu_ratio"), "1000", "10"}, {"--rate", "100"}));
  }
  static void TearDownTestSuite() { delete run_; }
  static Profiled* run_;
};
Profiled* Exports::run_ = nullptr;

// `go` on PATH, else the Debian / upstream install locations; "" when there is none.
std::string find_go() {
  if (const char* path = getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty() && access((dir + "/go").c_str(), X_OK) == 0) return dir + "/go";
  }
  glob_t g{};
  std::string found;
  if (glob("/usr/lib/go*/bin/go", 0, nullptr, &g) == 0 && g.gl_pathc > 0) found = g.gl_pathv[g.gl_pathc - 1];
  globfree(&g);
  if (found.empty() && access("/usr/local/go/bin/go", X_OK) == 0) found = "/usr/local/go/bin/go";
  return found;
}

// The function column of `pprof -top` rows, in order ("flat flat% sum% cum cum% NAME").
std::vector<std::string> top_functions(const std::string& out) {
  std::vector<std::string> names;
  std::istringstream in(out);
  bool table = false;
  for (std::string line; std::getline(in, line);) {
    if (!table) {
      table = line.find("flat%") != std::string::npos && line.find("cum%") != std::string::npos;
      continue;
    }
    std::istringstream row(line);
    std::string col;
    for (int i = 0; i < 5 && row >> col; ++i) {
    }
    std::string name;
    std::getline(row >> std::ws, name);
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

TEST_F(Exports, GoToolPprofListsTheHottestFunctionFirst) {
  ASSERT_TRUE(run_->ok);
  ASSERT_EQ(run_->result.exit_code, 0) << run_->result.err;
  std::string dir = scratch(), out = dir + "/cpu.pb.gz";
  RunResult exp = run({MLPROF_CLI, "export", run_->path, "--format", "pprof", "-o", out});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  std::string gz = read_all(out);
  ASSERT_GT(gz.size(), 20u);
  EXPECT_EQ(static_cast<uint8_t>(gz[0]), 0x1f);
  EXPECT_EQ(static_cast<uint8_t>(gz[1]), 0x8b);

  std::string go = find_go();
  if (go.empty()) GTEST_SKIP() << "no Go toolchain (go tool pprof): scripts/install-deps.sh installs golang-go";
  // pprof must not try to fetch or re-symbolize anything: no network, no binaries needed.
  RunResult pp = run({go, "tool", "pprof", "-top", out},
                     {"PPROF_TMPDIR=" + dir, "PPROF_BINARY_PATH=" + dir, "HOME=" + dir, "GOCACHE=" + dir + "/gocache"});
  ASSERT_EQ(pp.exit_code, 0) << pp.err << pp.out;
  EXPECT_NE(pp.out.find("Type: cpu"), std::string::npos) << "default sample type\n" << pp.out;
  auto names = top_functions(pp.out);
  ASSERT_GE(names.size(), 3u) << pp.out;
  EXPECT_EQ(names[0].rfind("hot_fifty", 0), 0u) << pp.out;
  EXPECT_EQ(names[1].rfind("hot_thirty", 0), 0u) << pp.out;
  EXPECT_EQ(names[2].rfind("hot_twenty", 0), 0u) << pp.out;
  EXPECT_EQ(pp.err.find("symbolization"), std::string::npos) << pp.err;
}

// The profile keeps each module's build id as the process had it mapped (the truth: readelf -n on
// the fixture), and the pprof export puts it on the module's mapping (`go tool pprof -raw`).
TEST_F(Exports, ModulesAndPprofMappingsCarryBuildIds) {
  ASSERT_TRUE(run_->ok);
  RunResult re = run({"/usr/bin/readelf", "-n", fixture("fixture_cpu_ratio")});
  auto at = re.out.find("Build ID: ");
  ASSERT_NE(at, std::string::npos) << "the fixture has no GNU build id note\n" << re.out << re.err;
  const std::string want = re.out.substr(at + 10, re.out.find_first_of("\n ", at + 10) - (at + 10));
  ASSERT_EQ(want.size(), 40u) << want;
  std::string got;
  for (const auto& m : run_->profile.modules)
    if (run_->profile.str(m.path).ends_with("/fixture_cpu_ratio")) got = m.build_id;
  EXPECT_EQ(got, want);

  std::string go = find_go();
  if (go.empty()) GTEST_SKIP() << "no Go toolchain (go tool pprof): scripts/install-deps.sh installs golang-go";
  std::string dir = scratch(), out = dir + "/cpu.pb.gz";
  ASSERT_EQ(run({MLPROF_CLI, "export", run_->path, "--format", "pprof", "-o", out}).exit_code, 0);
  RunResult pp = run({go, "tool", "pprof", "-raw", out},
                     {"PPROF_TMPDIR=" + dir, "PPROF_BINARY_PATH=" + dir, "HOME=" + dir, "GOCACHE=" + dir + "/gocache"});
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  auto maps = pp.out.find("\nMappings\n");
  ASSERT_NE(maps, std::string::npos) << pp.out;
  auto line = pp.out.find("/fixture_cpu_ratio ", maps);  // "1: 0x0/0x1/0x0 PATH BUILD_ID [FN]"
  ASSERT_NE(line, std::string::npos) << pp.out;
  auto bol = pp.out.rfind('\n', line), eol = pp.out.find('\n', line);
  EXPECT_NE(pp.out.substr(bol + 1, eol - bol - 1).find(want), std::string::npos) << "mapping line without the build id\n" << pp.out;
}

TEST_F(Exports, PprofToAnUnwritablePathFails) {
  ASSERT_TRUE(run_->ok);
  RunResult r = run({MLPROF_CLI, "export", run_->path, "--format", "pprof", "-o", "/nonexistent-dir/x.pb.gz"});
  EXPECT_EQ(r.exit_code, 2);  // refused before any work, as a bad option
  EXPECT_NE(r.err.find("cannot write /nonexistent-dir/x.pb.gz: directory /nonexistent-dir does not exist"),
            std::string::npos) << r.err;
}

// An output that would replace the profile being read, a directory, options that do not apply to
// the format and a mistyped subcommand are refused (exit 2) and the input stays whole.
TEST_F(Exports, OutputsAndOptionsThatCannotWorkAreRefused) {
  ASSERT_TRUE(run_->ok);
  const std::string dir = scratch();
  const std::string in = dir + "/in.mlprof";
  ASSERT_EQ(run({"/bin/cp", run_->path, in}).exit_code, 0);
  expect_refused(MLPROF_CLI, {
      {{"export", in, "--format", "collapsed", "-o", in}, "it is the profile being read"},
      {{"export", in, "--format", "json", "-o", dir + "/../" + dir.substr(dir.rfind('/') + 1) + "/in.mlprof"},
       "it is the profile being read"},
      {{"report", in, "--html", in}, "it is the profile being read"},
      {{"report", in, "--html", dir}, "is a directory, not a file"},
      {{"export", in, "--format", "json", "--metric", "cpu"}, "--metric does not apply to --format json"},
      {{"export", in, "--format", "chrome-trace", "--metric", "cpu"}, "--metric does not apply to --format chrome-trace"},
      {{"export", in, "--format", "pprof", "--by-thread", "-o", dir + "/x.pb.gz"}, "apply to --format collapsed only"},
      {{"frob", in}, "unknown subcommand 'frob'"},
  });
  EXPECT_TRUE(profile::read_profile(in)) << "the input was damaged";
  // A file written in place needs only to be writable itself: /dev/null, /dev/stdout, a pipe.
  EXPECT_EQ(run({MLPROF_CLI, "export", in, "--format", "collapsed", "-o", "/dev/null"}).exit_code, 0);
  // --metric chooses pprof's default sample type; one the profile lacks is named.
  RunResult bad = run({MLPROF_CLI, "export", in, "--format", "pprof", "--metric", "nosuch", "-o", dir + "/x.pb.gz"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("no metric 'nosuch'"), std::string::npos) << bad.err;
}

TEST_F(Exports, ChromeTraceHasTheThreadTrackAndItsSamples) {
  ASSERT_TRUE(run_->ok);
  const auto& p = run_->profile;
  std::string out = scratch() + "/trace.json";
  RunResult exp = run({MLPROF_CLI, "export", run_->path, "--format", "chrome-trace", "-o", out});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  json t = json::parse(read_all(out), nullptr, false);
  ASSERT_FALSE(t.is_discarded()) << "not valid JSON";
  ASSERT_TRUE(t["traceEvents"].is_array());

  ASSERT_EQ(p.processes.size(), 1u);
  uint32_t pid = p.processes[0].pid;
  bool process_named = false;
  uint64_t root_samples = 0;
  std::map<std::string, double> dur;  // per hot function, slice time
  for (auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e["ph"].is_string() && e["pid"].is_number()) << e;
    if (e["ph"] == "M" && e["name"] == "process_name") {
      EXPECT_EQ(e["pid"], pid);
      EXPECT_EQ(e["args"]["name"], "fixture_cpu_ratio");
      process_named = true;
    }
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], pid) << e;
    EXPECT_EQ(e["tid"], pid) << "the fixture burns on its main thread";
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e["name"].is_string()) << e;
    EXPECT_GE(e["ts"].get<double>(), -100'000) << e;  // relative to the run's start
    std::string name = e["name"];
    if (name.rfind("_start", 0) == 0) root_samples += e["args"]["samples"].get<uint64_t>();
    for (const char* fn : {"hot_fifty", "hot_thirty", "hot_twenty"})
      if (name.rfind(fn, 0) == 0) dur[fn] += e["dur"].get<double>();
  }
  EXPECT_TRUE(process_named);
  // _start is the root of (nearly) every stack: its slices hold the samples of the thread.
  EXPECT_GE(root_samples, p.samples.size() * 95 / 100);
  EXPECT_LE(root_samples, p.samples.size());
  double sum = dur["hot_fifty"] + dur["hot_thirty"] + dur["hot_twenty"];
  ASSERT_GT(sum, 0);
  // The trace's time split is the profile's: each function's slices add up to its self CPU share
  // (the profile's own accuracy against the program is tested in test_cpu_attribution.cpp).
  double self_sum = 0;
  for (const char* fn : {"hot_fifty", "hot_thirty", "hot_twenty"}) self_sum += function_self(p, fn);
  ASSERT_GT(self_sum, 0);
  for (const char* fn : {"hot_fifty", "hot_thirty", "hot_twenty"})
    EXPECT_NEAR(100 * dur[fn] / sum, 100 * function_self(p, fn) / self_sum, 2) << fn;
}

TEST_F(Exports, CollapsedSumsToTheSamplesTaken) {
  ASSERT_TRUE(run_->ok);
  const auto& p = run_->profile;
  RunResult r = run_collapsed(run_->path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int64_t sum = 0;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) sum += std::stoll(l.substr(l.rfind(' ') + 1));
  int64_t weights = 0;
  for (auto& s : p.samples) weights += s.weight;
  ASSERT_EQ(p.run.rate_hz, 100u);
  EXPECT_EQ(sum, weights * (1'000'000 / 100)) << "each sample weighs its ticks x 10 ms";
  EXPECT_GE(weights, counter_sum(p, "samples"));
}

}  // namespace
