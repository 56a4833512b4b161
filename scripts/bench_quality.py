"""Out-of-domain quality of an evaluator export against zero-shot baselines, on held-out labelled sets.

    python scripts/bench_quality.py --model outputs/evaluator-quickstart --json outputs/bench/quality.json \\
        [--limit 100] [--sets msmarco-triples,scifact,...] [--negatives 7] [--seed 13]

The export (calibrated scores) and two zero-shot baselines score the same (query, passage) pairs:

* ``bm25``: the BM25 pair score (Okapi BM25 of the query against the passage, idf from the set's
  own distinct passages; the tokenisation of ``data_prep``), as in ``scripts/bench_models.py``;
* ``minilm_cosine``: the zero-shot MiniLM bi-encoder (``data_prep.dense.DenseEncoder``, the packaged
  offline all-MiniLM-L6-v2): cosine of the query and passage embeddings.

Passages are shown to all three as the export's ``passage_format`` shows them to the model.
The labelled sets, read with the ``data_prep`` readers from ``--data-dir`` (``data/sample``) or,
when not there, ``--shared-data`` (``../shared/data``):

* ``msmarco-triples``: MS MARCO ``triples.train.small`` sample (query, positive, negative; the
  reader's mojibake repair on);
* ``flagembedding-msmarco`` / ``flagembedding-nq`` / ``flagembedding-reranker``: FlagEmbedding
  examples (query, ``pos``, ``neg`` lists: negatives mined by FlagEmbedding with dense retrievers);
* ``scifact``: SciFact (BEIR layout, train qrels as positives), negatives BM25-mined from its own
  corpus with ``data_prep.mining`` (the recipe's window 3:100, ``--negatives`` per claim);
* ``squad``: SQuAD v1.1 (the ``squad`` reader), ``--negatives`` other paragraphs of the question's
  article (seeded), leaving out any that contains a gold answer (a likely false negative);
* ``nq-open``: the NQ-open sample, negatives BM25-mined like SciFact's (answer-bearing hits dropped);
* ``crag-popqa``: CRAG's PopQA evaluator file (``crag-evaluator``; or Self-RAG's PopQA JSONL,
  ``popqa`` with CRAG's title-match rule) when one is found (``--crag-popqa FILE``, or a
  ``*popqa*`` file under either data folder).

A set is **excluded** (and the JSON says why) when the export's manifest says the model trained on
it: one of its files is, byte for byte, a training input the manifest names
(``training.config.prepare_data.input``, ``train_file``, ``dev_file``, ``train_mix`` files,
``training.data.train_file`` / ``dev_file``), or more than half its queries are training queries
(SQuAD-normalised text; otherwise the overlapping queries are dropped and counted). A set whose
pairs repeat an earlier set's exactly is excluded as a duplicate; one whose files are missing as
unavailable. ``--limit N`` keeps a seeded sample of N queries per set (after the overlap drop).

Per set the JSON has ``{"n", "positives", "queries", "auc", "accuracy_at_theta_high" (predict
relevant iff the calibrated score >= the export's ``theta_high``), "mrr", "p@1" (over queries
with several candidates and a positive), "baselines": {"bm25": {"auc", "mrr", "p@1"},
"minilm_cosine": {...}}, "decision", "beats_baselines", "margin"}`` (AUC above both baselines'); ``target_met`` is true
when every scored set beats both. ``margin`` is the AUC margin over each baseline in points with a 95%
paired bootstrap interval over queries (1,000 draws of the set's queries, all scores on the same
draws); ``clear`` when both intervals lie above 0, and ``clear_margin`` when every set's does.

An export with a corpus mode (``corpus_norm`` in its manifest: :mod:`inference.corpus_norm`) is
scored in that mode (as ``use_corpus`` runs it), against a corpus: each set's distinct passages (``"mode": "corpus"``;
in the decision view the withheld positives leave the corpus too), with that mode's thresholds;
its pair-by-pair figures are under ``without_corpus``. ``--no-corpus`` scores pair by pair only.

``decision`` is CRAG's view, which a pooled pair AUC does not give: the set's queries are split in
two by a seeded hash; one half keeps its candidates, the other has its positives withheld (retrieval
missed them), and each query is scored by its best candidate, as CRAG acts on it. ``decision.auc``
tells the two halves apart (``decision_auc`` per baseline); ``correct_when_answerable`` and
``incorrect_when_unanswerable`` are the shares the export's own thresholds route right. A score can
gain pair AUC and lose here: a per-query offset taken from what was retrieved ranks each query's
candidates against each other, which lifts the pooled AUC when every query has a positive, and can
hide the queries that have none (docs/benchmarks.md, "Out of domain": CSLS). Caveat: mined negatives are the hits a retriever ranked high, so
the BM25 baseline is handicapped on ``scifact`` / ``nq-open`` (BM25-mined) and a dense one
somewhat on the FlagEmbedding sets (dense-mined).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a source checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared baselines of bench_models

from bench_models import BM25Pairs, Cosine  # noqa: E402
from paired_bootstrap import auc_metric, paired_bootstrap, query_rows  # noqa: E402
from data_prep.build import file_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench_quality")


# --------------------------------------------------------------------------------------------
# sets


@dataclass
class Group:
    """One query's candidates: (passage, 0/1 label) in reader order."""

    qid: str
    query: str
    items: list[tuple[Any, float]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)


@dataclass
class SetSpec:
    fmt: str
    rel: str  # path under --data-dir / --shared-data
    kind: str  # "pairs": the reader gives labelled pairs; "mine": positives, negatives BM25-mined; "squad"
    about: str
    options: dict = field(default_factory=dict)


SETS: dict[str, SetSpec] = {
    "msmarco-triples": SetSpec("msmarco-triples", "msmarco/triples.train.small.sample.tsv", "pairs",
                               "MS MARCO triples (query, positive, negative)", {"fix_mojibake": True}),
    "flagembedding-msmarco": SetSpec("flagembedding", "flagembedding/msmarco.jsonl", "pairs",
                                     "FlagEmbedding MS MARCO examples (pos, dense-mined neg)"),
    "flagembedding-nq": SetSpec("flagembedding", "flagembedding/nq.jsonl", "pairs",
                                "FlagEmbedding NQ examples (pos, dense-mined neg)"),
    "flagembedding-reranker": SetSpec("flagembedding", "flagembedding/reranker_examples.jsonl", "pairs",
                                      "FlagEmbedding reranker examples"),
    "scifact": SetSpec("beir", "scifact", "mine", "SciFact train qrels; BM25-mined negatives from its corpus",
                       {"split": "train"}),
    "squad": SetSpec("squad", "squad/squad-v1.1-train-articles.json.gz", "squad",
                     "SQuAD v1.1; negatives: other paragraphs of the article without a gold answer"),
    "nq-open": SetSpec("nq-open", "nq_open/nq-open-oracle.jsonl.gz", "mine",
                       "NQ-open gold passages; BM25-mined negatives (answer-bearing hits dropped)"),
    "crag-popqa": SetSpec("crag-evaluator", "", "pairs", "CRAG's PopQA evaluator pairs (title-match labels)"),
}


def find_popqa(roots: list[Path]) -> Path | None:
    """A CRAG PopQA evaluator file (``*popqa*.txt``) or Self-RAG PopQA JSONL under ``roots``."""
    for pattern in ("*popqa*.txt", "*popqa*.jsonl", "*popqa*.jsonl.gz"):
        for root in roots:
            if root.is_dir():
                hits = sorted(p for p in root.rglob(pattern) if p.is_file())
                if hits:
                    return hits[0]
    return None


def locate(name: str, spec: SetSpec, args) -> tuple[SetSpec, Path | None]:
    roots = [Path(args.data_dir), Path(args.shared_data)]
    if name == "crag-popqa":
        path = Path(args.crag_popqa) if args.crag_popqa else find_popqa(roots)
        if path is None or not path.exists():
            return spec, None
        if path.suffix != ".txt":  # Self-RAG's PopQA with ctxs, labelled by CRAG's rule
            spec = SetSpec("popqa", "", "pairs", spec.about, {"rule": "title-match"})
        return spec, path
    for root in roots:
        if (root / spec.rel).exists():
            return spec, root / spec.rel
    return spec, None


def set_files(spec: SetSpec, path: Path) -> list[Path]:
    if path.is_dir():  # BEIR folder
        return [path / "corpus.jsonl", path / "queries.jsonl", path / "qrels" / f"{spec.options.get('split', 'train')}.tsv"]
    return [path]


def read_groups(spec: SetSpec, path: Path) -> list[Group]:
    """The set's labelled groups as the data_prep readers give them (positives only for "mine"/"squad")."""
    groups: dict[str, Group] = {}
    if spec.kind == "pairs":
        from data_prep.readers.rows import open_pair_rows

        opts = dict(spec.options)
        if spec.fmt == "crag-evaluator":
            opts["empty_passages"] = "skip"  # retrieval failures: nothing to score
        _, rows = open_pair_rows(path, spec.fmt, **opts)
        for r in rows:
            groups.setdefault(r.query_id, Group(r.query_id, r.query)).items.append((r.passage, float(r.label)))
        return list(groups.values())
    from data_prep.readers import open_source

    for ex in open_source(spec.fmt, input=str(path), **spec.options).queries():
        g = groups.setdefault(ex.id, Group(ex.id, ex.query))
        g.items += [(p, 1.0) for p in ex.positives] + [(p, 0.0) for p in ex.negatives]
        g.answers = list(ex.answers)
    return list(groups.values())


def content_key(groups: list[Group]) -> str:
    from inference.inputs import passage_text

    rows = sorted(f"{g.query}\t{passage_text(p)}\t{y}" for g in groups for p, y in g.items)
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()


def add_mined_negatives(spec: SetSpec, path: Path, groups: list[Group], negatives: int, seed: int) -> dict:
    """BM25 hard negatives from the set's own corpus (``data_prep.mining``) for the kept queries."""
    from data_prep.io import read_records
    from data_prep.mining import MiningConfig, run_mining
    from data_prep.readers import Source, open_source
    from data_prep.records import QueryExample

    src = open_source(spec.fmt, input=str(path), **spec.options)
    keep = {g.qid for g in groups}
    sub = Source(name=src.name, corpus=src.corpus, queries=lambda: (q for q in src.queries() if q.id in keep),
                 files=src.files, info=src.info)
    cfg = MiningConfig(negatives=negatives, seed=seed, show_progress=False, bm25_backend="numpy")
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        meta = run_mining(sub, Path(tmp) / "mined", cfg, overwrite=True)
        mined = {ex.id: ex for ex in read_records(Path(tmp) / "mined" / "examples.jsonl", QueryExample)}
    for g in groups:
        ex = mined.get(g.qid)
        g.items += [(p, 0.0) for p in (ex.negatives if ex else [])]
    return {"negatives": f"BM25 hard negatives from the set's corpus (data_prep.mining: window "
                         f"{cfg.window[0]}:{cfg.window[1]}, {negatives} per query, top)",
            "mining_counts": (meta or {}).get("counts")}


def add_article_negatives(path: Path, groups: list[Group], negatives: int, seed: int) -> dict:
    """Other paragraphs of the question's article, without a gold answer, ``negatives`` of them (seeded)."""
    from data_prep.readers import open_source
    from data_prep.text import contains_answer

    by_article: dict[str, list] = {}
    for p in open_source("squad", input=str(path)).corpus():
        by_article.setdefault(p.metadata["article"], []).append(p)
    dropped = 0
    for g in groups:
        pos_ids = {p.id for p, y in g.items if y >= 0.5}
        article = g.items[0][0].metadata["article"]
        answers = g.answers
        cands = []
        for p in by_article.get(article, []):
            if p.id in pos_ids:
                continue
            if answers and contains_answer(p.text, answers):
                dropped += 1
                continue
            cands.append(p)
        rng = random.Random(f"{seed}:{g.qid}:article-negatives")
        g.items += [(p, 0.0) for p in rng.sample(cands, min(negatives, len(cands)))]
    return {"negatives": f"{negatives} other paragraphs of the same article per question (seeded), "
                         "answer-bearing ones left out", "answer_bearing_paragraphs_left_out": dropped}


# --------------------------------------------------------------------------------------------
# what the export trained on


def _resolve(p: str | None) -> Path | None:
    if not p:
        return None
    path = Path(p)
    return path if path.is_absolute() else ROOT / path


def trained_on(manifest) -> list[dict]:
    """The training inputs the manifest names: ``{"field", "path", "format"?, "exists"}``."""
    t = manifest.training or {}
    cfg = t.get("config") or {}
    data = t.get("data") or {}
    out: list[dict] = []
    prep = cfg.get("prepare_data") or {}
    if prep.get("input"):
        out.append({"field": "training.config.prepare_data.input", "path": prep["input"], "format": prep.get("format")})
    for k in ("train_file", "dev_file"):
        if cfg.get(k):
            out.append({"field": f"training.config.{k}", "path": cfg[k]})
        if data.get(k):
            out.append({"field": f"training.data.{k}", "path": data[k]})
    for i, m in enumerate(cfg.get("train_mix") or []):
        for k in ("file", "dev_file"):
            if m.get(k):
                out.append({"field": f"training.config.train_mix[{i}].{k}", "path": m[k]})
        prep = m.get("prepare") or {}
        if prep.get("input"):
            out.append({"field": f"training.config.train_mix[{i}].prepare.input", "path": prep["input"],
                        "format": prep.get("format")})
        if m.get("dataset_dir"):
            d = _resolve(m["dataset_dir"])
            for f in sorted((d / manifest.task).glob("*.jsonl")) if d and (d / manifest.task).is_dir() else []:
                out.append({"field": f"training.config.train_mix[{i}].dataset_dir", "path": str(f)})
    for r in out:
        r["exists"] = bool(_resolve(r["path"]) and _resolve(r["path"]).is_file())
    return out


def training_queries(inputs: list[dict]) -> set[str]:
    """Normalised text of every query in the training inputs that exist here."""
    from data_prep.readers import open_source
    from data_prep.text import normalize_answer

    out: set[str] = set()
    for r in inputs:
        path = _resolve(r["path"])
        if not r["exists"]:
            continue
        if r.get("format"):
            out.update(normalize_answer(ex.query) for ex in open_source(r["format"], input=str(path)).queries())
            continue
        with open(path, encoding="utf-8") as f:  # LabelledPair / QueryExample JSONL: a "query" per line
            for line in f:
                if line.strip():
                    q = json.loads(line).get("query")
                    if isinstance(q, str):
                        out.add(normalize_answer(q))
    return out


# --------------------------------------------------------------------------------------------
# scoring


def rank_figures(scores, labels, qids) -> dict:
    """Full-list MRR and P@1 over queries with several candidates and a positive (none: {})."""
    from inference.metrics import ranking_metrics

    k = max(1, len(scores))
    r = ranking_metrics(scores, labels, qids, k=k)
    return {} if r is None else {"mrr": r[f"mrr@{k}"], "p@1": r["p@1"], "ranking_queries": r["ranking_queries"]}


def decision_split(qids, labels, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """CRAG's decision view of a set. Queries with a positive and a negative are split in two by a
    seeded hash of their id: an "answerable" half keeps every candidate; an "unanswerable" half has its
    positives withheld, as when retrieval missed them. Returns each kept query's candidate rows and
    whether it is answerable."""
    labels = np.asarray(labels, dtype=float) >= 0.5
    rows: dict[str, list[int]] = {}
    for i, q in enumerate(qids):
        rows.setdefault(str(q), []).append(i)
    cands, answerable = [], []
    for q, idx in rows.items():
        idx = np.asarray(idx)
        pos = labels[idx]
        if not pos.any() or pos.all():
            continue
        withheld = int(hashlib.sha256(f"{seed}:{q}:decision".encode("utf-8")).hexdigest(), 16) % 2 == 1
        cands.append(idx[~pos] if withheld else idx)
        answerable.append(not withheld)
    return cands, np.asarray(answerable, dtype=bool)


def decision_figures(scores, split, theta_high: float | None = None, theta_low: float | None = None) -> dict:
    """How well the best score among a query's candidates tells answerable queries from unanswerable
    ones (:func:`decision_split`): CRAG acts on that maximum (one Correct chunk makes the query
    Correct; Incorrect needs every chunk below theta_low). ``auc`` of the maximum; with thresholds,
    the share of answerable queries the export calls Correct and of unanswerable ones it calls
    Incorrect. Empty when either kind is missing."""
    from inference.metrics import roc_auc

    cands, answerable = split
    if not answerable.any() or answerable.all():
        return {}
    best = np.array([float(np.max(np.asarray(scores)[c])) for c in cands])
    out = {"queries": int(len(best)), "answerable": int(answerable.sum()), "auc": roc_auc(best, answerable.astype(float))}
    if theta_high is not None and theta_low is not None:
        out["correct_when_answerable"] = float(np.mean(best[answerable] >= theta_high))
        out["incorrect_when_unanswerable"] = float(np.mean(best[~answerable] < theta_low))
    return out


def margin_ci(ours, baselines: dict, labels, qids, seed: int = 13, resamples: int = 1000) -> dict:
    """The export's pair-AUC margin over each baseline, in AUC points, with a 95% paired bootstrap
    interval over queries (the set's queries drawn with replacement, each with all its pairs; the
    same draws for every score). ``clear`` when the interval's lower end is above 0 for every
    baseline: the margin is not the luck of which queries the set holds."""
    m = paired_bootstrap(auc_metric(labels), ours, baselines, query_rows(qids), seed, resamples)
    if not m:
        return {}
    out: dict = {"resamples": resamples, "unit": "AUC points (x100)", **{k: m[k] for k in baselines}}
    out["clear"] = all(out[k]["ci95"][0] > 0 for k in baselines)
    return out


def corpus_scores(model, pairs, texts, labels, split) -> tuple[np.ndarray, np.ndarray]:
    """Corpus-mode scores of ``pairs`` with the set's distinct passages as the reference corpus, and
    those of the decision view, where the unanswerable queries' withheld positives are out of the
    corpus too (retrieval cannot miss what the corpus holds)."""
    model.use_corpus(list(dict.fromkeys(texts)))
    try:
        probs = np.asarray(model.score(pairs))
        cands, answerable = split
        rows = np.concatenate([c for c, a in zip(cands, answerable) if not a] or [np.zeros(0, dtype=int)])
        withheld = set()
        unanswerable = {pairs[c[0]][0] for c, a in zip(cands, answerable) if not a}
        for i, (q, _) in enumerate(pairs):
            if q in unanswerable and labels[i] >= 0.5:
                withheld.add(texts[i])
        decision = probs.copy()
        if len(rows) and withheld:
            model.use_corpus([t for t in dict.fromkeys(texts) if t not in withheld])
            decision[rows] = model.score([pairs[i] for i in rows])
        return probs, decision
    finally:
        model.use_corpus(None)


def corpus_mode_info(model, used: bool) -> dict | None:
    cn = model.manifest.corpus_norm
    return None if cn is None else {"k": cn.k, "theta_high": cn.thresholds.theta_high,
                                    "theta_low": cn.thresholds.theta_low, "used": used}


def bench_set(model, groups: list[Group], cosine: Cosine, seed: int = 13, use_corpus: bool = True) -> dict:
    from inference.inputs import passage_text
    from inference.metrics import binary_at, roc_auc

    flat = [(g, p, y) for g in groups for p, y in g.items]
    labels = [y for _, _, y in flat]
    qids = [g.qid for g, _, _ in flat]
    texts = [passage_text(p, model.passage_format) for _, p, _ in flat]
    pairs = [(g.query, p) for g, p, _ in flat]
    split = decision_split(qids, labels, seed)
    t0 = time.perf_counter()
    plain = np.asarray(model.score(pairs))
    secs = time.perf_counter() - t0
    corpus_mode = use_corpus and model.manifest.corpus_norm is not None
    if corpus_mode:  # corpus mode (use_corpus): the set's distinct passages as the corpus
        probs, decision_probs = corpus_scores(model, pairs, texts, labels, split)
        cn = model.manifest.corpus_norm.thresholds
        thresholds = (cn.theta_high, cn.theta_low)
    else:
        probs = decision_probs = plain
        thresholds = (model.theta_high, model.theta_low)
    bm25 = BM25Pairs(texts)  # idf from the set's own distinct passages
    bm = np.zeros(len(flat))
    at = 0
    for g in groups:
        bm[at : at + len(g.items)] = bm25.score(g.query, texts[at : at + len(g.items)])
        at += len(g.items)
    cos = cosine.score([(g.query, t) for (g, _, _), t in zip(flat, texts)])
    b = binary_at(probs, labels, thresholds[0])
    pos = int(sum(y >= 0.5 for y in labels))
    out = {
        "n": len(flat), "positives": pos, "queries": len(groups), "mode": "corpus" if corpus_mode else "pairs",
        "auc": roc_auc(probs, labels),
        "accuracy_at_theta_high": b["accuracy"], "precision_at_theta_high": b["precision"],
        "recall_at_theta_high": b["recall"], "accuracy_all_negative": (len(flat) - pos) / len(flat) if flat else None,
        **rank_figures(probs, labels, qids),
        "score_mean": float(probs.mean()) if len(probs) else None, "pairs_per_s": round(len(flat) / secs, 1) if secs else None,
        "baselines": {name: {"auc": roc_auc(s, labels), **{k: v for k, v in rank_figures(s, labels, qids).items()
                                                           if k != "ranking_queries"}}
                      for name, s in (("bm25", bm), ("minilm_cosine", cos))},
    }
    out["decision"] = decision_figures(decision_probs, split, *thresholds)
    if corpus_mode:
        bp = binary_at(plain, labels, model.manifest.thresholds.theta_high)
        out["without_corpus"] = {"auc": roc_auc(plain, labels), "accuracy_at_theta_high": bp["accuracy"],
                                 "decision": decision_figures(plain, split, model.theta_high, model.theta_low)}
    for name, sc in (("bm25", bm), ("minilm_cosine", cos)):
        out["baselines"][name]["decision_auc"] = decision_figures(sc, split).get("auc")
    out["margin"] = margin_ci(probs, {"bm25": bm, "minilm_cosine": cos}, labels, qids, seed)
    if corpus_mode:
        out["without_corpus"]["margin"] = margin_ci(plain, {"bm25": bm, "minilm_cosine": cos}, labels, qids, seed)
    # a diagnostic, not a baseline: are ours and the zero-shot cosine complementary? (AUC of the mean
    # of the two scores' ranks within the set: no fitting, so nothing is tuned on the held-out set)
    if len(flat) > 1:
        from scipy.stats import rankdata

        out["diagnostics"] = {"rank_mean_ours_cosine_auc": roc_auc((rankdata(probs) + rankdata(cos)) / 2, labels)}
    aucs = [out["auc"], *(v["auc"] for v in out["baselines"].values())]
    out["beats_baselines"] = None if None in aucs else bool(aucs[0] > max(aucs[1:]))
    return out


# --------------------------------------------------------------------------------------------


def machine() -> dict:
    from bench_scoring import machine as facts

    return {**facts(), "platform": platform.platform(),
            "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}


def _closer(m: dict) -> str:
    """The baseline the export's margin is smallest over."""
    return min((k for k in m if isinstance(m[k], dict)), key=lambda k: m[k]["margin"])


def _margin(m: dict | None) -> str:
    """The margin over the closer baseline and its interval, e.g. ``+2.0 [+0.8, +3.3] clear``."""
    if not m:
        return "-"
    k = _closer(m)
    lo, hi = m[k]["ci95"]
    return f"{m[k]['margin']:+.1f} [{lo:+.1f}, {hi:+.1f}] over {k}{' clear' if m['clear'] else ''}"


def table(result: dict) -> str:
    head = f"{'set':<24}{'q':>5}{'pairs':>7}{'pos':>6} | {'mode':>6} {'AUC ours':>8}{'bm25':>7}{'minilm':>7} | {'acc@th':>6} | " \
           f"{'MRR ours':>8}{'bm25':>7}{'minilm':>7} | {'dec ours':>8}{'bm25':>7}{'minilm':>7} | beats | margin (95% CI)"
    f = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"
    lines = [head, "-" * len(head)]
    for name, r in result["sets"].items():
        b = r["baselines"]
        lines.append(f"{name:<24}{r['queries']:>5}{r['n']:>7}{r['positives']:>6} | {r['mode']:>6} {f(r['auc']):>8}{f(b['bm25']['auc']):>7}"
                     f"{f(b['minilm_cosine']['auc']):>7} | {f(r['accuracy_at_theta_high']):>6} | {f(r.get('mrr')):>8}"
                     f"{f(b['bm25'].get('mrr')):>7}{f(b['minilm_cosine'].get('mrr')):>7} | "
                     f"{f(r.get('decision', {}).get('auc')):>8}{f(b['bm25'].get('decision_auc')):>7}"
                     f"{f(b['minilm_cosine'].get('decision_auc')):>7} | {r['beats_baselines']!s:>5} | {_margin(r.get('margin'))}")
    for name, e in result["excluded"].items():
        lines.append(f"{name:<24}excluded ({e['kind']}): {e['reason']}")
    lines.append(f"target (beats both baselines on every scored set): {result['target_met']}; by a clear margin "
                 f"(the 95% interval above 0): {result['clear_margin']}; {result['runtime_s']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="outputs/evaluator-quickstart", help="the evaluator export")
    ap.add_argument("--json", required=True)
    ap.add_argument("--limit", type=int, default=None, help="a seeded sample of this many queries per set")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of: {', '.join(SETS)}")
    ap.add_argument("--negatives", type=int, default=7, help="negatives per query where we make them (scifact, squad, nq-open)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "sample"))
    ap.add_argument("--shared-data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--cosine-model", default=None, help="the bi-encoder of the cosine baseline (default: the "
                    "packaged MiniLM, zero-shot); e.g. a bi-encoder evaluator export")
    ap.add_argument("--record", action="store_true",
                    help="also write the figures into the export: metrics.held_out of its manifest and its model card")
    ap.add_argument("--crag-popqa", default=None, help="CRAG's PopQA evaluator file (default: searched for)")
    ap.add_argument("--no-corpus", action="store_true", help="score an export with a corpus mode pair by pair only "
                    "(by default it scores against each set's distinct passages, and pair by pair as 'without_corpus')")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in names if s not in SETS]
    if unknown:
        ap.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(SETS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import inference

    t_start = time.perf_counter()
    model = inference.load(args.model, task="evaluator", device="cpu")
    inputs = trained_on(model.manifest)
    shas = {file_sha256(_resolve(r["path"])): r for r in inputs if r["exists"]}
    seen_q = training_queries(inputs)
    logger.info("%s: theta_high %.4f; trained on %s (%d training queries found)", args.model, model.theta_high,
                ", ".join(r["path"] for r in inputs) or "nothing the manifest names", len(seen_q))
    from data_prep.text import normalize_answer

    result: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(),
        "export": {"path": args.model, "name": model.manifest.name, "theta_high": model.theta_high,
                   "theta_low": model.theta_low, "corpus_mode": corpus_mode_info(model, not args.no_corpus),
                   "trained_on": inputs, "training_queries": len(seen_q)},
        "options": {"limit": args.limit, "negatives": args.negatives, "seed": args.seed,
                    "cosine_model": args.cosine_model or "packaged MiniLM (zero-shot)"},
        "sets": {}, "excluded": {}, "set_info": {},
    }
    cosine: Cosine | None = None
    keys: dict[str, str] = {}
    for name in names:
        spec, path = locate(name, SETS[name], args)
        if path is None:
            where = f"{args.data_dir}, {args.shared_data}"
            result["excluded"][name] = {"kind": "unavailable", "reason": f"no {spec.rel or '*popqa* file'} under {where}"}
            logger.info("%s: unavailable", name)
            continue
        files = set_files(spec, path)
        hit = next((shas[s] for s in (file_sha256(f) for f in files if f.is_file()) if s in shas), None)
        if hit is not None:
            result["excluded"][name] = {"kind": "trained-on", "files": [str(f) for f in files],
                                        "reason": f"the manifest's {hit['field']} ({hit['path']}) is this set's file"}
            logger.info("%s: excluded, trained on", name)
            continue
        t0 = time.perf_counter()
        groups = read_groups(spec, path)
        key = content_key(groups)
        dup = next((k for k, v in keys.items() if v == key), None)
        if dup is not None:
            result["excluded"][name] = {"kind": "duplicate", "files": [str(f) for f in files],
                                        "reason": f"the same (query, passage, label) rows as {dup}"}
            logger.info("%s: excluded, duplicate of %s", name, dup)
            continue
        keys[name] = key
        overlap = [g for g in groups if normalize_answer(g.query) in seen_q]
        if groups and len(overlap) > len(groups) / 2:
            result["excluded"][name] = {"kind": "trained-on", "files": [str(f) for f in files],
                                        "reason": f"{len(overlap)} of its {len(groups)} queries are training queries"}
            logger.info("%s: excluded, %d of %d queries trained on", name, len(overlap), len(groups))
            continue
        drop = {g.qid for g in overlap}
        groups = [g for g in groups if g.qid not in drop]
        total = len(groups)
        if args.limit and len(groups) > args.limit:
            keep = set(random.Random(f"{args.seed}:{name}").sample([g.qid for g in groups], args.limit))
            groups = [g for g in groups if g.qid in keep]
        info: dict = {"format": spec.fmt, "files": [str(f) for f in files], "about": spec.about,
                      "queries_available": total, "training_queries_dropped": len(drop), **spec.options}
        if spec.kind == "mine":
            info.update(add_mined_negatives(spec, path, groups, args.negatives, args.seed))
        elif spec.kind == "squad":
            info.update(add_article_negatives(path, groups, args.negatives, args.seed))
        groups = [g for g in groups if g.items]
        if cosine is None:
            cosine = Cosine(args.cosine_model)
        logger.info("%s: %d queries, %d pairs", name, len(groups), sum(len(g.items) for g in groups))
        r = bench_set(model, groups, cosine, args.seed, use_corpus=not args.no_corpus)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        result["sets"][name], result["set_info"][name] = r, info
        logger.info("  AUC %s; BM25 %s; MiniLM cosine %s", r["auc"], r["baselines"]["bm25"]["auc"],
                    r["baselines"]["minilm_cosine"]["auc"])
    beats = [r["beats_baselines"] for r in result["sets"].values()]
    result["target_met"] = bool(beats) and all(b is True for b in beats)
    result["clear_margin"] = bool(beats) and all(bool(r.get("margin", {}).get("clear")) for r in result["sets"].values())
    result["runtime_s"] = round(time.perf_counter() - t_start, 1)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(result))
    if args.record:
        record(args.model, result)
    return 0


def record(export_dir: str, result: dict) -> None:
    """``metrics.held_out`` of the export's manifest and the ``Held-out figures`` of its model card
    (each file written whole, then renamed over the old one)."""
    import datetime

    from training.export import record_held_out

    sets = {name: {"n": r["n"], "queries": r["queries"], "auc": r["auc"], "bm25_auc": r["baselines"]["bm25"]["auc"],
                   "minilm_cosine_auc": r["baselines"]["minilm_cosine"]["auc"], "mrr": r["mrr"],
                   "accuracy_at_theta_high": r["accuracy_at_theta_high"],
                   **({"auc_without_corpus": r["without_corpus"]["auc"]} if r.get("without_corpus") else {}),
                   **({"margin_points": r["margin"][_closer(r["margin"])]["margin"],
                       "margin_ci95_low": r["margin"][_closer(r["margin"])]["ci95"][0],
                       "margin_ci95_high": r["margin"][_closer(r["margin"])]["ci95"][1]} if r.get("margin") else {}),
                   **({"decision_auc": r["decision"]["auc"],
                       "bm25_decision_auc": r["baselines"]["bm25"]["decision_auc"],
                       "minilm_cosine_decision_auc": r["baselines"]["minilm_cosine"]["decision_auc"]}
                      if r.get("decision") else {})}
            for name, r in result["sets"].items()}
    path = record_held_out(export_dir, {
        "about": (f"scripts/bench_quality.py on {datetime.date.today().isoformat()}: sets the export did not train on, "
                  "against zero-shot BM25 and the MiniLM cosine on the same pairs (`" + result["command"] + "`)"
                  + ("; auc is the export's corpus mode with each set's passages as the corpus, auc_without_corpus "
                     "its pair-by-pair score" if any(r.get("mode") == "corpus" for r in result["sets"].values()) else "")
                  + "; margin_points: auc over the closer baseline's, in points, with its 95% paired bootstrap interval "
                    "over queries (margin_ci95_low, margin_ci95_high)"),
        "sets": sets, "excluded": {k: v["reason"] for k, v in result["excluded"].items()},
    })
    logger.info("held-out figures recorded in %s and its model card", path)


if __name__ == "__main__":
    sys.exit(main())
