"""A 95% paired bootstrap of a metric margin over queries, shared by the benchmark scripts
(``bench_quality.margin_ci``, ``bench_models``).

A set's queries are drawn with replacement, each with all its rows (pairs, or passages of the
query); the model and every baseline are scored on the same draws, so the interval is that of the
margin itself, not of two separate metrics.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np

#: ``metric(scores, rows) -> value`` of the ``rows`` of one draw, or ``None`` to skip the draw
Metric = Callable[[np.ndarray, np.ndarray], "float | None"]


def query_rows(qids: Iterable) -> list[np.ndarray]:
    """The row indices of each query, in order of first appearance."""
    rows: dict[str, list[int]] = {}
    for i, q in enumerate(qids):
        rows.setdefault(str(q), []).append(i)
    return [np.asarray(v) for v in rows.values()]


def paired_bootstrap(metric: Metric, ours, baselines: Mapping[str, object], units: list[np.ndarray],
                     seed: int = 13, resamples: int = 1000, scale: float = 100.0) -> dict:
    """``{"resamples", name: {"margin", "ci95"}}``: ``metric(ours) - metric(baseline)`` on every row,
    times ``scale`` (points), with the 2.5 and 97.5 percentiles of that difference over ``resamples``
    draws of ``units`` (one index array per query; the draws seeded by ``seed``). A draw where
    ``metric`` gives ``None`` for any score is skipped. ``{}`` when no draw (or the full set) can be
    scored."""
    ours = np.asarray(ours, dtype=float)
    base = {k: np.asarray(v, dtype=float) for k, v in baselines.items()}
    if not units or not base:
        return {}
    rng = np.random.default_rng(seed)
    diffs: dict[str, list[float]] = {k: [] for k in base}
    for _ in range(resamples):
        idx = np.concatenate([units[j] for j in rng.integers(0, len(units), len(units))])
        a = metric(ours, idx)
        if a is None:
            continue
        bs = {k: metric(b, idx) for k, b in base.items()}
        if any(v is None for v in bs.values()):
            continue
        for k, v in bs.items():
            diffs[k].append(a - v)
    every = np.arange(len(ours))
    full_ours = metric(ours, every)
    out: dict = {"resamples": resamples}
    for k, d in diffs.items():
        full_base = metric(base[k], every)
        if not d or full_ours is None or full_base is None:
            return {}
        lo, hi = np.percentile(d, [2.5, 97.5])
        out[k] = {"margin": round(scale * (full_ours - full_base), 2),
                  "ci95": [round(scale * float(lo), 2), round(scale * float(hi), 2)]}
    return out


def auc_metric(labels) -> Metric:
    """Pair ROC AUC of the drawn rows; ``None`` when a draw holds one label only."""
    from inference.metrics import roc_auc

    y_all = np.asarray(labels, dtype=float)

    def auc(scores: np.ndarray, rows: np.ndarray) -> float | None:
        y = y_all[rows]
        if not len(y) or y.min() >= 0.5 or y.max() < 0.5:
            return None
        return roc_auc(scores[rows], y)

    return auc


def mean_metric(scores: np.ndarray, rows: np.ndarray) -> float | None:
    """The mean of per-unit values (e.g. each passage's P@1) over the drawn rows."""
    return float(np.mean(scores[rows])) if len(rows) else None
