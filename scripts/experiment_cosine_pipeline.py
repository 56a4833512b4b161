"""Experiment (issues 10 and 12): the CRAG pipeline graded by a calibrated bi-encoder cosine.

    python scripts/experiment_cosine_pipeline.py --json outputs/bench/pipeline-cosine.json \\
        [--encoder DIR] [--extractor outputs/extractor-quickstart]

The zero-shot MiniLM cosine ranks better than the quickstart cross-encoder in and out of domain
(docs/benchmarks.md). This asks what that would do to the pipeline before any model-core work: the
serving :class:`inference.evaluator.Evaluator` (thresholds, actions, the paper's query rule: all the
real code) is given an engine whose logit is ``20 * cosine`` from :class:`data_prep.dense.DenseEncoder`
(``--encoder``: the packaged MiniLM by default, or a folder from scripts/experiment_biencoder.py).
Its Platt calibration and two thresholds are fitted by ``training.fitting`` exactly as training fits
an export's, with the quickstart recipe's targets (precision 0.9, NPV 0.97), on the quickstart
dataset's **dev pairs** (outputs/datasets/nq-open). Then the same questions and indexes as
scripts/bench_pipeline.py (run it first: its indexes are reused) go through naive and CRAG. The
JSON holds the fitted decision and the same figures as bench_pipeline's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

SCALE = 20.0


class CosineEngine:
    """The one method the serving classes ask of an engine: ``logits(queries, passages)``."""

    def __init__(self, encoder, spec):
        import torch

        self.enc, self.spec, self.device = encoder, spec, torch.device("cpu")

    def logits(self, queries, passages, progress=False, desc="scoring"):
        import numpy as np

        from inference.inputs import EncodeStats

        if not len(queries):
            return np.zeros(0), EncodeStats()
        texts = list(dict.fromkeys([*queries, *passages]))
        vec = dict(zip(texts, self.enc.encode(texts)))
        z = np.array([SCALE * float(vec[q] @ vec[p]) for q, p in zip(queries, passages)], dtype=np.float64)
        return z, EncodeStats(pairs=len(z))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--encoder", default=None, help="bi-encoder folder (default: the packaged MiniLM)")
    ap.add_argument("--extractor", default="outputs/extractor-quickstart")
    ap.add_argument("--dataset-dir", default="outputs/datasets/nq-open")
    ap.add_argument("--work", default="outputs/bench/pipeline-index")
    ap.add_argument("--questions", type=int, default=150)
    ap.add_argument("--removed", type=int, default=90)
    args = ap.parse_args()

    import inference
    from bench_pipeline import dev_questions, machine, run_set
    from data_prep.dense import DenseEncoder
    from data_prep.io import read_records
    from data_prep.records import LabelledPair
    from data_prep.text import contains_answer, normalize_answer
    from inference.evaluator import Evaluator
    from inference.inputs import passage_text
    from inference.modeling import ModelSpec
    from pipeline.core import CragPipeline, PipelineConfig
    from pipeline.index import HybridIndex
    from training.fitting import fit_calibration, search_thresholds

    enc = DenseEncoder(args.encoder)
    spec = ModelSpec(head="cross-encoder", max_length=256, max_query_length=48)
    engine = CosineEngine(enc, spec)
    dev = list(read_records(Path(args.dataset_dir) / "evaluator" / "dev.pairs.jsonl", LabelledPair))
    z, _ = engine.logits([p.query for p in dev], [passage_text(p.passage) for p in dev])
    labels = [p.label for p in dev]
    calib = fit_calibration(z, labels, "platt")
    thresholds = search_thresholds(calib.apply(z), labels, 0.9, 0.97)
    ev = Evaluator(engine, SimpleNamespace(thresholds=thresholds, calibration=calib, sentence_max_chars=None),
                   "cosine-experiment")
    ex = inference.load(args.extractor, task="extractor") if args.extractor != "none" else None

    dev_q = dev_questions(13, 0.1)
    full_q, pool = dev_q[: args.questions], dev_q[args.questions:]
    work = Path(args.work)
    removed_index = HybridIndex.load(work / "removed", encoder=enc if args.encoder is None else None)
    norm = [normalize_answer(f"{c.title} {c.text}") for c in removed_index.iter_chunks()]
    removed_q = [q for q in pool if not any(contains_answer("", q.answers, normalized_text=t) for t in norm)]
    removed_q = removed_q[: args.removed]
    results = {}
    t0 = time.perf_counter()
    for name, qs, index in (("full", full_q, HybridIndex.load(work / "full", encoder=enc if args.encoder is None else None)),
                            ("removed", removed_q, removed_index)):
        pipe = CragPipeline(index, ev, ex, config=PipelineConfig(max_words=50, naive_k=5))
        results[name] = run_set(pipe, qs, name)
    f, r = results["full"], results["removed"]
    naive_ms, crag_ms = f["naive"]["stage_ms"]["total"]["median"], f["crag"]["stage_ms"]["total"]["median"]
    report = {
        "decision": {"calibration": calib.to_dict(),
                     "thresholds": thresholds.to_dict(), "dev_pairs": len(dev)},
        "naive_ms": naive_ms, "crag_ms": crag_ms, "overhead_ratio": round(crag_ms / naive_ms, 3),
        "answer_recall": {"naive": f["naive"]["answer_recall"], "crag": f["crag"]["answer_recall"]},
        "answer_precision": {"naive": f["naive"]["answer_precision"], "crag": f["crag"]["answer_precision"]},
        "abstain_rate": {"full": {"naive": f["naive"]["abstain_rate"], "crag": f["crag"]["abstain_rate"]},
                         "removed": {"naive": r["naive"]["abstain_rate"], "crag": r["crag"]["abstain_rate"]}},
        "sets": results, "seconds": round(time.perf_counter() - t0, 1),
        "settings": {"encoder": args.encoder or "packaged MiniLM", "extractor": args.extractor,
                     "questions": len(full_q), "removed": len(removed_q)},
        "command": " ".join(["python", *sys.argv]), "machine": machine(),
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("decision", "overhead_ratio", "answer_recall", "answer_precision",
                                             "abstain_rate")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
