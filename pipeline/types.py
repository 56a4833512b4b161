"""The records that pass between the pipeline's stages (one place, so stages stay swappable).

=====================  ================================================================
record                 made by
=====================  ================================================================
:class:`Chunk`         chunking (:mod:`pipeline.chunking`), web search (:mod:`pipeline.web`)
:class:`Hit`           hybrid recall (:mod:`pipeline.recall`): a chunk with its fused score
:class:`GradedChunk`   grading (:mod:`pipeline.grading`): evaluator score and CRAG action
:class:`Evidence`      refinement (:mod:`pipeline.refine`) + credibility (:mod:`pipeline.credibility`)
:class:`Conflict`      conflict detection (:mod:`pipeline.conflicts`)
:class:`Answer`        generation (:mod:`pipeline.generate`)
=====================  ================================================================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from data_prep.records import Passage

#: what an honest pipeline says when its evidence does not hold the answer
ABSTAIN = "cannot be determined from the available sources"
ACTIONS = ("Correct", "Ambiguous", "Incorrect")


@dataclass
class Chunk:
    """A piece of a document small enough to retrieve and grade.

    ``id`` is unique in an index (``"{doc_id}#p{paragraph}c{n}"`` for indexed chunks); ``start`` and
    ``end`` are character offsets of ``text`` in its paragraph; ``source`` names where the document
    came from (a file name, a dataset, a web site) and is what credibility is looked up by;
    ``metadata`` carries the rest (``published``: an ISO date; ``url`` for web results; any fields
    of the input passage).
    """

    id: str
    doc_id: str
    text: str
    title: str = ""
    paragraph: int = 0
    start: int = 0
    end: int = 0
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_passage(self) -> Passage:
        """As a :class:`~data_prep.records.Passage` (what the index stores and the models score)."""
        # the chunk's own fields win over same-named keys of the input's metadata
        meta = {**self.metadata, "doc_id": self.doc_id, "paragraph": self.paragraph, "start": self.start,
                "end": self.end, "source": self.source}
        return Passage(self.id, self.text, self.title, meta)

    @classmethod
    def from_passage(cls, p: Passage) -> "Chunk":
        meta = dict(p.metadata)
        doc_id = str(meta.pop("doc_id", p.id))
        paragraph = int(meta.pop("paragraph", 0))
        start = int(meta.pop("start", 0))
        end = int(meta.pop("end", len(p.text)))
        source = str(meta.pop("source", ""))
        return cls(p.id, doc_id, p.text, p.title, paragraph, start, end, source, meta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Hit:
    """A chunk returned by hybrid recall: its fused score and its 1-based rank in each route that
    found it (``{"dense": 3, "bm25": 1}``)."""

    chunk: Chunk
    score: float
    routes: dict[str, int] = field(default_factory=dict)
    row: int | None = None  # the chunk's row in the index (None: not from an index, e.g. the web)


@dataclass
class GradedChunk:
    """A chunk after grading: the evaluator's calibrated score and CRAG action; the answer
    classifier's probability when one is loaded; whether it stays in the evidence and why not."""

    chunk: Chunk
    score: float
    action: str
    answer_score: float | None = None
    kept: bool = True
    dropped_because: str | None = None
    origin: str = "index"  # "index" or "web"
    recall: Hit | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"id": self.chunk.id, "title": self.chunk.title, "source": self.chunk.source, "text": self.chunk.text,
             "score": self.score, "action": self.action, "answer_score": self.answer_score, "kept": self.kept,
             "dropped_because": self.dropped_because, "origin": self.origin}
        if self.recall is not None:
            d["recall"] = {"score": self.recall.score, "routes": self.recall.routes}
        return d


@dataclass
class Evidence:
    """One kept sentence (or strip) of a chunk: its text, where it is in the chunk, its score, and
    its source with that source's credibility in [0.1, 0.95]."""

    text: str
    chunk_id: str
    source: str
    score: float
    credibility: float = 0.5
    start: int = 0
    end: int = 0
    title: str = ""
    origin: str = "index"
    published: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Conflict:
    """Evidence sentences that disagree: ``kind`` ``number`` (the same quantity with different
    values, e.g. ``5 kg`` against ``7 kg``) or ``value`` (the same attribute named with different
    values); ``evidence`` holds indices into the evidence list, ``values`` the disagreeing values in
    the same order, and ``note`` a sentence a reader or a generator can be shown."""

    kind: str
    attribute: str
    values: list[str]
    evidence: list[int]
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Answer:
    """The generator's answer: ``text`` (the direct answer first), the evidence it rests on
    (indices into the evidence list), and ``abstained`` when the evidence does not say."""

    text: str
    citations: list[int] = field(default_factory=list)
    abstained: bool = False
    generator: str = ""
    quotes: list[str] = field(default_factory=list)
    conflict_choice: str | None = None
    raw: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
