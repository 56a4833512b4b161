"""Ray's cost and gain on the data jobs: one process, then Ray clusters of one and two nodes, one run.

Two jobs, each run three times on the same data with the same settings:

* **mine**: :func:`data_prep.mining.run_mining` over MS MARCO-shaped synthetic passages
  (``bench_scale.ScaleCorpus``) and queries of 3-9 of a passage's words, against one BM25 index
  built before the three runs (its build is reported, not timed in the runs). One retrieval thread
  in the one-process run, one CPU per Ray task.
* **score**: ``python -m inference score`` (:func:`inference.cli.score_file`) on ``--pairs``
  (question, chunk) pairs of the bundled NQ-open and SQuAD samples, every chunk distinct
  (:func:`write_pairs`), with an export (default the quickstart's), ``--chunk-size 1024``, torch on
  one thread in the one-process run, one CPU per Ray actor.

``local_s`` is the one-process run; ``ray1_s`` and ``ray2_s`` run on a local Ray cluster
(``ray.cluster_utils.Cluster``) of one and of two nodes of one CPU each, so that a 2-core machine
can show the scaling. Each Ray time is the whole command with the cluster already up (as a user's
cluster is): tasks, actor start-up (each actor loads the export), transfers, the driver's writes
and merge. ``overhead_1node = ray1_s / local_s`` (target <= 1.15) and ``scaling_2nodes = ray1_s /
ray2_s`` (target >= 1.7).

Same work: the three mining outputs are compared byte for byte and the scores within 1e-6; the
run fails (exit 1) if they differ.

    python scripts/bench_ray.py --json outputs/bench/ray.json       # what `make bench-ray` runs
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mining import machine  # noqa: E402
from bench_scale import ScaleCorpus  # noqa: E402
from data_prep.cluster import RayOptions  # noqa: E402
from data_prep.mining import MiningConfig, run_mining  # noqa: E402
from data_prep.readers import Source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"
SQUAD = ROOT / "data" / "sample" / "squad" / "squad-v1.1-train-articles.json.gz"
logger = logging.getLogger("bench_ray")
CHUNK = 1024


def distinct_chunks() -> tuple[list, list[str]]:
    """The bundled NQ-open and SQuAD samples as an index holds them (the pipeline's 200-character
    chunks with 40 of overlap, each distinct), and their questions."""
    from data_prep.readers import open_source
    from pipeline.chunking import chunks_from_source

    sources = {"nq-open": NQ, "squad": SQUAD}
    chunks = [c for fmt, f in sources.items()
              for c in chunks_from_source(fmt, input=str(f), max_chars=200, overlap=40, unit="chars")]
    questions = [q.query for fmt, f in sources.items() for q in open_source(fmt, input=str(f)).queries()]
    return chunks, questions


def write_pairs(path: Path, n: int) -> int:
    """``n`` (question, passage) pairs of the bundled NQ-open and SQuAD samples, every passage a
    distinct chunk (the pipeline's 200-character chunks with 40 of overlap, as an index holds them)
    and the questions taken in turn: a bi-encoder export caches vectors per process, so text that
    repeats across the file would time the cache, which each Ray actor keeps apart."""
    chunks, questions = distinct_chunks()
    if len(chunks) < n:
        raise ValueError(f"--pairs {n}: the samples hold {len(chunks)} distinct chunks")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            c = chunks[i]
            f.write(json.dumps({"query": questions[i % len(questions)], "passage": {"title": c.title, "text": c.text},
                                "query_id": f"q{i % len(questions)}", "passage_id": f"c{i}"}) + "\n")
    return n


def score_args(model: str, pairs: Path, out: Path, ray: str | None) -> SimpleNamespace:
    """The namespace ``python -m inference score`` parses (defaults of the command line)."""
    from inference.cli import build_parser

    argv = ["score", "--model", model, "--input", str(pairs), "--output", str(out), "--no-progress", "--overwrite",
            "--chunk-size", str(CHUNK)]  # with --ray: the block an actor scores (the default there)
    if ray:
        argv += ["--ray", ray]
    return build_parser().parse_args(argv)


def run_jobs(label: str, work: Path, source, index_dir: Path, cfg: MiningConfig, model: str, pairs: Path,
             ray: RayOptions | None) -> dict:
    from inference.cli import score_file

    out = work / f"mine-{label}"
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    run_mining(source, out, cfg, index_dir=index_dir, ray=ray)
    mine_s, mine_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    score_file(score_args(model, pairs, work / f"scores-{label}.jsonl", ray.address if ray else None))
    score_s, score_cpu = time.perf_counter() - t0, time.process_time() - c0
    logger.info("%s: mine %.1f s (driver CPU %.1f s), score %.1f s (driver CPU %.1f s)", label, mine_s, mine_cpu,
                score_s, score_cpu)
    return {"mine": mine_s, "score": score_s, "mine_cpu": mine_cpu, "score_cpu": score_cpu}


def on_cluster(nodes: int, fn):
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(nodes - 1):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, logging_level="WARNING")
    try:
        return fn()
    finally:
        ray.shutdown()
        c.shutdown()


def same_scores(a: Path, b: Path) -> bool:
    with open(a) as fa, open(b) as fb:
        for la, lb in zip(fa, fb, strict=True):
            x, y = json.loads(la), json.loads(lb)
            if x["index"] != y["index"] or x["action"] != y["action"] or abs(x["score"] - y["score"]) > 1e-6:
                return False
    return True


def run(args) -> dict:
    import torch

    work = Path(tempfile.mkdtemp(prefix="bench-ray-", dir=args.tmp))
    try:
        corpus = ScaleCorpus(args.docs, seed=args.seed)
        queries = corpus.scale_queries(args.queries, seed=args.seed + 1)
        source = Source(name="synthetic", corpus=corpus.passages, queries=lambda: iter(queries))
        cfg = MiningConfig(n_threads=1, num_shards=args.shards, show_progress=not args.no_progress)
        index_dir = work / "index"
        t0 = time.perf_counter()
        run_mining(Source(name="synthetic", corpus=corpus.passages, queries=lambda: iter(queries[:1])), work / "warm",
                   cfg, index_dir=index_dir)  # builds the index (and compiles the kernels) once
        index_s = time.perf_counter() - t0
        pairs = work / "pairs.jsonl"
        write_pairs(pairs, args.pairs)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            local = run_jobs("local", work, source, index_dir, cfg, args.model, pairs, None)
        finally:
            torch.set_num_threads(threads)
        opts = RayOptions("auto")
        ray1 = on_cluster(1, lambda: run_jobs("ray1", work, source, index_dir, cfg, args.model, pairs, opts))
        ray2 = on_cluster(2, lambda: run_jobs("ray2", work, source, index_dir, cfg, args.model, pairs, opts))

        ref = (work / "mine-local" / "examples.jsonl").read_bytes()
        same_mine = all((work / f"mine-{k}" / "examples.jsonl").read_bytes() == ref for k in ("ray1", "ray2"))
        same_score = all(same_scores(work / "scores-local.jsonl", work / f"scores-{k}.jsonl") for k in ("ray1", "ray2"))
        result: dict = {"setup": {"docs": args.docs, "queries": args.queries, "pairs": args.pairs, "model": args.model,
                                  "index_s": round(index_s, 1), "cpus_per_node": 1}}
        for job in ("mine", "score"):
            result[job] = {"local_s": round(local[job], 2), "ray1_s": round(ray1[job], 2), "ray2_s": round(ray2[job], 2),
                           "overhead_1node": round(ray1[job] / local[job], 3),
                           "scaling_2nodes": round(ray1[job] / ray2[job], 3),
                           # the driver's own CPU time in the Ray runs (reading, checks, transfers, writes, merge):
                           # what stays on one machine however many nodes work
                           "driver_cpu_s": {"ray1": round(ray1[f"{job}_cpu"], 2), "ray2": round(ray2[f"{job}_cpu"], 2)}}
        n_items = {"mine": args.queries, "score": args.pairs}
        for job in ("mine", "score"):  # the node count at which the driver is as busy as the workers are fast
            worker_rate = n_items[job] / ray1[job]
            driver_rate = n_items[job] / max(ray2[f"{job}_cpu"], 1e-9)
            result[job]["model"] = {"per_worker_per_s": round(worker_rate, 1), "driver_per_s": round(driver_rate, 1),
                                    "driver_bound_at_nodes": round(driver_rate / worker_rate, 1)}
        result["overhead_1node"] = max(result[j]["overhead_1node"] for j in ("mine", "score"))
        result["scaling_2nodes"] = min(result[j]["scaling_2nodes"] for j in ("mine", "score"))
        result["same_work"] = {"mine_bytes_equal": same_mine, "scores_within_1e-6": same_score}
        result["targets"] = {"overhead_1node_max": 1.15, "scaling_2nodes_min": 1.7,
                             "met": result["overhead_1node"] <= 1.15 and result["scaling_2nodes"] >= 1.7}
        result["machine"] = machine()
        result["command"] = " ".join(["python", *sys.argv])
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the figures here")
    ap.add_argument("--docs", type=int, default=200_000, help="synthetic passages to mine against")
    ap.add_argument("--queries", type=int, default=60_000)
    ap.add_argument("--pairs", type=int, default=20_000, help="pairs to score")
    ap.add_argument("--shards", type=int, default=8, help="mining shards (every run: the output does not depend on it)")
    ap.add_argument("--model", default=str(ROOT / "outputs" / "evaluator-quickstart"), help="export to score with")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (Path(args.model) / "evaluator.json").exists():
        print(f"error: no export at {args.model}: run `make quickstart` first, or give --model", file=sys.stderr)
        return 2
    result = run(args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("mine", "score", "overhead_1node", "scaling_2nodes", "same_work")}, indent=2))
    if not all(result["same_work"].values()):
        print("error: the runs computed different outputs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
