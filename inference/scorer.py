"""What every served model is: a scoring engine, the export's calibration and its manifest.

:class:`PairScorer` turns ``(query, passage)`` pairs into calibrated probabilities; the three task
objects (:class:`~inference.evaluator.Evaluator`, :class:`~inference.answer.AnswerClassifier`,
:class:`~inference.extractor.Extractor`) add their decision on top.

Empty (or whitespace-only) queries and passages are rejected with ``ValueError`` naming the pair:
there is nothing to score, and a number for them would look like evidence.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch

from data_prep.records import Passage

from .calibration import Calibration, sigmoid
from .corpus_norm import Reference, top_k_mean
from .engine import ScoringEngine
from .inputs import EncodeStats, passage_text
from .lexical import LexicalError, LexicalFeature
from .manifest import ExportError, Manifest
from .modeling import ModelSpec

Pair = tuple[str, "str | Passage"]
_REFERENCE_BLOCK = 8192  # reference passages tokenised and encoded at a time by use_corpus


class PairScorer:
    """Calibrated probabilities for (query, passage) pairs, in input order.

    A passage is a string or a :class:`~data_prep.records.Passage` (shown to the model through the
    manifest's ``passage_format``, ``"{title}. {text}"`` by default, as in training). An export with
    a lexical feature (:mod:`inference.lexical`) adds ``weight * lexical`` to every model logit.
    A bi-encoder export with a ``corpus_norm`` section scores against a reference corpus once one is
    given (:meth:`use_corpus`; :mod:`inference.corpus_norm`), with that mode's calibration.
    """

    task = ""

    def __init__(self, engine: ScoringEngine, manifest: Manifest, path: str | None = None):
        self.engine = engine
        self.manifest = manifest
        self.path = path
        self.reference: np.ndarray | Reference | None = None  # corpus mode: passage unit vectors, or a Reference
        self.lexical: LexicalFeature | None = None
        if manifest.lexical:
            if path is None:
                raise ExportError("the manifest has a lexical feature, but no export folder to read its table from")
            try:
                self.lexical = LexicalFeature.load(path, manifest.lexical)
            except LexicalError as e:
                raise ExportError(str(e)) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, head={self.spec.head!r}, device={str(self.device)!r})"

    @property
    def spec(self) -> ModelSpec:
        return self.engine.spec

    @property
    def calibration(self) -> Calibration:
        """The calibration in force: corpus mode's while a reference corpus is set, else the manifest's."""
        return self.manifest.corpus_norm.calibration if self.corpus_mode else self.manifest.calibration

    @property
    def corpus_mode(self) -> bool:
        return self.reference is not None

    # -- corpus mode ---------------------------------------------------------------------------
    def use_corpus(self, passages: Iterable[str | Passage] | None = None, *, vectors: np.ndarray | None = None,
                   reference: Reference | None = None, progress: bool = False) -> None:
        """Score against a reference corpus from now on: its ``passages`` (encoded here), their unit
        ``vectors`` computed by this model at this spec's length (a pipeline's dense index), or a
        ``reference`` that answers ``r(q)`` itself (:class:`~inference.corpus_norm.Reference`: a search
        index over such vectors). ``None`` for all returns to plain scoring. Only for exports with a
        ``corpus_norm`` section."""
        given = [name for name, v in (("passages", passages), ("vectors", vectors), ("reference", reference))
                 if v is not None]
        if not given:
            self.reference = None
            return
        if self.manifest.corpus_norm is None:
            raise ValueError("this export has no corpus_norm section: it scores pairs only (train it with "
                             "corpus_norm: true to score against a corpus)")
        if len(given) > 1:
            raise ValueError(f"use_corpus takes one of passages, vectors or reference, not {' and '.join(given)}")
        if reference is not None:
            if not isinstance(reference, Reference):
                raise TypeError(f"reference must have a top_k_mean(queries, vectors, k) method, got "
                                f"{type(reference).__name__}")
            self.reference = reference
            return
        if vectors is None:
            texts = [self.passage_text(p, f"reference passage {i}") for i, p in enumerate(passages)]
            vectors = self._encode_reference(texts, progress)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = getattr(self.engine, "dim", None)
        if vectors.ndim != 2 or len(vectors) == 0 or (dim and vectors.shape[1] != dim):
            raise ValueError(f"the reference corpus needs [n >= 1, {dim}] passage vectors, got shape {vectors.shape}")
        self.reference = vectors

    def _encode_reference(self, texts: list[str], progress: bool) -> np.ndarray:
        """The passages' unit vectors, encoded a block at a time (bounded memory for a large corpus)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        from tqdm import tqdm

        out = None
        with tqdm(total=len(texts), desc="reference corpus", unit=" passages", disable=not progress,
                  mininterval=1.0) as bar:
            for i in range(0, len(texts), _REFERENCE_BLOCK):
                v = self.engine.vectors(texts[i : i + _REFERENCE_BLOCK], "passage", bar=bar)[0]
                if out is None:  # the width is known once the first block is encoded
                    out = np.empty((len(texts), v.shape[1]), dtype=np.float32)
                out[i : i + len(v)] = v
        return out

    def query_offsets(self, queries: Sequence[str]) -> np.ndarray:
        """``r(q)`` per query (float64, input order): the mean of its ``k`` largest cosines to the
        reference corpus (each distinct query encoded once; the engine caches its vector)."""
        if self.reference is None or self.manifest.corpus_norm is None:
            raise ValueError("no reference corpus: call use_corpus first")
        uniq = list(dict.fromkeys(queries))
        if not uniq:
            return np.zeros(0)
        vecs, k = self.engine.vectors(uniq, "query")[0], self.manifest.corpus_norm.k
        if isinstance(self.reference, np.ndarray):
            r = top_k_mean(vecs, self.reference, k)
        else:
            r = np.asarray(self.reference.top_k_mean(uniq, vecs, k), dtype=np.float64)
            if r.shape != (len(uniq),):
                raise ValueError(f"the reference gave r(q) of shape {r.shape} for {len(uniq)} queries")
        at = {q: i for i, q in enumerate(uniq)}
        return r[[at[q] for q in queries]]

    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def passage_format(self) -> str:
        return self.spec.passage_format

    # -- inputs --------------------------------------------------------------------------------
    def passage_text(self, passage: str | Passage, where: str = "passage") -> str:
        try:
            text = passage_text(passage, self.passage_format)
        except TypeError as e:
            raise TypeError(f"{where}: {e}") from None
        if not text.strip():
            raise ValueError(f"{where}: empty passage (nothing to score)")
        return text

    def check_query(self, query: object, where: str = "query") -> str:
        if not isinstance(query, str):
            raise TypeError(f"{where}: the query must be a str, got {type(query).__name__}")
        if not query.strip():
            raise ValueError(f"{where}: empty query (nothing to score)")
        return query

    def texts(self, pairs: Iterable[Pair]) -> tuple[list[str], list[str]]:
        queries, passages = [], []
        for i, pair in enumerate(pairs):
            try:
                q, p = pair
            except (TypeError, ValueError):
                raise TypeError(f"pair {i}: expected a (query, passage) tuple, got {type(pair).__name__}") from None
            queries.append(self.check_query(q, f"pair {i}"))
            passages.append(self.passage_text(p, f"pair {i}"))
        return queries, passages

    # -- scores --------------------------------------------------------------------------------
    def logits(self, pairs: Iterable[Pair], progress: bool = False) -> np.ndarray:
        """The export's logit ``z`` per pair (float64, input order): the model's, plus the lexical
        term when the export has one (in corpus mode, :meth:`CorpusNorm.logits`)."""
        queries, passages = self.texts(pairs)
        return self.text_logits(queries, passages, progress)[0]

    def text_logits(self, queries: Sequence[str], passages: Sequence[str],
                    progress: bool = False) -> tuple[np.ndarray, EncodeStats]:
        """The export's logits of already checked texts, and the truncation counts."""
        z, stats = self.engine.logits(queries, passages, progress=progress)
        if self.corpus_mode:
            lex = self.lexical.scores(queries, passages) if self.lexical is not None else None
            return self.manifest.corpus_norm.logits(z, lex, self.query_offsets(queries)), stats
        if self.lexical is not None:
            z = z + self.lexical.logits(queries, passages)
        return z, stats

    def score_texts(self, queries: Sequence[str], passages: Sequence[str],
                    progress: bool = False) -> tuple[np.ndarray, np.ndarray, EncodeStats]:
        """Calibrated and raw probabilities of already checked texts, and the truncation counts."""
        z, stats = self.text_logits(queries, passages, progress)
        return self.calibrate(z), sigmoid(z), stats

    def calibrate(self, logits: Sequence[float] | np.ndarray) -> np.ndarray:
        """``sigmoid(a * z + b)`` with the manifest's calibration."""
        return self.calibration.apply(logits)

    @staticmethod
    def sigmoid(logits: Sequence[float] | np.ndarray) -> np.ndarray:
        return sigmoid(logits)

    def score(self, pairs: Iterable[Pair], progress: bool = False) -> list[float]:
        """Calibrated probabilities in [0, 1], one per pair, in input order."""
        return self.calibrate(self.logits(pairs, progress)).tolist()

    def score_raw(self, pairs: Iterable[Pair], progress: bool = False) -> list[float]:
        """Uncalibrated ``sigmoid(z)``, one per pair, in input order."""
        return sigmoid(self.logits(pairs, progress)).tolist()


def scorer_loader(cls: type[PairScorer]):
    """The loader a task registers: the export's engine wrapped in the task's class."""

    def load(export, options) -> PairScorer:
        from .loading import build_engine

        engine = build_engine(export, options)
        try:
            return cls(engine, export.manifest, str(export.path))
        except ValueError as e:
            raise ExportError(f"{export.manifest_path}: {e}") from None

    load.__doc__ = f"Build a :class:`{cls.__name__}` from an export."
    return load
