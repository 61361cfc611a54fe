"""Pure-Python CPU work for the overhead benchmark: string building, dict updates, arithmetic.
Usage: python3 bench/py_pure.py [iterations=300000]"""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 300000
counts = {}
total = 0
for i in range(n):
    key = "k%d" % (i % 1000)
    counts[key] = counts.get(key, 0) + 1
    total += (i * i) % 97
    if i % 5 == 0:
        total ^= len(str(total))
print(total, len(counts))
