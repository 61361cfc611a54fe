#include "tools/output_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace mlprof::tools {

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string output_problem(const std::string& path, bool replaced) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return fmt::format("{} is a directory, not a file", path);
    // Written in place (/dev/stdout, a pipe, a file in a read-only directory): the file itself.
    if (!replaced) return access(path.c_str(), W_OK) == 0 ? "" : fmt::format("{} is not writable", path);
  }
  const std::string d = dir_of(path);
  if (stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return fmt::format("directory {} does not exist", d);
  if (access(d.c_str(), W_OK) != 0) return fmt::format("directory {} is not writable", d);
  return "";
}

namespace {

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  const bool ea = stat(a.c_str(), &sa) == 0, eb = stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return false;
  char ra[PATH_MAX], rb[PATH_MAX];
  if (!realpath(dir_of(a).c_str(), ra) || !realpath(dir_of(b).c_str(), rb)) return a == b;
  return strcmp(ra, rb) == 0 && base_of(a) == base_of(b);
}

}  // namespace mlprof::tools
