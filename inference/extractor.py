"""The key-sentence extractor that :func:`inference.load` returns for ``task: extractor``.

``extract(query, passage)`` splits the passage into sentences with the splitter that built the
training data (:func:`data_prep.text.sentence_spans`, with the export's ``sentence_max_chars``),
scores every sentence against the query in one pass through the scoring engine, and returns the
``top_k`` best that score at least ``min_score``, **in passage order**, each with its text,
character offsets into the passage text, and calibrated score. ``extract_many`` does the same for
many (query, passage) pairs in one engine call (what CRAG's knowledge refinement needs).

A sentence is shown to the model as training saw it: with the passage's title through the
manifest's ``passage_format`` when the passage is a titled :class:`~data_prep.records.Passage`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from data_prep.records import Passage
from data_prep.text import Sentence, sentence_spans

from .decisions import SentenceSelection, check_unit
from .scorer import PairScorer, scorer_loader
from .tasks import register_loader

DEFAULT_SENTENCE_MAX_CHARS = 600


@dataclass
class KeySentence:
    """A kept sentence: its index among the passage's sentences, text, offsets and score."""

    index: int
    text: str
    start: int
    end: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Extractor(PairScorer):
    task = "extractor"

    @property
    def decision(self) -> SentenceSelection:
        return self.manifest.thresholds

    @property
    def sentence_max_chars(self) -> int:
        return self.manifest.sentence_max_chars or DEFAULT_SENTENCE_MAX_CHARS

    def __repr__(self) -> str:
        d = self.decision
        return (f"Extractor(path={self.path!r}, head={self.spec.head!r}, device={str(self.device)!r}, "
                f"top_k={d.top_k}, min_score={d.min_score})")

    def sentences(self, passage: str | Passage) -> list[Sentence]:
        """The passage's sentences, as the extractor sees them (offsets into its text)."""
        return sentence_spans(passage.text if isinstance(passage, Passage) else passage, self.sentence_max_chars)

    def _rule(self, top_k: int | None, min_score: float | None) -> tuple[int, float | None]:
        k = self.decision.top_k if top_k is None else top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {k!r}")
        m = self.decision.min_score if min_score is None else min_score
        if m is not None:
            check_unit("min_score", m)
        return k, m

    def score_sentences(self, items: Sequence[tuple[str, str | Passage]],
                        progress: bool = False) -> list[tuple[list[Sentence], list[float]]]:
        """Every sentence of every (query, passage) item with its calibrated score, in one engine call."""
        queries, texts, spans = [], [], []
        for i, item in enumerate(items):
            try:
                q, p = item
            except (TypeError, ValueError):
                raise TypeError(f"item {i}: expected a (query, passage) tuple, got {type(item).__name__}") from None
            q = self.check_query(q, f"item {i}")
            self.passage_text(p, f"item {i}")  # type and emptiness checks
            title = p.title if isinstance(p, Passage) else ""
            sents = self.sentences(p)
            spans.append(sents)
            for s in sents:
                queries.append(q)
                texts.append(self.passage_format.format(title=title, text=s.text) if title else s.text)
        probs = self.score_texts(queries, texts, progress)[0].tolist() if queries else []
        out, at = [], 0
        for sents in spans:
            out.append((sents, probs[at : at + len(sents)]))
            at += len(sents)
        return out

    def extract_many(self, items: Sequence[tuple[str, str | Passage]], top_k: int | None = None,
                     min_score: float | None = None, progress: bool = False) -> list[list[KeySentence]]:
        """:meth:`extract` for each (query, passage) item, batched."""
        k, m = self._rule(top_k, min_score)
        return [self.select(sents, scores, k, m) for sents, scores in self.score_sentences(list(items), progress)]

    def select(self, sents: Sequence[Sentence], scores: Sequence[float], top_k: int | None = None,
               min_score: float | None = None) -> list[KeySentence]:
        """The extractor's rule on one passage's scored sentences (:meth:`score_sentences`): the
        ``top_k`` best scoring at least ``min_score`` (defaults: the manifest's), in passage order."""
        k, m = self._rule(top_k, min_score)
        order = sorted(range(len(sents)), key=lambda j: (-scores[j], j))
        keep = [j for j in order if m is None or scores[j] >= m][:k]
        return [KeySentence(j, sents[j].text, sents[j].start, sents[j].end, float(scores[j])) for j in sorted(keep)]

    def extract(self, query: str, passage: str | Passage, top_k: int | None = None,
                min_score: float | None = None) -> list[KeySentence]:
        """The passage's key sentences for ``query``: at most ``top_k`` (default: the manifest's, 3),
        each scoring at least ``min_score`` (default: the manifest's, tuned on dev; ``0`` keeps the
        top k whatever they score), in passage order."""
        return self.extract_many([(query, passage)], top_k, min_score)[0]


load_extractor = register_loader("extractor")(scorer_loader(Extractor))
