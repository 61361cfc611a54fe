// Finding Python interpreters for the tests: $MLPROF_TEST_PYTHONS (colon-separated paths), else
// python3.X and python3 on PATH, pyenv's versions directory ($PYENV_ROOT or ~/.pyenv) and
// /usr/bin/python3. Each is identified by running it once.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace e2e {

struct Interpreter {
  std::string path;
  int major = 0, minor = 0;
  std::string version;  // "3.11.7"
  bool has_numpy = false;
  std::string name() const {  // a test-name-safe label, e.g. py3_11_7_pyenv
    std::string n = "py" + version;
    for (auto& c : n)
      if (c == '.') c = '_';
    return n + (path.find("/.pyenv/") != std::string::npos ? "_pyenv" : path.rfind("/usr/", 0) == 0 ? "_system" : "_other");
  }
};

inline std::string shell_output(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[512];
  while (fgets(buf, sizeof buf, f)) out += buf;
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

inline std::vector<Interpreter> find_interpreters() {
  std::vector<std::string> candidates;
  if (const char* env = getenv("MLPROF_TEST_PYTHONS"); env && *env) {
    std::string s = env;
    for (size_t i = 0; i <= s.size();) {
      size_t j = s.find(':', i);
      if (j == std::string::npos) j = s.size();
      if (j > i) candidates.push_back(s.substr(i, j - i));
      i = j + 1;
    }
  } else {
    std::string root = getenv("PYENV_ROOT") ? getenv("PYENV_ROOT") : std::string(getenv("HOME") ? getenv("HOME") : "/root") + "/.pyenv";
    if (DIR* d = opendir((root + "/versions").c_str())) {
      while (dirent* e = readdir(d))
        if (e->d_name[0] == '3') candidates.push_back(root + "/versions/" + e->d_name + "/bin/python3");
      closedir(d);
    }
    candidates.push_back("/usr/bin/python3");
    std::string path = getenv("PATH") ? getenv("PATH") : "";
    for (size_t i = 0; i <= path.size();) {
      size_t j = path.find(':', i);
      if (j == std::string::npos) j = path.size();
      std::string dir = path.substr(i, j - i);
      if (!dir.empty() && dir.find("shims") == std::string::npos) candidates.push_back(dir + "/python3");
      i = j + 1;
    }
  }
  std::vector<Interpreter> out;
  std::set<std::string> seen;
  for (auto& c : candidates) {
    char real[4096];
    if (access(c.c_str(), X_OK) != 0 || !realpath(c.c_str(), real) || !seen.insert(real).second) continue;
    std::string v = shell_output("'" + c + "' -c 'import sys; print(\"%d %d %d.%d.%d\" % (sys.version_info[:2] + sys.version_info[:3]))' 2>/dev/null");
    Interpreter it;
    char ver[64] = {};
    if (sscanf(v.c_str(), "%d %d %63s", &it.major, &it.minor, ver) != 3) continue;
    it.path = c;
    it.version = ver;
    it.has_numpy = shell_output("'" + c + "' -c 'import numpy; print(1)' 2>/dev/null") == "1";
    out.push_back(it);
  }
  return out;
}

inline const std::vector<Interpreter>& interpreters() {
  static const std::vector<Interpreter> all = find_interpreters();
  return all;
}

inline bool mlprof_supports(const Interpreter& p) { return p.major == 3 && p.minor >= 8 && p.minor <= 13; }

inline std::vector<Interpreter> supported_interpreters() {
  std::vector<Interpreter> v;
  for (auto& p : interpreters())
    if (mlprof_supports(p)) v.push_back(p);
  return v;
}

}  // namespace e2e
