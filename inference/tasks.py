"""The task registry: the three models this package trains and serves, each a small spec.

=====================  ==============================  =========================================
task                   serves                          decision (manifest ``thresholds``)
=====================  ==============================  =========================================
``evaluator``          ``Evaluator.score`` / ``grade``  two thresholds: Correct/Ambiguous/Incorrect
``answer_classifier``  ``AnswerClassifier.has_answer``  one threshold: holds the answer or not
``extractor``          ``Extractor.extract``            top-k sentences above a minimum score
=====================  ==============================  =========================================

A spec names the manifest file of its exports, the ``data_prep build`` folder its data comes from,
what label 1 means, its default loss, its decision rule, the metrics it reports and its model card
text. Training validates configs against these lists; :func:`inference.load` dispatches on the
manifest's ``task`` to the loader the task's serving module registers with :func:`register_loader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .decisions import SentenceSelection, Threshold, Thresholds

#: metrics computed on labelled pairs (every task's dev pairs)
PAIR_METRICS = ("accuracy", "precision", "recall", "f1", "auc", "ece", "mrr@10", "ndcg@10", "p@1")
#: metrics of a key-sentence extractor over passages with gold sentences
SENTENCE_METRICS = ("p@1", "r@3", "mrr")
#: dev metrics where higher is better: the ones a best checkpoint can be chosen by
RANKED_METRICS = ("auc", "f1", "accuracy", "mrr@10", "ndcg@10", "p@1")


@dataclass
class TaskSpec:
    name: str
    title: str
    manifest: str
    build_dir: str  # the folder of `python -m data_prep build` output that holds this task's pairs
    positive: str  # what label 1 means
    default_loss: str
    decision: type
    metrics: tuple[str, ...]
    card: str
    usage: str
    tags: tuple[str, ...]
    schema_versions: tuple[int, ...] = (1,)
    loader: Callable[..., Any] | None = field(default=None, repr=False)


TASKS: dict[str, TaskSpec] = {
    "evaluator": TaskSpec(
        name="evaluator",
        title="CRAG retrieval evaluator",
        manifest="evaluator.json",
        build_dir="evaluator",
        positive="the passage is relevant to the query",
        default_loss="bce",
        decision=Thresholds,
        metrics=PAIR_METRICS,
        card=("Scores a (query, passage) pair with a calibrated probability in [0, 1] that the passage is relevant, "
              "and routes it to **Correct**, **Ambiguous** or **Incorrect** as in Corrective RAG."),
        usage=('model.grade("who got the first nobel prize in physics", '
               '["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen ..."])'),
        tags=("crag", "retrieval-evaluator", "cross-encoder", "reranker"),
    ),
    "answer_classifier": TaskSpec(
        name="answer_classifier",
        title="answer-existence classifier",
        manifest="answer_classifier.json",
        build_dir="answer",
        positive="the passage holds the direct answer to the query",
        default_loss="bce",
        decision=Threshold,
        metrics=PAIR_METRICS,
        card=("Tells whether a passage holds the direct answer to a question (a calibrated probability in [0, 1] and a "
              "decision at the threshold tuned on dev): it removes on-topic passages that cannot answer."),
        usage=('model.has_answer("who got the first nobel prize in physics", '
               '["The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen ..."])'),
        tags=("crag", "answer-existence", "cross-encoder"),
    ),
    "extractor": TaskSpec(
        name="extractor",
        title="key-sentence extractor",
        manifest="extractor.json",
        build_dir="extractor",
        positive="the sentence holds (or states) the answer to the query",
        default_loss="bce",
        decision=SentenceSelection,
        metrics=PAIR_METRICS + ("r@3", "mrr"),
        card=("Scores each sentence of a passage against a question and keeps the 1-3 that matter, in passage order with "
              "their character offsets: CRAG's knowledge refinement without an LLM."),
        usage=('model.extract("who got the first nobel prize in physics", '
               '"The Nobel Prize in Physics is awarded by the Royal Swedish Academy of Sciences. The first one was '
               'awarded in 1901 to Wilhelm Conrad Röntgen.")'),
        tags=("crag", "key-sentence-extraction", "cross-encoder"),
    ),
}


def task_spec(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; this version knows: {', '.join(TASKS)}")
    return TASKS[name]


def register_loader(name: str):
    """Decorator: ``loader(export, options) -> model`` serves exports of task ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        task_spec(name).loader = fn
        return fn

    return deco


def load_all_tasks() -> None:
    """Import the serving modules, which register their loaders."""
    from . import answer, evaluator, extractor  # noqa: F401
