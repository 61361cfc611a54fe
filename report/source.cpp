#include "report/source.h"

#include <sys/stat.h>

#include <fstream>

namespace mlprof::report {
namespace {
constexpr off_t kMaxFileBytes = 8 << 20;  // a larger "source" file is not source we show
}

std::string source_path(const std::string& path, const std::string& cwd) {
  if (path.empty() || path[0] == '<') return {};
  if (path[0] == '/') return path;
  if (cwd.empty() || cwd[0] != '/') return {};
  return cwd + (cwd.back() == '/' ? "" : "/") + path;
}

std::vector<std::string> source_lines(const std::string& name, const std::string& cwd) {
  std::vector<std::string> lines;
  struct stat st;
  const std::string path = source_path(name, cwd);
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxFileBytes)
    return lines;
  std::ifstream f(path, std::ios::binary);
  for (std::string l; std::getline(f, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(std::move(l));
  }
  return lines;
}

const std::string& SourceCache::line(const std::string& path, uint32_t n) {
  auto it = files_.find(path);
  if (it == files_.end()) {
    std::vector<std::string> lines = source_lines(path, cwd_);
    for (auto& l : lines) {
      const size_t a = l.find_first_not_of(" \t"), b = l.find_last_not_of(" \t");
      l = a == std::string::npos ? std::string() : l.substr(a, b - a + 1);
    }
    it = files_.emplace(path, std::move(lines)).first;
  }
  return n >= 1 && n <= it->second.size() ? it->second[n - 1] : empty_;
}

}  // namespace mlprof::report
