#include "tools/serving_resources.h"

#include "collector/proc_stat.h"

#include <dirent.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace mlprof::tools {

namespace {

using collector::ProcStat;

// The process's CPU time from the kernel's scheduler clock (clock_getcpuclockid: every thread's
// runtime, exited threads included, in ns), or -1 when it cannot be read (gone, not allowed).
// /proc/PID/stat's utime + stime are tick samples: on this project's VM a service whose threads
// run in bursts shorter than a tick showed 0-50 ms for 80 ms of CPU.
int64_t sched_cpu_ns(pid_t pid) {
  clockid_t clock;
  struct timespec ts;
  if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// VmHWM of /proc/PID/status (the process's peak RSS since it started or last exec'd), in bytes;
// -1 when not there (gone, a kernel thread, a fake /proc without it).
int64_t read_hwm_bytes(const std::string& path) {
  char buf[4096];
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strstr(buf, "\nVmHWM:");
  if (!p) return -1;
  return strtoll(p + 7, nullptr, 10) * 1024;  // "VmHWM:\t  123456 kB"
}

std::map<pid_t, ProcStat> read_all(const std::string& proc) {
  std::map<pid_t, ProcStat> all;
  if (DIR* d = opendir(proc.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      ProcStat s;
      if (collector::read_proc_stat(proc + "/" + e->d_name + "/stat", &s)) all[s.pid] = s;
    }
    closedir(d);
  }
  return all;
}

// Descendants of `ancestor` (over the ppid links), parents before their children.
std::vector<pid_t> below(const std::map<pid_t, ProcStat>& all, pid_t ancestor) {
  std::map<pid_t, std::vector<pid_t>> kids;
  for (auto& [pid, s] : all) kids[s.ppid].push_back(pid);
  std::vector<pid_t> tree, todo = {ancestor};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    for (pid_t k : kids[p]) {
      tree.push_back(k);
      todo.push_back(k);
    }
  }
  return tree;
}

}  // namespace

std::vector<pid_t> descendants(pid_t ancestor, const std::string& proc_root) {
  return below(read_all(proc_root), ancestor);
}

profile::ServingResourcePoint TreePoller::poll(int64_t t_ns) {
  std::map<pid_t, ProcStat> all = read_all(proc_);
  const std::vector<pid_t> tree = below(all, ancestor_);
  static const int64_t tick_ns = 1000000000 / std::max<long>(1, sysconf(_SC_CLK_TCK));
  static const int64_t page = sysconf(_SC_PAGESIZE);
  profile::ServingResourcePoint pt;
  pt.t_ns = t_ns;
  auto same = [&](pid_t pid, const Seen& was) {
    auto a = all.find(pid);
    return a != all.end() && a->second.start == was.start;
  };
  std::set<pid_t> in_tree(tree.begin(), tree.end());
  // A process seen at the last poll and gone now (or its pid reused) was reaped: by a process of
  // the tree, whose cutime + cstime then grew by all the CPU the gone one used (its own and its
  // reaped children's), or by mlprof-run (the command, orphans). What it had used at the last
  // poll was counted already (or is in the baseline), so the reaper's children's CPU pays that
  // back first (`owed`): the rest is what it used since, a child that lived between two polls
  // all of it. A reaper gone too passes it up to its own parent, which reaps both.
  std::map<pid_t, int64_t> owed;
  for (const auto& [pid, was] : seen_) {
    if (in_tree.count(pid) && same(pid, was)) continue;
    pid_t up = was.ppid;
    for (int hops = 0; hops < 64; ++hops) {
      auto w = seen_.find(up);
      if (w == seen_.end() || (in_tree.count(up) && same(up, w->second))) break;
      up = w->second.ppid;
    }
    owed[up] += was.cpu_ns + was.owed;
  }
  std::map<pid_t, Seen> next;
  int64_t hwm_sum = 0;
  for (pid_t pid : tree) {
    const ProcStat& s = all[pid];
    const int64_t sched = proc_ == "/proc" ? sched_cpu_ns(pid) : -1;  // a test's fake /proc: its pids are not real
    const bool precise = sched >= 0;
    const int64_t own = precise ? sched : s.cpu_ticks * tick_ns;
    const int64_t children = s.child_ticks * tick_ns;
    Seen now{s.start, s.ppid, own + children, own, children, precise, 0};
    auto it = seen_.find(pid);
    // A process seen before adds its growth; a new one adds what it used since it started
    // (its reaped children's included) only when it is not the first poll (at the first poll the
    // baseline is zero by definition). A process whose clock changed kind (it could be read, now
    // only /proc can) starts over for its own CPU.
    if (it != seen_.end() && it->second.start == s.start) {
      const Seen& was = it->second;
      if (was.precise == precise) cpu_total_ += std::max<int64_t>(0, own - was.own_ns);
      const int64_t grown = std::max<int64_t>(0, children - was.children_ns);
      int64_t debt = was.owed + (owed.count(pid) ? owed[pid] : 0);
      const int64_t paid = std::min(debt, grown);
      cpu_total_ += grown - paid;
      debt -= paid;
      // /proc gives cutime + cstime in whole ticks (the sum is truncated, not each child): what
      // a reaped child had used may exceed its reaper's growth by less than a tick. More than
      // that is a reap /proc did not show yet (read between the two files): owed to the next poll.
      now.owed = grown > 0 && debt < tick_ns ? 0 : debt;
      // Carried from an earlier poll (not only this one's new debt): dropped once old enough.
      now.owed_polls = now.owed > 0 && was.owed > 0 ? was.owed_polls + 1 : 0;
      if (now.owed_polls > kMaxOwedPolls) now.owed = now.owed_polls = 0;
    } else if (polled_) {
      cpu_total_ += own + children;
    }
    next[pid] = now;
    const int64_t rss = s.rss_pages * page;
    hwm_sum += std::max(rss, read_hwm_bytes(proc_ + "/" + std::to_string(pid) + "/status"));
    pt.rss_bytes += rss;
    pt.threads += static_cast<uint32_t>(s.threads);
    ++pt.processes;
  }
  seen_ = std::move(next);
  peak_hwm_bytes_ = std::max(peak_hwm_bytes_, hwm_sum);
  polled_ = true;
  pt.cpu_ns = cpu_total_;
  return pt;
}

int64_t peak_millicores(const std::vector<profile::ServingResourcePoint>& pts, int64_t from, int64_t to,
                        int64_t window_ns) {
  // Each point's CPU is what the tree used since the point before. The span runs from the first
  // point at or after `from` (mlprof-run takes one at ready) to the first at or after `to` (it
  // takes one just after the load's end); when no point lies between them, the interval that
  // ends at the latter (a load shorter than the poll period between two points).
  size_t lo = pts.size(), hi = pts.size();
  for (size_t i = 0; i < pts.size(); ++i) {
    if (lo == pts.size() && pts[i].t_ns >= from) lo = i;
    if (pts[i].t_ns >= to) {
      hi = i;
      break;
    }
  }
  if (pts.empty()) return 0;
  if (hi == pts.size()) hi = pts.size() - 1;
  if (lo >= hi) lo = hi > 0 ? hi - 1 : 0;
  std::vector<const profile::ServingResourcePoint*> in;
  for (size_t i = lo; i <= hi; ++i) in.push_back(&pts[i]);
  if (in.size() < 2) return 0;
  const int64_t span = in.back()->t_ns - in.front()->t_ns;
  if (span <= 0) return 0;
  if (span < window_ns) return (in.back()->cpu_ns - in.front()->cpu_ns) * 1000 / span;
  int64_t best = 0;
  size_t j = 0;
  for (size_t i = 1; i < in.size(); ++i) {
    // The latest j whose distance to i is still at least one window.
    while (j + 1 < i && in[i]->t_ns - in[j + 1]->t_ns >= window_ns) ++j;
    const int64_t dt = in[i]->t_ns - in[j]->t_ns;
    if (dt < window_ns) continue;
    best = std::max(best, (in[i]->cpu_ns - in[j]->cpu_ns) * 1000 / dt);
  }
  return best;
}

int64_t parse_cpu_max(const std::string& line) {
  std::istringstream in(line);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  char* end = nullptr;
  long long q = strtoll(quota.c_str(), &end, 10);
  if (!end || *end || q <= 0) return 0;
  return q * 1000 / period;
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  for (;;) {
    const size_t j = s.find(sep, i);
    out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) return out;
    i = j + 1;
  }
}

struct CgroupMount {
  std::string root, point;  // the hierarchy's directory mounted, and where
  bool v2 = false;
};

// The directory of cgroup `path` under a mount, or "" when the mount does not show it.
std::string cgroup_dir(const CgroupMount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/") {
    if (rel.compare(0, m.root.size(), m.root) != 0) return "";
    rel = rel.substr(m.root.size());
  }
  if (rel == "/") rel.clear();
  return m.point + rel;
}

}  // namespace

CgroupQuota cgroup_cpu_quota(const std::string& cgroup, const std::string& mountinfo,
                             const std::function<std::string(const std::string&)>& read) {
  // mountinfo: "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS"
  std::vector<CgroupMount> v2, v1cpu;
  std::istringstream mi(mountinfo);
  for (std::string line; std::getline(mi, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, src, opts;
    if (!(left >> id >> parent >> dev >> root >> point) || !(right >> fstype >> src >> opts)) continue;
    if (fstype == "cgroup2") v2.push_back({root, point, true});
    if (fstype == "cgroup")
      for (const auto& o : split(opts, ','))
        if (o == "cpu") v1cpu.push_back({root, point, false});
  }
  if (v2.empty()) v2.push_back({"/", "/sys/fs/cgroup", true});  // no mountinfo: the usual place
  CgroupQuota best;
  auto consider = [&](int64_t q, const std::string& file) {
    if (q > 0 && (best.millicores == 0 || q < best.millicores)) best = {q, file};
  };
  // "ID:CONTROLLERS:PATH": "0::PATH" is cgroup v2; a v1 line lists its controllers.
  std::istringstream cg(cgroup);
  for (std::string line; std::getline(cg, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    bool cpu = false;
    for (const auto& c : split(controllers, ',')) cpu = cpu || c == "cpu";
    const bool is_v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    if (!is_v2 && !cpu) continue;
    for (const CgroupMount& m : is_v2 ? v2 : v1cpu) {
      std::string dir = cgroup_dir(m, path);
      if (dir.empty()) continue;
      for (;;) {  // the cgroup, then its ancestors up to the mount point
        if (is_v2) {
          consider(parse_cpu_max(read(dir + "/cpu.max")), dir + "/cpu.max");
        } else {
          const std::string quota = read(dir + "/cpu.cfs_quota_us"), period = read(dir + "/cpu.cfs_period_us");
          const long long q = strtoll(quota.c_str(), nullptr, 10), p = strtoll(period.c_str(), nullptr, 10);
          if (q > 0 && p > 0) consider(q * 1000 / p, dir + "/cpu.cfs_quota_us");
        }
        if (dir.size() <= m.point.size()) break;
        dir = dir.substr(0, dir.rfind('/'));
      }
    }
  }
  return best;
}

CgroupQuota own_cgroup_cpu_quota() {
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  return cgroup_cpu_quota(slurp("/proc/self/cgroup"), slurp("/proc/self/mountinfo"), slurp);
}

int64_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
}

int64_t available_millicores(std::string* source) {
  const int64_t cpus = usable_cpus();
  const CgroupQuota q = own_cgroup_cpu_quota();
  if (q.millicores > 0 && q.millicores < cpus * 1000) {
    if (source) *source = "cgroup CPU quota (" + q.source + ")";
    return q.millicores;
  }
  if (source) *source = "online CPUs";
  return cpus * 1000;
}

}  // namespace mlprof::tools
