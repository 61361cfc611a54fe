// Resource use of the service, measured from outside: mlprof-run polls /proc for every process
// below itself (the command and its descendants; orphans are reparented to mlprof-run, a child
// subreaper) at ~10 Hz, and reads the CPUs the service may use (cgroup v2 or v1 CPU quota,
// affinity).
// Independent of the preload, so the figures hold with --no-profile too.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "profile/model.h"

namespace mlprof::tools {

class TreePoller {
 public:
  explicit TreePoller(pid_t ancestor, std::string proc_root = "/proc")
      : ancestor_(ancestor), proc_(std::move(proc_root)) {}
  // One poll: CPU used by the tree since the first poll (sum over processes of their CPU growth
  // between polls, so processes that come and go count while seen), summed RSS, counts. A
  // process's CPU is its own, from its scheduler clock (clock_getcpuclockid: ns, exited threads
  // included) or /proc/PID/stat's utime + stime ticks where that clock cannot be read, plus its
  // reaped children's (cutime + cstime, ticks): a child that lived between two polls (a process
  // forked per request) counts when its parent reaps it, a child seen alive is not counted twice.
  profile::ServingResourcePoint poll(int64_t t_ns);
  // The peak RSS of the tree so far: the largest, over polls, of the sum over the processes then
  // of each one's VmHWM (/proc/PID/status: its peak RSS, which the kernel keeps; its RSS where
  // that is missing). A spike between two polls counts as long as its process still lives;
  // exact for one process, high for several (their peaks need not have been at the same time).
  int64_t peak_hwm_bytes() const { return peak_hwm_bytes_; }
  // The processes of the tree at the last poll, with their CPU time then (ns).
  std::map<pid_t, int64_t> cpu_by_pid() const {
    std::map<pid_t, int64_t> out;
    for (const auto& [pid, seen] : seen_) out[pid] = seen.cpu_ns;
    return out;
  }

 private:
  struct Seen {
    uint64_t start = 0;    // start time (field 22): tells a reused pid apart
    pid_t ppid = 0;
    int64_t cpu_ns = 0;    // own_ns + children_ns
    int64_t own_ns = 0;    // its threads' CPU
    int64_t children_ns = 0;  // its reaped children's (cutime + cstime)
    bool precise = false;  // own_ns from the scheduler's clock, not /proc's ticks
    int64_t owed = 0;      // CPU of gone children counted already, not yet in children_ns
    int owed_polls = 0;    // polls that debt has been carried (dropped after kMaxOwedPolls)
  };
  // A reap shows in the reaper's cutime by the next poll or two; a debt older than that is a child
  // its parent never waited for (SIGCHLD ignored: the kernel reaps it, and no cutime grows), and
  // carried on it would swallow the CPU of the children it does wait for.
  static constexpr int kMaxOwedPolls = 2;
  pid_t ancestor_;
  std::string proc_;
  std::map<pid_t, Seen> seen_;
  int64_t cpu_total_ = 0;
  int64_t peak_hwm_bytes_ = 0;
  bool polled_ = false;
};

// The processes below `ancestor` (its children, theirs, ...; for mlprof-run, a child subreaper,
// also the orphans reparented to it), parents first, from /proc's ppid links.
std::vector<pid_t> descendants(pid_t ancestor, const std::string& proc_root = "/proc");

// Peak CPU use in millicores over windows of at least window_ns, among the points that cover
// [from, to]: from the first point at or after `from` to the first at or after `to`, or the one
// interval ending at the latter when no point lies between (the average over that span when it is
// shorter than one window). 0 with fewer than two points.
int64_t peak_millicores(const std::vector<profile::ServingResourcePoint>& pts, int64_t from, int64_t to,
                        int64_t window_ns = 1000000000);

// The CPUs in this process's affinity mask (else the online CPUs; at least 1).
int64_t usable_cpus();

// CPUs this process may use, in millicores: the cgroup CPU quota (cgroup_cpu_quota) when it is
// below the CPUs in our affinity mask, else those CPUs. *source says which.
int64_t available_millicores(std::string* source);
// Parses a cgroup v2 cpu.max line: quota / period in millicores, or 0 for "max" / garbage.
int64_t parse_cpu_max(const std::string& line);

// The smallest CPU quota, in millicores, of this process's cgroup and its ancestors, in cgroup v2
// (cpu.max) and in a v1 cpu hierarchy (cpu.cfs_quota_us / cpu.cfs_period_us; -1 = none), found
// from the texts of /proc/self/cgroup and /proc/self/mountinfo; `read` returns a file's contents
// ("" when unreadable). 0 when no quota is set. *source names the file that set it.
struct CgroupQuota {
  int64_t millicores = 0;
  std::string source;
};
CgroupQuota cgroup_cpu_quota(const std::string& cgroup, const std::string& mountinfo,
                             const std::function<std::string(const std::string&)>& read);
// The same for this process, from the real files (children inherit its cgroup).
CgroupQuota own_cgroup_cpu_quota();

}  // namespace mlprof::tools
