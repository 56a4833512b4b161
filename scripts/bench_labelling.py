"""Benchmark the labeller's throughput: the same pairs, sequential against concurrent.

    python scripts/bench_labelling.py --json outputs/bench/labelling.json [--pairs 500] [--latency 0.2]

A chat-completions server on loopback (:class:`data_prep.labelling.loopback.ChatServer`, real HTTP)
answers every request after ``--latency`` seconds, as a remote LLM would. The same ``--pairs``
real NQ-open pairs are labelled twice through ``data_prep.labelling.label`` (the code behind
``python -m data_prep label``), each into a fresh folder: once with ``--concurrency 1``
(sequential) and once with the default concurrency. The JSON holds
``{"sequential_rps", "concurrent_rps", "ratio", "duplicates", "failed", ...}``: ``duplicates``
counts label lines beyond one per pair plus pairs the server was asked about more than once, in
either run; ``failed`` the pairs that failed. Target: ``ratio >= 10`` with no duplicate and no
failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"


def run_once(pairs_file: Path, out: Path, url: str, server, concurrency: int, task: str) -> dict:
    from data_prep.labelling import LabelConfig, OpenAIBackend, label
    from data_prep.labelling.loopback import prompt_parts

    start = len(server.requests)
    cfg = LabelConfig(input=str(pairs_file), output=str(out), task=task, progress=False)
    backend = OpenAIBackend([url], "bench-judge", None, concurrency=concurrency)
    t0 = time.perf_counter()
    s = label(cfg, backend)
    seconds = time.perf_counter() - t0
    lines = [json.loads(x) for x in (out / "labels.jsonl").read_text(encoding="utf-8").splitlines()]
    keys = Counter(x["metadata"]["llm"]["key"] for x in lines)
    asked = Counter(prompt_parts(r.body)[:2] for r in server.requests[start:])
    return {
        "concurrency": concurrency,
        "pairs": s["pairs"],
        "labelled": s["done"],
        "failed": s["failed_total"],
        "requests": s["requests"],
        "retries": s["retries"],
        "seconds": round(seconds, 3),
        "pairs_per_s": round(s["done"] / seconds, 3),
        "duplicate_lines": sum(n - 1 for n in keys.values()),
        "pairs_asked_twice": sum(n - 1 for n in asked.values()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--pairs", type=int, default=500)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the server waits before each answer")
    ap.add_argument("--concurrency", type=int, default=None, help="the concurrent run's (default: the command's default)")
    ap.add_argument("--task", default="relevance")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from data_prep.labelling.command import DEFAULT_CONCURRENCY
    from data_prep.labelling.loopback import ChatServer
    from data_prep.readers.rows import open_pair_rows

    concurrency = args.concurrency or DEFAULT_CONCURRENCY

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _, rows = open_pair_rows(NQ, "nq-open")
        pairs_file = tmp / "pairs.jsonl"
        n = 0
        with open(pairs_file, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"query": r.query, "passage": r.passage.text, "query_id": r.query_id}) + "\n")
                n += 1
                if n == args.pairs:
                    break
        with ChatServer(latency=args.latency) as server:
            seq = run_once(pairs_file, tmp / "sequential", server.url, server, 1, args.task)
            conc = run_once(pairs_file, tmp / "concurrent", server.url, server, concurrency, args.task)
    result = {
        "sequential_rps": seq["pairs_per_s"],
        "concurrent_rps": conc["pairs_per_s"],
        "ratio": round(conc["pairs_per_s"] / seq["pairs_per_s"], 2),
        "duplicates": seq["duplicate_lines"] + conc["duplicate_lines"] + seq["pairs_asked_twice"] + conc["pairs_asked_twice"],
        "failed": seq["failed"] + conc["failed"],
        "runs": {"sequential": seq, "concurrent": conc},
        "setup": {"pairs": n, "latency_s": args.latency, "task": args.task, "server": "loopback ChatServer (HTTP/1.1)",
                  "data": str(NQ.relative_to(ROOT))},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_avg_end": os.getloadavg()[0]},
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("sequential_rps", "concurrent_rps", "ratio", "duplicates", "failed")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
