#!/usr/bin/env python3
"""Real-GPU check of mlprof's CUDA attribution for a native program (docs/gpu.md).

Builds tests/gpu/native_lines.cu with nvcc, runs it under mlprof-run and compares with the truth
by construction: the kernel launched at the "long" line spins 2 ms on the GPU's timer and the one
at the "short" line 1 ms (so 2/3 and 1/3 of the kernel time, each share within +-5 percentage
points), the "copy" line moves ITERATIONS x 64 MiB host-to-device, the kernel table names each
kernel's launching line (not CUDA's headers or nvcc's stubs), and the process's heap peak is not
CUDA's address-space reservation.

Exit status: 0 pass, 1 fail, 77 skipped (no nvcc, no NVIDIA GPU, or no mlprof GPU support).

  tests/gpu/native_lines.py --mlprof-run build/bin/mlprof-run --mlprof build/bin/mlprof [--iterations N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from gpu_check import gpu_profile, line_sums, marker_lines, run, skip

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "native_lines.cu")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlprof-run", required=True)
    ap.add_argument("--mlprof", required=True)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--nvcc", default=os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    a = ap.parse_args()
    if not os.access(a.nvcc, os.X_OK):
        skip("no nvcc (set NVCC or put the CUDA toolkit's bin on PATH)")
    smi = shutil.which("nvidia-smi")
    if not smi or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        skip("no NVIDIA GPU (nvidia-smi -L failed or is missing)")

    tmp = tempfile.mkdtemp(prefix="mlprof_native_gpu_")
    exe = os.path.join(tmp, "native_lines")
    run([a.nvcc, "-g", "-O2", "-o", exe, SOURCE])
    lines = marker_lines(SOURCE)
    prof = os.path.join(tmp, "run.mlprof")
    run([a.mlprof_run, "-q", "--no-html", "-o", prof, "--", exe, str(a.iterations)])
    doc = gpu_profile(a.mlprof, prof)
    if doc is None:
        return 1

    got = line_sums(a.mlprof, prof, "gpu-kernel", "native_lines.cu", lines)[0]
    got["copy"] = line_sums(a.mlprof, prof, "gpu-copy-bytes", "native_lines.cu", lines)[0]["copy"]
    ok = True
    kernels = got["long"] + got["short"]
    for k, truth in (("long", 200.0 / 3), ("short", 100.0 / 3)):
        share = 100.0 * got[k] / kernels if kernels else 0
        bad = abs(share - truth) > 5
        ok &= not bad
        print("%-6s line %3d: %9.1f ms kernel time, %5.1f%% (truth %.1f%%)%s" % (k, lines[k], got[k] / 1000.0, share, truth,
                                                                               "  FAIL" if bad else ""))
    want_bytes = a.iterations * (64 << 20)
    print("copy   line %3d: %d bytes copied (truth %d)%s" % (lines["copy"], got["copy"], want_bytes,
                                                           "" if got["copy"] == want_bytes else "  FAIL"))
    ok &= got["copy"] == want_bytes

    table = {k["name"]: k for g in doc["gpu"] for k in g["kernels"]}
    for kernel, k in (("spin_long(unsigned long long)", "long"), ("spin_short(unsigned long long)", "short")):
        launch = ((table.get(kernel) or {}).get("launched_from") or {}).get("launch") or {}
        where = "%s:%s" % (os.path.basename(launch.get("file", "")), launch.get("line"))
        want = "native_lines.cu:%d" % lines[k]
        print("kernel %s launched from %s (truth %s)%s" % (kernel, where, want, "" if where == want else "  FAIL"))
        ok &= where == want

    mem = [p.get("memory") or {} for p in doc.get("processes", [])]
    peak = max((m.get("peak_heap_bytes", 0) for m in mem), default=0)
    rss = max((m.get("peak_rss_bytes", 0) for m in mem), default=0)
    print("heap peak %.1f MiB, RSS peak %.1f MiB%s" % (peak / 2**20, rss / 2**20,
                                                      "" if peak <= 2 * rss else "  FAIL (reservations counted?)"))
    ok &= peak <= 2 * rss
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
