"""Plots of a model's dev scores (PNG): reliability diagram, score histograms by label, precision and
NPV against the threshold. Written into every export's ``plots/`` and by
``python -m inference evaluate --plots DIR``.

matplotlib is imported only when a plot is drawn; it comes with the ``train`` extra
(``pip install crag-evaluators[train]``), not with the serving install.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib (pip install matplotlib, or crag-evaluators[train])") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(out_dir, probs, labels, thresholds: dict[str, float | None], precision_target: float | None = None,
                raw_probs=None) -> list[str]:
    """Reliability diagram, score histograms per label, precision/NPV against threshold (PNG).

    ``thresholds``: name -> value of the decision thresholds to mark (``theta_high`` and
    ``theta_low``, or the answer classifier's ``threshold``)."""
    plt = _pyplot()

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
    for name, t in thresholds.items():
        if t is not None:
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
    if precision_target is not None:
        ax.axhline(precision_target, color="grey", lw=0.6)
    for i, (name, t) in enumerate(thresholds.items()):
        if t is not None:
            ax.axvline(t, ls="--", color=f"C{i}", lw=0.8, label=name)
    ax.set(xlabel="threshold t", ylim=(0, 1.02), title="Precision / NPV on dev")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "thresholds.png", dpi=100)
    plt.close(fig)
    files.append("thresholds.png")
    return files
