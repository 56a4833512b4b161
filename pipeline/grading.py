"""Grading: the exported evaluator orders and grades the fused recall list, as CRAG's evaluator does.

* Each of the first ``grade_k`` hits (default 5) gets the evaluator's calibrated score and CRAG's
  action by the export's two thresholds (overridable; two-tier mode drops Ambiguous); the query's
  action follows the paper: any Correct -> Correct; else any Ambiguous -> Ambiguous; else Incorrect.
* With an answer-existence export, Correct and Ambiguous chunks it judges not to hold the answer
  leave the evidence (``dropped_because`` says so); the query's action is the evaluator's, but a
  query left with no chunk at all is treated as Incorrect (nothing can answer it).
* An optional generation-friendliness score re-ranks the kept chunks: a length inside a band of
  words, an answer-bearing sentence (the answer classifier's score when loaded), and the share of
  the question's words in the chunk, mixed by the weights of :class:`Friendliness`; the final order
  is ``(1 - weight) * evaluator score + weight * friendliness``. Off by default (weight 0).
* A bi-encoder evaluator embedded by the same weights as the index's dense route
  (:class:`IndexVectors`) grades with the chunk vectors the index already holds, and with the query
  vector the dense route just computed: grading then costs dot products, not a model pass. The
  scores are the ones the evaluator would compute itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np


from .types import GradedChunk, Hit

_WORD = re.compile(r"\w+")
_STOP = frozenset("a an and are as at be by did do does for from how in is it of on or that the this to was what "
                  "when where which who whom why will with".split())


@dataclass
class Friendliness:
    """How generation-friendly a chunk is, in [0, 1]: weights of its three parts (normalised)."""

    min_words: int = 12  # a chunk shorter than this many words loses length score (n / min_words)
    max_words: int = 120  # a chunk longer than this many words loses length score (max_words / n)
    length_weight: float = 0.3  # weight of the length part
    answer_weight: float = 0.4  # weight of the answer classifier's score (when one is loaded)
    overlap_weight: float = 0.3  # weight of the share of the question's content words in the chunk

    def score(self, question: str, text: str, answer_score: float | None) -> float:
        n = len(text.split())
        length = 1.0 if self.min_words <= n <= self.max_words else (
            n / self.min_words if n < self.min_words else self.max_words / n)
        q = {w for w in _WORD.findall(question.lower()) if w not in _STOP}
        overlap = len(q & set(_WORD.findall(text.lower()))) / len(q) if q else 0.0
        parts = [(self.length_weight, length), (self.overlap_weight, overlap)]
        if answer_score is not None:
            parts.append((self.answer_weight, answer_score))
        total = sum(w for w, _ in parts)
        return sum(w * v for w, v in parts) / total if total else 0.0


@dataclass
class GradingConfig:
    grade_k: int = 5  # the evaluator grades this many of the fused hits, best first
    theta_high: float | None = None  # upper threshold (Correct at or above); None: the export's
    theta_low: float | None = None  # lower threshold (Incorrect below); None: the export's
    two_tier: bool = False  # one threshold (theta_high): Correct or Incorrect, no Ambiguous
    answer_filter: bool = True  # drop chunks the answer classifier says cannot answer (when one is loaded)
    answer_threshold: float | None = None  # the answer classifier's threshold; None: the export's
    friendliness_weight: float = 0.0  # in [0, 1]: share of the generation-friendliness score in the kept chunks' order
    friendliness: Friendliness = field(default_factory=Friendliness)  # the friendliness score's parts
    # grade the index's chunks in the evaluator's corpus mode (inference.corpus_norm), the index as the
    # corpus, when the evaluator has one and the index holds its own vectors (IndexVectors). Off by
    # default: on the bundled NQ-open index it answers less and abstains more than pair by pair
    # (docs/benchmarks.md, "The CRAG pipeline")
    corpus_mode: bool = False

    def __post_init__(self) -> None:
        if self.grade_k < 1:
            raise ValueError(f"grade_k must be >= 1, got {self.grade_k}")
        if not 0 <= self.friendliness_weight <= 1:
            raise ValueError(f"friendliness_weight must be in [0, 1], got {self.friendliness_weight}")


@dataclass
class Grading:
    action: str  # the query's action (after the answer filter: Incorrect when nothing is left)
    evaluator_action: str  # the paper's rule over the evaluator's actions alone
    chunks: list[GradedChunk]  # best first
    theta_high: float
    theta_low: float | None
    passages_truncated: int = 0

    @property
    def kept(self) -> list[GradedChunk]:
        return [c for c in self.chunks if c.kept]

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "evaluator_action": self.evaluator_action, "theta_high": self.theta_high,
                "theta_low": self.theta_low, "chunks": [c.to_dict() for c in self.chunks]}


def grade_hits(question: str, hits: Sequence[Hit], evaluator, cfg: GradingConfig | None = None,
               answer_classifier=None, origin: str = "index") -> Grading:
    """Grade the first ``cfg.grade_k`` of ``hits`` (see the module docstring)."""
    cfg = cfg or GradingConfig()
    hits = list(hits)[: cfg.grade_k]
    g = evaluator.grade(question, [h.chunk.to_passage() for h in hits], cfg.theta_high, cfg.theta_low, cfg.two_tier)
    graded = [GradedChunk(h.chunk, c.score, c.action, origin=origin, recall=h) for h, c in zip(hits, g.chunks)]
    for c in graded:
        if c.action == "Incorrect":
            c.kept = False
            c.dropped_because = f"Incorrect (score {c.score:.3f} below theta_low)" if g.theta_low is not None else \
                f"Incorrect (score {c.score:.3f} below theta_high)"
    live = [c for c in graded if c.kept]
    if answer_classifier is not None and live:
        checks = answer_classifier.has_answer(question, [c.chunk.to_passage() for c in live], cfg.answer_threshold)
        t = answer_classifier.threshold if cfg.answer_threshold is None else cfg.answer_threshold
        for c, a in zip(live, checks):
            c.answer_score = a.score
            if cfg.answer_filter and not a.has_answer:
                c.kept = False
                c.dropped_because = f"no answer in it (answer classifier {a.score:.3f} < {t:.3f})"
    if cfg.friendliness_weight > 0:
        w = cfg.friendliness_weight

        def key(c: GradedChunk) -> float:
            return (1 - w) * c.score + w * cfg.friendliness.score(question, c.chunk.text, c.answer_score)
    else:
        def key(c: GradedChunk) -> float:
            return c.score
    graded.sort(key=lambda c: (not c.kept, -key(c)))
    action = g.action if any(c.kept for c in graded) else "Incorrect"
    return Grading(action, g.action, graded, g.theta_high, g.theta_low, g.passages_truncated)


class IndexReference:
    """The index as the corpus of the evaluator's corpus mode (:class:`inference.corpus_norm.Reference`).

    ``r(q)``, the mean of the question's ``k`` largest cosines to the index's chunks, is what the
    dense route already found when it searched at least ``k`` deep with the very vector the evaluator
    uses (the index's, handed over by :class:`IndexVectors`): then it costs nothing. Otherwise it is
    one search of the index's dense index (exact inner product) with the evaluator's vector.
    ``from_recall`` and ``searched`` count the two.
    """

    def __init__(self, index):
        self.index = index
        self.from_recall = 0
        self.searched = 0

    def top_k_mean(self, queries: Sequence[str], vectors: np.ndarray, k: int) -> np.ndarray:
        out = np.empty(len(queries), dtype=np.float64)
        deep = min(int(k), len(self.index))
        for i, (q, v) in enumerate(zip(queries, vectors)):
            top, known = self.index.nearest_scores(q), self.index.known_query_vector(q)
            if top is not None and len(top) >= deep and known is not None and np.array_equal(known[0], v):
                out[i] = float(np.mean(top[:deep], dtype=np.float64))
                self.from_recall += 1
            else:
                rows, scores = self.index.dense_search_vectors(v[None, :], deep)
                out[i] = float(np.mean(scores[0][rows[0] >= 0], dtype=np.float64))
                self.searched += 1
        return out


class IndexVectors:
    """Hands the index's stored vectors to a bi-encoder evaluator, where they are the evaluator's own.

    That holds when the evaluator's engine takes vectors (:meth:`~inference.engine.BiEncoderEngine.remember`),
    the index has a dense part embedded as ``title\\ntext`` at the evaluator's ``max_length``, and the
    index's encoder computes the same function as the evaluator (equal
    :func:`~inference.modeling.weights_fingerprint`). Each chunk is then handed over only if the
    text the evaluator scores (its ``passage_format``) is the text the index embedded, and the
    query only if it fits the evaluator's query length. :attr:`why_not` says why it does not apply.
    """

    def __init__(self, index, evaluator):
        self.index, self.evaluator = index, evaluator
        self.why_not = self._check()
        self.handed = 0
        self.strips_handed = 0

    @property
    def active(self) -> bool:
        return self.why_not is None

    @property
    def index_strip_words(self) -> int | None:
        """The strip window of the index's strip vectors, when they can be handed over (else None)."""
        return getattr(self.index, "strip_words", None) if self.active else None

    def _check(self) -> str | None:
        engine = getattr(self.evaluator, "engine", None)
        if not hasattr(engine, "remember"):
            return "the evaluator is not a bi-encoder"
        if not getattr(self.index, "has_dense", False):
            return "the index has no dense part"
        from .index import DENSE_TEXT

        info = self.index.info.get("dense") or {}
        if info.get("text") != DENSE_TEXT or not info.get("normalized"):
            return "the index's vectors are not unit vectors of title and text"
        if info.get("max_length") != self.evaluator.spec.max_length:
            return (f"the index embedded {info.get('max_length')} tokens per chunk, the evaluator reads "
                    f"{self.evaluator.spec.max_length}")
        from .index import encoder_fingerprint

        if encoder_fingerprint(self.index.encoder) != engine.fingerprint:
            return "the index was embedded by other weights than the evaluator's"
        return None

    def hand_over(self, question: str, hits: Sequence[Hit]) -> int:
        """Give the evaluator the vectors of ``hits`` (and of ``question``); how many chunks."""
        if not self.active:
            return 0
        engine = self.evaluator.engine
        mine = [(h.row, p) for h in hits if h.row is not None
                for p in [h.chunk.to_passage()] if self.evaluator.passage_text(p) == p.full_text("\n")]
        if mine:
            engine.remember([p.full_text("\n") for _, p in mine], self.index.chunk_vectors([r for r, _ in mine]))
        q = self.index.known_query_vector(question)
        if q is not None and len(engine.tokenizer(question, add_special_tokens=False)["input_ids"]) \
                <= self.evaluator.spec.max_query_length:
            engine.remember([question], q, kind="query")
        self.handed += len(mine)
        return len(mine)

    def hand_over_strips(self, chunks: Sequence[GradedChunk]) -> int:
        """Give the evaluator the stored vectors of the refinement strips of ``chunks`` (index
        chunks only, and only strips shown to it as the index embedded them); how many."""
        if not self.active or self.index.strip_words is None:
            return 0
        from data_prep.records import Passage

        texts, vecs = [], []
        for c in chunks:
            row = c.recall.row if c.recall is not None else None
            if row is None or c.origin != "index":
                continue
            spans, v = self.index.strip_vectors(row)
            for (a, b), vec in zip(spans, v):
                p = Passage(c.chunk.id, c.chunk.text[a:b], c.chunk.title)
                if p.text.strip() and self.evaluator.passage_text(p) == p.full_text("\n"):
                    texts.append(p.full_text("\n"))
                    vecs.append(vec)
        if texts:
            self.evaluator.engine.remember(texts, np.stack(vecs))
        self.strips_handed += len(texts)
        return len(texts)
