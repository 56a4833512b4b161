"""Serving under concurrent clients: ``python -m inference serve`` against the server a user would
write, the same weights, the same requests, one run.

Each request is a question with 20 documents; ``--requests`` of them are sent by 1, 8 and 32
concurrent clients (asyncio + httpx, one process), and every request's texts are distinct (a
bi-encoder export caches vectors per process, so repeated text would time the cache).

* **ours**: ``python -m inference serve --model EXPORT`` (dynamic batching), ``POST /v1/rerank``.
* **peer**: the quickstart export is a bi-encoder, whose head Infinity's ``/rerank`` cannot serve
  (it takes cross-encoders), so the peer is the server a user would write (the issue's rule):
  FastAPI calling ``SentenceTransformer.encode`` per request on the same weights (the export folder,
  mean pooling, ``max_seq_length`` the export's), returning each document's cosine, in the shape of
  ``/v1/rerank``. For a cross-encoder export the peer calls ``CrossEncoder.predict`` instead.
* **in-process**: ``inference.load(EXPORT).score`` on the same requests, one at a time, for the
  1-client latency target (p50 within 10% of it).

Same work, asserted: for every request, the peer's cosine (cross-encoder: logit), put through the
export's score formula (``similarity_scale * cosine + weight * lexical``, then the calibration; the
lexical term computed here with the export's table), equals our ``relevance_score`` within 1e-4.
Ours does the lexical term on top, so the comparison leans against us.

``--load-test N``: N small requests from 64 clients to a server with a small queue
(``--max-queue-items 128``, clients that back off 0.2 s on a 503), so that 503s are deliberate; every answer must be 200 or 503. Then the
same load again with a SIGTERM half-way: every request the server accepted is answered (200 or
503), the rest are refused connections, and the server exits 0.

    python scripts/bench_serving.py --json outputs/bench/serving.json     # what `make bench-serving` runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mining import machine  # noqa: E402
from bench_ray import distinct_chunks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench_serving")
BACKOFF_S = 0.2  # load test: a client told 503 waits this long (at most Retry-After) before its next request
WARMUP = 4  # requests of their own texts sent to each server before it is timed

PEER_APP = textwrap.dedent('''
    """The server a user would write: FastAPI calling sentence-transformers per request."""
    import os, sys, uuid
    import numpy as np
    from fastapi import FastAPI
    from pydantic import BaseModel

    EXPORT, HEAD, MAX_LEN = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if HEAD == "bi-encoder":
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer(EXPORT, device="cpu")
        model.max_seq_length = MAX_LEN
    else:
        from sentence_transformers import CrossEncoder
        model = CrossEncoder(EXPORT, device="cpu", max_length=MAX_LEN)

    class Rerank(BaseModel):
        query: str
        documents: list[str]
        model: str | None = None

    app = FastAPI()

    @app.post("/v1/rerank")
    def rerank(req: Rerank):  # a plain def: FastAPI runs it in its thread pool
        if HEAD == "bi-encoder":
            v = model.encode([req.query] + req.documents, normalize_embeddings=True, batch_size=32)
            scores = (v[1:] @ v[0]).tolist()
        else:
            scores = model.predict([(req.query, d) for d in req.documents], activation_fn=None).tolist()
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return {"id": str(uuid.uuid4()), "results": [{"index": i, "relevance_score": scores[i]} for i in order]}

    @app.get("/health")
    def health():
        return {"status": "ok"}

    if __name__ == "__main__":
        import uvicorn
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[4]), log_level="warning")
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready in {timeout} s")


def start(argv: list[str], port: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


async def drive(url: str, requests: list[dict], clients: int, timeout: float = 300, keepalive: bool = True,
                backoff_s: float = 0.0, progress: dict | None = None) -> dict:
    """Send ``requests`` from ``clients`` concurrent clients; latencies, statuses and bodies
    (``progress["done"]`` counts the answered ones as they come)."""
    import httpx

    latencies: list[float] = [0.0] * len(requests)
    bodies: list = [None] * len(requests)
    statuses: list = [None] * len(requests)
    nxt = iter(range(len(requests)))
    # without keep-alive (the SIGTERM test) each request opens its own connection, so a request is
    # either refused (the server had stopped listening) or accepted and answered
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients if keepalive else 0)

    async def client(c: httpx.AsyncClient) -> None:
        for i in nxt:
            t0 = time.perf_counter()
            try:
                r = await c.post("/v1/rerank", json=requests[i])
                statuses[i] = r.status_code
                bodies[i] = r.json() if r.status_code == 200 else None
                if r.status_code == 503 and backoff_s:  # as a client that reads Retry-After does
                    await asyncio.sleep(min(backoff_s, float(r.headers.get("retry-after", backoff_s))))
            except httpx.ConnectError:
                statuses[i] = "refused"
            except httpx.TransportError as e:
                statuses[i] = f"lost: {type(e).__name__}"
            latencies[i] = time.perf_counter() - t0
            if progress is not None:
                progress["done"] = progress.get("done", 0) + 1

    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for _ in range(clients)))
        wall = time.perf_counter() - t0
    ok = [latencies[i] for i, s in enumerate(statuses) if s == 200]
    return {"wall_s": wall, "latencies": latencies, "bodies": bodies, "statuses": statuses,
            "rps": len(ok) / wall, "p50_ms": 1000 * pct(ok, 0.5) if ok else None,
            "p99_ms": 1000 * pct(ok, 0.99) if ok else None}


def make_requests(texts: list[str], questions: list[str], n: int, docs: int, start: int) -> list[dict]:
    out = []
    for r in range(n):
        at = start + r * docs
        out.append({"query": questions[(start // docs + r) % len(questions)], "documents": texts[at : at + docs]})
    return out


def check_same_work(model, reqs: list[dict], ours: list, peer: list, head: str) -> float:
    """Max |ours - formula(peer)| over every document of every request."""
    import numpy as np

    worst = 0.0
    for req, o, p in zip(reqs, ours, peer):
        mine = {r["index"]: r["relevance_score"] for r in o["results"]}
        theirs = np.array([dict((r["index"], r["relevance_score"]) for r in p["results"])[i]
                           for i in range(len(req["documents"]))], dtype=np.float64)
        z = model.spec.similarity_scale * theirs if head == "bi-encoder" else theirs
        if model.lexical is not None:
            z = z + model.lexical.logits([req["query"]] * len(req["documents"]), req["documents"])
        want = model.calibrate(z)
        worst = max(worst, max(abs(mine[i] - want[i]) for i in range(len(want))))
    return float(worst)


def load_test(model_dir: str, n: int, clients: int, texts: list[str], questions: list[str]) -> dict:
    """``n`` small requests (4 short documents, repeated texts) against a small queue; then the same
    with a SIGTERM half-way."""
    reqs = [{"query": questions[i % 500], "documents": [t[:120] for t in texts[(i % 500) * 4 : (i % 500) * 4 + 4]]}
            for i in range(n)]
    out = {}
    for phase in ("steady", "sigterm"):
        port = free_port()
        proc, url = start([sys.executable, "-m", "inference", "serve", "--model", model_dir, "--port", str(port),
                           "--max-queue-items", "128", "--log-level", "warning"], port)
        if phase == "sigterm":
            loop = asyncio.new_event_loop()

            async def with_kill():
                progress: dict = {}
                task = asyncio.ensure_future(drive(url, reqs, clients, timeout=120, keepalive=False, backoff_s=BACKOFF_S,
                                                   progress=progress))
                while not task.done() and progress.get("done", 0) < n // 2:  # half-way through the requests
                    await asyncio.sleep(0.01)
                proc.send_signal(signal.SIGTERM)
                return await task

            res = loop.run_until_complete(with_kill())
            loop.close()
            code = proc.wait(120)
        else:
            res = asyncio.run(drive(url, reqs, clients, timeout=120, backoff_s=BACKOFF_S))
            code = stop(proc)
        counts: dict[str, int] = {}
        for s in res["statuses"]:
            counts[str(s)] = counts.get(str(s), 0) + 1
        bad = {k: v for k, v in counts.items() if k not in ("200", "503", "refused")}
        out[phase] = {"requests": n, "clients": clients, "wall_s": round(res["wall_s"], 2), "statuses": counts,
                      "errors_other_than_503": sum(bad.values()), "exit_code": code}
        logger.info("load test %s: %s in %.1f s, exit %s", phase, counts, res["wall_s"], code)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--model", default=str(ROOT / "outputs" / "evaluator-quickstart"))
    ap.add_argument("--requests", type=int, default=160, help="requests per client count")
    ap.add_argument("--docs", type=int, default=20, help="documents per request")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--load-test", type=int, default=10_000, help="requests of the load test (0: none)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would load the client
    if not Path(args.model).is_dir():
        print(f"error: no export at {args.model}: run `make quickstart` first, or give --model", file=sys.stderr)
        return 2
    import inference

    model = inference.load(args.model, device="cpu")
    head, max_len = model.spec.head, model.spec.max_length
    chunks, questions = distinct_chunks()
    texts = list(dict.fromkeys(c.text for c in chunks))
    counts = [int(c) for c in args.clients.split(",")]
    need = args.requests * args.docs * len(counts) + WARMUP * args.docs
    if need > len(texts):
        raise SystemExit(f"{need} distinct documents needed, the samples hold {len(texts)}")
    phases = {c: make_requests(texts, questions, args.requests, args.docs, k * args.requests * args.docs)
              for k, c in enumerate(counts)}

    warmup = make_requests(texts, questions, WARMUP, args.docs, len(texts) - WARMUP * args.docs)
    # in-process: one request at a time, a fresh model (no cached vectors), warmed up the same way
    inproc = inference.load(args.model, device="cpu")
    for req in warmup:
        inproc.score([(req["query"], d) for d in req["documents"]])
    lat = []
    for req in phases[counts[0]]:
        t0 = time.perf_counter()
        inproc.score([(req["query"], d) for d in req["documents"]])
        lat.append(time.perf_counter() - t0)
    del inproc
    in_process = {"p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99)}
    logger.info("in-process: p50 %.1f ms", in_process["p50_ms"])

    results: dict = {}
    bodies: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        peer_py = Path(tmp) / "peer_server.py"
        peer_py.write_text(PEER_APP)
        for side in ("ours", "peer"):
            port = free_port()
            argv_ = ([sys.executable, "-m", "inference", "serve", "--model", args.model, "--port", str(port),
                      "--log-level", "warning"] if side == "ours"
                     else [sys.executable, str(peer_py), args.model, head, str(max_len), str(port)])
            proc, url = start(argv_, port)
            try:
                asyncio.run(drive(url, warmup, 1))
                for c in counts:
                    res = asyncio.run(drive(url, phases[c], c))
                    bad = [s for s in res["statuses"] if s != 200]
                    if bad:
                        raise RuntimeError(f"{side}, {c} clients: {len(bad)} failed requests ({bad[:3]})")
                    results.setdefault(str(c), {})[side] = {k: round(res[k], 2) for k in ("rps", "p50_ms", "p99_ms")}
                    bodies[(side, c)] = res["bodies"]
                    logger.info("%s, %d clients: %.1f rps, p50 %.0f ms, p99 %.0f ms", side, c, res["rps"],
                                res["p50_ms"], res["p99_ms"])
            finally:
                stop(proc)
    worst = max(check_same_work(model, phases[c], bodies[("ours", c)], bodies[("peer", c)], head) for c in counts)
    c_max, c_min = str(max(counts)), str(min(counts))
    out = {
        "setup": {"model": args.model, "head": head, "requests_per_count": args.requests, "docs": args.docs,
                  "peer": "FastAPI + SentenceTransformer.encode" if head == "bi-encoder" else "FastAPI + CrossEncoder.predict"},
        **results,
        "in_process": {k: round(v, 2) for k, v in in_process.items()},
        f"ratio_rps_{c_max}": round(results[c_max]["ours"]["rps"] / results[c_max]["peer"]["rps"], 3),
        f"p99_lower_at_{c_max}": results[c_max]["ours"]["p99_ms"] < results[c_max]["peer"]["p99_ms"],
        f"p50_{c_min}_client_vs_in_process": round(results[c_min]["ours"]["p50_ms"] / in_process["p50_ms"], 3),
        "same_work": {"max_abs_score_diff": worst, "ok": worst <= 1e-4},
        "machine": machine(),
        "command": "python scripts/bench_serving.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    if args.load_test:
        out["load_test"] = load_test(args.model, args.load_test, 64, texts, questions)
    out["targets"] = {f"ratio_rps_{c_max}_min": 1.5, "p50_vs_in_process_max": 1.10,
                      "met": out[f"ratio_rps_{c_max}"] >= 1.5 and out[f"p99_lower_at_{c_max}"]
                      and out[f"p50_{c_min}_client_vs_in_process"] <= 1.10}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=2))
    if not out["same_work"]["ok"]:
        print(f"error: the two servers disagree by {worst:.3g}: they do not compute the same thing", file=sys.stderr)
        return 1
    lt = out.get("load_test", {})
    if any(p["errors_other_than_503"] or p["exit_code"] != 0 for p in lt.values()):
        print("error: the load test had errors other than 503, or a non-zero exit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
