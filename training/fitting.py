"""Fitting on the dev split: the score calibration and each task's decision rule.

Calibration (:class:`inference.calibration.Calibration`) maps a logit ``z`` to a probability;
``platt`` and ``temperature`` are fitted here by log loss.

Decisions (:mod:`inference.decisions`):

* evaluator (:func:`search_thresholds`): ``theta_high`` is the lowest threshold whose precision of
  ``score >= t`` reaches the target over at least ``min_support`` pairs; ``theta_low`` the highest
  whose negative predictive value of ``score < t`` reaches the target. With too small a dev split,
  or a target that cannot be met, the paper's defaults (0.79 / 0.50) are used and the reason is
  recorded.
* answer classifier (:func:`search_threshold`): the threshold maximising F1 (``rule="f1"``), or the
  lowest reaching a precision target, or the highest keeping a recall target.
* extractor (:func:`search_min_score`): the highest ``min_score`` that keeps ``recall_target`` of
  the dev key sentences.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np

from inference.calibration import Calibration, sigmoid
from inference.decisions import SentenceSelection, Threshold, Thresholds
from inference.metrics import binary_at, expected_calibration_error

logger = logging.getLogger(__name__)

PAPER_THETA_HIGH = 0.79
PAPER_THETA_LOW = 0.50


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


def fit_feature_weights(logits: Sequence[float], features: dict[str, tuple[Sequence[float], int]],
                        labels: Sequence[float], sample_weight: Sequence[float] | None = None) -> tuple[dict[str, float], dict]:
    """Weights ``w_f`` of extra terms in ``logit + sum_f w_f * x_f``: the ratios ``c_f / a`` of the
    logistic regression ``sigmoid(a * logit + sum_f c_f * x_f + b)`` fitted by log loss on dev, with
    ``a > 0`` and each ``c_f`` of the sign given with the feature (``+1``: ``c_f >= 0``; ``-1``:
    ``c_f <= 0``). ``features`` maps a name to ``(values, sign)``. Returns ``({name: w_f}, info)``;
    ``info`` has the coefficients and the dev log loss without and with the terms. ``sample_weight``
    weighs the pairs (a train_mix: each source by its share of the mix)."""
    from scipy.optimize import minimize

    z = np.asarray(logits, dtype=np.float64)
    names = list(features)
    x = np.stack([np.asarray(features[n][0], dtype=np.float64) for n in names]) if names else np.zeros((0, len(z)))
    y = np.asarray(labels, dtype=np.float64)
    if len(np.unique((y >= 0.5).astype(int))) < 2:
        raise ValueError("fitting feature weights needs both positive and negative dev pairs")
    sw = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    sw = sw / sw.sum()

    def nll(p):
        t = p[0] * z + p[1 : 1 + len(names)] @ x + p[-1]
        return float(np.sum(sw * (np.logaddexp(0.0, t) - y * t)))

    base = minimize(lambda p: nll(np.r_[p[0], np.zeros(len(names)), p[1]]), x0=[1.0, 0.0], method="L-BFGS-B")
    bounds = [(1e-6, None)] + [(0.0, None) if features[n][1] > 0 else (None, 0.0) for n in names] + [(None, None)]
    res = minimize(nll, x0=np.r_[base.x[0] if base.x[0] > 0 else 1.0, np.zeros(len(names)), base.x[1]],
                   method="L-BFGS-B", bounds=bounds)
    a, b = float(res.x[0]), float(res.x[-1])
    coef = {n: float(c) for n, c in zip(names, res.x[1:-1])}
    info = {"a": a, **{f"c_{n}": c for n, c in coef.items()}, "b": b,
            "dev_log_loss_without": float(base.fun), "dev_log_loss_with": float(res.fun)}
    return {n: c / a for n, c in coef.items()}, info


def fit_lexical_weight(logits: Sequence[float], lexical: Sequence[float], labels: Sequence[float],
                       sample_weight: Sequence[float] | None = None) -> tuple[float, dict]:
    """The weight ``w`` of the lexical term in ``logit + w * lexical`` (:func:`fit_feature_weights`
    with ``c >= 0``: a lexical match never counts against a passage). Returns ``(w, info)``; ``info``
    has the fitted ``a``, ``c``, ``b`` and the dev log loss without and with the term."""
    weights, fit = fit_feature_weights(logits, {"lexical": (lexical, 1)}, labels, sample_weight)
    info = {"a": fit["a"], "c": fit["c_lexical"], "b": fit["b"], "dev_log_loss_without": fit["dev_log_loss_without"],
            "dev_log_loss_with": fit["dev_log_loss_with"]}
    logger.info("lexical weight %.4f (logistic a %.4f, c %.4f); dev log loss %.4f -> %.4f", weights["lexical"],
                info["a"], info["c"], info["dev_log_loss_without"], info["dev_log_loss_with"])
    return weights["lexical"], info


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


def _small_dev(y: np.ndarray, min_dev_pairs: int, min_support: int) -> str | None:
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if len(y) < min_dev_pairs or n_pos < min_support or n_neg < min_support:
        return (f"dev split too small to tune ({len(y)} pairs, {n_pos} positive; need {min_dev_pairs} pairs and "
                f"{min_support} of each class)")
    return None


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
    common = dict(precision_target=precision_target, npv_target=npv_target, dev_pairs=len(y), dev_positives=int(y.sum()))
    small = _small_dev(y, min_dev_pairs, min_support)
    if small:
        return Thresholds(default_high, default_low, "paper-default", notes=[small], **common)
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
    raw = sigmoid(logits)
    return {
        "ece_before": expected_calibration_error(raw, labels),
        "ece_after": expected_calibration_error(calib.apply(logits), labels),
    }


THRESHOLD_RULES = ("f1", "precision", "recall")


def search_threshold(probs: Sequence[float], labels: Sequence[float], rule: str = "f1", target: float | None = None,
                     min_dev_pairs: int = 50, min_support: int = 5, default: float = 0.5) -> Threshold:
    """One decision threshold on calibrated probabilities (the answer classifier's).

    ``f1``: the threshold with the highest F1 on dev (ties: the higher threshold); ``precision``:
    the lowest threshold whose precision reaches ``target`` over at least ``min_support`` pairs;
    ``recall``: the highest threshold whose recall stays at or above ``target``. A dev split too
    small to tune, or a target never reached, gives ``default`` (0.5: the calibrated midpoint) with
    the reason in ``notes``."""
    if rule not in THRESHOLD_RULES:
        raise ValueError(f"unknown threshold rule {rule!r} (one of {', '.join(THRESHOLD_RULES)})")
    if rule != "f1" and (target is None or not 0 < target <= 1):
        raise ValueError(f"rule {rule!r} needs a target in (0, 1], got {target!r}")
    s = np.asarray(probs, dtype=np.float64)
    y = (np.asarray(labels, dtype=np.float64) >= 0.5).astype(np.int64)
    common = dict(rule=rule, target=target if rule != "f1" else None, dev_pairs=len(y), dev_positives=int(y.sum()))
    small = _small_dev(y, min_dev_pairs, min_support)
    if small:
        return Threshold(default, "default", notes=[small], **common)
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    n = np.arange(1, len(s) + 1)
    last = np.r_[s_sorted[1:] != s_sorted[:-1], True]  # threshold = each distinct score, descending
    tp, n, cand = tp[last], n[last], s_sorted[last]
    precision, recall = tp / n, tp / max(int(y.sum()), 1)
    if rule == "f1":
        f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
        i = int(np.flatnonzero(f1 == f1.max())[0])  # the first of the best: the highest threshold
        return Threshold(float(cand[i]), "dev-search", notes=[f"dev F1 {f1[i]:.4f} at precision {precision[i]:.4f}, "
                                                               f"recall {recall[i]:.4f}"], **common)
    ok = np.flatnonzero((precision >= target) & (n >= min_support)) if rule == "precision" else np.flatnonzero(recall >= target)
    if not len(ok):
        return Threshold(default, "default", notes=[f"{rule} {target} not reached on dev: threshold {default}"], **common)
    i = int(ok[-1]) if rule == "precision" else int(ok[0])
    return Threshold(float(cand[i]), "dev-search", notes=[f"dev precision {precision[i]:.4f}, recall {recall[i]:.4f}"],
                     **common)


def search_min_score(probs: Sequence[float], labels: Sequence[float], top_k: int = 3, recall_target: float | None = 0.9,
                     min_support: int = 5) -> SentenceSelection:
    """The extractor's rule: ``min_score`` is the highest score that keeps at least
    ``recall_target`` of the dev key sentences (``None``: no minimum); ``top_k`` is given."""
    s = np.asarray(probs, dtype=np.float64)
    y = (np.asarray(labels, dtype=np.float64) >= 0.5).astype(np.int64)
    common = dict(top_k=top_k, recall_target=recall_target, dev_sentences=len(y), dev_positives=int(y.sum()))
    if recall_target is None:
        return SentenceSelection(min_score=None, method="none", **common)
    pos = np.sort(s[y == 1])[::-1]
    if len(pos) < min_support:
        return SentenceSelection(min_score=None, method="default",
                                 notes=[f"{len(pos)} dev key sentences (need {min_support}): no minimum score"], **common)
    keep = int(np.ceil(recall_target * len(pos)))
    t = float(pos[keep - 1])
    kept = binary_at(s, y, t)
    return SentenceSelection(min_score=t, method="dev-search",
                             notes=[f"keeps {kept['recall']:.4f} of the dev key sentences at precision "
                                    f"{kept['precision']:.4f}"], **common)
