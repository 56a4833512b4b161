"""Hybrid recall: dense, BM25 and metadata routes over a :class:`~pipeline.index.HybridIndex`,
fused by weighted reciprocal rank fusion (the seed's numbers: top 20 per route, weights
dense 0.5 / BM25 0.3 / metadata 0.2).

Routes, each answering its ``top_k`` best chunks for the question:

* ``dense`` - cosine similarity of MiniLM embeddings (:meth:`HybridIndex.dense_search`); skipped
  for an index built without embeddings.
* ``bm25`` - BM25 over the chunk title and text with the index's tokenizer, which indexes a code
  such as ``E-204`` whole as well as in parts, so a question naming the exact code matches it.
* ``metadata`` - the chunks whose metadata values or title hold a code named in the question
  (:func:`find_codes`), best BM25 score for the question first (chunks the BM25 route scores 0
  come last, by row). No code in the question: the route finds nothing.

A route with no result contributes nothing; a route whose weight is 0 is not run.

Weighted RRF (:func:`weighted_rrf`)::

    score(d) = sum over routes r that ranked d of  w_r / (k + rank_r(d))

with 1-based ranks and ``k = 60`` (Cormack et al., 2009). Ties are broken by the best single-route
rank, then by chunk id, so the order is deterministic.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from .types import Hit

if TYPE_CHECKING:  # the index imports this module (for find_codes); recall only calls its methods
    from .index import HybridIndex

logger = logging.getLogger(__name__)

ROUTES = ("dense", "bm25", "metadata")
DEFAULT_WEIGHTS = {"dense": 0.5, "bm25": 0.3, "metadata": 0.2}

# A token: ASCII letters/digits joined by - _ . (no spaces), not glued to more of the same.
_START = r"(?<![A-Za-z0-9])(?<![A-Za-z0-9][-_.])"
_END = r"(?![A-Za-z0-9])(?![-_.][A-Za-z0-9])"
_SEG = r"[A-Za-z0-9]+"
# a segment that mixes letters and digits, but not an ordinal or a decade ("4th", "1990s")
_MIXED = r"(?=[A-Za-z0-9]*[A-Za-z])(?=[A-Za-z0-9]*[0-9])(?![0-9]+(?:st|nd|rd|th|s)(?![A-Za-z0-9]))[A-Za-z0-9]+"

#: What counts as a product/model code in a question (and in metadata, for the index's code map).
#: Each pattern is searched in the text; every match is a code. The defaults find
#: letter-digit tokens joined by ``-``/``_``/``.``: one segment mixing letters and digits
#: (``A12B``, ``v2.1``, ``MP3``, ``XR7000``), or a letter segment joined to a digit segment
#: (``E-204``, ``XR-7000``, ``ISO_9001``). Plain words, plain numbers (``2019``, ``3.5``,
#: ``2019-2020``), ordinals and decades (``4th``, ``1990s``) and number-word compounds
#: (``5-year``) are not codes.
DEFAULT_CODE_PATTERNS: tuple[str, ...] = (
    rf"{_START}(?:{_SEG}[-_.])*{_MIXED}(?:[-_.]{_SEG})*{_END}",
    rf"{_START}(?:{_SEG}[-_.])*[A-Za-z]+[-_.][0-9][A-Za-z0-9]*(?:[-_.]{_SEG})*{_END}",
)


def find_codes(question: str, patterns: Sequence[str | re.Pattern] = DEFAULT_CODE_PATTERNS) -> list[str]:
    """The code-like tokens of ``question`` as written, each once, in order of appearance
    (``"Is E-204 on the XR-7000 v2.1?"`` -> ``["E-204", "XR-7000", "v2.1"]``)."""
    found: dict[str, int] = {}
    for pat in patterns:
        rx = pat if isinstance(pat, re.Pattern) else _compile(pat)
        for m in rx.finditer(question):
            code = m.group()
            if code and (code not in found or m.start() < found[code]):
                found[code] = m.start()
    return sorted(found, key=lambda c: (found[c], c))


_COMPILED: dict[str, re.Pattern] = {}


def _compile(pattern: str) -> re.Pattern:
    rx = _COMPILED.get(pattern)
    if rx is None:
        try:
            rx = _COMPILED[pattern] = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"bad code pattern {pattern!r}: {e}") from None
    return rx


def weighted_rrf(rankings: Mapping[str, Sequence[str]], weights: Mapping[str, float], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists: ``score(d) = sum_r weights[r] / (k + rank_r(d))``, ranks 1-based.

    Best first; ties by the best (lowest) rank ``d`` has in any single route with a positive
    weight, then by id. A route with weight 0 adds nothing; a route in ``rankings`` without a
    weight is an error. An id repeated in one ranking counts at its first rank.
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or k < 0:
        raise ValueError(f"RRF k must be a number >= 0, got {k!r}")
    missing = [r for r in rankings if r not in weights]
    if missing:
        raise ValueError(f"no weight for route(s) {', '.join(missing)} (weights: {dict(weights)})")
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for route, ids in rankings.items():
        w = float(weights[route])
        if w < 0:
            raise ValueError(f"route {route!r} has a negative weight {w}")
        if w == 0:
            continue
        seen: set[str] = set()
        for rank, d in enumerate(ids, start=1):
            if d in seen:
                continue
            seen.add(d)
            scores[d] = scores.get(d, 0.0) + w / (k + rank)
            best[d] = min(best.get(d, rank), rank)
    return sorted(scores.items(), key=lambda x: (-x[1], best[x[0]], x[0]))


class HybridRecall:
    """Dense + BM25 + metadata recall over one index, fused by :func:`weighted_rrf`.

    ``top_k`` results per route; ``recall(question, k)`` returns the best ``k`` fused hits (all of
    them, at most one route's ``top_k`` per route, when ``k`` is None). ``weights``: routes left
    out weigh 0. ``code_patterns``: how codes are found in the question (default: the patterns
    the index's code map was built with, so both sides agree).
    """

    def __init__(
        self,
        index: "HybridIndex",
        weights: Mapping[str, float] | None = None,
        top_k: int = 20,
        rrf_k: int = 60,
        code_patterns: Sequence[str] | None = None,
    ):
        weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
        unknown = sorted(set(weights) - set(ROUTES))
        if unknown:
            raise ValueError(f"unknown recall route(s) {', '.join(unknown)}; routes are {', '.join(ROUTES)}")
        if any(float(w) < 0 for w in weights.values()):
            raise ValueError(f"recall weights must be >= 0, got {weights}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or rrf_k < 0:
            raise ValueError(f"rrf_k must be a number >= 0, got {rrf_k!r}")
        self.index = index
        self.weights = {r: float(weights.get(r, 0.0)) for r in ROUTES}
        self.top_k = top_k
        self.rrf_k = rrf_k
        if code_patterns is None:  # the patterns the index's code map was built with
            code_patterns = (getattr(index, "info", None) or {}).get("metadata", {}).get("code_patterns") or DEFAULT_CODE_PATTERNS
        self.code_patterns = tuple(code_patterns)
        for p in self.code_patterns:
            _compile(p)
        if self.weights["dense"] > 0 and not index.has_dense:
            logger.info("index %s has no dense embeddings: the dense route is skipped", getattr(index, "dir", ""))

    def active_routes(self) -> list[str]:
        """The routes a query runs: positive weight, and for ``dense`` an index with embeddings."""
        return [r for r in ROUTES if self.weights[r] > 0 and (r != "dense" or self.index.has_dense)]

    def route_rows(self, question: str) -> dict[str, list[int]]:
        """Each active route's ranked index rows for ``question`` (at most ``top_k`` each)."""
        out: dict[str, list[int]] = {}
        for route in self.active_routes():
            if route == "dense":
                out[route] = [r for r, _ in self.index.dense_search(question, self.top_k)]
            elif route == "bm25":
                out[route] = [r for r, _ in self.index.bm25_search(question, self.top_k)]
            else:
                out[route] = self.metadata_route(question)
        return out

    def metadata_route(self, question: str) -> list[int]:
        """Rows whose metadata/title codes include one named in ``question``, by BM25 score for the
        question (descending; then by row), the first ``top_k``."""
        codes = find_codes(question, self.code_patterns)
        if not codes:
            return []
        rows = self.index.metadata_rows(codes)
        if not rows:
            return []
        scores = self.index.bm25_scores(question, rows)
        order = sorted(range(len(rows)), key=lambda i: (-float(scores[i]), rows[i]))
        return [rows[i] for i in order[: self.top_k]]

    def recall(self, question: str, k: int | None = None) -> list[Hit]:
        """The fused hits for ``question``, best first; ``Hit.routes`` holds each route's 1-based rank."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("recall needs a non-empty question")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be a positive integer or None, got {k!r}")
        rows = self.route_rows(question)
        chunks = {r: self.index.chunk(r) for r in _unique(r for rr in rows.values() for r in rr)}
        rankings = {route: [chunks[r].id for r in rr] for route, rr in rows.items()}
        by_id = {c.id: c for c in chunks.values()}
        row_of = {c.id: r for r, c in chunks.items()}
        ranks = {route: {cid: i for i, cid in reversed(list(enumerate(ids, start=1)))} for route, ids in rankings.items()}
        fused = weighted_rrf(rankings, self.weights, self.rrf_k)
        if k is not None:
            fused = fused[:k]
        return [
            Hit(by_id[cid], score, {route: ranks[route][cid] for route in rankings if cid in ranks[route]}, row_of[cid])
            for cid, score in fused
        ]

    __call__ = recall


def _unique(items: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(items))


__all__ = ["DEFAULT_CODE_PATTERNS", "DEFAULT_WEIGHTS", "ROUTES", "HybridRecall", "find_codes", "weighted_rrf"]
