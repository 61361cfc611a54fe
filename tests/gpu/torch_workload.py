# GPU workload for tests/gpu/torch_lines.py (docs/gpu.md): three GPU-heavy lines of known kinds.
#   python3 torch_workload.py ITERATIONS MODE
# MODE "events": times each marked line's GPU work with CUDA events (the truth) and prints JSON;
# MODE "plain": runs the loop and prints iterations/s (under mlprof-run, or unprofiled);
# MODE "profiler": runs under torch.profiler and prints the CUDA kernel names it saw.
import json
import sys
import time

import torch

iters = int(sys.argv[1])
mode = sys.argv[2]
dev = torch.device("cuda")
a = torch.randn(4096, 4096, device=dev)
b = torch.randn(4096, 4096, device=dev)
x = torch.randn(32 << 20, device=dev)
host = torch.randn(32 << 20).pin_memory()


def step(ev=None):
    if ev: ev[0].record()
    c = a @ b  # LINE: matmul
    if ev: ev[1].record()
    y = torch.sin(x) * 2.0 + 1.0  # LINE: elementwise
    if ev: ev[2].record()
    d = host.to(dev, non_blocking=True)  # LINE: copy
    if ev: ev[3].record()
    return c, y, d


for _ in range(5):  # warm-up: cuBLAS handles, allocator pool, kernel selection
    step()
torch.cuda.synchronize()

if mode == "events":
    totals = {"matmul": 0.0, "elementwise": 0.0, "copy": 0.0}
    for _ in range(iters):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        step(ev)
        torch.cuda.synchronize()
        totals["matmul"] += ev[0].elapsed_time(ev[1])
        totals["elementwise"] += ev[1].elapsed_time(ev[2])
        totals["copy"] += ev[2].elapsed_time(ev[3])
    print(json.dumps({"ms": totals}))
elif mode == "plain":
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    print(json.dumps({"iterations_per_s": iters / (time.perf_counter() - t0)}))
elif mode == "profiler":
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    print(json.dumps({"kernels": names}))
else:
    sys.exit("unknown mode " + mode)
