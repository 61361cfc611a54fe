// The files mlprof-run and mlprof write: checked before any work (a run's whole profile must not
// be lost to an output path that cannot take it), and written with the reason of a failure.
#pragma once
#include <string>

namespace mlprof::tools {

std::string dir_of(const std::string& path);  // "." for a bare name, "/" for "/x"

// Why `path` cannot be written as a file, or "" when it can: its directory is missing or not
// writable, or the path names a directory.
std::string output_problem(const std::string& path);

// Whether two paths name the same file: the same inode when both exist, else the same directory
// (resolved) and name.
bool same_file(const std::string& a, const std::string& b);

// Writes `data` to `path` ("" when it worked, else why it failed: "path: strerror").
std::string write_file(const std::string& path, const std::string& data);

}  // namespace mlprof::tools
