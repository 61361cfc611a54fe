#include "tools/serving_session.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>

#include "common/clock.h"
#include "tools/serving_advice.h"
#include "tools/serving_recommend.h"
#include "tools/serving_resources.h"
#include "tools/serving_stats.h"
#include "tools/serving_window.h"

namespace mlprof::tools {

namespace {
constexpr size_t kMaxPoints = 1 << 16;  // 10 Hz: 1.8 hours before points are merged pairwise
constexpr int64_t kInterruptSlackNs = 100000000;  // a failure this long before the interrupt is its
}  // namespace

ServingSession::ServingSession(ServingOptions o, double duration_s, std::vector<std::string> bodies, char** env)
    : o_(std::move(o)), duration_s_(duration_s), bodies_(std::move(bodies)), thread_env_(thread_pool_env(env)) {}

ServingSession::~ServingSession() { join(); }

void ServingSession::start(pid_t ancestor, pid_t service) {
  service_pid_ = service;
  load_thread_ = std::thread([this] { load_main(); });
  poll_thread_ = std::thread([this, ancestor] { poll_main(ancestor); });
}

void ServingSession::service_exited(int exit_code) {
  if (exited_.exchange(true)) return;
  exit_code_ = exit_code;
  exited_ns_ = clock_ns();
  stop_ = true;
}

void ServingSession::join() {
  stop_ = true;
  stop_poll_ = true;
  if (load_thread_.joinable()) load_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
}

void ServingSession::load_main() {
  ready_ = wait_ready(o_.readiness_url(), o_.ready_timeout_s, stop_, service_pid_);
  if (ready_.ready) {
    // A resource point at ready, so the load's CPU peak starts there and not up to 100 ms
    // earlier, inside the start-up (model loading can use every core).
    ready_seen_ = true;
    poll_now_ = true;
    for (int i = 0; i < 50 && poll_now_.load() && !stop_poll_.load(); ++i) usleep(1000);
    LoadConfig c;
    c.url = o_.url;
    c.content_type = o_.content_type;
    c.bodies = &bodies_;
    c.concurrency = o_.concurrency;
    c.rps = o_.rps;
    c.max_requests = o_.max_requests;
    c.warmup = o_.warmup;
    c.timeout_s = o_.timeout_s;
    c.duration_s = duration_s_;
    c.service_pid = service_pid_;
    load_ = run_load(c, stop_, &window_);
  }
  done_ = true;
}

// Every 100 ms from the service's start until the load ends, at ready (poll_now_), and once more
// when the load ends: a load shorter than the period (300 requests at 26,000/s) still has a first
// and a last point of its own.
// The thread-pool variables come from each service process's own environment (/proc/PID/environ:
// as it was at the process's last exec, so `-- env OMP_NUM_THREADS=4 python3 serve.py` counts),
// read at every poll (a process may exec again) and merged over the processes that used CPU
// (10 ms or more since the service answered, or since first seen before that): a shell that
// exported other values before starting the server without exec waits idle and does not count,
// whatever its own start-up cost. Over every process when none did.
void ServingSession::poll_main(pid_t ancestor) {
  TreePoller poller(ancestor);
  std::map<pid_t, std::map<std::string, std::string>> env_of;
  std::map<pid_t, int64_t> first_cpu;
  std::set<pid_t> busy;
  bool rebased = false;  // first_cpu taken again once the service answered
  auto take = [&] {
    auto pt = poller.poll(clock_ns());
    const bool rebase = !rebased && ready_seen_.load();
    if (rebase) {
      rebased = true;
      busy.clear();  // start-up work (loading, a shell's own start) is not serving
    }
    for (const auto& [pid, cpu] : poller.cpu_by_pid()) {
      auto [it, fresh] = first_cpu.emplace(pid, cpu);
      if (rebase) it->second = cpu;
      else if (!fresh && cpu - it->second >= 10000000) busy.insert(pid);
      std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
      std::string block((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (!f.bad() && !block.empty()) env_of[pid] = thread_pool_env_block(block);
    }
    std::map<std::string, std::string> env;
    bool any_busy = false;
    for (const auto& [pid, e] : env_of) any_busy = any_busy || busy.count(pid);
    for (const auto& [pid, e] : env_of)
      if (!any_busy || busy.count(pid)) merge_thread_env(&env, e);
    std::lock_guard<std::mutex> g(points_mu_);
    if (!env_of.empty()) thread_env_ = std::move(env);  // the service's own, no longer mlprof-run's
    points_.push_back(pt);
    peak_hwm_bytes_ = poller.peak_hwm_bytes();
    if (points_.size() >= kMaxPoints) {  // keep every other point: the span stays covered
      size_t k = 0;
      for (size_t i = 0; i < points_.size(); i += 2) points_[k++] = points_[i];
      points_.resize(k);
    }
  };
  while (!stop_poll_.load() && !done_.load()) {
    take();
    for (int i = 0; i < 100 && !stop_poll_.load() && !done_.load() && !poll_now_.load(); ++i) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, nullptr);
    }
    poll_now_ = false;
  }
  if (done_.load()) take();  // the load's end (mlprof-run stops the service only after it)
}

int ServingSession::finish(profile::Profile& prof) {
  join();
  profile::Serving& s = prof.serving;
  s.present = true;
  s.url = o_.url;
  s.requests_file = o_.requests;
  s.content_type = o_.content_type;
  s.load_mode = o_.rps > 0 ? "open" : "closed";
  s.concurrency = o_.rps > 0 ? load_.max_in_flight : o_.concurrency;
  s.rps_milli = static_cast<int64_t>(o_.rps * 1000 + 0.5);
  s.warmup = o_.warmup;
  s.timeout_ns = static_cast<int64_t>(o_.timeout_s * 1e9);
  s.ready_ns = ready_.ready ? ready_.ready_ns : 0;
  s.load_start_ns = load_.start_ns;
  s.load_end_ns = load_.end_ns;
  s.window_start_ns = load_.window_start_ns;
  s.window_end_ns = load_.window_end_ns;
  s.late_starts = load_.late_starts;
  s.requests = std::move(load_.requests);
  // Requests cut off by mlprof-run's interruption are not the service's failures (they counted as
  // such: successRate 0.973 for a service that answered every request): abandoned in flight, or
  // failed on the service's own shutdown (the terminal's Ctrl-C reaches it too, at the same moment,
  // so up to 100 ms before mlprof-run noticed). Left out of the figures (status kAborted).
  if (const int64_t t_int = interrupted_ns_.load(); t_int > 0)
    for (auto& r : s.requests)
      if (r.status == 0 && r.start_ns + r.latency_ns >= t_int - kInterruptSlackNs)
        r.status = profile::ServingRequest::kAborted;
  // The steady window's requests: those after the warmup that no interruption or --duration cut off.
  s.window_requests = 0;
  if (s.window_start_ns > 0)
    for (size_t i = s.warmup; i < s.requests.size(); ++i)
      s.window_requests += s.requests[i].status != profile::ServingRequest::kAborted;
  s.thread_env = thread_env_;
  {
    std::lock_guard<std::mutex> g(points_mu_);
    s.resources = points_;
    s.max_utilized_memory_bytes = peak_hwm_bytes_;
  }
  fill_latency_fields(s);
  std::string cpu_source;
  s.available_millicores = available_millicores(&cpu_source);
  const int64_t from = s.ready_ns ? s.ready_ns : s.load_start_ns;
  s.max_utilized_millicores = s.load_end_ns > from ? peak_millicores(s.resources, from, s.load_end_ns) : 0;
  // The peak of the processes' own peaks (VmHWM): a spike between two polls counts, which the
  // polled RSS missed (a request that briefly held 800 MiB read 0.71-0.77 GiB).
  for (auto& pt : s.resources) s.max_utilized_memory_bytes = std::max(s.max_utilized_memory_bytes, pt.rss_bytes);

  const int code = exit_code_.load();
  const std::string exit_desc = code > 128 ? fmt::format("was killed by signal {}", code - 128)
                                           : fmt::format("exited with status {}", code);
  int rc = kExitServingOk;
  if (interrupted_.load() && !(ready_.ready && !load_.stopped)) {
    s.outcome = "interrupted";
    s.error = fmt::format("interrupted after {} of the requests", s.requests.size());
    rc = kExitServingInterrupted;
  } else if (!ready_.ready && ready_.stopped && exited_.load()) {  // the exit ended the wait
    s.outcome = "service-exited";
    s.error = fmt::format(
        "the service {} before it answered on {}: see its output above (a crash while loading, a wrong command "
        "line or a port already in use?)",
        exit_desc, o_.readiness_url());
    rc = kExitServingExited;
  } else if (!ready_.ready) {
    s.outcome = "not-ready";
    s.error = fmt::format(
        "the service did not answer on {} within {:g} s (last attempt: {}); check that it listens on that host and "
        "port, or raise --ready-timeout if it loads slowly. mlprof-run stopped it",
        o_.readiness_url(), o_.ready_timeout_s, ready_.last_error.empty() ? "no answer" : ready_.last_error);
    rc = kExitServingNotReady;
  } else if (load_.stopped || (exited_.load() && exited_ns_.load() <= load_.end_ns)) {
    // Stopped by the exit, or the exit was seen only after the last request failed on it.
    s.outcome = "service-exited";
    s.error = fmt::format(
        "the service {} during the replay, after {} requests ({} answered with 2xx){}: see its output above; the "
        "figures cover the requests sent until then",
        exit_desc, s.requests.size(), s.success_queries,
        load_.first_error.empty() ? "" : fmt::format("; the first failed request: {}", load_.first_error));
    rc = kExitServingExited;
  } else if (load_.time_limit) {
    s.outcome = "time-limit";
  } else {
    s.outcome = "completed";
  }
  // --duration ended the replay before the warmup did: no steady-state request (the figures read
  // 0 ms and a recommendation came from a load that was all warmup).
  const bool steady = s.window_requests > 0;
  if (rc == kExitServingOk && !steady) {
    const uint64_t warmup_sent = std::min<uint64_t>(s.warmup, s.requests.size());
    const std::string by = load_.time_limit ? fmt::format("--duration {:g} s", duration_s_) : std::string("the load");
    if (s.requests.size() > s.warmup)  // the steady requests were all cut off
      s.error = fmt::format(
          "no steady-state request was measured: {} ended the replay, and the {} request(s) still in flight {:g} s "
          "later were cut off; raise --duration (or --timeout, if the service answers that slowly). No latency, "
          "throughput or recommendation",
          by, load_.cut_at_limit, kDurationGraceS);
    else
      s.error = fmt::format(
          "no steady-state request was measured: {} ended the replay during the warmup, after {} of the {} warmup "
          "requests; raise --duration or lower --warmup. No latency, throughput or recommendation",
          by, warmup_sent, s.warmup);
  }
  // A recommendation only from a replay that ran to its end (or to --duration) and measured the
  // steady state: the peaks of a run that failed say nothing about what the service needs
  // (requested_* stay 0: none).
  if ((s.outcome == "completed" || s.outcome == "time-limit") && steady) {
    Recommendation r = recommend(s.max_utilized_millicores, s.max_utilized_memory_bytes);
    s.requested_millicores = r.millicores;
    s.requested_memory_bytes = r.memory_bytes;
  }
  if (steady && s.window_end_ns > s.window_start_ns) {
    fill_window_lines(prof, s);
    WindowCpu w = window_cpu(prof, s.window_start_ns, s.window_end_ns);
    s.advice = serving_advice(prof, s, w);
  }
  if (!s.error.empty()) fprintf(stderr, "mlprof-run: %s\n", s.error.c_str());
  return rc;
}

}  // namespace mlprof::tools
