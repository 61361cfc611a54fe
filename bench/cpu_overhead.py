#!/usr/bin/env python3
"""CPU-sampling overhead of mlprof on CPU-bound native workloads, next to gperftools and perf.

Usage: bench/cpu_overhead.sh [--runs N] [--workloads cpu_ratio,native_inference,threads]
                             [--quick] [--build DIR] [--out FILE] [--keep]

For each workload, every round runs each configuration once (round-robin, the starting
configuration rotating each round, after one untimed warm-up round), so drift hits all alike:
  unprofiled | mlprof-run --rate 100 | --rate 1000 | --rate 100 --mode wall | the two 100 Hz ones with --no-memory |
  --rate 1000 with MLPROF_TIMER=timer |
  --rate 100 --unwinder libunwind |
  gperftools CPUPROFILE_FREQUENCY=100 | =1000 | perf record -g -F 99 (if `perf record` works here).
Two walls are measured per run:
  * command wall: time.perf_counter around the whole command (for mlprof-run this includes
    starting the collector and, after the program exits, building + writing the profile);
  * program wall: the workload alone, from fork to exit, measured by a tiny statically linked
    wrapper (bench-built with cc; static, so no LD_PRELOAD reaches it) placed just around the
    workload, inside the profiler.
Ratios are per round (config / the same round's unprofiled run); the table gives their median and
min-max. "collector CPU" is mlprof's own RunInfo.collector_cpu_ns (getrusage of mlprof-run before
post-processing) over the profile's run duration, in % of one core; "profiler proc CPU" is the
rusage of the profiler process (os.wait4 minus the workload's own rusage, reported by the wrapper)
over the command wall, post-processing included. "samples/CPU-s" = samples in the profile / the
workload's CPU seconds. Targets (issue): <= 1.01x at 100 Hz, <= 1.03x at 1000 Hz, collector < 2%.
Python 3 stdlib only; needs a built tree (./scripts/build.sh).
"""
import argparse, json, os, platform, re, shutil, statistics, struct, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPERF_LIB = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0"
WORKLOADS = {  # name: (path relative to the build dir, full-size args, --quick args)
    "cpu_ratio": ("fixtures/fixture_cpu_ratio", ["1000", "25"], ["1000", "3"]),
    "native_inference": ("bin/native_inference", ["300", "2"], ["40", "2"]),
    "threads": ("fixtures/fixture_threads", ["1500"], ["200"]),
    # Python (Debian's interpreter, numpy from apt); absolute paths are used as they are.
    "py_pure": ("/usr/bin/python3", [os.path.join(ROOT, "bench", "py_pure.py"), "8000000"],
                [os.path.join(ROOT, "bench", "py_pure.py"), "800000"]),
    "py_numpy": ("/usr/bin/python3", [os.path.join(ROOT, "examples", "serve.py"), "120"],
                 [os.path.join(ROOT, "examples", "serve.py"), "15"]),
}
WRAPPER_C = r"""
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
int main(int argc, char **argv) {  /* timed_exec RESULT CMD ARGS...: "wall_s child_cpu_s child_maxrss_kib" */
  struct timespec a, b; struct rusage ru; int st = 0;
  if (argc < 3) return 125;
  clock_gettime(CLOCK_MONOTONIC, &a);
  pid_t p = fork();
  if (p == 0) { execvp(argv[2], argv + 2); _exit(127); }
  if (p < 0 || wait4(p, &st, 0, &ru) < 0) return 126;
  clock_gettime(CLOCK_MONOTONIC, &b);
  FILE *f = fopen(argv[1], "w");
  if (f) {
    fprintf(f, "%.9f %.6f %ld\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9,
            ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
            ru.ru_maxrss);
    fclose(f);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
"""


def sh(cmd, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    except (OSError, subprocess.SubprocessError) as e:
        return subprocess.CompletedProcess(cmd, 127, "", str(e))


def build_wrapper(tmp):  # also used by mem_overhead.py
    src, exe = os.path.join(tmp, "timed_exec.c"), os.path.join(tmp, "timed_exec")
    with open(src, "w") as f:
        f.write(WRAPPER_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None, "no C compiler: program wall and workload RSS not measured"
    if sh([cc, "-O2", "-static", "-o", exe, src]).returncode == 0:
        return exe, None
    r = sh([cc, "-O2", "-o", exe, src])  # dynamic: LD_PRELOADed profilers also load into the wrapper
    return (exe, "static link failed: wrapper is dynamic") if r.returncode == 0 else (None, "wrapper build failed")


def probe_perf(tmp):
    if not shutil.which("perf"):
        return "not installed"
    r = sh(["perf", "record", "-q", "-g", "-F", "99", "-o", os.path.join(tmp, "probe.data"), "--", "true"])
    return None if r.returncode == 0 else "perf record does not work here: " + (r.stderr.strip().splitlines() or ["?"])[-1]


def configs(build, perf_note):
    mr = os.path.join(build, "bin", "mlprof-run")
    gp = None if os.path.exists(GPERF_LIB) else "not installed (" + GPERF_LIB + ")"
    # (name, kind, prefix(tmpfile) -> argv before the wrapper, extra env(tmpfile), unavailable note)
    ml = lambda *a: (lambda f: [mr, "-q", "--no-html", "-o", f + ".mlprof", *a, "--"])
    gpe = lambda hz: (lambda f: {"LD_PRELOAD": GPERF_LIB, "CPUPROFILE": f + ".prof", "CPUPROFILE_FREQUENCY": str(hz)})
    return [
        ("unprofiled", "none", lambda f: [], None, None),
        ("mlprof 100 Hz", "mlprof", ml("--rate", "100"), None, None),
        ("mlprof 1000 Hz", "mlprof", ml("--rate", "1000"), None, None),
        ("mlprof 100 Hz wall", "mlprof", ml("--rate", "100", "--mode", "wall"), None, None),
        # CPU sampling alone (mlprof-run profiles memory too by default): the issue-3 figure.
        ("mlprof 100 Hz no-memory", "mlprof", ml("--rate", "100", "--no-memory"), None, None),
        ("mlprof 100 Hz wall no-memory", "mlprof", ml("--rate", "100", "--mode", "wall", "--no-memory"), None, None),
        # The design: POSIX CPU-time timers, tick-limited like gperftools, missed ticks weighted.
        ("mlprof 1000 Hz timer", "mlprof", ml("--rate", "1000"), lambda f: {"MLPROF_TIMER": "timer"}, None),
        # The clock the 100 Hz default used before session 8 (perf events: ~2 us per context switch).
        ("mlprof 100 Hz perf clock no-memory", "mlprof", ml("--rate", "100", "--no-memory"),
         lambda f: {"MLPROF_TIMER": "perf"}, None),
        ("mlprof 100 Hz libunwind", "mlprof", ml("--rate", "100", "--unwinder", "libunwind"), None, None),
        ("gperftools 100 Hz", "gperf", lambda f: [], gpe(100), gp),
        ("gperftools 1000 Hz", "gperf", lambda f: [], gpe(1000), gp),
        ("perf record -g -F 99", "perf", lambda f: ["perf", "record", "-q", "-g", "-F", "99", "-o", f + ".data", "--"],
         None, perf_note),
    ]


def gperf_samples(path):
    """Sample count of a gperftools CPU profile (legacy binary format, 8-byte words)."""
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 8
    w = struct.unpack_from("<%dQ" % n, data)
    i, total = 5, 0  # header: 0, 3, 0, period_us, 0
    while i + 2 < n:
        count, depth = w[i], w[i + 1]
        if count == 0 and depth == 1 and w[i + 2] == 0:
            break
        total += count
        i += 2 + depth
    return total


def mlprof_facts(build, prof, tmp):
    html = os.path.join(tmp, "r.html")
    r = sh([os.path.join(build, "bin", "mlprof"), "report", prof, "--html", html])
    if r.returncode != 0:
        raise RuntimeError("mlprof report failed: " + r.stderr.strip()[-300:])
    with open(html) as f:
        m = re.search(r'id="mlprof-data">(.*?)</script>', f.read(), re.S)
    d = json.loads(m.group(1))
    run = d["run"]
    return {"duration": run["duration_ns"] / 1e9, "collector_cpu": run["collector_cpu_ns"] / 1e9,
            "samples": d["counters"]["samples"], "timer": run.get("timer", "?"),
            "postprocess_ms": float(run["extra"].get("postprocess_ms", "nan"))}


def run_once(build, cfg, cmd, wrapper, tmp, env):
    name, kind, prefix, extra_env, _ = cfg
    base = os.path.join(tmp, "out")
    for ext in (".mlprof", ".prof", ".data", ".t"):
        if os.path.exists(base + ext):
            os.unlink(base + ext)
    argv = prefix(base) + ([wrapper, base + ".t"] if wrapper else []) + cmd
    e = dict(env, **(extra_env(base) if extra_env else {}))
    with open(os.path.join(tmp, "stderr"), "w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=e, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        if p.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (name, p.returncode, err.read().strip()[-400:]))
    res = {"wall": wall, "rusage": ru.ru_utime + ru.ru_stime}
    if wrapper:
        with open(base + ".t") as f:
            res["prog_wall"], res["child_cpu"] = map(float, f.read().split()[:2])
        res["proc_cpu"] = res["rusage"] - res["child_cpu"]  # the profiler process (+ wrapper, ~1 ms)
    if kind == "mlprof":
        res.update(mlprof_facts(build, base + ".mlprof", tmp))
    elif kind == "gperf" and os.path.exists(base + ".prof"):
        res["samples"] = gperf_samples(base + ".prof")
    return res


def fastest_ratio(rs, unp):
    """The fastest program wall of runs rs over the fastest unprofiled one (noise on a shared machine
    only adds time, so the fastest run is the nearest to the undisturbed cost); None without runs.
    Also used by mem_overhead.py."""
    fast = [r["prog_wall"] for r in rs if "prog_wall" in r]
    fast0 = [r["prog_wall"] for r in unp if "prog_wall" in r]
    return min(fast) / min(fast0) if fast and fast0 else None


def fmt_ratio(xs):
    return ("%.3f×" % statistics.median(xs), "%.3f–%.3f" % (min(xs), max(xs))) if xs else ("–", "–")


def table(wl, cfgs, results, notes, stats):
    rows = []
    unp = results.get("unprofiled", [])
    for cfg in cfgs:
        name, kind = cfg[0], cfg[1]
        note = cfg[4] or notes.get(name)
        rs = results.get(name, [])
        if note or not rs:
            rows.append("| %s | %s | %s |%s" % (wl, name, note or "no runs", " |" * 10))
            continue
        n = min(len(rs), len(unp))
        med = lambda k: statistics.median(r[k] for r in rs) if all(k in r for r in rs) else None
        wr = fmt_ratio([rs[i]["wall"] / unp[i]["wall"] for i in range(n)])
        pr = fmt_ratio([rs[i]["prog_wall"] / unp[i]["prog_wall"] for i in range(n) if "prog_wall" in rs[i]])
        fr = fastest_ratio(rs, unp)
        fr = "%.3f×" % fr if fr is not None else "–"
        sps = [r["samples"] / r["child_cpu"] for r in rs if "samples" in r and r.get("child_cpu")]
        coll = [100 * r["collector_cpu"] / r["duration"] for r in rs if "collector_cpu" in r]
        proc = [100 * r["proc_cpu"] / r["wall"] for r in rs if "proc_cpu" in r] if kind in ("mlprof", "perf") else []
        f = lambda v, spec: spec % v if v is not None else "–"
        mf = lambda xs, spec: spec % statistics.median(xs) if xs else "–"
        timers = sorted({r["timer"] for r in rs if "timer" in r})
        stats[name] = (wr[0], pr[0], mf(coll, "%.2f%%"), fr)
        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            wl, name, f(med("wall"), "%.3f"), wr[0], wr[1], f(med("prog_wall"), "%.3f"), pr[0], pr[1], fr,
            mf(sps, "%.0f") + (" (%s)" % ", ".join(timers) if timers else ""), mf(coll, "%.2f%%"),
            mf(proc, "%.2f%%"), f(med("postprocess_ms"), "%.0f")))
    return rows


def emit_report(out, notes, path):  # also used by mem_overhead.py
    """Prints the report lines, then the load average and the notes; writes the same to path."""
    out += ["", "Load average at end: " + " ".join("%.2f" % x for x in os.getloadavg()), "", notes]
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if path:
        with open(path, "w") as f:
            f.write(text)


def machine_facts():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    hz = sh(["sh", "-c", "grep -h '^CONFIG_HZ=' /boot/config-$(uname -r) 2>/dev/null || "
                   "zcat /proc/config.gz 2>/dev/null | grep '^CONFIG_HZ='"]).stdout.strip() or "CONFIG_HZ=?"
    git = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).stdout.strip() or "?"
    perf = sh(["perf", "--version"]).stdout.strip() if shutil.which("perf") else "none"
    return ("nproc %d (affinity %d), CPU %s, kernel %s (%s: CPU-time itimers deliver at most that many "
            "samples/CPU-s), load average at start %s, python %s, mlprof git %s, %s"
            % (os.cpu_count(), len(os.sched_getaffinity(0)), model, platform.release(), hz,
               " ".join("%.2f" % x for x in os.getloadavg()), platform.python_version(), git, perf))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="timed rounds per workload (default 7; 3 with --quick)")
    ap.add_argument("--configs", default="", help="comma-separated configuration names to run (default: all)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    ap.add_argument("--quick", action="store_true", help="CI smoke: 3 runs, small sizes")
    ap.add_argument("--build", default=os.environ.get("MLPROF_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", help="also write the markdown to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    runs = a.runs or (3 if a.quick else 7)
    wls = [w.strip() for w in a.workloads.split(",") if w.strip()]
    bad = [w for w in wls if w not in WORKLOADS]
    if bad or runs < 1:
        ap.error("unknown workload(s) %s" % bad if bad else "--runs must be >= 1")
    build = os.path.abspath(a.build)
    if not os.access(os.path.join(build, "bin", "mlprof-run"), os.X_OK):
        sys.exit("cpu_overhead: %s/bin/mlprof-run not found; run ./scripts/build.sh first" % build)
    facts = machine_facts()
    tmp = tempfile.mkdtemp(prefix="mlprof-ovh-")
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith(("MLPROF_", "CPUPROFILE", "PERF_"))}
    wrapper, wnote = build_wrapper(tmp)
    cfgs = configs(build, probe_perf(tmp))
    if a.configs:  # the unprofiled baseline always runs
        keep = set(c.strip() for c in a.configs.split(","))
        unknown = keep - set(c[0] for c in cfgs)
        if unknown:
            sys.exit("unknown configuration(s): %s; known: %s" % (", ".join(sorted(unknown)), ", ".join(c[0] for c in cfgs)))
        cfgs = [c for c in cfgs if c[0] == "unprofiled" or c[0] in keep]
    out = ["# mlprof CPU-sampling overhead", "",
           "Command: `%s`" % " ".join([os.environ.get("CPU_OVERHEAD_ARGV0") or sys.argv[0]] + sys.argv[1:]),
           "", "Machine: " + facts, "",
           "Runs: %d timed rounds per workload after 1 warm-up round; configurations round-robin, rotating "
           "start.%s" % (runs, " " + wnote if wnote else ""), "",
           "| workload | configuration | command wall s (median) | command wall ratio | min–max | program wall s "
           "| program wall ratio | min–max | fastest-run ratio | samples/CPU-s | collector CPU (of run) "
           "| profiler proc CPU (of wall) | post-proc ms |", "|" + "---|" * 13]
    verdicts = []
    try:
        for wl in wls:
            rel, full, quick = WORKLOADS[wl]
            exe = os.path.join(build, rel)
            if not os.access(exe, os.X_OK):
                out.append("| %s | (all) | not built: %s |%s" % (wl, exe, " |" * 9))
                continue
            cmd = [exe] + (quick if a.quick else full)
            live = [c for c in cfgs if not c[4]]
            results, notes = {}, {}
            for rnd in range(runs + 1):  # round 0: warm-up, discarded
                k = rnd % len(live)
                for cfg in live[k:] + live[:k]:
                    if cfg[0] in notes:
                        continue
                    try:
                        r = run_once(build, cfg, cmd, wrapper, tmp, env)
                    except Exception as e:  # one broken configuration must not stop the others
                        notes[cfg[0]] = "failed: " + str(e).replace("|", "/").replace("\n", " ")
                        continue
                    if rnd > 0:
                        results.setdefault(cfg[0], []).append(r)
                print("cpu_overhead: %s round %d/%d done" % (wl, rnd, runs), file=sys.stderr, flush=True)
            stats = {}
            out += table(" ".join([wl] + cmd[1:]), cfgs, results, notes, stats)
            # Issue targets: native workloads <= 1.01x at 100 Hz and <= 1.03x at 1000 Hz; Python
            # workloads <= 1.02x at 100 Hz in CPU and wall mode (the Python issue).
            py = wl.startswith("py_")
            targets = ([(c[0], 1.02) for c in cfgs if c[1] == "mlprof" and "100 Hz" in c[0]] if py else
                       [("mlprof 100 Hz", 1.01), ("mlprof 1000 Hz", 1.03)])
            for cfg, target in targets:
                if cfg in stats:
                    w, pw, c, fr = stats[cfg]
                    ok = lambda r: "–" if r == "–" else ("meets" if float(r[:-1]) <= target else "MISSES")
                    verdicts.append("- %s, %s (target ≤ %.2f×): program wall %s (%s), fastest runs %s (%s), "
                                    "command wall %s (%s)%s"
                                    % (wl, cfg, target, pw, ok(pw), fr, ok(fr), w, ok(w),
                                       ", collector CPU %s of one core (target < 2%%)" % c if target < 1.02 else ""))
    finally:
        if a.keep:
            print("cpu_overhead: temporary files kept in " + tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    out += ["", "Targets (medians of per-round ratios):"] + verdicts
    emit_report(out, ("Command wall = the whole command (mlprof-run includes collector start-up and, after the program "
            "exits, symbolization + writing the profile; gperftools includes writing its profile at exit). "
            "Program wall = the workload process alone, fork to exit, timed by a static wrapper inside the "
            "profiler. Ratios: median and range of per-round ratios against the same round's unprofiled run; "
            "fastest-run ratio: the configuration's fastest program wall / the unprofiled fastest (noise only "
            "adds time). "
            "collector CPU = mlprof's RunInfo.collector_cpu_ns / the profile's run duration (% of one core, "
            "post-processing excluded); profiler proc CPU = the profiler process's own rusage / command wall "
            "(post-processing included). Targets: mlprof <= 1.01× at 100 Hz, <= 1.03× at 1000 Hz, collector "
            "< 2% of one core at 100 Hz; Python workloads <= 1.02× at 100 Hz, CPU and wall mode."), a.out)


if __name__ == "__main__":
    main()
