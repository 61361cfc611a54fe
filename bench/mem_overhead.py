#!/usr/bin/env python3
"""Memory-profiling overhead of mlprof on a malloc-heavy workload, next to heaptrack and valgrind massif.

Usage: bench/mem_overhead.sh [--runs N] [--workloads churn,churn_short] [--configs A,B] [--quick]
                             [--build DIR] [--out FILE] [--keep]

Workload: fixtures/fixture_mem_leak 0 8 OPS (tests/fixtures/mem_leak.cpp with no leak): 2 threads,
each OPS operations on a window of 64 live blocks: malloc/calloc/realloc of 16 B-16 KiB (rarely
256 KiB), new[]/delete[], std::string and std::vector growth; everything freed.
  churn        OPS = 6,000,000 per thread (~35 M allocations in all, ~2.4 s unprofiled on the project's VM)
  churn_small  OPS = 8,000,000 per thread, blocks of 16-256 B only (MAX_SIZE 256): the issue's "tens of
               millions of small allocations" (tcache-fast in glibc: the hooks' own cost shows most here)
  churn_short  OPS = 1,000,000 per thread (~5.9 M allocations, ~0.3 s): for the configurations that
               record every allocation (mlprof exact mode, heaptrack, massif: minutes on `churn`)
Configurations (round-robin, the starting one rotating each round, after one untimed warm-up round):
  unprofiled | mlprof-run (memory on, default interval) | mlprof-run --no-memory (CPU sampling only:
  separates the cost of memory profiling) | mlprof-run --mem-interval 1 (exact) | heaptrack |
  valgrind --tool=massif. Tools not installed are listed as "not installed".
Measured per run:
  * command wall: the whole command (mlprof-run: collector start, and after the program exits,
    building and writing the profile);
  * program wall: the workload alone, fork to exit, timed by a static wrapper just around it (for
    heaptrack and massif the wrapper runs under the tool, so it includes their start);
  * ALLOC records/s: the profile's mem_samples counter / the process's lifetime; FREE records the same;
    mem_dropped must be 0;
  * collector CPU: RunInfo.collector_cpu_ns / run duration (% of one core);
  * max RSS: the workload's own (the wrapper's rusage of it) and the largest process of the whole
    command (wait4 of the profiler: its own and its reaped children's maximum; Linux also counts the
    RSS the forked bench process had before exec, which the unprofiled run shows). When the second is
    larger than both the workload's and the unprofiled run's, it is the profiler's (mlprof-run's
    collector, heaptrack_interpret); otherwise the column gives that bound ("<= N").
Ratios are per round (config / the same round's unprofiled run); the table gives the median and
min-max. Python 3 stdlib only; needs a built tree (./scripts/build.sh).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_overhead import build_wrapper, emit_report, fastest_ratio, machine_facts, sh  # noqa: E402  (same directory: shared timing wrapper)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {  # name: (path relative to the build dir, full-size args, --quick args, configurations)
    "churn": ("fixtures/fixture_mem_leak", ["0", "8", "6000000"], ["0", "8", "600000"],
              ["unprofiled", "mlprof", "mlprof --no-memory", "heaptrack"]),
    "churn_small": ("fixtures/fixture_mem_leak", ["0", "8", "8000000", "256"], ["0", "8", "600000", "256"],
                    ["unprofiled", "mlprof", "mlprof --no-memory", "heaptrack"]),
    "churn_short": ("fixtures/fixture_mem_leak", ["0", "8", "1000000"], ["0", "8", "50000"],
                    ["unprofiled", "mlprof", "mlprof exact", "heaptrack", "massif"]),
}


def configs(build):
    mr = os.path.join(build, "bin", "mlprof-run")
    ml = lambda *a: (lambda f: [mr, "-q", "--no-html", "-o", f + ".mlprof", *a, "--"])
    ht = shutil.which("heaptrack")
    vg = shutil.which("valgrind")
    # name -> (kind, prefix(tmpfile) -> argv before the wrapper, unavailable note)
    return {
        "unprofiled": ("none", lambda f: [], None),
        "mlprof": ("mlprof", ml(), None),
        "mlprof --no-memory": ("mlprof", ml("--no-memory"), None),
        "mlprof exact": ("mlprof", ml("--mem-interval", "1"), None),
        # Other sampling intervals than the default, for the interval/overhead trade-off.
        "mlprof 256K": ("mlprof", ml("--mem-interval", "256K"), None),
        "mlprof 512K": ("mlprof", ml("--mem-interval", "512K"), None),  # the default before session 8
        "mlprof 1M": ("mlprof", ml("--mem-interval", "1M"), None),
        "mlprof 2M": ("mlprof", ml("--mem-interval", "2M"), None),
        "heaptrack": ("tool", lambda f: [ht, "-o", f + ".heaptrack"], None if ht else "not installed (heaptrack)"),
        # The static wrapper runs under valgrind too; the workload is its child.
        "massif": ("tool", lambda f: [vg, "-q", "--tool=massif", "--trace-children=yes",
                                      "--massif-out-file=" + f + ".massif.%p"], None if vg else "not installed (valgrind)"),
    }


def mlprof_facts(build, prof):
    r = sh([os.path.join(build, "bin", "mlprof"), "export", prof, "--format", "json"])
    if r.returncode != 0:
        raise RuntimeError("mlprof export --format json failed: " + r.stderr.strip()[-300:])
    d = json.loads(r.stdout)
    run = d["run"]
    procs = d.get("processes", [])
    counters = lambda k: sum(int(p.get("counters", {}).get(k, 0)) for p in procs)
    life = sum(max(p.get("end_ns", 0) - p.get("start_ns", 0), 0) for p in procs) / 1e9
    mem = next((p["memory"] for p in procs if p.get("memory")), None)
    return {"duration": run["duration_ns"] / 1e9, "collector_cpu": run["collector_cpu_ns"] / 1e9,
            "mem_samples": counters("mem_samples"), "mem_frees": counters("mem_frees"),
            "mem_dropped": counters("mem_dropped") + counters("mem_table_full"), "life": life,
            "interval": mem["interval_bytes"] if mem else None}


def run_once(build, name, cfg, cmd, wrapper, tmp, env):
    kind, prefix, _ = cfg
    base = os.path.join(tmp, "out")
    for fn in os.listdir(tmp):
        if fn.startswith("out."):
            os.unlink(os.path.join(tmp, fn))
    argv = prefix(base) + ([wrapper, base + ".t"] if wrapper else []) + cmd
    with open(os.path.join(tmp, "stderr"), "w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        if code != 0:
            raise RuntimeError("%s exited %d: %s" % (name, code, err.read().strip()[-400:]))
    res = {"wall": wall, "tree_maxrss_mib": ru.ru_maxrss / 1024}
    if wrapper:
        with open(base + ".t") as f:
            w, cpu, rss = f.read().split()
        res.update(prog_wall=float(w), child_cpu=float(cpu), work_maxrss_mib=int(rss) / 1024)
    if kind == "mlprof":
        res.update(mlprof_facts(build, base + ".mlprof"))
    return res


def ratio(xs):
    return ("%.2f×" % statistics.median(xs), "%.2f–%.2f" % (min(xs), max(xs))) if xs else ("–", "–")


def table(wl, names, cfgs, results, notes):
    rows = []
    unp = results.get("unprofiled", [])
    for name in names:
        note = cfgs[name][2] or notes.get(name)
        rs = results.get(name, [])
        if note or not rs:
            rows.append("| %s | %s | %s |%s" % (wl, name, note or "no runs", " |" * 10))
            continue
        n = min(len(rs), len(unp))
        med = lambda k: statistics.median(r[k] for r in rs) if rs and all(k in r for r in rs) else None
        f = lambda v, spec: spec % v if v is not None else "–"
        wr = ratio([rs[i]["wall"] / unp[i]["wall"] for i in range(n)])
        pr = ratio([rs[i]["prog_wall"] / unp[i]["prog_wall"] for i in range(n) if "prog_wall" in rs[i]])
        fr = fastest_ratio(rs, unp)
        fr = "%.2f×" % fr if fr is not None else "–"
        allocs = [r["mem_samples"] / r["life"] for r in rs if r.get("life")]
        frees = [r["mem_frees"] / r["life"] for r in rs if r.get("life")]
        coll = [100 * r["collector_cpu"] / r["duration"] for r in rs if r.get("duration")]
        dropped = max((r.get("mem_dropped", 0) for r in rs), default=0)
        # wait4's maxrss also counts what the forked bench process held before exec (the unprofiled
        # run's figure): only a larger value is the profiler's own.
        work, tree = med("work_maxrss_mib"), med("tree_maxrss_mib")
        floor = max([work or 0] + [r["tree_maxrss_mib"] for r in unp])
        prof_rss = ("–" if name == "unprofiled" or tree is None else
                    "%.0f" % tree if tree > floor * 1.05 else "<= %.0f" % floor)
        mf = lambda xs, spec: spec % statistics.median(xs) if xs else "–"
        interval = next((r["interval"] for r in rs if r.get("interval")), None)
        rows.append("| %s | %s | %s | %s (%s) | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |" % (
            wl, name + (" (interval %s B)" % interval if interval else ""), f(med("wall"), "%.2f"), wr[0], wr[1],
            f(med("prog_wall"), "%.2f"), pr[0], pr[1], fr, mf(allocs, "%.0f"), mf(frees, "%.0f"),
            str(dropped) if any("mem_dropped" in r for r in rs) else "–", mf(coll, "%.1f%%"),
            f(work, "%.0f"), prof_rss))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="timed rounds per workload (default 5; 2 with --quick)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    ap.add_argument("--configs", default="", help="comma-separated configuration names (default: each workload's)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, small sizes")
    ap.add_argument("--build", default=os.environ.get("MLPROF_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", help="also write the markdown to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    runs = a.runs or (2 if a.quick else 5)
    wls = [w.strip() for w in a.workloads.split(",") if w.strip()]
    bad = [w for w in wls if w not in WORKLOADS]
    if bad or runs < 1:
        ap.error("unknown workload(s) %s" % bad if bad else "--runs must be >= 1")
    build = os.path.abspath(a.build)
    for exe in ("bin/mlprof-run", "bin/mlprof", "fixtures/fixture_mem_leak"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            sys.exit("mem_overhead: %s/%s not found; run ./scripts/build.sh first" % (build, exe))
    cfgs = configs(build)
    keep_order = [c.strip() for c in a.configs.split(",") if c.strip()]
    keep = set(keep_order)
    if keep - set(cfgs):
        sys.exit("unknown configuration(s): %s; known: %s" % (", ".join(sorted(keep - set(cfgs))), ", ".join(cfgs)))
    facts = machine_facts()
    tmp = tempfile.mkdtemp(prefix="mlprof-memovh-")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith(("MLPROF_", "HEAPTRACK"))}
    wrapper, wnote = build_wrapper(tmp)
    out = ["# mlprof memory-profiling overhead", "",
           "Command: `%s`" % " ".join([os.environ.get("MEM_OVERHEAD_ARGV0") or sys.argv[0]] + sys.argv[1:]),
           "", "Machine: " + facts, "",
           "Runs: %d timed rounds per workload after 1 warm-up round; configurations round-robin, rotating "
           "start.%s" % (runs, " " + wnote if wnote else ""), "",
           "| workload | configuration | command wall s | command wall ratio (min–max) | program wall s "
           "| program wall ratio (min–max) | fastest-run ratio | ALLOC records/s | FREE records/s | dropped "
           "| collector CPU | workload max RSS MiB | profiler max RSS MiB |", "|" + "---|" * 13]
    try:
        for wl in wls:
            rel, full, quick, names = WORKLOADS[wl]
            if keep:  # the configurations asked for, in their order, unprofiled first
                names = ["unprofiled"] + [n for n in keep_order if n != "unprofiled"]
            cmd = [os.path.join(build, rel)] + (quick if a.quick else full)
            live = [n for n in names if not cfgs[n][2]]
            results, notes = {}, {}
            for rnd in range(runs + 1):  # round 0: warm-up, discarded
                k = rnd % len(live)
                for name in live[k:] + live[:k]:
                    if name in notes:
                        continue
                    try:
                        r = run_once(build, name, cfgs[name], cmd, wrapper, tmp, env)
                    except Exception as e:  # one broken configuration must not stop the others
                        notes[name] = "failed: " + str(e).replace("|", "/").replace("\n", " ")
                        continue
                    if rnd > 0:
                        results.setdefault(name, []).append(r)
                print("mem_overhead: %s round %d/%d done" % (wl, rnd, runs), file=sys.stderr, flush=True)
            out += table(" ".join([wl] + cmd[1:]), names, cfgs, results, notes)
    finally:
        if a.keep:
            print("mem_overhead: temporary files kept in " + tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    emit_report(out, ("Command wall = the whole command (mlprof-run includes collector start-up and, after the program exits, "
            "symbolization + writing the profile; heaptrack includes interpreting its trace). Program wall = the "
            "workload process alone, fork to exit, timed by a static wrapper (under heaptrack and massif the "
            "wrapper itself runs under the tool). Ratios: median and range of per-round ratios against the same "
            "round's unprofiled run; fastest-run ratio: the fastest program wall / the unprofiled fastest (noise only "
            "adds time). ALLOC/FREE records/s: the profile's mem_samples / mem_frees counters over the "
            "process's lifetime; dropped = mem_dropped + mem_table_full (largest of the runs). Collector CPU = "
            "RunInfo.collector_cpu_ns / run duration (% of one core, post-processing excluded). Profiler max RSS: "
            "the largest process of the command (wait4), shown when it exceeds the workload's own max RSS and the "
            "unprofiled command's (wait4 counts the bench's own RSS before exec); otherwise an upper bound."), a.out)


if __name__ == "__main__":
    main()
