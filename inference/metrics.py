"""The one implementation of the metrics, used at training time, at export and by
``python -m inference evaluate``.

* pair metrics (every task's labelled pairs): accuracy, precision, recall, F1 and NPV at a
  threshold, ROC AUC, ECE, MRR@10 / nDCG@10 / P@1 per query group, CRAG's action table;
* extraction metrics (a key-sentence extractor over passages with gold sentences): ``p@1``,
  ``r@3`` and ``mrr``, where a predicted sentence counts as gold when its span overlaps a gold
  sentence's span by at least half of its own length.

Scores are probabilities in [0, 1]; labels are 0/1 (soft labels are binarised at 0.5).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from .decisions import ACTIONS, action_of, query_action  # noqa: F401  (re-exported)


def _as_arrays(scores: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = (np.asarray(labels, dtype=np.float64).reshape(-1) >= 0.5).astype(np.int64)
    if s.shape != y.shape:
        raise ValueError(f"{len(s)} scores but {len(y)} labels")
    return s, y


def average_ranks(s: np.ndarray) -> np.ndarray:
    """1-based ranks of ``s``, ties sharing the average of their ranks (as scipy's ``rankdata``)."""
    order = np.argsort(s, kind="mergesort")
    srt = s[order]
    edges = np.flatnonzero(np.r_[True, srt[1:] != srt[:-1], True])
    starts, ends = edges[:-1], edges[1:]
    ranks = np.empty(len(s), dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def roc_auc(scores: Sequence[float], labels: Sequence[float]) -> float | None:
    """Area under the ROC curve (ties count one half); ``None`` when only one class is present."""
    s, y = _as_arrays(scores, labels)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(s)  # ties count one half
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def expected_calibration_error(scores: Sequence[float], labels: Sequence[float], n_bins: int = 15) -> float:
    """ECE with equal-width bins: sum over bins of |accuracy - confidence| weighted by bin size,
    where the 'confidence' of a bin is its mean predicted probability of the positive class."""
    s, y = _as_arrays(scores, labels)
    if len(s) == 0:
        return float("nan")
    bins = np.minimum((s * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = bins == b
        if m.any():
            ece += m.mean() * abs(y[m].mean() - s[m].mean())
    return float(ece)


def binary_at(scores: Sequence[float], labels: Sequence[float], threshold: float) -> dict[str, float]:
    """Accuracy, precision, recall, F1 and NPV of ``score >= threshold``."""
    s, y = _as_arrays(scores, labels)
    pred = s >= threshold
    tp = int((pred & (y == 1)).sum())
    fp = int((pred & (y == 0)).sum())
    fn = int((~pred & (y == 1)).sum())
    tn = int((~pred & (y == 0)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "accuracy": (tp + tn) / len(s) if len(s) else float("nan"),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "npv": tn / (tn + fn) if tn + fn else 0.0,
    }


def action_table(
    scores: Sequence[float], labels: Sequence[float], theta_high: float, theta_low: float | None
) -> dict[str, dict[str, int]]:
    """How many pairs of each true label land in each action."""
    s, y = _as_arrays(scores, labels)
    table = {"positive": dict.fromkeys(ACTIONS, 0), "negative": dict.fromkeys(ACTIONS, 0)}
    for score, label in zip(s, y):
        table["positive" if label else "negative"][action_of(float(score), theta_high, theta_low)] += 1
    return table


def ranking_metrics(
    scores: Sequence[float], labels: Sequence[float], query_ids: Sequence[str], k: int = 10
) -> dict[str, float] | None:
    """MRR@k, nDCG@k and P@1 over queries that have at least two passages and one positive.
    ``None`` when no query qualifies (one passage per query)."""
    s, y = _as_arrays(scores, labels)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(query_ids):
        groups[str(q)].append(i)
    rr, ndcg, p1 = [], [], []
    for idx in groups.values():
        if len(idx) < 2:
            continue
        ys = y[idx]
        if ys.sum() == 0:
            continue
        # stable order: ties broken by input order, so results do not depend on float noise
        order = np.argsort(-s[idx], kind="stable")[:k]
        ranked = ys[order]
        hits = np.nonzero(ranked)[0]
        rr.append(1.0 / (hits[0] + 1) if len(hits) else 0.0)
        p1.append(float(ranked[0]))
        disc = 1.0 / np.log2(np.arange(2, len(ranked) + 2))
        ideal = np.sort(ys)[::-1][:k]
        ndcg.append(float((ranked * disc).sum() / (ideal * disc[: len(ideal)]).sum()))
    if not rr:
        return None
    return {f"mrr@{k}": float(np.mean(rr)), f"ndcg@{k}": float(np.mean(ndcg)), "p@1": float(np.mean(p1)),
            "ranking_queries": len(rr)}


def evaluate_scores(
    scores: Sequence[float],
    labels: Sequence[float],
    theta_high: float,
    theta_low: float | None = None,
    query_ids: Sequence[str] | None = None,
    actions: bool = True,
) -> dict[str, Any]:
    """Every pair metric we report, at the decision threshold ``theta_high`` (the paper's evaluator
    accuracy counts a pair as relevant when its score reaches the upper threshold; for the answer
    classifier it is its one threshold, with ``actions=False``: no CRAG action table)."""
    s, y = _as_arrays(scores, labels)
    out: dict[str, Any] = {"n": int(len(s)), "positives": int(y.sum())}
    out.update(binary_at(s, y, theta_high))
    out["auc"] = roc_auc(s, y)
    out["ece"] = expected_calibration_error(s, y)
    out["score_mean"] = float(s.mean()) if len(s) else float("nan")
    out["score_std"] = float(s.std()) if len(s) else float("nan")
    if actions:
        out["thresholds"] = {"theta_high": theta_high, "theta_low": theta_low, "decision": "theta_high"}
        out["actions"] = action_table(s, y, theta_high, theta_low)
    else:
        out["threshold"] = theta_high
    if query_ids is not None:
        rank = ranking_metrics(s, y, query_ids)
        if rank:
            out.update(rank)
    return out


# --------------------------------------------------------------------------------------------
# key-sentence extraction


Span = tuple[int, int]


def counts_as_gold(pred: Span, golds: Sequence[Span]) -> list[int]:
    """Indices of the gold spans that ``pred`` overlaps by at least half of its own length."""
    length = max(pred[1] - pred[0], 1)
    return [i for i, g in enumerate(golds) if min(pred[1], g[1]) - max(pred[0], g[0]) >= 0.5 * length]


def extraction_metrics(ranked: Sequence[Sequence[Span]], golds: Sequence[Sequence[Span]], k: int = 3) -> dict[str, Any]:
    """``p@1``, ``r@k`` and ``mrr`` over passages: ``ranked[i]`` are passage i's sentence spans best
    first, ``golds[i]`` its gold sentence spans (at least one).

    * ``p@1``: the top sentence counts as gold;
    * ``r@k``: the share of the gold sentences that one of the top ``k`` sentences counts as;
    * ``mrr``: the mean of 1 / rank of the first sentence that counts as gold (0 when none does).
    """
    if len(ranked) != len(golds):
        raise ValueError(f"{len(ranked)} rankings but {len(golds)} gold lists")
    p1, rk, rr = [], [], []
    for preds, gold in zip(ranked, golds):
        if not gold:
            raise ValueError("every passage needs at least one gold sentence")
        hits = [bool(counts_as_gold(p, gold)) for p in preds]
        p1.append(float(bool(hits) and hits[0]))
        found = {g for p in list(preds)[:k] for g in counts_as_gold(p, gold)}
        rk.append(len(found) / len(gold))
        first = next((i for i, h in enumerate(hits) if h), None)
        rr.append(0.0 if first is None else 1.0 / (first + 1))
    n = len(ranked)
    return {"n": n, "p@1": float(np.mean(p1)) if n else float("nan"), f"r@{k}": float(np.mean(rk)) if n else float("nan"),
            "mrr": float(np.mean(rr)) if n else float("nan"),
            "gold_sentences": int(sum(len(g) for g in golds)), "sentences": int(sum(len(r) for r in ranked))}
