"""An HTTP inference service to replay requests against (mlprof-run --requests, docs/serving.md).

At start it trains a scikit-learn model (a TF-IDF + logistic-regression text classifier on a
synthetic corpus: the "model loading" phase), then answers POST /score with JSON bodies
{"text": "..."} -> {"label": ..., "score": ...}. Any other path or method answers 404/405, which
still tells mlprof-run the service is up. Standard library HTTP server (threaded, keep-alive);
scikit-learn and numpy from apt (python3-sklearn).

Usage: python3 examples/serve_http.py [--port 8080] [--leak-bytes N]
  --leak-bytes N  keep N bytes per request forever (a planted leak: the per-request memory table
                  of the report should show about N bytes retained per request at the marked line)
"""
import argparse
import json
import random
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

TOPICS = {
    "sports": "match goal team score season player coach league win final",
    "finance": "market stock price bank rate profit invest fund trade growth",
    "weather": "rain storm sun cloud wind forecast cold warm snow temperature",
    "tech": "model data compute network server code cloud chip software latency",
}


def load_model(seed=7, docs_per_topic=400):
    """The start-up cost: build a corpus and fit the model (seconds, like loading weights)."""
    rng = random.Random(seed)
    texts, labels = [], []
    for label, words in TOPICS.items():
        vocab = words.split()
        for _ in range(docs_per_topic):
            texts.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(8, 30))))
            labels.append(label)
    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=1)
    x = vec.fit_transform(texts)
    clf = LogisticRegression(max_iter=500)
    clf.fit(x, labels)
    return vec, clf


def normalize(text):
    # Per-request Python work (interpreter time the per-line table shows).
    out = []
    for word in text.lower().split():
        w = word.strip(".,;:!?\"'")
        if w:
            out.append(w)
    return " ".join(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the load loop reuses connections
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms Nagle/delayed-ACK stall
    model = None
    leak_bytes = 0
    kept = []

    def log_message(self, fmt, *args):  # no per-request log lines
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(200 if self.path == "/health" else 404, {"status": "ok" if self.path == "/health" else "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        if self.path != "/score":
            return self.reply(404, {"error": "POST to /score"})
        try:
            req = json.loads(raw)
            text = normalize(str(req["text"]))
        except (ValueError, KeyError, TypeError):
            return self.reply(400, {"error": "body must be JSON with a \"text\" field"})
        vec, clf = Handler.model
        probs = clf.predict_proba(vec.transform([text]))[0]  # native: sparse matmul in scikit-learn
        best = int(probs.argmax())
        if Handler.leak_bytes:
            Handler.kept.append(bytearray(Handler.leak_bytes))  # LEAK-LINE (only with --leak-bytes)
        self.reply(200, {"label": str(clf.classes_[best]), "score": round(float(probs[best]), 4)})


class Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: under open-loop load (--rps) a burst of new
    # connections overflows it, and the dropped SYNs come back after TCP's 1 s and 3 s retransmit
    # timeouts, seconds of latency that are neither the model's nor the profiler's.
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--leak-bytes", type=int, default=0)
    args = ap.parse_args()
    Handler.model = load_model()
    Handler.leak_bytes = args.leak_bytes
    server = Server(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"serve_http: listening on http://127.0.0.1:{args.port}/score", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
