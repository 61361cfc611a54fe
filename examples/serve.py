"""A small model server to profile: requests arrive as JSON text, are tokenized in pure Python,
scored by a 3-layer MLP in numpy, post-processed and answered; a background thread aggregates
request metrics. Where the time goes is roughly known by construction: the matrix products
(native), tokenizing and post-processing (interpreter), a little simulated I/O wait.

Usage: python3 examples/serve.py [requests=400]   (numpy from apt: python3-numpy)
"""
import json
import random
import sys
import threading
import time

import numpy as np

VOCAB = 4096
HIDDEN = 512
CLASSES = 16


class Model:
    def __init__(self, seed=42):
        rng = np.random.default_rng(seed)
        self.w1 = rng.normal(0, 0.05, (VOCAB, HIDDEN)).astype(np.float32)
        self.w2 = rng.normal(0, 0.05, (HIDDEN, HIDDEN)).astype(np.float32)
        self.w3 = rng.normal(0, 0.05, (HIDDEN, CLASSES)).astype(np.float32)

    def forward(self, x):
        h = np.maximum(x @ self.w1, 0)  # native: matrix product
        h = np.maximum(h @ self.w2, 0)  # native: matrix product
        logits = h @ self.w3
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


def tokenize(text):
    # Pure-Python feature hashing: the kind of preprocessing that is slow in the interpreter.
    features = [0.0] * VOCAB
    for word in text.lower().split():
        word = word.strip(".,;:!?")
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) % VOCAB
        features[h] += 1.0
    return features


def postprocess(probs):
    out = []
    for row in probs.tolist():
        best = max(range(len(row)), key=row.__getitem__)
        out.append({"label": best, "score": round(row[best], 4)})
    return out


WORDS = ("model server latency batch token vector matrix python native profile memory thread "
         "request answer score label feature cache queue worker").split()


def make_request(rng, batch=16):
    docs = [" ".join(rng.choice(WORDS) for _ in range(120)) for _ in range(batch)]
    return json.dumps({"inputs": docs})


metrics = []
metrics_lock = threading.Lock()
done = threading.Event()


def metrics_worker():
    # Aggregates latencies every few milliseconds, as servers do for their /metrics endpoint.
    while not done.is_set():
        with metrics_lock:
            snapshot = sorted(metrics[-500:])
        if snapshot:
            p50 = snapshot[len(snapshot) // 2]
            p99 = snapshot[int(len(snapshot) * 0.99)]
            _ = (p50, p99, sum(snapshot) / len(snapshot))
        time.sleep(0.005)


def main():
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    model = Model()
    rng = random.Random(7)
    worker = threading.Thread(target=metrics_worker, name="metrics")
    worker.start()
    t0 = time.perf_counter()
    for _ in range(requests):
        start = time.perf_counter()
        body = json.loads(make_request(rng))
        x = np.array([tokenize(doc) for doc in body["inputs"]], dtype=np.float32)
        answer = json.dumps({"predictions": postprocess(model.forward(x))})
        time.sleep(0.0005)  # writing the answer to the client
        with metrics_lock:
            metrics.append(time.perf_counter() - start)
        assert answer
    elapsed = time.perf_counter() - t0
    done.set()
    worker.join()
    print(f"served {requests} requests in {elapsed:.2f} s ({requests / elapsed:.0f} req/s)")


if __name__ == "__main__":
    main()
