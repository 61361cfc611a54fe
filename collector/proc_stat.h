// /proc/PID/stat, read by the collector (is a process whose connection closed still running?)
// and by the serving workflow's resource poller (tools/serving_resources.h).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace mlprof::collector {

struct ProcStat {
  pid_t pid = 0, ppid = 0;
  char state = 0;           // R, S, D, Z, X, ...
  uint64_t flags = 0;       // the kernel's PF_* flags
  int64_t cpu_ticks = 0;    // utime + stime: the process's own threads
  int64_t child_ticks = 0;  // cutime + cstime: its children it reaped (and theirs, recursively)
  int64_t threads = 0;
  int64_t rss_pages = 0;
  uint64_t start = 0;
};

// Reads a /proc/PID/stat file (`path`); false when it cannot be read or parsed.
bool read_proc_stat(const std::string& path, ProcStat* s);

}  // namespace mlprof::collector
