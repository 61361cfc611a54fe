#include "collector/proc_stat.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mlprof::collector {

// "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so fields are counted from
// the last ')'.
bool read_proc_stat(const std::string& path, ProcStat* s) {
  char buf[1024];
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* close = strrchr(buf, ')');
  if (!close || close[1] == 0) return false;
  s->pid = atoi(buf);
  // Fields after ')' start at field 3 (state).
  const char* p = close + 2;
  int field = 3;
  char* end = nullptr;
  while (*p && field <= 24) {
    if (field == 3) {
      s->state = *p;
    } else {
      long long v = strtoll(p, &end, 10);
      switch (field) {
        case 4: s->ppid = static_cast<pid_t>(v); break;
        case 9: s->flags = static_cast<uint64_t>(v); break;
        case 14: s->cpu_ticks += v; break;  // utime
        case 15: s->cpu_ticks += v; break;  // stime
        case 16: s->child_ticks += v; break;  // cutime
        case 17: s->child_ticks += v; break;  // cstime
        case 20: s->threads = v; break;
        case 22: s->start = static_cast<uint64_t>(v); break;
        case 24: s->rss_pages = v; break;
      }
    }
    p = strchr(p, ' ');
    if (!p) break;
    ++p;
    ++field;
  }
  return field > 24;
}

}  // namespace mlprof::collector
