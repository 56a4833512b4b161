"""The decision rules of the three tasks, as stored in a manifest's ``thresholds`` and applied when
serving. Choosing the values on a dev split is training's job (:mod:`training.fitting`).

* :class:`Thresholds` - the evaluator's two thresholds: a chunk is **Correct** when its calibrated
  score reaches ``theta_high``, **Ambiguous** when it reaches ``theta_low``, else **Incorrect``;
  a query is Correct when any chunk is, else Ambiguous when any chunk is, else Incorrect.
* :class:`Threshold` - the answer-existence classifier's one threshold: a passage holds the
  answer when its calibrated probability reaches ``threshold``.
* :class:`SentenceSelection` - the extractor's rule: keep a passage's ``top_k`` sentences by
  score, among those scoring at least ``min_score`` (``None``: no minimum), in passage order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

ACTIONS = ("Correct", "Ambiguous", "Incorrect")


def check_unit(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")


def check_thresholds(theta_high: float, theta_low: float | None) -> None:
    """``theta_low`` may be ``None`` (two-tier mode: one threshold, no Ambiguous)."""
    check_unit("theta_high", theta_high)
    if theta_low is not None:
        check_unit("theta_low", theta_low)
        if theta_low > theta_high:
            raise ValueError(f"theta_low ({theta_low}) must not exceed theta_high ({theta_high})")


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


@dataclass
class Thresholds:
    """The evaluator's decision: two thresholds and how they were chosen."""

    theta_high: float
    theta_low: float
    method: str = "fixed"
    precision_target: float = 0.9
    npv_target: float = 0.9
    dev_pairs: int = 0
    dev_positives: int = 0
    notes: list[str] = field(default_factory=list)

    rule = "two-thresholds"

    def __post_init__(self) -> None:
        check_thresholds(self.theta_high, self.theta_low)
        self.theta_high, self.theta_low = float(self.theta_high), float(self.theta_low)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Threshold:
    """The answer classifier's decision: one threshold and how it was chosen (``rule``: ``f1``
    maximises F1 on dev; ``precision`` / ``recall`` reach ``target``; ``fixed`` was given)."""

    threshold: float
    method: str = "fixed"
    rule: str = "fixed"
    target: float | None = None
    dev_pairs: int = 0
    dev_positives: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_unit("threshold", self.threshold)
        self.threshold = float(self.threshold)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SentenceSelection:
    """The extractor's decision: at most ``top_k`` sentences, each scoring at least ``min_score``
    (chosen on dev as the highest score that keeps ``recall_target`` of the key sentences)."""

    top_k: int = 3
    min_score: float | None = None
    method: str = "fixed"
    recall_target: float | None = None
    dev_sentences: int = 0
    dev_positives: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if self.min_score is not None:
            check_unit("min_score", self.min_score)
            self.min_score = float(self.min_score)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
