"""Benchmark the bi-encoder head's serving engine against sentence-transformers' ``SentenceTransformer``.

    python scripts/bench_biencoder.py --model outputs/evaluator-quickstart --json outputs/bench/biencoder.json [--pairs 2000]

Both score the same real (query, passage) pairs of the built NQ-open evaluator data (dev pairs
first, then train pairs; each query comes with its 8 passages, as a grader sees them) with the same
weights (the export folder, which ``SentenceTransformer`` loads as a Transformer with mean pooling),
on the same device, in float32, in one process; the runs alternate and the best of ``--repeats`` is
kept. Ours: :meth:`inference.evaluator.Evaluator.logits` with the vector cache off (so every run
encodes). The peer, two ways: ``naive`` encodes every pair's query and passage
(``model.encode(queries)``, ``model.encode(passages)``, then ``model.similarity_pairwise``: the
straightforward call), ``dedup`` encodes each distinct text once, as ours does. Reported: pairs/s
of each and the ratios, and the largest difference between our cosine (``z / scale``) and theirs;
then the latency of grading one query's top-5 and top-20 chunks (``Evaluator.grade``, cache off,
beside ``encode`` of the query and the chunks and their cosines), median and p95 over
``--latency-queries`` queries, callers alternating on every query. Before timing the script waits
for a quiet machine, as scripts/bench_scoring.py does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scoring import DATA, latency, latency_groups, load_pairs, machine, timed, wait_for_quiet  # noqa: E402

logger = logging.getLogger("bench_biencoder")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="outputs/evaluator-quickstart", help="a bi-encoder evaluator export")
    ap.add_argument("--json", required=True)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--data", nargs="*", default=[str(DATA / "dev.pairs.jsonl"), str(DATA / "train.pairs.jsonl")])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--st-batch-size", type=int, default=32, help="SentenceTransformer.encode batch size (its default)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--latency-queries", type=int, default=30)
    ap.add_argument("--latency-repeats", type=int, default=3)
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--wait", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch
    from sentence_transformers import SentenceTransformer

    import inference

    load_start = wait_for_quiet(args.max_load, args.wait)
    ours = inference.load(args.model, device=args.device)
    if ours.spec.head != "bi-encoder":
        raise SystemExit(f"{args.model}: head {ours.spec.head!r}; this compares bi-encoder exports (cross-encoders: "
                         "scripts/bench_scoring.py)")
    ours.engine.cache_size = 0  # every run encodes
    scale = ours.spec.similarity_scale
    st = SentenceTransformer(str(args.model), device=args.device)
    st.max_seq_length = ours.spec.max_length
    pairs = load_pairs(args.pairs, [Path(f) for f in args.data], args.seed)
    texts = [(p.query, ours.passage_text(p.passage)) for p in pairs]
    queries, passages = [q for q, _ in texts], [p for _, p in texts]

    def run_ours():
        return ours.logits(texts) / scale

    def encode(xs):
        return st.encode(xs, batch_size=args.st_batch_size, convert_to_tensor=True, show_progress_bar=False)

    def run_naive():
        return st.similarity_pairwise(encode(queries), encode(passages)).cpu().numpy().astype(np.float64)

    def run_dedup():
        uq, up = list(dict.fromkeys(queries)), list(dict.fromkeys(passages))
        qv, pv = encode(uq), encode(up)
        qi, pi = {t: i for i, t in enumerate(uq)}, {t: i for i, t in enumerate(up)}
        return st.similarity_pairwise(qv[[qi[q] for q in queries]], pv[[pi[p] for p in passages]]).cpu().numpy().astype(np.float64)

    run_ours(), run_naive()  # warm-up
    best = {"ours": float("inf"), "naive": float("inf"), "dedup": float("inf")}
    outs = {}
    for _ in range(args.repeats):
        for name, fn in (("ours", run_ours), ("naive", run_naive), ("dedup", run_dedup)):
            t, outs[name] = timed(fn, 1)
            best[name] = min(best[name], t)
    n = len(texts)
    result = {
        "pairs": n, "distinct_queries": len(set(queries)), "distinct_passages": len(set(passages)),
        "ours_pairs_per_s": n / best["ours"], "st_naive_pairs_per_s": n / best["naive"],
        "st_dedup_pairs_per_s": n / best["dedup"], "ratio_naive": best["naive"] / best["ours"],
        "ratio_dedup": best["dedup"] / best["ours"],
        "max_abs_cosine_diff": float(max(np.max(np.abs(outs["ours"] - outs[k])) for k in ("naive", "dedup"))),
    }
    logger.info("ours %.1f pairs/s; SentenceTransformer %.1f (naive), %.1f (distinct texts); ratios %.2f / %.2f; "
                "max |cos diff| %.2e", result["ours_pairs_per_s"], result["st_naive_pairs_per_s"],
                result["st_dedup_pairs_per_s"], result["ratio_naive"], result["ratio_dedup"], result["max_abs_cosine_diff"])

    def st_grade(q, chunks):
        return st.similarity(encode([q]), encode([ours.passage_text(c) for c in chunks]))

    for k in (5, 20):
        groups = latency_groups(pairs, args.latency_queries, k, args.seed)
        lat = latency({"grade": ours.grade, "st_encode": st_grade}, groups, k, args.latency_repeats)
        result[f"latency_top{k}"] = lat
        result[f"latency_ratio_top{k}"] = lat["st_encode"]["median_ms"] / lat["grade"]["median_ms"]
        logger.info("grade top-%d: median %.1f ms (SentenceTransformer %.1f ms, ratio %.2f)", k,
                    lat["grade"]["median_ms"], lat["st_encode"]["median_ms"], result[f"latency_ratio_top{k}"])

    import sentence_transformers
    import transformers

    result.update({
        "model": str(args.model), "device": args.device, "max_length": ours.spec.max_length,
        "batch_tokens": ours.engine.batch_tokens, "st_batch_size": args.st_batch_size, "repeats": args.repeats,
        "load_avg_start": load_start, "load_avg_end": os.getloadavg()[0], "machine": machine(),
        "versions": {"sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    })
    from data_prep.io import write_json

    write_json(args.json, result)
    print(json.dumps({k: result[k] for k in ("ours_pairs_per_s", "st_naive_pairs_per_s", "st_dedup_pairs_per_s",
                                             "ratio_naive", "ratio_dedup", "max_abs_cosine_diff")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
