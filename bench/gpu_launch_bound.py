"""A launch-bound CUDA loop (bench/gpu_launch_bound.sh, docs/benchmarks.md): N tiny kernels
(`x = x + 1` on 256 floats), so the CPU side of a launch is all there is to time. Prints one JSON
line: {"launches_per_s": ...}.

Usage: python3 bench/gpu_launch_bound.py LAUNCHES [plain|profiler] [DEVICE]
"profiler" runs the timed loop inside torch.profiler (CPU and CUDA activities), the tool users
compare with. DEVICE defaults to cuda ("cpu" only checks the script on a machine without a GPU).
"""
import json
import sys
import time

import torch

n = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "plain"
dev = torch.device(sys.argv[3] if len(sys.argv) > 3 else "cuda")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

x = torch.zeros(256, device=dev)
for _ in range(2000):  # warm-up: the caching allocator, the kernel's first launch, mlprof's caches
    x = x + 1
sync()


def loop():
    global x
    t0 = time.perf_counter()
    for _ in range(n):
        x = x + 1
    sync()
    return time.perf_counter() - t0


if mode == "profiler":
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts):
        dt = loop()
else:
    dt = loop()
print(json.dumps({"launches_per_s": n / dt}))
