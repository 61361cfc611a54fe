"""A loop whose off-CPU time is known (bench/wall_accuracy.sh): each round computes COMPUTE_MS at the
COMPUTE line and sleeps SLEEP_MS at the SLEEP line, for SECONDS. It measures its sleeps' off-CPU
time itself: their wall time less its CPU clock (time.thread_time) and its run-queue delay
(/proc/thread-self/schedstat) over them, and prints {"sleep_wall": s, "sleep_off_cpu": s} as JSON.
Usage: python3 wall_loop.py [SECONDS=3] [COMPUTE_MS=7.3] [SLEEP_MS=4.1]
(The defaults are not multiples of the 10 ms wall period, so rounds drift against the ticks.)
"""
import json
import sys
import time


def on_cpu_or_runnable():
    with open("/proc/thread-self/schedstat") as f:
        delay_ns = f.read().split()[1]
    return time.thread_time() + int(delay_ns) / 1e9


seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
compute = (float(sys.argv[2]) if len(sys.argv) > 2 else 7.3) / 1000
sleep = (float(sys.argv[3]) if len(sys.argv) > 3 else 4.1) / 1000
wall = off = 0.0
end = time.monotonic() + seconds
while time.monotonic() < end:
    t0 = time.monotonic()
    while time.monotonic() - t0 < compute: pass  # COMPUTE
    t1, r1 = time.monotonic(), on_cpu_or_runnable()
    time.sleep(sleep)  # SLEEP
    t2, r2 = time.monotonic(), on_cpu_or_runnable()
    wall += t2 - t1
    off += (t2 - t1) - (r2 - r1)
print(json.dumps({"sleep_wall": wall, "sleep_off_cpu": off}))
