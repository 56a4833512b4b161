"""Knowledge refinement (CRAG's decompose-then-recompose): keep the strips of the kept chunks that
matter for the question, in their original order.

1. **Decompose** each chunk into strips: the extractor's sentences (its own splitter and
   ``sentence_max_chars``) when an extractor export is loaded, else the chunk's sentences with any
   sentence over ``window_words`` words cut into windows of that many words (CRAG's fixed-length
   strips).
2. **Score** every strip against the question in one engine call: with the extractor (calibrated
   key-sentence probability), else with the evaluator (calibrated relevance of the strip).
3. **Filter**: drop strips of fewer than ``min_words`` words (CRAG drops strips under 4 words) and,
   when ``min_score`` is set, strips scoring below it; drop a strip whose words already stand in a
   better one (overlapping chunks repeat the text at their borders); keep the ``top_strips`` best
   over all chunks (default 5, as in the paper).
4. **Recompose**: the kept strips in their original order: chunks in graded order, strips by
   position in their chunk.

A strip's ``score`` in the evidence mixes its own score with its chunk's evaluator score,
``strip ** (1 - chunk_weight) * chunk ** chunk_weight`` (a geometric mix; ``chunk_weight`` 0 gives
the strip's score alone), so that a sentence of a highly relevant chunk outranks an equally good
sentence of a doubtful one. Which chunks are refined: Ambiguous ones always; Correct ones when
``refine_correct`` (the default, as CRAG refines its Correct documents too); a chunk not refined
becomes one evidence item holding its whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from data_prep.text import sentence_spans

from .types import Evidence, GradedChunk

_WORD_SPAN = re.compile(r"\S+")


@dataclass
class RefineConfig:
    top_strips: int = 5  # strips kept over all refined chunks (the paper: 5)
    min_words: int = 4  # strips of fewer words are dropped (CRAG drops strips under 4 words)
    min_score: float | None = None  # strips scoring below this are dropped; None: no floor
    window_words: int = 50  # without an extractor, a sentence longer than this many words is cut into windows of it
    refine_correct: bool = True  # refine Correct chunks too (as CRAG does), not only Ambiguous ones
    chunk_weight: float = 0.5  # in [0, 1]: a strip's score is strip ** (1 - w) * chunk ** w

    def __post_init__(self) -> None:
        if self.top_strips < 1:
            raise ValueError(f"top_strips must be >= 1, got {self.top_strips}")
        if self.window_words < 4:
            raise ValueError(f"window_words must be >= 4, got {self.window_words}")
        if not 0 <= self.chunk_weight <= 1:
            raise ValueError(f"chunk_weight must be in [0, 1], got {self.chunk_weight}")


def word_windows(text: str, size: int) -> list[tuple[int, int]]:
    """Character spans of consecutive windows of ``size`` words (the last may be shorter)."""
    words = [m.span() for m in _WORD_SPAN.finditer(text)]
    return [(words[i][0], words[min(i + size, len(words)) - 1][1]) for i in range(0, len(words), size)]


def sentence_strips(text: str, window: int) -> list[tuple[int, int]]:
    """Character spans of ``text``'s sentences, a sentence longer than ``window`` words cut into
    windows of ``window`` words (a chunk of the index is a few sentences: windows of the whole
    chunk would leave nothing to refine)."""
    out: list[tuple[int, int]] = []
    for s in sentence_spans(text):
        out.extend((s.start + a, s.start + b) for a, b in word_windows(text[s.start:s.end], window))
    return out


def _strips(chunks: Sequence[GradedChunk], extractor, window: int) -> list[list[tuple[int, int]]]:
    if extractor is not None:
        return [[(s.start, s.end) for s in extractor.sentences(c.chunk.text)] for c in chunks]
    return [sentence_strips(c.chunk.text, window) for c in chunks]


def _distinct(candidates: list) -> list:
    """Best first, without a strip whose words already stand in a better strip: overlapping chunks
    repeat the sentences (or sentence ends) at their borders."""
    kept: list = []
    seen: list[str] = []
    for cand in candidates:
        words = " " + " ".join(_WORD_SPAN.findall(cand[2].text.lower())) + " "
        if any(words in s for s in seen):
            continue
        kept.append(cand)
        seen.append(words)
    return kept


def refine(question: str, graded: Sequence[GradedChunk], extractor=None, evaluator=None,
           cfg: RefineConfig | None = None) -> list[Evidence]:
    """Evidence from the kept chunks of ``graded`` (best first), as the module docstring describes.
    ``extractor`` or ``evaluator`` scores the strips (one of them is needed when a chunk is refined)."""
    cfg = cfg or RefineConfig()
    kept = [c for c in graded if c.kept]
    to_refine = [c for c in kept if c.action == "Ambiguous" or (cfg.refine_correct and c.action == "Correct")]
    refined = {id(c) for c in to_refine}
    whole = [c for c in kept if id(c) not in refined]
    candidates: list[tuple[int, int, Evidence]] = []  # (chunk rank, start, evidence)
    rank = {id(c): i for i, c in enumerate(kept)}
    if to_refine:
        if extractor is None and evaluator is None:
            raise ValueError("refinement needs an extractor or an evaluator to score the strips")
        spans = _strips(to_refine, extractor, cfg.window_words)
        queries, texts, where = [], [], []
        for c, sp in zip(to_refine, spans):
            for a, b in sp:
                text = c.chunk.text[a:b]
                if len(text.split()) < cfg.min_words:
                    continue
                queries.append(question)
                texts.append(text)
                where.append((c, a, b))
        scorer = extractor if extractor is not None else evaluator
        if texts:
            fmt = scorer.passage_format  # a strip of a titled chunk is shown with its title, as in training
            shown = [fmt.format(title=c.chunk.title, text=t) if c.chunk.title else t for t, (c, _, _) in zip(texts, where)]
            probs = scorer.score_texts(queries, shown)[0].tolist()
            for (c, a, b), p in zip(where, probs):
                if cfg.min_score is not None and p < cfg.min_score:
                    continue
                mixed = (p ** (1 - cfg.chunk_weight)) * (c.score ** cfg.chunk_weight)
                ev = Evidence(c.chunk.text[a:b], c.chunk.id, c.chunk.source, float(mixed), start=a, end=b,
                              title=c.chunk.title, origin=c.origin, published=c.chunk.metadata.get("published"))
                candidates.append((rank[id(c)], a, ev))
        candidates.sort(key=lambda t: -t[2].score)
        candidates = _distinct(candidates)[: cfg.top_strips]
    for c in whole:
        ev = Evidence(c.chunk.text, c.chunk.id, c.chunk.source, float(c.score), start=0, end=len(c.chunk.text),
                      title=c.chunk.title, origin=c.origin, published=c.chunk.metadata.get("published"))
        candidates.append((rank[id(c)], 0, ev))
    candidates.sort(key=lambda t: (t[0], t[1]))
    return [ev for _, _, ev in candidates]
