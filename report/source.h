// Source text of profiled lines, read from disk when the report is made (Python and C/C++ files
// that are readable there); cached per file. Unreadable or pseudo files ("<frozen ...>",
// "<generated>") give "".
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlprof::report {

// Where to read a profiled file from: an absolute path as it is; a relative one (Python 3.8 names
// a script started as `python3 app.py` "app.py") under the run's working directory `cwd`; "" for
// pseudo files ("<frozen ...>", "<string>") and relative paths without a cwd.
std::string source_path(const std::string& path, const std::string& cwd);

// The lines of that file as written (indentation kept, a trailing '\r' dropped); empty when it is
// not a readable regular file of at most 8 MiB (a larger "source" file is not source we show).
std::vector<std::string> source_lines(const std::string& path, const std::string& cwd);

class SourceCache {
 public:
  // `cwd`: the run's working directory (profile::Run::cwd), for relative paths.
  explicit SourceCache(std::string cwd = {}) : cwd_(std::move(cwd)) {}
  // The line's text, without the newline and leading/trailing blanks; "" when unavailable.
  const std::string& line(const std::string& path, uint32_t line);

 private:
  std::string cwd_;
  std::map<std::string, std::vector<std::string>> files_;
  std::string empty_;
};

}  // namespace mlprof::report
