"""Serving under concurrent clients: ``python -m inference serve`` against the server a user would
write, the same weights, the same requests, one run.

Each request is a question with 20 documents; ``--requests`` of them are sent by 1, 8 and 32
concurrent clients (asyncio + httpx, one process), and every request's texts are distinct (a
bi-encoder export caches vectors per process, so repeated text would time the cache).

* **ours**: ``python -m inference serve --model EXPORT`` (dynamic batching), ``POST /v1/rerank``.
* **peer** (``--peer auto``): for a cross-encoder export (the answer classifier's quickstart, or an
  evaluator trained with ``head: cross-encoder``), **Infinity** (``infinity_emb v2 --model-id EXPORT
  --engine torch --device cpu``, its defaults otherwise, ``POST /rerank``), installed by this script
  into its own virtualenv (``--infinity-venv``, default ``outputs/bench/infinity-venv``: it pins
  numpy<2 and sentence-transformers<4; torch is pinned to this project's CPU build). The quickstart
  evaluator is a bi-encoder, whose head Infinity's ``/rerank`` cannot serve (it takes
  cross-encoders), so there the peer is the server a user would write: FastAPI calling
  ``SentenceTransformer.encode`` per request on the same weights (the export folder, mean pooling,
  ``max_seq_length`` the export's), returning each document's cosine, in the shape of ``/v1/rerank``
  (``--peer fastapi`` with a cross-encoder: ``CrossEncoder.predict``).
* **in-process**: ``inference.load(EXPORT).score`` on the same requests, one at a time, for the
  1-client latency target (p50 within 10% of it).

Same work, asserted: for every request, the peer's cosine (cross-encoder: logit; Infinity: its
sigmoid, turned back into the logit), put through the export's score formula (``similarity_scale * cosine + weight * lexical``, then the calibration; the
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

import numpy as np

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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
    log = tempfile.TemporaryFile(mode="w+")  # a server that logs every request must never block on a full pipe
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
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
                backoff_s: float = 0.0, progress: dict | None = None, path: str = "/v1/rerank") -> dict:
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
                r = await c.post(path, json=requests[i])
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


def check_same_work(model, reqs: list[dict], ours: list, peer: list, head: str, peer_kind: str = "fastapi") -> float:
    """Max |ours - formula(peer)| over every document of every request."""
    worst = 0.0
    for req, o, p in zip(reqs, ours, peer):
        mine = {r["index"]: r["relevance_score"] for r in o["results"]}
        theirs = np.array([dict((r["index"], r["relevance_score"]) for r in p["results"])[i]
                           for i in range(len(req["documents"]))], dtype=np.float64)
        if peer_kind == "infinity":  # Infinity answers sigmoid(logit) in float32: back to the logit
            theirs = np.clip(theirs, 1e-12, 1 - 1e-7)
            theirs = np.log(theirs) - np.log1p(-theirs)
        z = model.spec.similarity_scale * theirs if head == "bi-encoder" else theirs
        if model.lexical is not None:
            z = z + model.lexical.logits([req["query"]] * len(req["documents"]), req["documents"])
        want = model.calibrate(z)
        worst = max(worst, max(abs(mine[i] - want[i]) for i in range(len(want))))
    return float(worst)


def infinity_argv(venv: Path, model_dir: str, port: int) -> list[str]:
    """Infinity in its own virtualenv (created here on first use), serving ``model_dir``."""
    exe = venv / "bin" / "infinity_emb"
    if not exe.exists():
        logger.info("installing Infinity into %s (once)", venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run(pip + ["torch==2.13.0"], check=True)  # the CPU build; an open range pulls CUDA
        subprocess.run(pip + ["infinity-emb[server,torch]", "torch==2.13.0"], check=True)
    return [str(exe), "v2", "--model-id", str(Path(model_dir).resolve()), "--port", str(port), "--engine", "torch",
            "--device", "cpu"]


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
    ap.add_argument("--repeats", type=int, default=2,
                    help="turns per client count, the two servers alternating (the median rate is reported)")
    ap.add_argument("--peer", choices=("auto", "fastapi", "infinity"), default="auto",
                    help="auto: Infinity for a cross-encoder export, FastAPI + sentence-transformers otherwise")
    ap.add_argument("--infinity-venv", default=str(ROOT / "outputs" / "bench" / "infinity-venv"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would load the client
    if not Path(args.model).is_dir():
        print(f"error: no export at {args.model}: run `make quickstart` first, or give --model", file=sys.stderr)
        return 2
    import inference

    model = inference.load(args.model, device="cpu")
    head, max_len = model.spec.head, model.spec.max_length
    peer_kind = args.peer if args.peer != "auto" else ("infinity" if head == "cross-encoder" else "fastapi")
    if peer_kind == "infinity" and head != "cross-encoder":
        raise SystemExit(f"Infinity's /rerank serves cross-encoders; {args.model} is a {head}")
    chunks, questions = distinct_chunks()
    texts = list(dict.fromkeys(c.text for c in chunks))
    counts = [int(c) for c in args.clients.split(",")]
    need = args.requests * args.docs * len(counts) * args.repeats + WARMUP * args.docs
    if need > len(texts):
        raise SystemExit(f"{need} distinct documents needed, the samples hold {len(texts)}")
    # (repeat, clients) -> requests; every phase has texts of its own (our vector cache never hits)
    phases = {(r, c): make_requests(texts, questions, args.requests, args.docs,
                                    (r * len(counts) + k) * args.requests * args.docs)
              for r in range(args.repeats) for k, c in enumerate(counts)}

    warmup = make_requests(texts, questions, WARMUP, args.docs, len(texts) - WARMUP * args.docs)
    # in-process: one request at a time, a fresh model (no cached vectors), warmed up the same way
    inproc = inference.load(args.model, device="cpu")
    for req in warmup:
        inproc.score([(req["query"], d) for d in req["documents"]])
    lat = []
    for req in phases[(0, counts[0])]:
        t0 = time.perf_counter()
        inproc.score([(req["query"], d) for d in req["documents"]])
        lat.append(time.perf_counter() - t0)
    del inproc
    in_process = {"p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99)}
    logger.info("in-process: p50 %.1f ms", in_process["p50_ms"])

    # Both servers run side by side (the idle one costs nothing) and take turns, phase by phase, in
    # alternating order, so that a change in the machine's load hits both sides alike.
    runs: dict = {}  # (side, clients) -> [drive results]
    bodies: dict = {}
    procs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        peer_py = Path(tmp) / "peer_server.py"
        peer_py.write_text(PEER_APP)
        try:
            for side in ("ours", "peer"):
                port = free_port()
                if side == "ours":
                    argv_ = [sys.executable, "-m", "inference", "serve", "--model", args.model, "--port", str(port),
                             "--log-level", "warning"]
                elif peer_kind == "infinity":
                    argv_ = infinity_argv(Path(args.infinity_venv), args.model, port)
                else:
                    argv_ = [sys.executable, str(peer_py), args.model, head, str(max_len), str(port)]
                path = "/rerank" if side == "peer" and peer_kind == "infinity" else "/v1/rerank"
                proc, url = start(argv_, port)
                procs[side] = (proc, url, path)
                asyncio.run(drive(url, warmup, 1, path=path))
            for r in range(args.repeats):
                for k, c in enumerate(counts):
                    for side in (("ours", "peer") if (r + k) % 2 == 0 else ("peer", "ours")):
                        _, url, path = procs[side]
                        res = asyncio.run(drive(url, phases[(r, c)], c, path=path))
                        bad = [s for s in res["statuses"] if s != 200]
                        if bad:
                            raise RuntimeError(f"{side}, {c} clients: {len(bad)} failed requests ({bad[:3]})")
                        runs.setdefault((side, c), []).append(res)
                        bodies[(side, r, c)] = res["bodies"]
                        logger.info("repeat %d, %s, %d clients: %.1f rps, p50 %.0f ms, p99 %.0f ms", r, side, c,
                                    res["rps"], res["p50_ms"], res["p99_ms"])
        finally:
            for proc, _, _ in procs.values():
                stop(proc)
    results: dict = {}
    for (side, c), rs in runs.items():  # the median repeat's rate; latency percentiles over all requests
        lats = [x for res in rs for x, st in zip(res["latencies"], res["statuses"]) if st == 200]
        results.setdefault(str(c), {})[side] = {"rps": round(float(np.median([res["rps"] for res in rs])), 2),
                                                "rps_per_repeat": [round(res["rps"], 2) for res in rs],
                                                "p50_ms": round(1000 * pct(lats, 0.5), 2),
                                                "p99_ms": round(1000 * pct(lats, 0.99), 2)}
    worst = max(check_same_work(model, phases[(r, c)], bodies[("ours", r, c)], bodies[("peer", r, c)], head,
                                peer_kind) for r in range(args.repeats) for c in counts)
    c_max, c_min = str(max(counts)), str(min(counts))
    out = {
        "setup": {"model": args.model, "head": head, "requests_per_count": args.requests, "docs": args.docs,
                  "repeats": args.repeats,
                  "peer": ("Infinity (infinity_emb v2, torch, cpu)" if peer_kind == "infinity" else
                           "FastAPI + SentenceTransformer.encode" if head == "bi-encoder" else
                           "FastAPI + CrossEncoder.predict")},
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
