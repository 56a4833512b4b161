"""The retrieval evaluator that :func:`inference.load` returns for ``task: evaluator``.

``score`` (calibrated probabilities), ``score_raw`` (``sigmoid(z)``) and ``grade`` (CRAG's Correct /
Ambiguous / Incorrect per chunk and per query, by the manifest's two thresholds).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from data_prep.records import Passage

from .decisions import Thresholds, action_of, check_thresholds, query_action
from .scorer import PairScorer, scorer_loader
from .tasks import register_loader


@dataclass
class ChunkGrade:
    """One chunk of a graded query: its position in the input, calibrated score and action."""

    index: int
    score: float
    action: str
    passage_id: str | None = None


@dataclass
class Grade:
    """CRAG's decision for one query: per-chunk actions and the query-level action (any Correct ->
    Correct; else any Ambiguous -> Ambiguous; else Incorrect; no chunks -> Incorrect)."""

    query: str
    action: str
    chunks: list[ChunkGrade]
    theta_high: float
    theta_low: float | None  # None: two-tier mode (no Ambiguous)
    passages_truncated: int = 0

    @property
    def scores(self) -> list[float]:
        return [c.score for c in self.chunks]

    def ranked(self) -> list[ChunkGrade]:
        """Chunks by score, best first (ties keep input order)."""
        return sorted(self.chunks, key=lambda c: -c.score)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Evaluator(PairScorer):
    """A loaded retrieval evaluator: calibrated relevance probabilities and CRAG actions.

    ``pairs`` are ``(query, passage)`` tuples; a passage is a string or a
    :class:`~data_prep.records.Passage`.
    """

    task = "evaluator"

    @property
    def decision(self) -> Thresholds:
        """The thresholds in force: corpus mode's while a reference corpus is set, else the manifest's."""
        return self.manifest.corpus_norm.thresholds if self.corpus_mode else self.manifest.thresholds

    @property
    def theta_high(self) -> float:
        return self.decision.theta_high

    @property
    def theta_low(self) -> float:
        return self.decision.theta_low

    def __repr__(self) -> str:
        return (f"Evaluator(path={self.path!r}, head={self.spec.head!r}, device={str(self.device)!r}, "
                f"theta_high={self.theta_high:.4f}, theta_low={self.theta_low:.4f})")

    # -- CRAG decisions ------------------------------------------------------------------------
    def thresholds(self, theta_high: float | None = None, theta_low: float | None = None,
                   two_tier: bool = False) -> tuple[float, float | None]:
        """The thresholds in force: the manifest's unless overridden; ``theta_low`` is ``None`` in
        two-tier mode (one threshold, no Ambiguous)."""
        hi = self.theta_high if theta_high is None else float(theta_high)
        lo = None if two_tier else (self.theta_low if theta_low is None else float(theta_low))
        if lo is not None and theta_low is None and lo > hi:
            lo = hi  # theta_high lowered below the manifest's theta_low: no Ambiguous band
        check_thresholds(hi, lo)
        return hi, lo

    def actions(self, scores: Sequence[float], theta_high: float | None = None, theta_low: float | None = None,
                two_tier: bool = False) -> list[str]:
        hi, lo = self.thresholds(theta_high, theta_low, two_tier)
        return [action_of(float(s), hi, lo) for s in scores]

    def grade(self, query: str, chunks: Sequence[str | Passage], theta_high: float | None = None,
              theta_low: float | None = None, two_tier: bool = False) -> Grade:
        """Score ``chunks`` against ``query`` and route them as CRAG does."""
        hi, lo = self.thresholds(theta_high, theta_low, two_tier)
        if isinstance(chunks, (str, Passage)):
            raise TypeError("chunks must be a list of passages (got a single one)")
        chunks = list(chunks)
        if not chunks:
            return Grade(query, "Incorrect", [], hi, lo)
        probs, _, stats = self.score_texts(*self.texts((query, c) for c in chunks))
        graded = [ChunkGrade(i, float(s), action_of(float(s), hi, lo), c.id if isinstance(c, Passage) else None)
                  for i, (s, c) in enumerate(zip(probs, chunks))]
        return Grade(query, query_action([g.action for g in graded]), graded, hi, lo, stats.passages_truncated)


load_evaluator = register_loader("evaluator")(scorer_loader(Evaluator))
