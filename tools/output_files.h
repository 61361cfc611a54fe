// The files mlprof-run and mlprof write, checked before any work: a run's whole profile must not
// be lost to an output path that cannot take it. (They are written by profile::write_file.)
#pragma once
#include <string>

namespace mlprof::tools {

std::string dir_of(const std::string& path);  // "." for a bare name, "/" for "/x"

// Why `path` cannot be written as a file, or "" when it can: the path names a directory, or its
// directory is missing or not writable. `replaced`: the file is written beside and renamed over
// (mlprof-run's profile, so the directory must be writable); else an existing file is written in
// place and only needs to be writable itself (/dev/stdout, a pipe).
std::string output_problem(const std::string& path, bool replaced);

// Whether two paths name the same file: the same inode when both exist, else the same directory
// (resolved) and name.
bool same_file(const std::string& a, const std::string& b);

}  // namespace mlprof::tools
