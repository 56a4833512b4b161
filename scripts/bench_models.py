"""Out-of-domain report of the answer-existence classifier and the key-sentence extractor against baselines.

    python scripts/bench_models.py --json outputs/bench/models.json \\
        [--answer-model outputs/answer-classifier-quickstart] [--extractor-model outputs/extractor-quickstart] \\
        [--evaluator-model outputs/evaluator-quickstart] [--max-queries 300] [--resamples 1000] [--seed 13]

Both models and their baselines score the same rows in one run:

* **answer classifier** (AUC, and accuracy / F1 at the export's threshold) against ``evaluator``
  (the evaluator export, ``--evaluator-model``, used in its place: its calibrated score of the
  same (question, passage) pair), ``bm25_pair`` (Okapi BM25 of the question against the passage,
  idf from the set's distinct passages; the tokenisation of ``data_prep``) and ``minilm_cosine``
  (the zero-shot MiniLM bi-encoder cosine: the weights the quickstart starts from, as they ship);
* **extractor** (``p@1``, ``r@3``, ``mrr`` per passage) against ``first_sentences`` (passage
  order), ``bm25`` over the passage's sentences, ``lexical_overlap`` (the share of the question's
  content words in the sentence), ``minilm_cosine`` and ``evaluator`` (its score of each
  (question, sentence) pair);

on each labelled set the models did not train on:

* ``dev`` (both): the dev split of the recipe's built dataset (SQuAD questions never trained on;
  their articles were, since the split is by question): in domain;
* ``nq_ood`` (both): the dev split of the bundled NQ-open sample (``--nq``), mined here with each
  question's top 10 BM25 hits kept and labelled by answer containment (answer task), its gold
  passages' sentences labelled by answer containment (extractor task). Held-out questions of a
  source the quickstart evaluator trains on (its train split), and a recipe that mixes NQ-open in;
* ``nq_answerability`` (answer classifier): SQuAD-2.0-style, from the same NQ-open dev questions: its
  gold passage (label 1 where it holds a gold answer) against hard negatives that only the answer
  separates (``data_prep build --hard-negatives all``, :mod:`data_prep.tasks.answerability`: the
  passage with its answer sentences removed, the passage with its answer swapped for a wrong one of
  the same type, the question with its key entity swapped for one the passage lacks), one of each
  kind a question; questions that got none are left out;
* ``msmarco_ood`` (answer classifier): MS MARCO passages (web pages, which no recipe trains on): the
  passage MS MARCO's annotators selected as holding the answer against the non-selected ones the
  bundled files pair it with (the triples sample's BM25 negative, FlagEmbedding's mined negatives);
* ``scifact_rationales`` (extractor): SciFact's rationale sentences when ``--scifact`` (BEIR
  layout) holds sentence labels; the BEIR layout has none (corpus, queries, qrels), so the JSON says
  ``{"available": false, "why": ...}`` and nothing is invented.

Per set and baseline, ``margins`` holds the model's margin on the headline metric (AUC for the
answer classifier; ``p@1`` and ``r@3`` for the extractor), in points (x100), with a 95% paired
bootstrap interval over questions (``--resamples`` draws of the set's questions, each with all its
rows, seeded; ``scripts/paired_bootstrap.py``, the one ``bench_quality.py`` uses) and ``ahead``
(the interval's lower end above 0). Answer sets also give ``by_negative_kind``: the AUC of the
positives against each kind of negative alone (``answer-removed``, ``answer-swapped``,
``question-perturbed``; ``hit`` and ``negative`` in the mined sets), with the same margins: which
contrast a model misses. A perturbed question is drawn with the question it came from.

``summary`` (last in the JSON, and printed as Markdown tables) has one row per model, set,
metric and baseline, and ``targets``: the answer classifier ahead of ``evaluator``, ``bm25_pair``
and ``minilm_cosine`` on every answer set; the extractor ahead of ``bm25`` and ``minilm_cosine``
on ``p@1`` and ``r@3`` on every extractor set; each failed target listed by set. A set is left
out of the targets (and says why) when more than half its questions are in the model's training
files; ``evaluator_trained_queries`` counts those of the evaluator's (the quickstart evaluator
trained on NQ-open's train split, so NQ is not out of domain for that baseline).

``--record`` writes each model's figures into its export (``metrics.held_out`` of the manifest
and the model card's ``Held-out figures``; the weights are not touched).

The training time of each quickstart is read from its manifest (``training.train_runtime``).
``--int8`` also scores every set with the opt-in int8 mode (``quantize="int8"``) and reports its
figures beside the fp32 ones (``model_int8``: the metric change and the largest score difference).
Per model and set the JSON has ``{"n", ..., "model": {...}, "baselines": {name: {...}},
"margins": {...}}``.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bootstrap (scripts/paired_bootstrap.py)

from paired_bootstrap import auc_metric, mean_metric, paired_bootstrap, query_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NQ = ROOT / "data" / "sample" / "nq_open" / "nq-open-oracle.jsonl.gz"
#: MS MARCO passage data (web pages, a source neither quickstart trains on): (format, file)
MSMARCO = (("msmarco-triples", ROOT / "data" / "sample" / "msmarco" / "triples.train.small.sample.tsv"),
           ("flagembedding", ROOT / "data" / "sample" / "flagembedding" / "msmarco.jsonl"))
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
logger = logging.getLogger("bench_models")

#: the baselines each model has to be ahead of, and on which metrics (``summary.targets``)
TARGETS = {"answer_classifier": (("auc",), ("evaluator", "bm25_pair", "minilm_cosine")),
           "extractor": (("p@1", "r@3"), ("bm25", "minilm_cosine"))}


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


def origin_of(pair) -> str:
    """The question a pair belongs to: a perturbed question's original one, else its own."""
    return str(pair.metadata.get("origin_query_id") or pair.query_id)


def load_pairs(path: Path, max_queries: int | None):
    """The labelled pairs of ``path``; with ``max_queries``, those of its first questions (a
    perturbed question goes with the one it came from)."""
    from data_prep.io import read_records
    from data_prep.records import LabelledPair

    pairs = list(read_records(path, LabelledPair))
    if max_queries:
        keep = set(list(dict.fromkeys(origin_of(p) for p in pairs))[:max_queries])
        pairs = [p for p in pairs if origin_of(p) in keep]
    return pairs


def nq_ood(work: Path, nq: Path = NQ) -> Path:
    """The NQ-open sample mined with top hits kept, built into answer and extractor data (kept in
    ``work`` and reused)."""
    from data_prep.build import BuildConfig, build
    from data_prep.mining import MiningConfig, run_mining
    from data_prep.readers import open_source

    built = work / "built"
    if not (built / "meta.json").exists():
        run_mining(open_source("nq-open", input=str(nq)), work / "mined",
                   MiningConfig(negatives=7, answer_hits=10, seed=13, show_progress=False))
        build(BuildConfig(input=str(work / "mined" / "examples.jsonl"), output=str(built), tasks=("answer", "extractor"),
                          dev_ratio=0.1, seed=13, overwrite=True))
    return built


#: the recipes' split seed: nq_answerability's questions are the dev split every NQ-open build of it holds out
SPLIT_SEED = 13


def answerability_set(work: Path, nq: Path = NQ) -> tuple[Path, dict]:
    """The SQuAD-2.0-style answerability pairs of the NQ-open dev questions (built afresh each run, in
    seconds): each gold passage and its hard negatives (``data_prep build --hard-negatives all``,
    one of each kind a question). The questions are NQ-open's dev split (``dev_ratio`` 0.1, seed 13:
    those of ``nq_ood``), which no quickstart trains on, the evaluator and a recipe that mixes NQ-open
    in included; the span pool the swaps draw from is the whole sample's. Returns the pairs file,
    with only the questions that got a hard negative, and the build's ``meta["hard_negatives"]``
    counts."""
    from data_prep.build import BuildConfig, build
    from data_prep.io import read_records, write_jsonl
    from data_prep.readers import open_source
    from data_prep.records import LabelledPair

    work.mkdir(parents=True, exist_ok=True)
    examples = work / "examples.jsonl"
    write_jsonl(examples, [ex for ex in open_source("nq-open", input=str(nq)).queries()])  # positives only
    meta = build(BuildConfig(input=str(examples), output=str(work / "built"), tasks=("answer",), dev_ratio=0.1,
                             seed=SPLIT_SEED, hard_negatives=("removed", "swapped", "perturbed"), overwrite=True))
    pairs = list(read_records(work / "built" / "answer" / "dev.pairs.jsonl", LabelledPair))
    with_negatives = {origin_of(p) for p in pairs if p.metadata.get("negative_kind")}
    kept = [p for p in pairs if origin_of(p) in with_negatives]
    out = work / "pairs.jsonl"
    write_jsonl(out, kept)
    info = {"source": str(nq), "split": "dev (dev_ratio 0.1, seed 13)", "questions": len({origin_of(p) for p in pairs}), "questions_with_hard_negatives":
            len(with_negatives), **{k: meta["hard_negatives"][k] for k in ("kinds", "per_question", "made", "skipped")}}
    return out, info


def msmarco_set(work: Path, files=MSMARCO) -> tuple[Path, dict]:
    """MS MARCO answer existence (web passages; no quickstart trains on MS MARCO): each query's
    passage that the MS MARCO annotators selected as holding the answer (label 1) against the
    non-selected passages its files pair it with (label 0): the triples sample's BM25-retrieved
    negative, FlagEmbedding's mined negatives. Mojibake is repaired (``fix_mojibake``) for every
    scorer alike; a query in both files is kept from the first. Returns the pairs file and counts."""
    from data_prep.io import write_jsonl
    from data_prep.readers import open_pairs
    from data_prep.text import normalize_answer

    work.mkdir(parents=True, exist_ok=True)
    pairs, earlier, info = [], set(), {"files": {}, "queries_in_an_earlier_file": 0}
    for fmt, path in files:
        if not Path(path).is_file():
            info["files"][str(path)] = "missing"
            continue
        options = {"fix_mojibake": True} if fmt == "msmarco-triples" else {}
        mine, dropped = set(), set()
        for p in open_pairs(fmt, input=str(path), **options):
            key = normalize_answer(p.query)
            if key in earlier:
                dropped.add(key)
                continue
            mine.add(key)
            pairs.append(p)
        earlier |= mine
        info["files"][str(path)] = {"format": fmt, "queries": len(mine)}
        info["queries_in_an_earlier_file"] += len(dropped)
    out = work / "pairs.jsonl"
    write_jsonl(out, pairs)
    return out, info


def scifact_rationales(folder: Path) -> dict:
    """Whether ``folder`` (SciFact) has rationale sentence labels to score the extractor on."""
    if not folder.is_dir():
        return {"available": False, "why": f"no SciFact folder at {folder}"}
    keys = ("evidence", "rationale", "rationales", "sentences", "evidence_sets")
    found = []
    for name in ("queries.jsonl", "corpus.jsonl", "claims_train.jsonl"):
        path = folder / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as f:
            for line, _ in zip(f, range(200)):
                row = json.loads(line)
                found += [f"{name}:{k}" for k in keys if k in row or k in (row.get("metadata") or {})]
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    if not found:
        return {"available": False, "files": files,
                "why": "the BEIR layout holds claims, abstracts and claim-to-abstract qrels only "
                       "(no rationale sentence indices), so no sentence labels exist to score against"}
    return {"available": False, "files": files, "fields": sorted(set(found)),
            "why": "rationale-like fields found, but this script has no reader for them yet"}


def training_queries_of(model) -> set[str]:
    """Normalised questions of the training files (``train*``) the export's manifest names and
    that exist here (``bench_quality.trained_on``)."""
    from bench_quality import trained_on, training_queries

    inputs = [r for r in trained_on(model.manifest) if not r.get("format") and Path(r["path"]).name.startswith("train")]
    return training_queries(inputs)


def seen_queries(pairs, seen: set[str]) -> int:
    from data_prep.text import normalize_answer

    return len({p.query for p in pairs if normalize_answer(p.query) in seen})


# --------------------------------------------------------------------------------------------
# margins


def with_ahead(m: dict, metric: str) -> dict:
    """``paired_bootstrap``'s result with ``metric``, ``unit`` and an ``ahead`` per baseline."""
    if not m:
        return {}
    out = {"metric": metric, "unit": "points (x100)", "resamples": m["resamples"]}
    for k, v in m.items():
        if isinstance(v, dict):
            out[k] = {**v, "ahead": bool(v["ci95"][0] > 0)}
    return out


def auc_margins(ours, baselines: dict, labels, units: list[str], seed: int, resamples: int) -> dict:
    return with_ahead(paired_bootstrap(auc_metric(labels), ours, baselines, query_rows(units), seed, resamples), "auc")


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


def negative_kind(pair) -> str | None:
    """``None`` for a positive; else the generated kind, or the pair's role (``hit``, ``negative``;
    ``gold-without-answer`` for a gold passage without a gold answer string)."""
    if pair.label >= 0.5:
        return None
    kind = pair.metadata.get("negative_kind") or pair.passage.metadata.get("negative_kind")
    role = pair.metadata.get("role") or "negative"
    return kind or ("gold-without-answer" if role == "positive" else role)


def by_negative_kind(pairs, scores: dict[str, np.ndarray], labels, units, seed: int, resamples: int) -> dict:
    """Per negative kind: the AUC of every positive against that kind's negatives alone, for the
    model and each baseline, and the model's margins."""
    from inference.metrics import roc_auc

    kinds = [negative_kind(p) for p in pairs]
    labels = np.asarray(labels, dtype=float)
    out = {}
    for kind in sorted({k for k in kinds if k}):
        rows = np.asarray([i for i, k in enumerate(kinds) if k is None or k == kind])
        sub = {name: s[rows] for name, s in scores.items()}
        y = labels[rows]
        out[kind] = {"n": int(sum(k == kind for k in kinds)), "auc": {name: roc_auc(s, y) for name, s in sub.items()},
                     "margins": auc_margins(sub["model"], {k: v for k, v in sub.items() if k != "model"}, y,
                                            [units[i] for i in rows], seed, resamples)}
    return out


def bench_answer(model, pairs, cosine: Cosine, int8=None, evaluator=None, seed: int = 13, resamples: int = 1000) -> dict:
    from inference.inputs import passage_text

    if not pairs:
        return {"n": 0, "skipped": "no pairs"}
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
    base = {"bm25_pair": bm, "minilm_cosine": np.asarray(cos)}
    if evaluator is not None:
        base = {"evaluator": np.asarray(evaluator.score([(p.query, p.passage) for p in pairs])), **base}
    units = [origin_of(p) for p in pairs]
    return {
        **extra,
        "n": len(pairs), "positives": int(sum(y >= 0.5 for y in labels)), "queries": len(set(units)),
        "by_role_label": dict(roles),
        "model": {**pair_figures(probs, labels, model.threshold), "threshold": model.threshold,
                  "pairs_per_s": round(len(pairs) / secs, 1) if secs else None},
        "baselines": {k: pair_figures(v, labels) for k, v in base.items()},
        "margins": auc_margins(probs, base, labels, units, seed, resamples),
        "by_negative_kind": by_negative_kind(pairs, {"model": np.asarray(probs), **base}, labels, units, seed, resamples),
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


def ranking_per_passage(groups, scores_per_group) -> dict[str, np.ndarray]:
    """``p@1``, ``r@3`` and ``mrr`` of each passage (ties: the earlier sentence first)."""
    from inference.metrics import extraction_metrics

    out: dict[str, list[float]] = {"p@1": [], "r@3": [], "mrr": []}
    for ps, sc in zip(groups, scores_per_group):
        idx = list(range(len(ps)))
        order = sorted(idx, key=lambda j: (-sc[j], j))
        m = extraction_metrics([[(j, j + 1) for j in order]], [[(j, j + 1) for j in idx if ps[j].label >= 0.5]], k=3)
        for k in out:
            out[k].append(m[k])
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def ranking_figures(groups, scores_per_group) -> dict:
    per = ranking_per_passage(groups, scores_per_group)
    return {k: float(v.mean()) if len(v) else float("nan") for k, v in per.items()}


def ranking_margins(groups, ours: dict, baselines: dict[str, dict], seed: int, resamples: int) -> dict:
    """``{"p@1": margins, "r@3": margins}`` over each baseline, the draws over questions."""
    units = query_rows(ps[0].query_id for ps in groups)
    return {m: with_ahead(paired_bootstrap(mean_metric, ours[m], {k: v[m] for k, v in baselines.items()}, units,
                                           seed, resamples), m)
            for m in ("p@1", "r@3")}


def bench_extractor(model, pairs, cosine: Cosine, int8=None, evaluator=None, seed: int = 13, resamples: int = 1000) -> dict:
    from inference.inputs import passage_text

    groups = groups_of(pairs)
    if not groups:
        return {"passages": 0, "skipped": "no passage with a gold sentence"}
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
    bm = [bm25.score(ps[0].query, [p.passage.text for p in ps]) for ps in groups]
    cos = cosine.score([(p.query, passage_text(p.passage, model.passage_format)) for p in flat])
    scores = {
        "first_sentences": [[-j for j in range(len(ps))] for ps in groups],
        "bm25": bm,
        "lexical_overlap": [[overlap(p.query, p.passage.text) for p in ps] for ps in groups],
        "minilm_cosine": per_group(cos),
    }
    if evaluator is not None:
        scores["evaluator"] = per_group(evaluator.score([(p.query, p.passage) for p in flat]))
    ours = ranking_per_passage(groups, per_group(probs))
    base = {k: ranking_per_passage(groups, v) for k, v in scores.items()}
    mean = lambda per: {k: float(v.mean()) for k, v in per.items()}  # noqa: E731
    return {
        **extra,
        "passages": len(groups), "queries": len({ps[0].query_id for ps in groups}), "sentences": len(flat),
        "gold_sentences": int(sum(p.label >= 0.5 for p in flat)),
        "model": {**mean(ours), "sentences_per_s": round(len(flat) / secs, 1) if secs else None},
        "baselines": {k: mean(v) for k, v in base.items()},
        "margins": ranking_margins(groups, ours, base, seed, resamples),
    }


# --------------------------------------------------------------------------------------------
# summary


def summary(result: dict) -> dict:
    """One row per model, set, metric and baseline (margin, interval, ahead), and the targets."""
    rows, targets = [], {}
    for task, (metrics, needed) in TARGETS.items():
        if task not in result:  # not scored this run (--tasks)
            continue
        failed: dict[str, list[str]] = {}
        checked, left_out = [], {}
        for name, r in result.get(task, {}).items():
            if not isinstance(r, dict) or ("margins" not in r and "excluded_from_targets" not in r):
                continue  # export, training, scifact_rationales
            margins = r.get("margins") or {}
            per_metric = {"auc": margins} if task == "answer_classifier" else margins
            for metric, m in per_metric.items():
                for base, v in m.items():
                    if isinstance(v, dict):
                        rows.append({"model": task, "set": name, "metric": metric, "baseline": base, "margin": v["margin"],
                                     "ci95": v["ci95"], "ahead": v["ahead"]})
            if r.get("excluded_from_targets"):
                left_out[name] = r["excluded_from_targets"]
                continue
            checked.append(name)
            for metric in metrics:
                m = per_metric.get(metric) or {}
                for base in needed:
                    if base not in m:
                        failed.setdefault(name, []).append(f"{base} {metric} (not scored)")
                    elif not m[base]["ahead"]:
                        failed.setdefault(name, []).append(f"{base} {metric}")
        targets[task] = {"rule": f"ahead (95% interval above 0) of {', '.join(needed)} on {' and '.join(metrics)} "
                                 "on every scored set",
                         "sets": checked, "met": bool(checked) and not failed, "failed": failed,
                         **({"left_out": left_out} if left_out else {})}
    targets["met"] = all(t["met"] for t in targets.values())
    return {"rows": rows, "targets": targets}


def markdown(result: dict) -> str:
    """The summary, and the answer sets' AUC by negative kind, as Markdown tables."""
    f = lambda v: "-" if v is None else f"{v:+.2f}"  # noqa: E731
    lines = ["| model | set | metric | baseline | margin | 95% CI | ahead |", "|---|---|---|---|---:|---|---|"]
    for r in result["summary"]["rows"]:
        lines.append(f"| {r['model']} | {r['set']} | {r['metric']} | {r['baseline']} | {f(r['margin'])} | "
                     f"[{f(r['ci95'][0])}, {f(r['ci95'][1])}] | {'yes' if r['ahead'] else 'no'} |")
    kinds = [(name, kind, k) for name, r in result.get("answer_classifier", {}).items() if isinstance(r, dict)
             for kind, k in (r.get("by_negative_kind") or {}).items()]
    if kinds:
        names = list(kinds[0][2]["auc"])
        lines += ["", "| answer set | negative kind | n | " + " | ".join(f"AUC {n}" for n in names) + " |",
                  "|---|---|---:|" + "---:|" * len(names)]
        for name, kind, k in kinds:
            cells = " | ".join("-" if k["auc"].get(n) is None else f"{k['auc'][n]:.3f}" for n in names)
            lines.append(f"| {name} | {kind} | {k['n']} | {cells} |")
    lines.append("")
    t = result["summary"]["targets"]
    for task in (k for k in TARGETS if k in t):
        fails = "; ".join(f"{s}: {', '.join(v)}" for s, v in t[task]["failed"].items()) or "none"
        lines.append(f"- **{task}** target ({t[task]['rule']}): {'met' if t[task]['met'] else 'not met'}; failed: {fails}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------


def _margin_text(v: dict) -> str:
    return f"{v['margin']:+.1f} [{v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f}]"


def held_out_figures(task: str, result: dict) -> dict:
    """``metrics.held_out`` for ``task``'s export: per set the model's headline figures, each target
    baseline's, and the margins with their intervals as text ("+2.7 [+1.3, +4.2]", points)."""
    import datetime

    metrics, needed = TARGETS[task]
    sets, notes = {}, {}
    for name, r in result[task].items():
        if not isinstance(r, dict) or "margins" not in r or not r["margins"]:
            continue
        row: dict = {"n": r.get("n", r.get("passages")), "queries": r["queries"]}
        per_metric = {"auc": r["margins"]} if task == "answer_classifier" else r["margins"]
        for metric in metrics:
            row[metric] = round(r["model"][metric], 4)
            for base in needed:
                if base in r["baselines"]:
                    row[f"{base} {metric}"] = round(r["baselines"][base][metric], 4)
            for base in needed:
                if base in per_metric.get(metric, {}):
                    row[f"{metric} vs {base}"] = _margin_text(per_metric[metric][base])
        sets[name] = row
        if r.get("excluded_from_targets"):
            notes[name] = r["excluded_from_targets"]
    t = result["summary"]["targets"][task]
    return {
        "about": (f"scripts/bench_models.py on {datetime.date.today().isoformat()} (`{result['command']}`): "
                  f"labelled sets the export did not train on (dev: held-out questions of its training articles), "
                  f"each scored by the export and by {', '.join(needed)} on the same rows; margins in points, with "
                  f"the 95% paired bootstrap interval over questions ({result['options']['resamples']} draws). Target: "
                  f"{t['rule']}: {'met' if t['met'] else 'not met'}"
                  + ("" if t["met"] else "; failed: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in t["failed"].items()))
                  + ". Why, per set: docs/benchmarks.md."),
        "sets": sets, **({"excluded": notes} if notes else {}),
    }


def training_time(model) -> dict:
    t = model.manifest.training
    return {"train_runtime_s": t.get("train_runtime"), "global_step": t.get("global_step"),
            "train_examples": t.get("data", {}).get("train_examples")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answer-model", default="outputs/answer-classifier-quickstart")
    ap.add_argument("--extractor-model", default="outputs/extractor-quickstart")
    ap.add_argument("--evaluator-model", default="outputs/evaluator-quickstart",
                    help="the evaluator export scored as a baseline in each model's place ('none': left out)")
    ap.add_argument("--dataset", default="outputs/datasets/squad", help="the recipes' built dataset (dev split)")
    ap.add_argument("--work", default="outputs/bench/nq-ood", help="where the NQ out-of-domain data is built")
    ap.add_argument("--nq", default=str(NQ), help="the NQ-open file of nq_ood and nq_answerability")
    ap.add_argument("--scifact", default=str(SCIFACT), help="SciFact (BEIR layout), checked for rationale sentence labels")
    ap.add_argument("--max-queries", type=int, default=None, help="cap each set at this many questions")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap draws of each margin's interval")
    ap.add_argument("--seed", type=int, default=13, help="seed of the bootstrap draws")
    ap.add_argument("--int8", action="store_true", help="also score with the opt-in int8 mode (quantize='int8')")
    ap.add_argument("--tasks", default="answer_classifier,extractor",
                    help="the models to score, comma-separated (answer_classifier, extractor)")
    ap.add_argument("--record", action="store_true", help="also write each model's figures into its export: "
                    "metrics.held_out of its manifest and the Held-out figures of its model card")
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks or set(tasks) - set(TARGETS):
        ap.error(f"--tasks takes {', '.join(TARGETS)}, got {args.tasks!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    import inference

    t_start = time.perf_counter()
    ans = inference.load(args.answer_model, task="answer_classifier", device="cpu") if "answer_classifier" in tasks else None
    ext = inference.load(args.extractor_model, task="extractor", device="cpu") if "extractor" in tasks else None
    ans8 = inference.load(args.answer_model, device="cpu", quantize="int8") if args.int8 and ans else None
    ext8 = inference.load(args.extractor_model, device="cpu", quantize="int8") if args.int8 and ext else None
    evaluator, evaluator_info = None, {"export": None, "why": "--evaluator-model none"}
    if args.evaluator_model.lower() != "none":
        if Path(args.evaluator_model).exists():
            evaluator = inference.load(args.evaluator_model, task="evaluator", device="cpu")
            evaluator_info = {"export": args.evaluator_model, "name": evaluator.manifest.name, "mode": "pairs"}
        else:
            logger.warning("no evaluator export at %s: its baseline is left out", args.evaluator_model)
            evaluator_info = {"export": None, "why": f"no export at {args.evaluator_model}"}
    cosine = Cosine()
    work = ROOT / args.work
    ood = nq_ood(work, Path(args.nq))
    answerability, answerability_info = answerability_set(work / "answerability", Path(args.nq))
    msmarco, msmarco_info = msmarco_set(work / "msmarco")
    dataset = ROOT / args.dataset
    seen = {"model": {"answer_classifier": training_queries_of(ans) if ans else set(),
                      "extractor": training_queries_of(ext) if ext else set()},
            "evaluator": training_queries_of(evaluator) if evaluator is not None else set()}
    result: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "options": {"max_queries": args.max_queries, "resamples": args.resamples, "seed": args.seed,
                    "margin_unit": "points (x100)", "evaluator": evaluator_info},
    }
    for task, model, export in (("answer_classifier", ans, args.answer_model), ("extractor", ext, args.extractor_model)):
        if model is not None:
            result[task] = {"export": export, "training": training_time(model)}
    answer_sets = (("dev", dataset / "answer" / "dev.pairs.jsonl"), ("nq_ood", ood / "answer" / "dev.pairs.jsonl"),
                   ("nq_answerability", answerability), ("msmarco_ood", msmarco))
    extractor_sets = (("dev", dataset / "extractor" / "dev.pairs.jsonl"), ("nq_ood", ood / "extractor" / "dev.pairs.jsonl"))
    for task, model, q8, bench, sets in (("answer_classifier", ans, ans8, bench_answer, answer_sets),
                                         ("extractor", ext, ext8, bench_extractor, extractor_sets)):
        if model is None:
            continue
        for name, path in sets:
            pairs = load_pairs(path, args.max_queries)
            logger.info("%s on %s: %d pairs", task, name, len(pairs))
            r = bench(model, pairs, cosine, q8, evaluator, args.seed, args.resamples)
            n_q = len({origin_of(p) for p in pairs})
            r["model_trained_queries"] = seen_queries(pairs, seen["model"][task])
            r["evaluator_trained_queries"] = seen_queries(pairs, seen["evaluator"])
            if n_q and r["model_trained_queries"] > n_q / 2:
                r["excluded_from_targets"] = (f"{r['model_trained_queries']} of its {n_q} questions are in the "
                                              "model's training files")
            if name == "nq_answerability":
                r["about"] = answerability_info
            if name == "msmarco_ood":
                r["about"] = msmarco_info
            if "margins" not in r:
                r["excluded_from_targets"] = r.get("skipped", "nothing to score")
            result[task][name] = r
            logger.info("  model %s; baselines %s", {k: round(v, 4) for k, v in r.get("model", {}).items()
                                                      if k in ("auc", "p@1", "r@3")},
                        {b: {k: round(v, 4) for k, v in f.items() if k in ("auc", "p@1", "r@3") and v is not None}
                         for b, f in r.get("baselines", {}).items()})
    if ext is not None:
        result["extractor"]["scifact_rationales"] = scifact_rationales(Path(args.scifact))
    result["runtime_s"] = round(time.perf_counter() - t_start, 1)
    result["summary"] = summary(result)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(markdown(result))
    if args.record:
        from training.export import record_held_out

        for task, export in (("answer_classifier", args.answer_model), ("extractor", args.extractor_model)):
            if task not in tasks:
                continue
            path = record_held_out(export, held_out_figures(task, result))
            logger.info("%s: held-out figures recorded in %s and its model card", task, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
