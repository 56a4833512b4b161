"""Benchmark the answer-existence classifier and the key-sentence extractor against baselines.

    python scripts/bench_models.py --json outputs/bench/models.json \\
        [--answer-model outputs/answer-classifier-quickstart] [--extractor-model outputs/extractor-quickstart]

Both models and their baselines score the same rows in one run:

* **answer classifier** (AUC, and accuracy / F1 at the export's threshold) against the BM25 pair
  score (Okapi BM25 of the question against the passage, idf from the set's distinct passages; the
  tokenisation of ``data_prep``) and the zero-shot MiniLM bi-encoder cosine (the weights the
  quickstart starts from, used as they ship);
* **extractor** (``p@1``, ``r@3``, ``mrr`` per passage) against "first sentences" (passage order),
  BM25 over the passage's sentences, lexical overlap (the share of the question's content words in
  the sentence) and the MiniLM cosine;

on each set:

* ``dev``: the dev split of the recipe's built dataset (SQuAD questions never trained on; their
  articles were, since the split is by question);
* ``nq_ood``: out of domain, the dev split of the bundled NQ-open sample, mined here with each
  question's top 10 BM25 hits kept and labelled by answer containment (answer task) and its gold
  passages' sentences labelled by answer containment (extractor task). Neither model saw NQ.

The training time of each quickstart is read from its manifest (``training.train_runtime``).
``--int8`` also scores every set with the opt-in int8 mode (``quantize="int8"``) and reports its
figures beside the fp32 ones (``model_int8``: the metric change and the largest score difference).
The JSON has, per model and set, ``{"n", ..., "model": {...}, "baselines": {name: {...}}}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"
logger = logging.getLogger("bench_models")


# --------------------------------------------------------------------------------------------
# baselines


class BM25Pairs:
    """Okapi BM25 of a query against given documents, idf over a fixed set of documents."""

    def __init__(self, docs: list[str]):
        from rank_bm25 import BM25Okapi

        from data_prep.tokenization import build_tokenizer

        self.tok = build_tokenizer()
        self.index = {d: i for i, d in enumerate(dict.fromkeys(docs))}
        self.bm25 = BM25Okapi([self.tok(d) or ["<empty>"] for d in self.index])

    def score(self, query: str, docs: list[str]) -> list[float]:
        return [float(s) for s in self.bm25.get_batch_scores(self.tok(query), [self.index[d] for d in docs])]


class Cosine:
    """The zero-shot MiniLM bi-encoder (mean pooling, unit vectors): cosine of query and text."""

    def __init__(self, model_path: str | None = None):
        from data_prep.dense import DenseEncoder

        self.enc = DenseEncoder(model_path, batch_size=64)  # None: the packaged MiniLM
        self.cache: dict[str, np.ndarray] = {}

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        todo = list(dict.fromkeys(t for p in pairs for t in p if t not in self.cache))
        for t, v in zip(todo, self.enc.encode(todo) if todo else []):
            self.cache[t] = v
        return [float(self.cache[q] @ self.cache[d]) for q, d in pairs]


_WORD = re.compile(r"\w+", re.UNICODE)


def overlap(query: str, sentence: str) -> float:
    from data_prep.tokenization import ENGLISH_STOPWORDS

    q = {w for w in _WORD.findall(query.lower()) if w not in ENGLISH_STOPWORDS}
    s = set(_WORD.findall(sentence.lower()))
    return len(q & s) / len(q) if q else 0.0


# --------------------------------------------------------------------------------------------
# data


def load_pairs(path: Path, max_queries: int | None):
    from data_prep.io import read_records
    from data_prep.records import LabelledPair

    pairs = list(read_records(path, LabelledPair))
    if max_queries:
        keep = list(dict.fromkeys(p.query_id for p in pairs))[:max_queries]
        keep_set = set(keep)
        pairs = [p for p in pairs if p.query_id in keep_set]
    return pairs


def nq_ood(work: Path) -> Path:
    """The bundled NQ-open sample mined with top hits kept, built into answer and extractor data."""
    from data_prep.build import BuildConfig, build
    from data_prep.mining import MiningConfig, run_mining
    from data_prep.readers import open_source

    built = work / "built"
    if not (built / "meta.json").exists():
        run_mining(open_source("nq-open", input=str(NQ)), work / "mined",
                   MiningConfig(negatives=7, answer_hits=10, seed=13, show_progress=False))
        build(BuildConfig(input=str(work / "mined" / "examples.jsonl"), output=str(built), tasks=("answer", "extractor"),
                          dev_ratio=0.1, seed=13, overwrite=True))
    return built


# --------------------------------------------------------------------------------------------
# answer classifier


def pair_figures(scores, labels, threshold: float | None = None) -> dict:
    from inference.metrics import binary_at, roc_auc

    out = {"auc": roc_auc(scores, labels)}
    if threshold is not None:
        b = binary_at(scores, labels, threshold)
        out.update({"accuracy_at_threshold": b["accuracy"], "f1_at_threshold": b["f1"],
                    "precision_at_threshold": b["precision"], "recall_at_threshold": b["recall"]})
    return out


def bench_answer(model, pairs, cosine: Cosine, int8=None) -> dict:
    from inference.inputs import passage_text

    labels = [p.label for p in pairs]
    texts = [passage_text(p.passage, model.passage_format) for p in pairs]
    t0 = time.perf_counter()
    probs = model.score([(p.query, p.passage) for p in pairs])
    secs = time.perf_counter() - t0
    bm25 = BM25Pairs(texts)
    by_q: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        by_q[p.query].append(i)
    bm = np.zeros(len(pairs))
    for q, idx in by_q.items():
        bm[idx] = bm25.score(q, [texts[i] for i in idx])
    cos = cosine.score([(p.query, t) for p, t in zip(pairs, texts)])
    roles: dict[str, int] = defaultdict(int)
    for p in pairs:
        roles[f"{p.metadata.get('role')}:{int(p.label >= 0.5)}"] += 1
    extra = {}
    if int8 is not None:
        t0 = time.perf_counter()
        q8 = int8.score([(p.query, p.passage) for p in pairs])
        extra["model_int8"] = {**pair_figures(q8, labels, model.threshold), "pairs_per_s": round(len(pairs) / (time.perf_counter() - t0), 1),
                               "max_abs_diff_vs_fp32": float(np.max(np.abs(np.asarray(q8) - np.asarray(probs))))}
    return {
        **extra,
        "n": len(pairs), "positives": int(sum(y >= 0.5 for y in labels)), "queries": len(by_q), "by_role_label": dict(roles),
        "model": {**pair_figures(probs, labels, model.threshold), "threshold": model.threshold,
                  "pairs_per_s": round(len(pairs) / secs, 1)},
        "baselines": {"bm25_pair": pair_figures(bm, labels), "minilm_cosine": pair_figures(cos, labels)},
    }


# --------------------------------------------------------------------------------------------
# extractor


def groups_of(pairs) -> list[list]:
    """Sentence pairs grouped by (query, parent passage), in sentence order, with a gold sentence."""
    g: dict[tuple[str, str], list] = defaultdict(list)
    for p in pairs:
        g[(p.query_id, p.passage.metadata["parent_id"])].append(p)
    out = []
    for ps in g.values():
        ps.sort(key=lambda p: p.passage.metadata["sentence_index"])
        if any(p.label >= 0.5 for p in ps):
            out.append(ps)
    return out


def ranking_figures(groups, scores_per_group) -> dict:
    from inference.metrics import extraction_metrics

    ranked, golds = [], []
    for ps, sc in zip(groups, scores_per_group):
        idx = list(range(len(ps)))
        order = sorted(idx, key=lambda j: (-sc[j], j))
        ranked.append([(j, j + 1) for j in order])
        golds.append([(j, j + 1) for j in idx if ps[j].label >= 0.5])
    m = extraction_metrics(ranked, golds, k=3)
    return {k: m[k] for k in ("p@1", "r@3", "mrr")}


def bench_extractor(model, pairs, cosine: Cosine, int8=None) -> dict:
    from inference.inputs import passage_text

    groups = groups_of(pairs)
    flat = [p for ps in groups for p in ps]
    t0 = time.perf_counter()
    probs = model.score([(p.query, p.passage) for p in flat])
    secs = time.perf_counter() - t0

    def per_group(values):
        out, at = [], 0
        for ps in groups:
            out.append(list(values[at : at + len(ps)]))
            at += len(ps)
        return out

    extra = {}
    if int8 is not None:
        t0 = time.perf_counter()
        q8 = int8.score([(p.query, p.passage) for p in flat])
        extra["model_int8"] = {**ranking_figures(groups, per_group(q8)),
                               "sentences_per_s": round(len(flat) / (time.perf_counter() - t0), 1),
                               "max_abs_diff_vs_fp32": float(np.max(np.abs(np.asarray(q8) - np.asarray(probs))))}
    texts = [p.passage.text for p in flat]
    bm25 = BM25Pairs(texts)
    bm = []
    for ps in groups:
        bm.append(bm25.score(ps[0].query, [p.passage.text for p in ps]))
    cos = cosine.score([(p.query, passage_text(p.passage, model.passage_format)) for p in flat])
    return {
        **extra,
        "passages": len(groups), "sentences": len(flat), "gold_sentences": int(sum(p.label >= 0.5 for p in flat)),
        "model": {**ranking_figures(groups, per_group(probs)), "sentences_per_s": round(len(flat) / secs, 1)},
        "baselines": {
            "first_sentences": ranking_figures(groups, [[-j for j in range(len(ps))] for ps in groups]),
            "bm25": ranking_figures(groups, bm),
            "lexical_overlap": ranking_figures(groups, [[overlap(p.query, p.passage.text) for p in ps] for ps in groups]),
            "minilm_cosine": ranking_figures(groups, per_group(cos)),
        },
    }


# --------------------------------------------------------------------------------------------


def training_time(model) -> dict:
    t = model.manifest.training
    return {"train_runtime_s": t.get("train_runtime"), "global_step": t.get("global_step"),
            "train_examples": t.get("data", {}).get("train_examples")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answer-model", default="outputs/answer-classifier-quickstart")
    ap.add_argument("--extractor-model", default="outputs/extractor-quickstart")
    ap.add_argument("--dataset", default="outputs/datasets/squad", help="the recipes' built dataset (dev split)")
    ap.add_argument("--work", default="outputs/bench/nq-ood", help="where the NQ out-of-domain data is built")
    ap.add_argument("--max-queries", type=int, default=None, help="cap each set at this many questions")
    ap.add_argument("--int8", action="store_true", help="also score with the opt-in int8 mode (quantize='int8')")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import inference

    ans = inference.load(args.answer_model, task="answer_classifier", device="cpu")
    ext = inference.load(args.extractor_model, task="extractor", device="cpu")
    ans8 = inference.load(args.answer_model, device="cpu", quantize="int8") if args.int8 else None
    ext8 = inference.load(args.extractor_model, device="cpu", quantize="int8") if args.int8 else None
    cosine = Cosine()
    ood = nq_ood(ROOT / args.work)
    dataset = ROOT / args.dataset
    result: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "answer_classifier": {"export": args.answer_model, "training": training_time(ans)},
        "extractor": {"export": args.extractor_model, "training": training_time(ext)},
    }
    for name, folder in (("dev", dataset), ("nq_ood", ood)):
        pairs = load_pairs(folder / "answer" / "dev.pairs.jsonl", args.max_queries)
        logger.info("answer classifier on %s: %d pairs", name, len(pairs))
        result["answer_classifier"][name] = r = bench_answer(ans, pairs, cosine, ans8)
        logger.info("  AUC %.4f; BM25 %.4f; MiniLM cosine %.4f", r["model"]["auc"], r["baselines"]["bm25_pair"]["auc"],
                    r["baselines"]["minilm_cosine"]["auc"])
        pairs = load_pairs(folder / "extractor" / "dev.pairs.jsonl", args.max_queries)
        logger.info("extractor on %s: %d sentence pairs", name, len(pairs))
        result["extractor"][name] = r = bench_extractor(ext, pairs, cosine, ext8)
        logger.info("  p@1 %.4f r@3 %.4f; first %.4f, BM25 %.4f, overlap %.4f, cosine %.4f", r["model"]["p@1"],
                    r["model"]["r@3"], *(r["baselines"][b]["p@1"] for b in ("first_sentences", "bm25", "lexical_overlap",
                                                                            "minilm_cosine")))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: {s: v[s]["model"] for s in ("dev", "nq_ood")} for k, v in result.items()
                      if k in ("answer_classifier", "extractor")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
