// Source text of profiled lines, read from disk when the report is made (Python and C/C++ files
// that are readable there); cached per file. Unreadable or pseudo files ("<frozen ...>",
// "<generated>") give "".
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlprof::report {

class SourceCache {
 public:
  // The line's text, without the newline and leading/trailing blanks; "" when unavailable.
  const std::string& line(const std::string& path, uint32_t line);

 private:
  std::map<std::string, std::vector<std::string>> files_;
  std::string empty_;
};

}  // namespace mlprof::report
