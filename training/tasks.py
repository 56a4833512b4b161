"""The training side of each task (the serving side is :mod:`inference.tasks`): its config class,
how its decision is fitted on the dev scores, and which dev metrics go into the manifest.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from inference.decisions import SentenceSelection, Threshold, Thresholds
from inference.metrics import evaluate_scores, extraction_metrics

from . import fitting
from .config import AnswerClassifierConfig, EvaluatorConfig, ExtractorConfig, TrainConfig


def evaluator_decision(cfg: EvaluatorConfig, probs: np.ndarray, labels: np.ndarray) -> Thresholds:
    if cfg.theta_high is not None and cfg.theta_low is not None:
        return Thresholds(cfg.theta_high, cfg.theta_low, "fixed", cfg.precision_target, cfg.npv_target,
                          len(labels), int((labels >= 0.5).sum()))
    th = fitting.search_thresholds(probs, labels, cfg.precision_target, cfg.npv_target, cfg.min_dev_pairs)
    if cfg.theta_high is not None or cfg.theta_low is not None:
        hi = cfg.theta_high if cfg.theta_high is not None else th.theta_high
        lo = cfg.theta_low if cfg.theta_low is not None else min(th.theta_low, hi)
        th = Thresholds(hi, lo, th.method + "+fixed", th.precision_target, th.npv_target, th.dev_pairs,
                        th.dev_positives, th.notes)
    return th


def answer_decision(cfg: AnswerClassifierConfig, probs: np.ndarray, labels: np.ndarray) -> Threshold:
    if cfg.threshold is not None:
        return Threshold(cfg.threshold, "fixed", "fixed", None, len(labels), int((labels >= 0.5).sum()))
    return fitting.search_threshold(probs, labels, cfg.threshold_rule, cfg.threshold_target, cfg.min_dev_pairs)


def extractor_decision(cfg: ExtractorConfig, probs: np.ndarray, labels: np.ndarray) -> SentenceSelection:
    if cfg.min_score is not None:
        return SentenceSelection(cfg.top_k, cfg.min_score, "fixed", None, len(labels), int((labels >= 0.5).sum()))
    return fitting.search_min_score(probs, labels, cfg.top_k, cfg.min_score_recall_target)


def decision_point(decision) -> tuple[float, float | None]:
    """The thresholds at which a task's pair metrics are read (and plotted)."""
    if isinstance(decision, Thresholds):
        return decision.theta_high, decision.theta_low
    if isinstance(decision, Threshold):
        return decision.threshold, None
    return (decision.min_score if decision.min_score is not None else 0.5), None


def plot_thresholds(decision) -> dict[str, float | None]:
    if isinstance(decision, Thresholds):
        return {"theta_high": decision.theta_high, "theta_low": decision.theta_low}
    if isinstance(decision, Threshold):
        return {"threshold": decision.threshold}
    return {"min_score": decision.min_score}


def sentence_ranking_metrics(probs: Sequence[float], labels: Sequence[float], group_ids: Sequence[str],
                             sentence_index: Sequence[int], k: int = 3) -> dict[str, Any]:
    """``p@1``, ``r@3`` and ``mrr`` of sentence pairs grouped by passage (groups with a gold sentence)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        groups[g].append(i)
    ranked, golds = [], []
    for idx in groups.values():
        gold = [(sentence_index[i], sentence_index[i] + 1) for i in idx if labels[i] >= 0.5]
        if not gold:
            continue
        order = sorted(idx, key=lambda i: (-probs[i], sentence_index[i]))
        ranked.append([(sentence_index[i], sentence_index[i] + 1) for i in order])
        golds.append(gold)
    out = extraction_metrics(ranked, golds, k)
    return {"p@1": out["p@1"], f"r@{k}": out[f"r@{k}"], "mrr": out["mrr"], "passages": out["n"]}


def dev_metrics(cfg: TrainConfig, decision, probs: np.ndarray, labels: np.ndarray, ds) -> dict[str, Any]:
    """The dev metrics of the manifest, on calibrated scores at the task's decision point."""
    hi, lo = decision_point(decision)
    pair_tasks = isinstance(decision, Thresholds)
    m = evaluate_scores(probs, labels, hi, lo, query_ids=ds.group_ids, actions=pair_tasks)
    if isinstance(decision, SentenceSelection):
        m.update(sentence_ranking_metrics(probs, labels, ds.group_ids, ds.sentence_index, decision.top_k))
    return m


@dataclass(frozen=True)
class TrainingTask:
    config: type[TrainConfig]
    fit_decision: Callable[[Any, np.ndarray, np.ndarray], Any]


TRAINING_TASKS: dict[str, TrainingTask] = {
    "evaluator": TrainingTask(EvaluatorConfig, evaluator_decision),
    "answer_classifier": TrainingTask(AnswerClassifierConfig, answer_decision),
    "extractor": TrainingTask(ExtractorConfig, extractor_decision),
}
