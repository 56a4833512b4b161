"""Score calibration and CRAG threshold search on the dev split.

Every head produces a real-valued logit ``z`` per pair. Calibration maps it to a probability:

* ``temperature``: ``p = sigmoid(z / T)``
* ``platt``: ``p = sigmoid(a * z + b)``
* ``none``: ``p = sigmoid(z)``

Thresholds: ``theta_high`` is the lowest threshold from which on the precision of
``score >= t`` stays at or above the target; ``theta_low`` is the highest threshold up to which
the negative predictive value of ``score < t`` stays at or above the target. With too small a dev
split, or a target that cannot be met, the paper's defaults (0.79 / 0.50) are used and the reason
is recorded.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from inference.metrics import expected_calibration_error

logger = logging.getLogger(__name__)

PAPER_THETA_HIGH = 0.79
PAPER_THETA_LOW = 0.50


@dataclass
class Calibration:
    method: str = "none"
    a: float = 1.0
    b: float = 0.0

    def apply(self, logits) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        return 1.0 / (1.0 + np.exp(-(self.a * z + self.b)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.method == "temperature":
            d["temperature"] = 1.0 / self.a
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Calibration":
        return cls(method=d["method"], a=float(d["a"]), b=float(d["b"]))


def _nll(a: float, b: float, z: np.ndarray, y: np.ndarray) -> float:
    t = a * z + b
    # log(1 + exp(t)) - y * t, computed stably
    return float(np.mean(np.logaddexp(0.0, t) - y * t))


def fit_calibration(logits: Sequence[float], labels: Sequence[float], method: str = "platt") -> Calibration:
    """Fit by minimising the log loss on (logit, label) pairs. Labels may be soft."""
    if method == "none":
        return Calibration("none")
    from scipy.optimize import minimize

    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if len(np.unique((y >= 0.5).astype(int))) < 2:
        raise ValueError("calibration needs both positive and negative dev pairs")
    if method == "temperature":
        res = minimize(lambda p: _nll(math.exp(p[0]), 0.0, z, y), x0=[0.0], method="L-BFGS-B")
        return Calibration("temperature", a=float(math.exp(res.x[0])), b=0.0)
    if method == "platt":
        res = minimize(lambda p: _nll(p[0], p[1], z, y), x0=[1.0, 0.0], method="L-BFGS-B")
        return Calibration("platt", a=float(res.x[0]), b=float(res.x[1]))
    raise ValueError(f"unknown calibration method {method!r} (use platt, temperature or none)")


@dataclass
class Thresholds:
    theta_high: float
    theta_low: float
    method: str
    precision_target: float
    npv_target: float
    dev_pairs: int
    dev_positives: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _high_threshold(s: np.ndarray, y: np.ndarray, target: float, min_support: int) -> float | None:
    """Lowest t such that precision(score >= t) >= target over at least min_support pairs.

    The issue's rule taken literally. Cumulative precision is steady once a few dozen pairs are
    above t, so one negative ranked first no longer pushes theta_high to the top (an earlier rule
    required the target at every t' >= t and gave recall 0.14 on a 50-positive dev split).
    """
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    n = np.arange(1, len(s) + 1)
    # evaluate only at the last index of each run of equal scores (threshold = that score)
    last = np.r_[s_sorted[1:] != s_sorted[:-1], True]
    prec, support, cand = (tp / n)[last], n[last], s_sorted[last]
    ok = np.flatnonzero((prec >= target) & (support >= min_support))
    return float(cand[ok[-1]]) if len(ok) else None  # cand descending: the last one is the lowest


def _low_threshold(s: np.ndarray, y: np.ndarray, target: float, min_support: int) -> float | None:
    """Highest t such that NPV(score < t) >= target over at least min_support pairs."""
    order = np.argsort(s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tn = np.cumsum(1 - y_sorted)
    n = np.arange(1, len(s) + 1)
    last = np.r_[s_sorted[1:] != s_sorted[:-1], True]
    npv, support, cand = (tn / n)[last], n[last], s_sorted[last]
    ok = np.flatnonzero((npv >= target) & (support >= min_support))
    if not len(ok):
        return None
    i = ok[-1]  # cand ascending: the pairs up to cand[i] fall below the next distinct score
    return float(cand[i + 1]) if i + 1 < len(cand) else float(np.nextafter(cand[i], np.inf))


def search_thresholds(
    probs: Sequence[float],
    labels: Sequence[float],
    precision_target: float = 0.90,
    npv_target: float = 0.90,
    min_dev_pairs: int = 50,
    min_support: int = 5,
    default_high: float = PAPER_THETA_HIGH,
    default_low: float = PAPER_THETA_LOW,
) -> Thresholds:
    s = np.asarray(probs, dtype=np.float64)
    y = (np.asarray(labels, dtype=np.float64) >= 0.5).astype(np.int64)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    common = dict(precision_target=precision_target, npv_target=npv_target, dev_pairs=len(y), dev_positives=n_pos)
    if len(y) < min_dev_pairs or n_pos < min_support or n_neg < min_support:
        note = f"dev split too small to tune ({len(y)} pairs, {n_pos} positive; need {min_dev_pairs} pairs and {min_support} of each class)"
        return Thresholds(default_high, default_low, "paper-default", notes=[note], **common)
    notes = []
    high = _high_threshold(s, y, precision_target, min_support)
    low = _low_threshold(s, y, npv_target, min_support)
    method = "dev-search"
    if high is None:
        notes.append(f"precision {precision_target} not reached on dev: theta_high = paper default {default_high}")
        high = default_high
        method = "dev-search+default"
    if low is None:
        notes.append(f"NPV {npv_target} not reached on dev: theta_low = paper default {default_low}")
        low = default_low
        method = "dev-search+default"
    if low > high:
        notes.append(f"bands overlap (theta_low {low:.4f} > theta_high {high:.4f}): theta_low set to theta_high, no Ambiguous band")
        low = high
    return Thresholds(float(high), float(low), method, notes=notes, **common)


def calibration_report(logits, labels, calib: Calibration) -> dict[str, float]:
    raw = 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    return {
        "ece_before": expected_calibration_error(raw, labels),
        "ece_after": expected_calibration_error(calib.apply(logits), labels),
    }


def write_plots(out_dir, probs, labels, thresholds: Thresholds, raw_probs=None) -> list[str]:
    """Reliability diagram, score histograms per label, precision/NPV against threshold (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = np.asarray(probs, dtype=np.float64)
    y = (np.asarray(labels, dtype=np.float64) >= 0.5).astype(int)
    files = []

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    bins = np.linspace(0, 1, 11)
    for name, vals in (("calibrated", s), ("raw", raw_probs)):
        if vals is None:
            continue
        vals = np.asarray(vals)
        idx = np.minimum((vals * 10).astype(int), 9)
        xs, ys = [], []
        for b in range(10):
            m = idx == b
            if m.any():
                xs.append(vals[m].mean())
                ys.append(y[m].mean())
        ax.plot(xs, ys, marker="o", label=name)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set(xlabel="predicted probability", ylabel="fraction relevant", title="Reliability (dev)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "reliability.png", dpi=100)
    plt.close(fig)
    files.append("reliability.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.hist(s[y == 1], bins=bins, alpha=0.6, label=f"relevant ({int(y.sum())})")
    ax.hist(s[y == 0], bins=bins, alpha=0.6, label=f"not relevant ({int((1 - y).sum())})")
    for t, name in ((thresholds.theta_high, "theta_high"), (thresholds.theta_low, "theta_low")):
        ax.axvline(t, ls="--", color="k", lw=0.8)
    ax.set(xlabel="calibrated score", ylabel="pairs", title="Dev scores by label")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "score_histogram.png", dpi=100)
    plt.close(fig)
    files.append("score_histogram.png")

    ts = np.linspace(0.01, 0.99, 99)
    prec, npv = [], []
    for t in ts:
        p = s >= t
        prec.append(y[p].mean() if p.any() else np.nan)
        npv.append((1 - y[~p]).mean() if (~p).any() else np.nan)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(ts, prec, label="precision (score >= t)")
    ax.plot(ts, npv, label="NPV (score < t)")
    ax.axhline(thresholds.precision_target, color="grey", lw=0.6)
    ax.axvline(thresholds.theta_high, ls="--", color="C0", lw=0.8)
    ax.axvline(thresholds.theta_low, ls="--", color="C1", lw=0.8)
    ax.set(xlabel="threshold t", ylim=(0, 1.02), title="Precision / NPV on dev")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "thresholds.png", dpi=100)
    plt.close(fig)
    files.append("thresholds.png")
    return files
