"""CRAG's grading over an out-of-domain index: pair by pair against corpus mode, the same hits, one run.

    python scripts/bench_grading.py --json outputs/bench/grading-scifact.json \\
        [--evaluator outputs/evaluator-quickstart] [--scifact DIR] [--claims 0] [--max-chars 512] [--grade-k 5]

Data: SciFact in the BEIR layout (``--scifact``, default the shared copy: 5,183 abstracts, 809
claims with train qrels), which the quickstart never trains on. Its abstracts are chunked
(``--max-chars``, by paragraphs and sentences as ``python -m pipeline index`` does) and indexed (BM25
and dense vectors of the evaluator's own weights, so that grading reuses them). The claims are split
in two by a seeded hash: **full** claims are graded over that index (their gold abstracts are in it);
**removed** claims over a second index built without any removed claim's gold abstract (a retrieval
miss: nothing there supports the claim, so Incorrect is the right action).

Per claim, the pipeline's hybrid recall (dense + BM25, weighted RRF) gives the hits, then the
evaluator grades the first ``--grade-k`` twice: pair by pair (the pipeline's default) and in corpus
mode (``GradingConfig(corpus_mode=True)``: the index as the corpus, ``r(q)`` from the dense route's
search). Per mode: the query actions; ``evidence_recall`` (full claims: a chunk of a gold abstract
among the kept chunks; a naive RAG keeps the top ``grade_k`` whatever they are, its figure is the
gold share of those); ``kept_precision`` (the share of kept chunks that are gold); ``abstain_rate``
(Incorrect: nothing kept); ``decision_auc`` (the best chunk score, full claims against removed ones);
the median grading time. The evaluator needs a corpus mode for the second column (``corpus_norm:
true``; else only pair by pair is reported).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import build  # noqa: E402  (an index folder, reused when there)
from bench_scoring import machine  # noqa: E402  (the machine facts every benchmark records)

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
MODES = ("pairs", "corpus")


def removed_half(qid: str, seed: int) -> bool:
    return int(hashlib.sha256(f"{seed}:{qid}:removed".encode("utf-8")).hexdigest(), 16) % 2 == 1


def grade_set(pipes: dict, claims) -> list[dict]:
    """Each claim's hits graded in each mode: per-claim records."""
    out = []
    for i, ex in enumerate(claims):
        gold = {p.id for p in ex.positives}
        some = next(iter(pipes.values()))
        hits = some.recall.recall(ex.query)
        rec = {"id": ex.id, "claim": ex.query, "gold": sorted(gold),
               "top_gold": [h.chunk.doc_id in gold for h in hits[: some.config.grading.grade_k]]}
        order = list(pipes.items())
        for mode, pipe in (order if i % 2 == 0 else order[::-1]):  # each mode goes first half the time (warm caches)
            t0 = time.perf_counter()
            g = pipe.grade(ex.query, hits)
            ms = (time.perf_counter() - t0) * 1000
            rec[mode] = {"action": g.action, "ms": ms, "best": max(c.score for c in g.chunks),
                         "kept": [c.chunk.doc_id in gold for c in g.chunks if c.kept and g.action != "Incorrect"],
                         "scores": [round(c.score, 4) for c in g.chunks]}
        out.append(rec)
    return out


def summary(full: list[dict], removed: list[dict], mode: str) -> dict:
    from inference.metrics import roc_auc

    def actions(rs):
        got = dict.fromkeys(("Correct", "Ambiguous", "Incorrect"), 0)
        for r in rs:
            got[r[mode]["action"]] += 1
        return got

    kept = [k for r in full for k in r[mode]["kept"]]
    best = [r[mode]["best"] for r in full] + [r[mode]["best"] for r in removed]
    return {
        "full": {"n": len(full), "actions": actions(full),
                 "evidence_recall": float(np.mean([any(r[mode]["kept"]) for r in full])),
                 "kept_precision": float(np.mean(kept)) if kept else None,
                 "abstain_rate": float(np.mean([r[mode]["action"] == "Incorrect" for r in full]))},
        "removed": {"n": len(removed), "actions": actions(removed),
                    "abstain_rate": float(np.mean([r[mode]["action"] == "Incorrect" for r in removed])),
                    "kept_chunks_per_claim": float(np.mean([len(r[mode]["kept"]) for r in removed]))},
        "decision_auc": roc_auc(np.asarray(best), [1.0] * len(full) + [0.0] * len(removed)),
        "grading_ms": {"median": float(np.median([r[mode]["ms"] for r in full + removed])),
                       "p95": float(np.percentile([r[mode]["ms"] for r in full + removed], 95))},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--evaluator", default="outputs/evaluator-quickstart", help="a bi-encoder evaluator export")
    ap.add_argument("--scifact", default=str(SCIFACT), help="SciFact in the BEIR layout (corpus.jsonl, queries.jsonl, qrels/)")
    ap.add_argument("--split", default="train", help="the qrels split")
    ap.add_argument("--claims", type=int, default=0, help="claims to grade (0: all with qrels)")
    ap.add_argument("--max-chars", type=int, default=512, help="chunk size in characters")
    ap.add_argument("--grade-k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--work", default="outputs/bench/grading-index", help="index folders (reused when present)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import inference
    from data_prep.readers import open_source
    from pipeline.chunking import chunks_from_source
    from pipeline.core import CragPipeline, PipelineConfig
    from pipeline.grading import GradingConfig
    from pipeline.index import HybridIndex, load_encoder

    sci = Path(args.scifact)
    files = dict(corpus=str(sci / "corpus.jsonl"), queries=str(sci / "queries.jsonl"),
                 qrels=str(sci / "qrels" / f"{args.split}.tsv"), split=args.split)
    for f in ("corpus", "queries", "qrels"):
        if not Path(files[f]).is_file():
            sys.exit(f"error: {files[f]} not found (--scifact: a BEIR folder)")
    if not Path(args.evaluator, "evaluator.json").is_file():
        sys.exit(f"error: evaluator export not found: {args.evaluator} (run `make quickstart`, or pass --evaluator DIR)")
    ev = inference.load(args.evaluator, task="evaluator")
    if ev.spec.head != "bi-encoder":
        sys.exit(f"error: {args.evaluator} is not a bi-encoder export: the index is embedded with the evaluator's weights")

    claims = [ex for ex in open_source("beir", **files).queries() if ex.positives]
    if args.claims:
        claims = claims[: args.claims]
    full_q = [ex for ex in claims if not removed_half(ex.id, args.seed)]
    removed_q = [ex for ex in claims if removed_half(ex.id, args.seed)]
    drop = {p.id for ex in removed_q for p in ex.positives}

    from data_prep.build import file_sha256

    stamp = file_sha256(Path(args.evaluator) / "model.safetensors")[:10]
    work = Path(args.work) / f"scifact-{args.max_chars}-{Path(args.evaluator).name}-{stamp}-{args.seed}-{len(claims)}"
    encoder = load_encoder(str(Path(args.evaluator).resolve()))
    chunking = {"max_chars": args.max_chars, "overlap": 32, "unit": "chars"}
    t_index = time.perf_counter()

    def chunks():
        return chunks_from_source("beir", max_chars=args.max_chars, overlap=32, **files)

    build(work / "full", chunks(), encoder, "full", chunking=chunking)
    build(work / "removed", (c for c in chunks() if c.doc_id not in drop), encoder, "removed", chunking=chunking)
    index_s = time.perf_counter() - t_index

    modes = {"pairs": False}
    if ev.manifest.corpus_norm is not None:
        modes["corpus"] = True
    results, sizes = {}, {}
    for name, qs in (("full", full_q), ("removed", removed_q)):
        index = HybridIndex.load(work / name, encoder=encoder)
        sizes[name] = len(index)
        if name == "removed":  # the removed claims' gold abstracts really are gone
            assert not any(c.doc_id in drop for c in index.iter_chunks())
        pipes = {m: CragPipeline(index, ev, config=PipelineConfig(grading=GradingConfig(grade_k=args.grade_k, corpus_mode=on)))
                 for m, on in modes.items()}
        for m, p in pipes.items():
            why = p.index_vectors.why_not
            if why:
                sys.exit(f"error: grading cannot reuse the index's vectors ({why})")
            if modes[m] and p.corpus_grading is not None:
                sys.exit(f"error: corpus mode is off: {p.corpus_grading}")
        t0 = time.perf_counter()
        print(f"{name}: {len(qs)} claims over {len(index)} chunks", flush=True)
        results[name] = grade_set(pipes, qs)
        if "corpus" in pipes:
            ref = pipes["corpus"].index_reference
            sizes[f"{name}_r_from_recall"] = ref.from_recall
            sizes[f"{name}_r_searched"] = ref.searched
        print(f"  {time.perf_counter() - t0:.0f} s", flush=True)

    full, removed = results["full"], results["removed"]
    report = {
        "naive": {"evidence_recall": float(np.mean([any(r["top_gold"]) for r in full])),
                  "kept_precision": float(np.mean([g for r in full for g in r["top_gold"]])),
                  "abstain_rate": {"full": 0.0, "removed": 0.0}},
        "modes": {m: summary(full, removed, m) for m in modes},
        "settings": {"evaluator": args.evaluator, "scifact": str(sci), "split": args.split, "claims": len(claims),
                     "full_claims": len(full_q), "removed_claims": len(removed_q), "removed_abstracts": len(drop),
                     "max_chars": args.max_chars, "grade_k": args.grade_k, "seed": args.seed,
                     "chunks": sizes, "index_build_s": round(index_s, 1), "index_dir": str(work),
                     "thresholds": {"pairs": ev.manifest.thresholds.to_dict(),
                                    **({"corpus": ev.manifest.corpus_norm.thresholds.to_dict()}
                                       if ev.manifest.corpus_norm else {})}},
        "per_claim": results,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"naive": report["naive"], "modes": report["modes"]}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
