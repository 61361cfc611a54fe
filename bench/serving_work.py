"""The example service's per-request work without the network (bench/serving_work.sh).

Loads examples/serve_http.py's model, then handles every body of examples/requests.txt ROUNDS
times in-process, the way its /score handler does (json.loads, normalize, TF-IDF transform,
predict_proba, json.dumps of the reply), and prints the thread CPU time of that loop as
"T <seconds>" on stderr. A warm-up pass runs first, so one-time costs (imports, the first
code objects' shipping) are not timed. With argv[1] = 1 a pass-through allocator wrapper
(argv[2], bench/py_alloc_passthrough.c) is installed before the loop: the floor of wrapping.

Usage: python3 bench/serving_work.py WRAP PASSTHROUGH_SO ROUNDS
"""
import ctypes
import json
import os
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "examples"))
import serve_http  # noqa: E402  (the example service's own functions)

wrap, so, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
vec, clf = serve_http.load_model()
bodies = [line.strip().encode() for line in open(os.path.join(root, "examples", "requests.txt")) if line.strip()]


def handle(raw):
    req = json.loads(raw)
    text = serve_http.normalize(str(req["text"]))
    probs = clf.predict_proba(vec.transform([text]))[0]
    best = int(probs.argmax())
    return json.dumps({"label": str(clf.classes_[best]), "score": round(float(probs[best]), 4)}).encode()


for raw in bodies:  # warm-up
    handle(raw)
if wrap:
    ctypes.PyDLL(so).install(3)
t = time.thread_time()
for _ in range(rounds):
    for raw in bodies:
        handle(raw)
print("T", time.thread_time() - t, file=sys.stderr)
