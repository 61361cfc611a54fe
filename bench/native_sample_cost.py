"""What a memory sample of a native allocation costs on a deep Python stack (docs/benchmarks.md,
session 20): the thread CPU time of a loop of np.empty(100000) (800 KB from malloc, made with the
GIL held) at the bottom of a 30-deep recursion, printed in seconds. Run it unprofiled and under
`mlprof-run --mem-interval 64K` (every call then takes a sample): the difference over the number
of calls is a sample's cost. `spin` times a plain loop instead (CPU samples only).
Usage: python3 bench/native_sample_cost.py native|spin N
Needs numpy (Debian's python3-numpy).
"""
import sys
import time

import numpy as np

mode, n = sys.argv[1], int(sys.argv[2])


def deep(d, f):
    if d == 0:
        return f()
    return deep(d - 1, f)


def native():
    t = time.thread_time()
    for _ in range(n):
        np.empty(100000)
    return time.thread_time() - t


def spin():
    t = time.thread_time()
    x = 0
    for i in range(n):
        x += i * i
    return time.thread_time() - t


print(f"{deep(30, native if mode == 'native' else spin):.4f}")
