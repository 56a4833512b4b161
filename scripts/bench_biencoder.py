"""Benchmark the bi-encoder head's serving engine against sentence-transformers' ``SentenceTransformer``.

    python scripts/bench_biencoder.py --model outputs/evaluator-quickstart --json outputs/bench/biencoder.json [--pairs 2000]

Both score the same real (query, passage) pairs of the built NQ-open evaluator data (dev pairs
first, then train pairs; each query comes with its 8 passages, as a grader sees them) with the same
weights (the export folder, which ``SentenceTransformer`` loads as a Transformer with mean pooling),
on the same device, in float32, in one process; the runs alternate and the best of ``--repeats`` is
kept.

An export may add a lexical term to its logit (``logit = similarity_scale * cosine + weight *
lexical``, :mod:`inference.lexical`; the quickstart export has one). The peer computes the cosine
only, so ours is run two ways:

* ``ours_with_lexical``: :meth:`inference.evaluator.Evaluator.logits`, the export's full logit, what
  the product costs;
* ``ours_without_lexical``: ``BiEncoderEngine.logits`` (the model part of that logit, before the
  lexical term), the like-for-like with the peer.

The lexical term alone (``LexicalFeature.logits``) is timed too. Every run is cold: the engine's
vector cache is off and the lexical feature's passage-token cache is emptied before each run, so
every run encodes and tokenises. The peer, two ways: ``st_naive`` encodes every pair's query and
passage (``model.encode(queries)``, ``model.encode(passages)``, then ``model.similarity_pairwise``:
the straightforward call), ``st_dedup`` encodes each distinct text once, as ours does. Speed-ups
are the peer's seconds over ours (above 1: ours is faster).

The agreement check compares the engine's cosine (its model logit / ``similarity_scale``, without
the lexical term) with the peer's cosine; the script exits 1 when the largest difference is above
``--cosine-tol`` (1e-5). It also checks that the full logit is the model logit plus the lexical
term, and reports how large that term is (``lexical``).

Then the latency of grading one query's top-5 and top-20 chunks, median and p95 over
``--latency-queries`` queries, callers alternating on every query: ``grade``
(``Evaluator.grade``, cache off, with the lexical term: the product), ``model`` (the engine's
logits of the same chunks: the like-for-like) and ``st_encode`` (``encode`` of the query and the
chunks and their cosines). Before timing the script waits for a quiet machine, as
scripts/bench_scoring.py does.
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
    ap.add_argument("--cosine-tol", type=float, default=1e-5,
                    help="largest |our cosine - SentenceTransformer's| accepted (exit 1 above it)")
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
    lex = ours.lexical  # None: an export without the lexical term
    if ours.corpus_mode:
        raise SystemExit("corpus mode is on; this compares plain scoring")
    st = SentenceTransformer(str(args.model), device=args.device)
    st.max_seq_length = ours.spec.max_length
    pairs = load_pairs(args.pairs, [Path(f) for f in args.data], args.seed)
    texts = [(p.query, ours.passage_text(p.passage)) for p in pairs]
    queries, passages = [q for q, _ in texts], [p for _, p in texts]

    def cold_lexical():
        """Empty the lexical feature's passage-token cache, so a run tokenises every passage (as the
        vector cache being off makes it encode every text)."""
        if lex is not None:
            with lex._lock:
                lex._tokens.clear()

    def run_with_lexical():  # the export's full logit: model + weight x lexical
        return ours.logits(texts)

    def run_without_lexical():  # the model logit only: scale x cosine
        return ours.engine.logits(queries, passages)[0]

    def run_lexical():  # weight x lexical only
        return lex.logits(queries, passages)

    def encode(xs):
        return st.encode(xs, batch_size=args.st_batch_size, convert_to_tensor=True, show_progress_bar=False)

    def run_naive():
        return st.similarity_pairwise(encode(queries), encode(passages)).cpu().numpy().astype(np.float64)

    def run_dedup():
        uq, up = list(dict.fromkeys(queries)), list(dict.fromkeys(passages))
        qv, pv = encode(uq), encode(up)
        qi, pi = {t: i for i, t in enumerate(uq)}, {t: i for i, t in enumerate(up)}
        return st.similarity_pairwise(qv[[qi[q] for q in queries]], pv[[pi[p] for p in passages]]).cpu().numpy().astype(np.float64)

    runs = {"ours_with_lexical": run_with_lexical, "ours_without_lexical": run_without_lexical,
            "st_naive": run_naive, "st_dedup": run_dedup}
    if lex is not None:
        runs["lexical_term"] = run_lexical
    run_without_lexical(), run_naive()  # warm-up
    best = dict.fromkeys(runs, float("inf"))
    outs = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            cold_lexical()
            t, outs[name] = timed(fn, 1)
            best[name] = min(best[name], t)
    n = len(texts)
    cosine = outs["ours_without_lexical"] / scale  # the engine's cosine: the model part, before the lexical term
    cos_diff = float(max(np.max(np.abs(cosine - outs[k])) for k in ("st_naive", "st_dedup")))
    lex_term = outs["lexical_term"] if lex is not None else np.zeros(n)
    decomposition = float(np.max(np.abs(outs["ours_with_lexical"] - outs["ours_without_lexical"] - lex_term)))
    per_s = {k: n / best[k] for k in best}
    result = {
        "pairs": n, "distinct_queries": len(set(queries)), "distinct_passages": len(set(passages)),
        "similarity_scale": scale,
        "ours_with_lexical_pairs_per_s": per_s["ours_with_lexical"],
        "ours_without_lexical_pairs_per_s": per_s["ours_without_lexical"],
        "lexical_term_pairs_per_s": per_s.get("lexical_term"),
        "st_naive_pairs_per_s": per_s["st_naive"], "st_dedup_pairs_per_s": per_s["st_dedup"],
        "speedup_without_lexical_vs_st_naive": best["st_naive"] / best["ours_without_lexical"],
        "speedup_without_lexical_vs_st_dedup": best["st_dedup"] / best["ours_without_lexical"],
        "speedup_with_lexical_vs_st_naive": best["st_naive"] / best["ours_with_lexical"],
        "speedup_with_lexical_vs_st_dedup": best["st_dedup"] / best["ours_with_lexical"],
        "lexical_time_share": 1.0 - best["ours_without_lexical"] / best["ours_with_lexical"],
        "max_abs_cosine_diff_vs_st": cos_diff, "cosine_tolerance": args.cosine_tol,
        "cosines_agree": cos_diff <= args.cosine_tol,
        "max_abs_logit_decomposition_error": decomposition,
        "lexical": None if lex is None else {
            "weight": lex.weight,
            "term_mean": float(lex_term.mean()), "term_max": float(lex_term.max()),
            "term_max_over_scale": float(lex_term.max() / scale),
            # what the script reported as its cosine difference before: the full logit / scale against
            # the peer's cosine, i.e. mostly the lexical term / scale (not a cosine comparison)
            "max_abs_full_logit_over_scale_vs_st_cosine": float(np.max(np.abs(outs["ours_with_lexical"] / scale
                                                                              - outs["st_naive"]))),
        },
        "definitions": {
            "ours_with_lexical": "Evaluator.logits: the export's full logit (scale x cosine + weight x lexical), "
                                 "the product's cost",
            "ours_without_lexical": "BiEncoderEngine.logits: the model logit (scale x cosine) only, the like-for-like "
                                    "with SentenceTransformer",
            "lexical_term": "LexicalFeature.logits alone (weight x lexical)",
            "st_naive": "SentenceTransformer encode(queries), encode(passages), similarity_pairwise",
            "st_dedup": "SentenceTransformer encoding each distinct text once, as ours does",
            "speedup_*": "the peer's best seconds / ours (above 1: ours is faster)",
            "lexical_time_share": "share of ours_with_lexical's time not spent in ours_without_lexical",
            "max_abs_cosine_diff_vs_st": "max |BiEncoderEngine.logits / similarity_scale - peer cosine| over both "
                                         "peer runs",
            "max_abs_logit_decomposition_error": "max |full logit - model logit - lexical term|",
            "cold": "vector cache off, lexical token cache emptied before every run",
        },
    }
    logger.info("ours %.1f pairs/s with the lexical term, %.1f without; lexical term alone %s; SentenceTransformer "
                "%.1f (naive), %.1f (distinct texts); like-for-like speed-ups %.2f / %.2f, with lexical %.2f / %.2f; "
                "max |cos diff| %.2e", result["ours_with_lexical_pairs_per_s"],
                result["ours_without_lexical_pairs_per_s"],
                "-" if lex is None else f"{result['lexical_term_pairs_per_s']:.1f}",
                result["st_naive_pairs_per_s"], result["st_dedup_pairs_per_s"],
                result["speedup_without_lexical_vs_st_naive"], result["speedup_without_lexical_vs_st_dedup"],
                result["speedup_with_lexical_vs_st_naive"], result["speedup_with_lexical_vs_st_dedup"], cos_diff)

    def grade(q, chunks):  # the product: model + lexical term, calibration, actions
        cold_lexical()
        return ours.grade(q, chunks)

    def model(q, chunks):  # the like-for-like: the engine's logits of the same chunks
        return ours.engine.logits([q] * len(chunks), [ours.passage_text(c) for c in chunks])

    def st_grade(q, chunks):
        return st.similarity(encode([q]), encode([ours.passage_text(c) for c in chunks]))

    for k in (5, 20):
        groups = latency_groups(pairs, args.latency_queries, k, args.seed)
        lat = latency({"grade": grade, "model": model, "st_encode": st_grade}, groups, k, args.latency_repeats)
        result[f"latency_top{k}"] = lat
        result[f"latency_speedup_top{k}_with_lexical"] = lat["st_encode"]["median_ms"] / lat["grade"]["median_ms"]
        result[f"latency_speedup_top{k}_without_lexical"] = lat["st_encode"]["median_ms"] / lat["model"]["median_ms"]
        logger.info("top-%d: grade median %.1f ms, model only %.1f ms, SentenceTransformer %.1f ms "
                    "(speed-ups %.2f with lexical, %.2f without)", k, lat["grade"]["median_ms"],
                    lat["model"]["median_ms"], lat["st_encode"]["median_ms"],
                    result[f"latency_speedup_top{k}_with_lexical"], result[f"latency_speedup_top{k}_without_lexical"])

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
    print(json.dumps({k: result[k] for k in (
        "ours_with_lexical_pairs_per_s", "ours_without_lexical_pairs_per_s", "lexical_term_pairs_per_s",
        "st_naive_pairs_per_s", "st_dedup_pairs_per_s", "speedup_without_lexical_vs_st_naive",
        "speedup_without_lexical_vs_st_dedup", "speedup_with_lexical_vs_st_naive", "speedup_with_lexical_vs_st_dedup",
        "max_abs_cosine_diff_vs_st", "cosines_agree")}, indent=2))
    if not result["cosines_agree"]:
        logger.error("the engine's cosine and SentenceTransformer's differ by %.2e (> %.0e)", cos_diff, args.cosine_tol)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
