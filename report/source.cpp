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

const std::string& SourceCache::line(const std::string& path, uint32_t n) {
  auto it = files_.find(path);
  if (it == files_.end()) {
    std::vector<std::string> lines;
    struct stat st;
    const std::string file = source_path(path, cwd_);
    if (!file.empty() && stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxFileBytes) {
      std::ifstream f(file);
      for (std::string l; std::getline(f, l);) {
        size_t a = l.find_first_not_of(" \t"), b = l.find_last_not_of(" \t\r");
        lines.push_back(a == std::string::npos ? std::string() : l.substr(a, b - a + 1));
      }
    }
    it = files_.emplace(path, std::move(lines)).first;
  }
  return n >= 1 && n <= it->second.size() ? it->second[n - 1] : empty_;
}

}  // namespace mlprof::report
