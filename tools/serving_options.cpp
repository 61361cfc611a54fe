#include "tools/serving_options.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace mlprof::tools {

bool read_request_bodies(const std::string& path, std::vector<std::string>* out, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "cannot read the request file " + path + ": " + strerror(errno);
    return false;
  }
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out->push_back(std::move(line));
  }
  if (f.bad()) {
    *why = "cannot read the request file " + path + ": read error";
    return false;
  }
  if (out->empty()) {
    *why = "the request file " + path + " has no request: give one POST body per line";
    return false;
  }
  return true;
}

}  // namespace mlprof::tools
