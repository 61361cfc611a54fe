// Helpers for end-to-end tests: run mlprof-run / mlprof on fixture programs, read the profile,
// and ask it questions whose answers the fixtures know by construction.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "profile/model.h"
#include "profile/profile_io.h"

namespace e2e {

namespace profile = mlprof::profile;

inline std::string fixture(const std::string& name) { return std::string(MLPROF_FIXTURE_DIR) + "/" + name; }

struct RunResult {
  int exit_code = -1;  // exit status, or 128+signal
  std::string out, err;
};

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs argv with stdout/stderr captured to files (so large outputs cannot deadlock a pipe).
inline RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  std::string base = ::testing::TempDir() + "/mlprof_e2e_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  std::string out = base + ".out", err = base + ".err";
  pid_t pid = fork();
  if (pid == 0) {
    freopen(out.c_str(), "w", stdout);
    freopen(err.c_str(), "w", stderr);
    for (auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  RunResult r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_all(out);
  r.err = read_all(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

// A scratch directory per test.
inline std::string scratch() {
  std::string d = ::testing::TempDir() + "/mlprof_e2e_XXXXXX";
  std::vector<char> buf(d.begin(), d.end());
  buf.push_back('\0');
  return mkdtemp(buf.data());
}

struct Profiled {
  RunResult result;
  mlprof::profile::Profile profile;
  bool ok = false;
  std::string path;
};

// mlprof-run -q -o DIR/run.mlprof [extra...] -- cmd...
inline Profiled profile_run(const std::vector<std::string>& cmd, const std::vector<std::string>& extra = {},
                            const std::vector<std::string>& env = {}) {
  Profiled p;
  p.path = scratch() + "/run.mlprof";
  std::vector<std::string> argv = {MLPROF_RUN, "-q", "-o", p.path};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  p.result = run(argv, env);
  auto r = mlprof::profile::read_profile(p.path);
  if (r) {
    p.profile = std::move(r.value());
    p.ok = true;
  } else {
    ADD_FAILURE() << "profile not readable: " << r.error() << "\nstderr: " << p.result.err;
  }
  return p;
}

// A command line refused as bad input: `binary args...` exits 2 and says `expect` on stderr.
struct Refusal {
  std::vector<std::string> args;
  std::string expect;
};
inline void expect_refused(const std::string& binary, const std::vector<Refusal>& cases) {
  for (const auto& c : cases) {
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 2) << c.expect;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err;
  }
}

inline RunResult run_collapsed(const std::string& profile) {
  return run({MLPROF_CLI, "export", profile, "--format", "collapsed"});
}

// The line number of the first line in `source` containing `marker`.
inline uint32_t marker_line(const std::string& source, const std::string& marker) {
  std::ifstream f(source);
  std::string line;
  for (uint32_t n = 1; std::getline(f, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  ADD_FAILURE() << "marker '" << marker << "' not in " << source;
  return 0;
}

inline std::string fixture_source(const std::string& file) {
  return std::string(MLPROF_SOURCE_DIR) + "/tests/fixtures/" + file;
}

inline uint32_t cpu(const mlprof::profile::Profile& p) { return p.metric("cpu"); }

// Self value of functions whose name starts with `prefix` (demangled names carry parameters).
inline int64_t function_self(const mlprof::profile::Profile& p, const std::string& prefix) {
  int64_t v = 0;
  for (auto& f : p.functions)
    if (p.str(f.function).rfind(prefix, 0) == 0) v += f.self.at(cpu(p));
  return v;
}
inline int64_t function_total(const mlprof::profile::Profile& p, const std::string& prefix) {
  int64_t v = 0;
  for (auto& f : p.functions)
    if (p.str(f.function).rfind(prefix, 0) == 0) v = std::max(v, f.total.at(cpu(p)));
  return v;
}
inline int64_t total_cpu(const mlprof::profile::Profile& p) {
  int64_t v = 0;
  for (auto& sv : p.stack_values) v += sv.values.at(cpu(p));
  return v;
}
inline int64_t line_self(const mlprof::profile::Profile& p, const std::string& file_suffix, uint32_t line) {
  int64_t v = 0;
  for (auto& l : p.lines) {
    const std::string& f = p.str(l.file);
    if (l.line == line && f.size() >= file_suffix.size() &&
        f.compare(f.size() - file_suffix.size(), file_suffix.size(), file_suffix) == 0)
      v += l.self.at(cpu(p));
  }
  return v;
}
// Per-process cpu: process index -> value, and value of stacks of that process containing `fn`.
inline int64_t process_function_total(const mlprof::profile::Profile& p, uint32_t process, const std::string& prefix) {
  int64_t v = 0;
  for (auto& sv : p.stack_values) {
    if (p.threads.at(sv.thread).process != process) continue;
    for (uint32_t fid : p.stacks.at(sv.stack).frames) {
      if (p.str(p.frames.at(fid).function).rfind(prefix, 0) == 0) {
        v += sv.values.at(cpu(p));
        break;
      }
    }
  }
  return v;
}
inline int64_t counter_sum(const mlprof::profile::Profile& p, const std::string& name) {
  int64_t v = 0;
  for (auto& proc : p.processes) {
    auto it = proc.counters.find(name);
    if (it != proc.counters.end()) v += static_cast<int64_t>(it->second);
  }
  return v;
}

}  // namespace e2e
