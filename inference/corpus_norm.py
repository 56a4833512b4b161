"""Corpus normalisation of a bi-encoder export: each query's scores read against the corpus it searches.

A bi-encoder's cosine is not on one scale across queries: a short query made of common words is
close to many passages, a precise one to few, so one threshold over raw cosines calls too much
relevant for the first and too little for the second. With a reference corpus (the passages the
pipeline searches: its dense index), an export that has this section scores::

    logit = model_logit + lexical_weight * lexical - weight * r(q)
    r(q)  = mean of the k largest cosines of the query's vector to the reference passages' vectors

the query-side term of CSLS (cross-domain similarity local scaling, Conneau et al., "Word
translation without parallel data", ICLR 2018), which takes the hubness out of nearest-neighbour
similarities. ``weight`` and ``lexical_weight`` are fitted on dev with ``r(q)`` taken against the
training and dev passages (half the dev queries with their positives withheld from both, so that
the fit sees retrieval misses: :func:`training.core.fit_corpus_norm`), and the corpus mode has its own calibration and thresholds, since its
logit is another number than the plain one. Without a reference the export scores as before (the
manifest's ``calibration`` and ``thresholds``): corpus mode is opt-in per scorer
(:meth:`inference.scorer.PairScorer.use_corpus`).

It needs a corpus of some size: ``r(q)`` over a few hundred passages is dominated by the query's own
candidates (docs/benchmarks.md, "Out of domain").

The reference is a matrix of passage vectors (``r(q)`` is then one matrix product per query block,
:func:`top_k_mean`) or any object with the :class:`Reference` method: a search index that already
knows each query's nearest passages (a pipeline's dense recall) gives ``r(q)`` for nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from .calibration import Calibration

FORMULA = ("logit = model_logit + lexical_weight * lexical - weight * r(q); r(q) = mean of the k largest cosines "
           "of the query to the reference corpus")
_BLOCK = 256  # queries per block of the similarity matrix (256 x 1M float32 = 1 GB at most)


def top_k_mean(queries: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    """``r(q)`` of each row of ``queries`` ``[m, d]``: the mean of its ``k`` largest inner products
    with the rows of ``reference`` ``[n, d]`` (all of them when ``n <= k``). float64 ``[m]``."""
    q = np.asarray(queries, dtype=np.float32)
    r = np.asarray(reference, dtype=np.float32)
    if q.ndim != 2 or r.ndim != 2 or (len(q) and q.shape[1] != r.shape[1]):
        raise ValueError(f"top_k_mean: query vectors {q.shape} and reference vectors {r.shape} do not match")
    if len(r) == 0:
        raise ValueError("top_k_mean: the reference corpus is empty")
    if k < 1:
        raise ValueError(f"top_k_mean: k must be positive, got {k}")
    k = min(k, len(r))
    out = np.empty(len(q), dtype=np.float64)
    for i in range(0, len(q), _BLOCK):
        s = q[i : i + _BLOCK] @ r.T
        top = np.partition(s, len(r) - k, axis=1)[:, len(r) - k :] if k < len(r) else s
        out[i : i + _BLOCK] = top.astype(np.float64).mean(axis=1)
    return out


@runtime_checkable
class Reference(Protocol):
    """A reference corpus that answers ``r(q)`` itself (for example from a search index)."""

    def top_k_mean(self, queries: Sequence[str], vectors: np.ndarray, k: int) -> np.ndarray:
        """``r(q)`` per query: the mean of the ``k`` largest cosines of its unit vector (a row of
        ``vectors``, computed by the evaluator) to the corpus. float64 ``[len(queries)]``."""
        ...


def combine(model_logits, lexical, offsets, weight: float, lexical_weight: float) -> np.ndarray:
    """``model_logit + lexical_weight * lexical - weight * r(q)`` (float64; ``lexical`` None: no term)."""
    z = np.asarray(model_logits, dtype=np.float64) - weight * np.asarray(offsets, dtype=np.float64)
    if lexical is not None and lexical_weight:
        z = z + lexical_weight * np.asarray(lexical, dtype=np.float64)
    return z


@dataclass
class CorpusNorm:
    """The manifest's ``corpus_norm`` section: the weights, calibration and decision of corpus mode."""

    k: int
    weight: float  # of r(q), in logit units (subtracted)
    calibration: Calibration
    thresholds: Any  # the task's decision (inference.decisions), fitted on corpus-mode dev scores
    lexical_weight: float = 0.0  # replaces lexical.weight in corpus mode (0: no lexical term)
    info: dict[str, Any] = field(default_factory=dict)  # how it was fitted

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"corpus_norm.k must be a positive integer, got {self.k!r}")
        for name in ("weight", "lexical_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"corpus_norm.{name} must be a finite number >= 0, got {v!r}")

    def logits(self, model_logits: np.ndarray, lexical: np.ndarray | None, offsets: np.ndarray) -> np.ndarray:
        """Corpus-mode logits from the model's, the lexical scores (None: no lexical feature) and ``r(q)``."""
        return combine(model_logits, lexical, offsets, self.weight, self.lexical_weight)

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "weight": self.weight, "lexical_weight": self.lexical_weight, "formula": FORMULA,
                "calibration": self.calibration.to_dict(), "thresholds": self.thresholds.to_dict(),
                **({"fit": self.info} if self.info else {})}
