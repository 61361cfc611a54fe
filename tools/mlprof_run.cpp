// mlprof-run: starts the collector, runs the command with the preload, forwards signals, stops on
// --duration, then writes the profile, the HTML report and a short summary. Returns the command's
// exit status (128+N when it died of signal N). With --requests/--url (the serving workflow,
// docs/serving.md) it also replays the request file against the service, stops the service when
// the replay ends, and returns the serving exit status (tools/serving_session.h).
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "collector/profile_builder.h"
#include "common/clock.h"
#include "collector/server.h"
#include "common/wire_format.h"
#include "fmt/format.h"
#include "profile/profile_io.h"
#include "report/report.h"
#include "tools/output_files.h"
#include "tools/preload_reach.h"
#include "tools/preload_variant.h"
#include "tools/run_options.h"
#include "tools/serving_resources.h"
#include "tools/serving_session.h"

extern char** environ;

namespace {

using namespace mlprof;

using tools::dir_of;

// The preload: MLPROF_PRELOAD_PATH, next to this executable (build tree), or ../lib/mlprof.
std::string find_preload() {
  if (const char* p = getenv("MLPROF_PRELOAD_PATH"); p && *p) return access(p, R_OK) == 0 ? p : "";
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir = dir_of(std::string(self, static_cast<size_t>(n)));
  for (const std::string& cand : {dir + "/libmlprof_preload.so", dir + "/../lib/mlprof/libmlprof_preload.so"}) {
    char real[PATH_MAX];
    if (access(cand.c_str(), R_OK) == 0 && realpath(cand.c_str(), real)) return real;
  }
  return "";
}

std::string default_output(const std::vector<std::string>& cmd) {
  std::string name = cmd[0].substr(cmd[0].rfind('/') + 1);
  for (auto& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
  time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return fmt::format("mlprof-{}-{}.mlprof", name, stamp);
}

// The CPUs the command can use, for the report's "more busy threads than CPUs" hint:
// extra["cpus"] = CPUs in our affinity mask (else online), extra["cpu_quota"] = the cgroup CPU
// limit (v2 cpu.max or v1 cpu.cfs_quota_us, tools::own_cgroup_cpu_quota) when one is set.
void record_cpus(profile::RunInfo& run) {
  run.extra["cpus"] = fmt::format("{}", tools::usable_cpus());
  const tools::CgroupQuota q = tools::own_cgroup_cpu_quota();
  if (q.millicores > 0) run.extra["cpu_quota"] = fmt::format("{:.2f}", q.millicores / 1000.0);
}

std::string html_path_for(const std::string& profile) {
  std::string base = profile;
  if (base.size() > 7 && base.compare(base.size() - 7, 7, ".mlprof") == 0) base.resize(base.size() - 7);
  return base + ".html";
}

// MLPROF_DISABLE=1 in mlprof-run's environment: the command inherits it, and the preload stays off.
bool preload_disabled() {
  const char* d = getenv("MLPROF_DISABLE");
  return d && strcmp(d, "1") == 0;
}

// Why a run profiled no process at all: the preload never reported from the command.
std::string nothing_profiled(const std::string& command) {
  if (preload_disabled())
    return "no process was profiled: MLPROF_DISABLE=1 is set in the environment, which turns mlprof's preload off; "
           "unset it";
  const std::string exe = tools::resolve_command(command);
  const std::string why = tools::preload_blocker(exe);
  if (!why.empty())
    return fmt::format(
        "no process was profiled: {} is {}, and the loader ignores LD_PRELOAD for such a program (a statically "
        "linked one has no loader; a set-id one runs in secure mode), so mlprof's preload never ran in it; profile "
        "a dynamically linked build{}",
        exe, why, why == "statically linked" ? "" : ", or a copy without the set-id bit");
  return "no process was profiled: mlprof's preload never reported from the command (a statically linked or "
         "set-id program it ran, or one that removed LD_PRELOAD from its environment before running its work)";
}

struct Child {
  pid_t pid = -1;
  int exec_errno = 0;
};

// Starts the command with the preload (without it when `preload` is empty: serving --no-profile).
// Reports exec failures through a close-on-exec pipe.
Child spawn(const tools::RunOptions& o, const std::string& preload, const std::string& socket, const sigset_t& orig_mask) {
  std::vector<std::string> env_strings;
  // The preload goes first: its malloc/free/memcpy hooks must be found before those of an allocator
  // the user preloads (tcmalloc, jemalloc), which the hooks then reach as the next definition.
  std::string ld = preload;
  if (const char* cur = getenv("LD_PRELOAD"); cur && *cur) ld = preload + ":" + cur;
  for (char** e = environ; *e; ++e) {
    if (!preload.empty() && (strncmp(*e, "LD_PRELOAD=", 11) == 0 || strncmp(*e, "MLPROF_", 7) == 0)) continue;
    env_strings.emplace_back(*e);
  }
  if (!preload.empty()) {
    env_strings.push_back("LD_PRELOAD=" + ld);
    env_strings.push_back("MLPROF_SOCKET=" + socket);
    env_strings.push_back(fmt::format("MLPROF_RATE={}", o.rate_hz));
    if (!o.unwinder.empty()) env_strings.push_back("MLPROF_UNWINDER=" + o.unwinder);
    env_strings.push_back("MLPROF_MODE=" + o.mode);
    if (o.quiet) env_strings.push_back("MLPROF_QUIET=1");
    // Memory options override the user's own MLPROF_MEMORY / MLPROF_MEM_INTERVAL; without them those
    // pass through like the other MLPROF_* settings.
    if (o.no_memory) env_strings.push_back("MLPROF_MEMORY=0");
    if (o.no_gpu) env_strings.push_back("MLPROF_GPU=0");
    if (o.mem_interval) env_strings.push_back(fmt::format("MLPROF_MEM_INTERVAL={}", o.mem_interval));
    auto starts = [](const char* e, const char* prefix) { return strncmp(e, prefix, strlen(prefix)) == 0; };
    for (char** e = environ; *e; ++e)  // pass through the user's own MLPROF_* settings (MLPROF_SIGNAL, ...)
      if (starts(*e, "MLPROF_") && !starts(*e, "MLPROF_SOCKET=") && !starts(*e, "MLPROF_RATE=") &&
          !starts(*e, "MLPROF_OUTPUT_DIR=") && !starts(*e, "MLPROF_MODE=") && !starts(*e, "MLPROF_PRELOAD_PATH=") &&
          !(o.no_memory && starts(*e, "MLPROF_MEMORY=")) && !(o.mem_interval && starts(*e, "MLPROF_MEM_INTERVAL=")) &&
          !(o.no_gpu && starts(*e, "MLPROF_GPU=")))
        env_strings.emplace_back(*e);
  }
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int pfd[2];
  Child c;
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    c.exec_errno = errno;
    return c;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    sigprocmask(SIG_SETMASK, &orig_mask, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t w = write(pfd[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(pfd[1]);
  if (pid < 0) {
    c.exec_errno = errno;
    close(pfd[0]);
    return c;
  }
  c.pid = pid;
  int e = 0;
  if (read(pfd[0], &e, sizeof e) == sizeof e) c.exec_errno = e;
  close(pfd[0]);
  return c;
}

int status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tools::RunOptions o;
  int code = 0;
  if (!tools::parse_run_options(argc, argv, &o, &code)) return code;
  if (o.output.empty()) o.output = default_output(o.command);
  if (!o.no_html && o.html.empty()) o.html = html_path_for(o.output);
  // Checked before the command runs: a run's whole profile must not be lost at its end.
  std::string why = tools::output_problem(o.output, true);
  if (why.empty() && !o.no_html) why = tools::output_problem(o.html, false);
  if (why.empty() && !o.no_html && tools::same_file(o.output, o.html))
    why = fmt::format("-o and --html both name {}: the report would replace the profile", o.output);
  if (!why.empty()) {
    fprintf(stderr, "mlprof-run: cannot write the output: %s\n", why.c_str());
    return 2;
  }
  const bool serving = o.serving.enabled();
  if (preload_disabled() && !o.quiet && !o.serving.no_profile)
    fprintf(stderr, "mlprof-run: MLPROF_DISABLE=1 is set: mlprof's preload stays off in the command, so nothing "
                    "will be profiled (unset it)\n");
  std::vector<std::string> bodies;
  if (serving) {
    if (!tools::read_request_bodies(o.serving.requests, &bodies, &why)) {
      fprintf(stderr, "mlprof-run: %s\n", why.c_str());
      return 2;
    }
    const uint64_t total = o.serving.max_requests ? o.serving.max_requests : bodies.size();
    if (o.serving.warmup >= total) {
      fprintf(stderr,
              "mlprof-run: --warmup %llu leaves no request for the steady state (%llu requests in all); lower it or "
              "raise --max-requests\n",
              static_cast<unsigned long long>(o.serving.warmup), static_cast<unsigned long long>(total));
      return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
  }
  std::string preload = serving && o.serving.no_profile ? std::string() : find_preload();
  if (preload.empty() && !(serving && o.serving.no_profile)) {
    fprintf(stderr,
            "mlprof-run: libmlprof_preload.so not found next to mlprof-run or in ../lib/mlprof; "
            "set MLPROF_PRELOAD_PATH to its path\n");
    return 2;
  }

  // An allocator in the user's LD_PRELOAD that defines operator new (tcmalloc, jemalloc) serves C++
  // allocations without calling malloc: the preload variant with operator new/delete hooks sees them
  // (unless MLPROF_PRELOAD_PATH names the preload to use).
  const char* explicit_preload = getenv("MLPROF_PRELOAD_PATH");
  if (!preload.empty() && !o.no_memory && !(explicit_preload && *explicit_preload)) {
    const char* user = getenv("LD_PRELOAD");
    const std::string lib = user ? tools::library_defining_operator_new(user) : std::string();
    if (!lib.empty()) {
      const std::string variant = dir_of(preload) + "/libmlprof_preload_new.so";
      if (access(variant.c_str(), R_OK) == 0) {
        if (!o.quiet)
          fprintf(stderr, "mlprof-run: %s (LD_PRELOAD) defines operator new: using libmlprof_preload_new.so, which hooks it\n",
                  lib.c_str());
        preload = variant;
      } else {
        fprintf(stderr,
                "mlprof-run: %s (LD_PRELOAD) defines operator new and libmlprof_preload_new.so is not next to %s: "
                "C++ new/delete allocations will not be seen\n",
                lib.c_str(), preload.c_str());
      }
    }
  }

  // CPU only: the preload without allocation hooks, so the program's malloc/free/memcpy calls go
  // straight to libc (the full preload would only forward them). The full one still works when
  // the variant is missing (an install that copied only libmlprof_preload.so).
  if (!preload.empty() && o.no_memory && !(explicit_preload && *explicit_preload)) {
    const std::string variant = dir_of(preload) + "/libmlprof_preload_cpu.so";
    if (access(variant.c_str(), R_OK) == 0) preload = variant;
  }

  collector::Server server;
  if (Status st = server.listen(); !st.ok()) {
    fprintf(stderr, "mlprof-run: %s\n", st.error.c_str());
    return 2;
  }

  // Signals arrive through a signalfd; the child gets the original mask back before exec.
  sigset_t mask, orig_mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, &orig_mask);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  // Orphaned grandchildren (daemonizing servers, workers) are reparented to us, not to init.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  profile::RunInfo run;
  run.command = o.command;
  run.start_realtime_ns = clock_ns(CLOCK_REALTIME);
  run.start_ns = clock_ns();
  run.rate_hz = o.rate_hz;
  run.timer = "thread-cpu-timer";  // replaced by the streams' own clock in build_profile
  run.mode = o.mode;
  run.mlprof_version = MLPROF_VERSION;
  record_cpus(run);
  char buf[PATH_MAX];
  if (getcwd(buf, sizeof buf)) run.cwd = buf;
  if (gethostname(buf, sizeof buf) == 0) run.hostname = buf;

  std::unique_ptr<tools::ServingSession> session;
  if (serving) {
    session = std::make_unique<tools::ServingSession>(o.serving, o.duration_s, std::move(bodies), environ);
    server.set_memory_window(session->window());
  }
  Child child = spawn(o, preload, server.socket_path(), orig_mask);
  if (child.pid < 0 || child.exec_errno) {
    fprintf(stderr, "mlprof-run: cannot run '%s': %s\n", o.command[0].c_str(), strerror(child.exec_errno));
    if (child.pid > 0) waitpid(child.pid, nullptr, 0);
    return child.exec_errno == ENOENT ? 127 : 126;
  }
  if (session) session->start(getpid(), child.pid);

  const bool status_line = !o.quiet && isatty(STDERR_FILENO);
  const int64_t start = clock_ns();
  // Serving: --duration bounds the replay (the load thread), and the service stops when it ends.
  const int64_t deadline = o.duration_s > 0 && !serving ? start + static_cast<int64_t>(o.duration_s * 1e9) : INT64_MAX;
  int phase = 0;  // --duration: 1 flush asked, 2 SIGTERM sent, 3 SIGKILL sent
  std::set<uint32_t> stopped_pids;  // the processes SIGTERM was sent to (phase 2)
  int64_t phase_t = 0, exited_t = 0, last_status = 0;
  bool child_done = false, detach_sent = false;
  size_t killed_below = 0;  // processes below the command still running 5 s after the stopping SIGTERM
  bool below_done = false;  // none is left below the command (no more /proc scans)
  int child_status = 0;

  for (;;) {
    bool sig = server.poll_once(100, sfd);
    if (sig) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGCHLD) continue;
        if (session) session->interrupt();
        // A signal from the terminal (SI_KERNEL) reached the whole foreground group, the command
        // included; one sent to mlprof-run alone is passed on.
        if (si.ssi_code != SI_KERNEL && !child_done) kill(child.pid, static_cast<int>(si.ssi_signo));
      }
    }
    for (;;) {  // reap the command and any orphans reparented to us
      int st = 0;
      pid_t p = waitpid(-1, &st, WNOHANG);
      if (p <= 0) break;
      if (p == child.pid) {
        child_done = true;
        child_status = st;
        exited_t = clock_ns();
        if (session) session->service_exited(status_to_code(st));
      }
    }
    int64_t t = clock_ns();
    if (!child_done) {
      if (phase == 0 && (t >= deadline || (session && session->load_finished()))) {
        server.broadcast(static_cast<uint8_t>(wire::Command::kFlush));
        phase = 1;
        phase_t = t;
      } else if (phase == 1 && (server.flushed_replies() >= server.open_connections() || t - phase_t > 1000000000)) {
        // The command and every process below it: a wrapper script's server (sh -c '...; python3
        // serve.py') would otherwise outlive the run.
        // The command is among the descendants; it is signalled first and once (a second SIGTERM
        // can mean "stop now" to a program's own handler).
        kill(child.pid, SIGTERM);
        stopped_pids.insert(static_cast<uint32_t>(child.pid));
        for (pid_t p : tools::descendants(getpid()))
          if (p != child.pid && kill(p, SIGTERM) == 0) stopped_pids.insert(static_cast<uint32_t>(p));
        phase = 2;
        phase_t = t;
      } else if (phase == 2 && t - phase_t > 5000000000LL) {
        if (!o.quiet) fprintf(stderr, "\nmlprof-run: the command ignored SIGTERM for 5 s; sending SIGKILL\n");
        kill(child.pid, SIGKILL);
        for (pid_t p : tools::descendants(getpid()))
          if (p != child.pid) kill(p, SIGKILL);
        phase = 3;
      }
    } else if (phase == 2 && !below_done) {
      // Stopping the run (--duration, the serving load's end): the command went, but processes
      // below it that ignored the SIGTERM (a prefork server's workers) are killed 5 s after it,
      // like the command would have been, not detached to run on after mlprof-run. Once none is
      // left, the branch below waits for the streams as for any command that ended.
      const std::vector<pid_t> left = tools::descendants(getpid());
      below_done = left.empty();
      if (!below_done && t - phase_t > 5000000000LL) {
        if (!o.quiet)
          fprintf(stderr, "\nmlprof-run: %zu process%s below the command still ran 5 s after SIGTERM; sending SIGKILL\n",
                  left.size(), left.size() == 1 ? "" : "es");
        for (pid_t p : left) {
          kill(p, SIGKILL);
          stopped_pids.insert(static_cast<uint32_t>(p));  // ended on purpose: not "killed or crashed"
        }
        killed_below = left.size();
        // Orphans are mlprof-run's children (the subreaper): reaped here, so that none outlives
        // the run, not even as a zombie for init to collect.
        const int64_t until = clock_ns() + 1000000000LL;
        for (pid_t p : left)
          while (waitpid(p, nullptr, WNOHANG) == 0 && clock_ns() < until) usleep(5000);
        phase = 3;
        exited_t = clock_ns();  // the detach grace below counts from here: their streams end now
      }
    } else {
      if (server.open_connections() == 0) break;
      // Processes that outlive the command (daemons) are detached after a grace period.
      if (!detach_sent && t - exited_t > 2000000000LL) {
        server.broadcast(static_cast<uint8_t>(wire::Command::kDetach));
        detach_sent = true;
      } else if (detach_sent && t - exited_t > 4000000000LL) {
        break;
      }
    }
    if (status_line && t - last_status > 500000000) {
      last_status = t;
      fprintf(stderr, "\r\033[Kmlprof: %.1fs  samples %llu  processes %zu  dropped %llu", (t - start) / 1e9,
              static_cast<unsigned long long>(server.samples()), server.streams(),
              static_cast<unsigned long long>(server.dropped()));
    }
  }
  if (status_line) fprintf(stderr, "\r\033[K");

  run.end_ns = clock_ns();
  run.exit_status = status_to_code(child_status);
  // mlprof-run stopped the command itself (after flushing every stream): say so, and its stream's
  // missing END is no warning. A command that caught SIGTERM and exited on its own ended cleanly.
  const bool stopped_here = phase >= 2 && WIFSIGNALED(child_status) &&
                            (WTERMSIG(child_status) == SIGTERM || WTERMSIG(child_status) == SIGKILL);
  if (stopped_here) {
    const char* why = serving ? "at the end of the serving load" : "after --duration";
    run.extra["stopped_by"] = WTERMSIG(child_status) == SIGKILL
                                  ? fmt::format("mlprof-run (SIGKILL {}: SIGTERM was ignored for 5 s)", why)
                                  : fmt::format("mlprof-run (SIGTERM {}, once the event streams were flushed)", why);
  }
  if (killed_below > 0) {
    std::string& by = run.extra["stopped_by"];
    const std::string what = fmt::format("{} process{} below the command still ran 5 s after SIGTERM and got SIGKILL",
                                         killed_below, killed_below == 1 ? "" : "es");
    by = by.empty() ? "mlprof-run (" + what + ")" : by + "; " + what;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  run.collector_cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
                         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;

  // libdw would ask debuginfod servers (DEBUGINFOD_URLS) for missing debug info: slow, and over
  // the network. Only when the user asks for it (the command's environment was fixed at spawn).
  if (!getenv("MLPROF_DEBUGINFOD")) unsetenv("DEBUGINFOD_URLS");
  std::vector<collector::ProcessStream> streams = server.take_streams();
  std::vector<std::string> server_warnings = server.warnings();
  server.shutdown();
  int64_t build_start = clock_ns();
  collector::BuildOptions build_opts;
  build_opts.memory_window = serving;
  // The processes mlprof-run stopped after their streams were flushed: the command (when the
  // signal is what ended it) and those below it.
  if (stopped_here || phase >= 2) build_opts.stopped_pids = stopped_pids;
  if (!stopped_here) build_opts.stopped_pids.erase(static_cast<uint32_t>(child.pid));
  build_opts.command_pid = static_cast<uint32_t>(child.pid);
  profile::Profile prof = collector::build_profile(streams, run, build_opts);
  const int serving_rc = session ? session->finish(prof) : 0;
  for (auto& w : server_warnings) prof.warnings.push_back(w);
  if (prof.processes.empty() && !o.command.empty() && !preload.empty())
    prof.warnings.push_back(nothing_profiled(o.command[0]));
  prof.run.extra["postprocess_ms"] = fmt::format("{}", (clock_ns() - build_start) / 1000000);

  // A write that fails after all (a full disk, a path changed during the run) is said last, after
  // the summary, and nothing is said written that was not.
  std::string write_error;
  bool profile_written = false, html_written = false;
  if (Status st = profile::write_profile(prof, o.output); !st.ok()) {
    write_error = st.error + "; this run's profile is lost" +
                  (o.quiet ? std::string() : " (the summary above is all that is left of it)");
  } else {
    profile_written = true;
    if (!o.no_html) {
      const std::string html = report::html_report(prof);
      write_error = profile::write_file(o.html, html.data(), html.size());
      html_written = write_error.empty();
      if (!html_written) write_error = "cannot write the HTML report " + write_error;
    }
  }
  if (!o.quiet) {
    report::SummaryOptions so;
    so.top = 10;
    so.color = isatty(STDERR_FILENO);
    fprintf(stderr, "%s", report::text_summary(prof, so).c_str());
    if (profile_written)
      fprintf(stderr, "mlprof: profile written to %s%s%s\n", o.output.c_str(), html_written ? ", report to " : "",
              html_written ? o.html.c_str() : "");
  }
  if (!write_error.empty()) fprintf(stderr, "mlprof-run: %s\n", write_error.c_str());
  if (session) {
    curl_global_cleanup();
    return serving_rc;
  }
  return run.exit_status;
}
