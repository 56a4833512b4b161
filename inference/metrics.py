"""The one implementation of evaluator metrics, used at training time and by ``python -m inference evaluate``.

Scores are probabilities in [0, 1]; labels are 0/1 (soft labels are binarised at 0.5).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

ACTIONS = ("Correct", "Ambiguous", "Incorrect")


def _as_arrays(scores: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = (np.asarray(labels, dtype=np.float64).reshape(-1) >= 0.5).astype(np.int64)
    if s.shape != y.shape:
        raise ValueError(f"{len(s)} scores but {len(y)} labels")
    return s, y


def roc_auc(scores: Sequence[float], labels: Sequence[float]) -> float | None:
    """Area under the ROC curve (ties count one half); ``None`` when only one class is present."""
    s, y = _as_arrays(scores, labels)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(s)  # average ranks handle ties
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


def action_of(score: float, theta_high: float, theta_low: float | None) -> str:
    """CRAG's per-chunk action. ``theta_low=None`` is the two-tier mode (no Ambiguous)."""
    if score >= theta_high:
        return "Correct"
    if theta_low is not None and score >= theta_low:
        return "Ambiguous"
    return "Incorrect"


def query_action(actions: Sequence[str]) -> str:
    """The paper's query-level rule: any Correct -> Correct; else any Ambiguous -> Ambiguous; else Incorrect."""
    if "Correct" in actions:
        return "Correct"
    if "Ambiguous" in actions:
        return "Ambiguous"
    return "Incorrect"


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
    """MRR@k and nDCG@k over queries that have at least two passages and one positive.
    ``None`` when no query qualifies (one passage per query)."""
    s, y = _as_arrays(scores, labels)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(query_ids):
        groups[str(q)].append(i)
    rr, ndcg = [], []
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
        disc = 1.0 / np.log2(np.arange(2, len(ranked) + 2))
        ideal = np.sort(ys)[::-1][:k]
        ndcg.append(float((ranked * disc).sum() / (ideal * disc[: len(ideal)]).sum()))
    if not rr:
        return None
    return {f"mrr@{k}": float(np.mean(rr)), f"ndcg@{k}": float(np.mean(ndcg)), "ranking_queries": len(rr)}


def evaluate_scores(
    scores: Sequence[float],
    labels: Sequence[float],
    theta_high: float,
    theta_low: float | None = None,
    query_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every metric we report, at the decision threshold ``theta_high`` (the paper's evaluator
    accuracy counts a pair as relevant when its score reaches the upper threshold)."""
    s, y = _as_arrays(scores, labels)
    out: dict[str, Any] = {"n": int(len(s)), "positives": int(y.sum())}
    out.update(binary_at(s, y, theta_high))
    out["auc"] = roc_auc(s, y)
    out["ece"] = expected_calibration_error(s, y)
    out["score_mean"] = float(s.mean()) if len(s) else float("nan")
    out["score_std"] = float(s.std()) if len(s) else float("nan")
    out["thresholds"] = {"theta_high": theta_high, "theta_low": theta_low, "decision": "theta_high"}
    out["actions"] = action_table(s, y, theta_high, theta_low)
    if query_ids is not None:
        rank = ranking_metrics(s, y, query_ids)
        if rank:
            out.update(rank)
    return out
