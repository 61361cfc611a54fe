"""A pure-Python request loop for bench/instr_overhead.sh: json in, regex tokens, a word count,
json out, over 200 generated bodies, like a small text service's handler (no numpy or scipy:
valgrind cannot run scipy's boost ufuncs). A warm-up pass runs first; with WRAP = 1 the
pass-through allocator wrapper (bench/py_alloc_passthrough.c, built by the script) is installed
after it. Usage: python3 bench/instr_work.py WRAP PASSTHROUGH_SO PASSES
"""
import ctypes, json, re, sys
wrap, so, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
bodies = [json.dumps({"id": i, "text": "Request number %d: the quick brown fox jumps over the lazy dog %d times" % (i, i * 7)}) for i in range(200)]
WORD = re.compile(r"\w+")
def handle(raw):
    req = json.loads(raw)
    words = WORD.findall(req["text"].lower())
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    feats = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
    return json.dumps({"id": req["id"], "top": feats, "n": len(words)}).encode()
for raw in bodies: handle(raw)
if wrap: ctypes.PyDLL(so).install(3)
for _ in range(n):
    for raw in bodies: handle(raw)
