"""The answer-existence classifier that :func:`inference.load` returns for ``task: answer_classifier``.

"Does this passage hold the direct answer to the question?" An on-topic passage that cannot answer
scores low here even when the evaluator finds it relevant; CRAG pipelines use it to drop such
passages from the evidence. ``has_answer`` returns the calibrated probability and the decision at
the export's threshold (tuned on dev), per passage, in input order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from data_prep.records import Passage

from .decisions import Threshold, check_unit
from .scorer import PairScorer, scorer_loader
from .tasks import register_loader


@dataclass
class AnswerCheck:
    """One passage: its position in the input, calibrated probability and the decision."""

    index: int
    score: float
    has_answer: bool
    passage_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class AnswerClassifier(PairScorer):
    task = "answer_classifier"

    @property
    def decision(self) -> Threshold:
        return self.manifest.thresholds

    @property
    def threshold(self) -> float:
        return self.decision.threshold

    def __repr__(self) -> str:
        return (f"AnswerClassifier(path={self.path!r}, head={self.spec.head!r}, device={str(self.device)!r}, "
                f"threshold={self.threshold:.4f})")

    def has_answer(self, query: str, passages: Sequence[str | Passage], threshold: float | None = None) -> list[AnswerCheck]:
        """Whether each passage holds the direct answer to ``query`` (``threshold`` overrides the
        manifest's)."""
        t = self.threshold if threshold is None else threshold
        check_unit("threshold", t)
        if isinstance(passages, (str, Passage)):
            raise TypeError("passages must be a list of passages (got a single one)")
        passages = list(passages)
        if not passages:
            return []
        probs, _, _ = self.score_texts(*self.texts((query, p) for p in passages))
        return [AnswerCheck(i, float(s), bool(s >= t), p.id if isinstance(p, Passage) else None)
                for i, (s, p) in enumerate(zip(probs, passages))]


load_answer_classifier = register_loader("answer_classifier")(scorer_loader(AnswerClassifier))
