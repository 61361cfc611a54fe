#!/usr/bin/env python3
"""Overhead measured in concurrent pairs: the unprofiled and the profiled run at the same time.

Usage: bench/paired_overhead.sh [--rounds N] [--workloads py_pure,py_numpy] [--configs A,B]
                                [--build DIR] [--out FILE]

Why: on the project's VM the speed of the whole machine drifts by 10-40% within minutes (slow
phases; docs/benchmarks.md, session 9), so back-to-back runs compare different machines and their
per-round ratios spread 0.7-1.7. Here each round starts the unprofiled run on one CPU and the
profiled one on the other (taskset: the profiler's own threads, collector included, share its CPU,
so their cost is charged to the profiled run), at the same moment; both see the same phase. The
CPUs swap every round, so a difference between the two vCPUs cancels out over an even number of
rounds. Each ratio is profiled program wall / unprofiled program wall of the same round (the timed
wrapper of bench/cpu_overhead.py, fork to exit of the workload).
Reported per configuration: the median of the per-round ratios (min-max), the geometric mean, and
the median of the ratios on each CPU arrangement (a large gap between them says the two vCPUs are
not alike today). BLAS/OpenMP pools are set to one thread (both runs have one CPU each).
Configuration "unprofiled" pairs the unprofiled run with itself: the method's own noise floor.
Workloads: those of bench/cpu_overhead.py (single-threaded Python: py_pure, py_numpy; native:
cpu_ratio, native_inference) and mem_overhead.py's churn (2 threads on one CPU here).
Python 3 stdlib only; needs a built tree (./scripts/build.sh) and 2 CPUs.
"""
import argparse, math, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_overhead import WORKLOADS, build_wrapper, configs, machine_facts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTRA_WORKLOADS = {"churn": ("fixtures/fixture_mem_leak", ["0", "8", "3000000"], ["0", "8", "300000"])}
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def start(argv, cpu, env, tmp, tag):
    err = open(os.path.join(tmp, tag + ".err"), "w+")
    return subprocess.Popen(["taskset", "-c", str(cpu)] + argv, env=env, stdout=subprocess.DEVNULL, stderr=err,
                            cwd=tmp), err


def finish(p, err, what):
    p.wait()
    if p.returncode != 0:
        err.seek(0)
        raise RuntimeError("%s exited %d: %s" % (what, p.returncode, err.read().strip()[-400:]))
    err.close()


def prog_wall(path):
    with open(path) as f:
        return float(f.read().split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12, help="rounds per configuration (even: CPUs swap)")
    ap.add_argument("--workloads", default="py_pure,py_numpy")
    ap.add_argument("--configs", default="mlprof 100 Hz no-memory,mlprof 100 Hz wall no-memory",
                    help="names from bench/cpu_overhead.py's configurations")
    ap.add_argument("--build", default=os.environ.get("MLPROF_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("paired_overhead: needs 2 CPUs (one per run of a pair)")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    tmp = tempfile.mkdtemp(prefix="mlprof-paired-")
    wrapper, note = build_wrapper(tmp)
    if not wrapper or note:
        sys.exit("paired_overhead: needs the static timing wrapper (%s)" % (note or "no C compiler"))
    known = {c[0]: c for c in configs(a.build, None)}
    wanted = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in wanted:
        if c not in known or known[c][1] not in ("mlprof", "none"):
            sys.exit("paired_overhead: unknown configuration '%s' (one of: %s)" %
                     (c, ", ".join(k for k, v in known.items() if v[1] in ("mlprof", "none"))))
    wls = dict(WORKLOADS, **EXTRA_WORKLOADS)
    env = dict(os.environ, **ONE_THREAD)
    lines = ["# mlprof overhead in concurrent pairs", "",
             "Command: `bench/paired_overhead.sh %s`" % " ".join(
                 "'%s'" % x if " " in x else x for x in sys.argv[1:]), "",
             "Machine: " + machine_facts(), "",
             "Rounds: %d per configuration; CPUs %d and %d, swapped every round." % (a.rounds, cpus[0], cpus[1]), "",
             "| workload | configuration | ratio median (min-max) | geometric mean | median, profiled on CPU %d | on CPU %d |"
             % (cpus[0], cpus[1]), "|---|---|---|---|---|---|"]
    for wname in [w.strip() for w in a.workloads.split(",") if w.strip()]:
        if wname not in wls:
            sys.exit("paired_overhead: unknown workload '%s' (one of: %s)" % (wname, ", ".join(wls)))
        exe, args, _ = wls[wname]
        exe = exe if os.path.isabs(exe) else os.path.join(a.build, exe)
        cmd = [exe] + args
        for cname in wanted:
            _, _, prefix, extra_env, _ = known[cname]
            ratios = {cpus[0]: [], cpus[1]: []}
            for r in range(a.rounds):
                pcpu, ucpu = (cpus[0], cpus[1]) if r % 2 == 0 else (cpus[1], cpus[0])
                base = os.path.join(tmp, "p")
                penv = dict(env, **(extra_env(base) if extra_env else {}))
                u, uerr = start([wrapper, os.path.join(tmp, "u.t")] + cmd, ucpu, env, tmp, "u")
                p, perr = start(prefix(base) + [wrapper, os.path.join(tmp, "p.t")] + cmd, pcpu, penv, tmp, "p")
                finish(u, uerr, "unprofiled " + wname)
                finish(p, perr, cname + " " + wname)
                ratio = prog_wall(os.path.join(tmp, "p.t")) / prog_wall(os.path.join(tmp, "u.t"))
                ratios[pcpu].append(ratio)
                print("%s | %s | round %d: profiled on CPU %d, ratio %.3f" % (wname, cname, r + 1, pcpu, ratio),
                      file=sys.stderr, flush=True)
                time.sleep(0.2)
            allr = ratios[cpus[0]] + ratios[cpus[1]]
            gm = math.exp(sum(math.log(x) for x in allr) / len(allr))
            med = lambda xs: "%.3f×" % statistics.median(xs) if xs else "–"
            lines.append("| %s | %s | **%.3f×** (%.3f–%.3f) | %.3f× | %s | %s |" % (
                wname + " " + " ".join(os.path.basename(x) for x in args), cname, statistics.median(allr),
                min(allr), max(allr), gm, med(ratios[cpus[0]]), med(ratios[cpus[1]])))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
