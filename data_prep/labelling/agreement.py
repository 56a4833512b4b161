"""Agreement of LLM labels with gold labels: accuracy, Cohen's kappa and the confusion table.

Both sides are made binary before comparing: gold at ``label >= 0.5``; the LLM's relevance at a
mean grade of at least ``relevant_grade`` (default 2: "contains an answer", the usual cut of a 0-3
TREC scale), its answer and sentence labels at ``label >= 0.5``. For relevance the table of gold
against each grade is reported too, since that shows where a prompt is too lenient or too strict.

Cohen's kappa: ``(p_o - p_e) / (1 - p_e)`` with ``p_o`` the observed agreement and ``p_e`` the
agreement expected by chance from the two sides' marginals; 1 when ``p_e == 1`` and the sides agree
everywhere (both constant and equal), 0 when they are constant and differ.
"""

from __future__ import annotations

from typing import Any, Sequence


def cohen_kappa(a: Sequence[int], b: Sequence[int]) -> float | None:
    n = len(a)
    if n == 0 or n != len(b):
        return None
    cats = sorted(set(a) | set(b))
    po = sum(1 for x, y in zip(a, b) if x == y) / n
    pe = sum((sum(1 for x in a if x == c) / n) * (sum(1 for y in b if y == c) / n) for c in cats)
    if pe >= 1.0:
        return 1.0 if po == 1.0 else 0.0
    return (po - pe) / (1.0 - pe)


def agreement(gold: Sequence[float], llm: Sequence[int], grades: Sequence[float] | None = None) -> dict[str, Any]:
    """``gold``: labels in [0, 1]; ``llm``: the LLM's binary decisions; ``grades``: its mean grades
    (relevance) for the graded table."""
    g = [int(x >= 0.5) for x in gold]
    n = len(g)
    if n == 0:
        return {"n": 0}
    tp = sum(1 for x, y in zip(g, llm) if x and y)
    tn = sum(1 for x, y in zip(g, llm) if not x and not y)
    fp = sum(1 for x, y in zip(g, llm) if not x and y)
    fn = sum(1 for x, y in zip(g, llm) if x and not y)
    out: dict[str, Any] = {
        "n": n,
        "gold_positive": sum(g),
        "llm_positive": sum(llm),
        "accuracy": (tp + tn) / n,
        "cohen_kappa": cohen_kappa(g, list(llm)),
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "confusion": {"gold 1": {"llm 1": tp, "llm 0": fn}, "gold 0": {"llm 1": fp, "llm 0": tn}},
    }
    if grades is not None:
        table: dict[str, dict[str, int]] = {"gold 1": {}, "gold 0": {}}
        for x, gr in zip(g, grades):
            k = f"grade {gr:g}"
            row = table["gold 1" if x else "gold 0"]
            row[k] = row.get(k, 0) + 1
        out["by_grade"] = {r: dict(sorted(v.items())) for r, v in table.items()}
    return out
