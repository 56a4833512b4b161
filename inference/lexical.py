"""The lexical feature of an export: how much of the query the passage covers, by BM25.

A dense or cross-encoder logit judges meaning; it misses what exact words catch (names, numbers,
rare terms), and a BM25 score is what it is weakest against out of domain. An export may add a
lexical term to its logit::

    logit = model_logit + weight * lexical(query, passage)

``lexical`` is the Okapi BM25 score of the query against the passage divided by the most the
query could score (every query term present, saturated): a number in [0, 1] that does not grow
with the query's length, so one weight serves short and long queries. Document frequencies and the
average length come from the training corpus (every distinct passage of the training data) and
ship with the export in ``lexical.json``; a term the corpus never saw gets the largest idf.
``weight`` is fitted on dev together with the calibration (:func:`training.fitting.fit_lexical_weight`),
so the calibrated probability is ``sigmoid(a * (z + weight * lexical) + b)``.

The pair score needs nothing but the two texts, so it works wherever the model logit does: in
:class:`~inference.scorer.PairScorer`, ``inference evaluate`` and the pipeline's grading from index
vectors. Tokenisation is :mod:`data_prep.tokenization` (Snowball stemming by default).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from data_prep.tokenization import TokenizerConfig, build_tokenizer

LEXICAL_FILE = "lexical.json"
_CACHE_SIZE = 16_384


class LexicalError(ValueError):
    """A lexical table that cannot be used; the message names the file and what is wrong."""


@dataclass
class LexicalFeature:
    """Normalised BM25 of a query against a passage, with a corpus's document frequencies."""

    df: dict[str, int]
    documents: int
    avgdl: float
    weight: float = 0.0
    k1: float = 1.2
    b: float = 0.75
    tokenizer: TokenizerConfig = field(default_factory=lambda: TokenizerConfig(stem=True))

    def __post_init__(self) -> None:
        if self.documents < 1 or not self.avgdl > 0:
            raise LexicalError(f"a lexical table needs documents (got {self.documents}) and a positive average length "
                               f"(got {self.avgdl})")
        self._tok = build_tokenizer(self.tokenizer)
        self._tokens: OrderedDict[str, tuple[Counter, int]] = OrderedDict()  # passage -> (term counts, length)
        self._lock = threading.Lock()

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_corpus(cls, texts: Iterable[str], tokenizer: TokenizerConfig | None = None, **kw: Any) -> "LexicalFeature":
        """Document frequencies and average length of the distinct ``texts``."""
        tokenizer = tokenizer or TokenizerConfig(stem=True)
        tok = build_tokenizer(tokenizer)
        df: Counter = Counter()
        n = length = 0
        for text in dict.fromkeys(texts):
            toks = tok(text)
            df.update(set(toks))
            n += 1
            length += len(toks)
        if n == 0 or length == 0:
            raise LexicalError("the lexical feature needs a corpus with words in it; got none")
        return cls(df=dict(df), documents=n, avgdl=length / n, tokenizer=tokenizer, **kw)

    # -- scoring -------------------------------------------------------------------------------
    def idf(self, term: str) -> float:
        n = self.df.get(term, 0)
        return math.log(1.0 + (self.documents - n + 0.5) / (n + 0.5))

    def _passage(self, text: str) -> tuple[Counter, int]:
        with self._lock:
            hit = self._tokens.get(text)
            if hit is not None:
                self._tokens.move_to_end(text)
                return hit
        toks = self._tok(text)
        hit = (Counter(toks), len(toks))
        with self._lock:
            self._tokens[text] = hit
            if len(self._tokens) > _CACHE_SIZE:
                self._tokens.popitem(last=False)
        return hit

    def _query(self, query: str) -> tuple[list[float], list[str]]:
        """The query's distinct terms and their idf."""
        terms = list(dict.fromkeys(self._tok(query)))
        return [self.idf(t) for t in terms], terms

    def _pair(self, query: tuple[list[float], list[str]], passage: str) -> float:
        weights, terms = query
        total = sum(weights)
        if total <= 0:
            return 0.0
        tf, dl = self._passage(passage)
        norm = self.k1 * (1.0 - self.b + self.b * dl / self.avgdl)
        got = 0.0
        for t, w in zip(terms, weights):
            f = tf.get(t, 0)
            if f:
                got += w * f / (f + norm)
        return got / total

    def pair(self, query: str, passage: str) -> float:
        """BM25(query, passage) / the query's largest possible BM25, in [0, 1] (0 for a query with no terms)."""
        return self._pair(self._query(query), passage)

    def scores(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """:meth:`pair` of each (query, passage), float64, in order (each distinct query tokenised once)."""
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        seen: dict[str, tuple[list[float], list[str]]] = {}
        out = np.empty(len(queries), dtype=np.float64)
        for i, (q, p) in enumerate(zip(queries, passages)):
            if q not in seen:
                seen[q] = self._query(q)
            out[i] = self._pair(seen[q], p)
        return out

    def logits(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """``weight * lexical`` per pair: what the export adds to the model's logit."""
        return self.weight * self.scores(queries, passages)

    # -- files ---------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The manifest's ``lexical`` section (without the table, which is the file)."""
        return {"file": LEXICAL_FILE, "weight": self.weight, "k1": self.k1, "b": self.b,
                "documents": self.documents, "avgdl": self.avgdl, "terms": len(self.df),
                "tokenizer": self.tokenizer.to_dict(),
                "formula": "logit = model_logit + weight * BM25(query, passage) / max BM25 of the query"}

    def save(self, folder: str | os.PathLike) -> dict[str, Any]:
        """Write ``folder/lexical.json`` (terms sorted) and return the manifest section with its sha256."""
        path = Path(folder) / LEXICAL_FILE
        blob = json.dumps({"documents": self.documents, "avgdl": self.avgdl, "tokenizer": self.tokenizer.to_dict(),
                           "df": dict(sorted(self.df.items()))}, ensure_ascii=False, separators=(",", ":"))
        path.write_text(blob + "\n", encoding="utf-8")
        return {**self.info(), "sha256": hashlib.sha256((blob + "\n").encode("utf-8")).hexdigest()}

    @classmethod
    def load(cls, folder: str | os.PathLike, section: dict[str, Any]) -> "LexicalFeature":
        """The feature a manifest's ``lexical`` section describes, its table read from ``folder``."""
        path = Path(folder) / str(section.get("file", LEXICAL_FILE))
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise LexicalError(f"{path}: cannot read the lexical table the manifest names ({e})") from None
        want = section.get("sha256")
        if want and hashlib.sha256(raw).hexdigest() != want:
            raise LexicalError(f"{path}: the lexical table does not match the manifest's sha256 (changed or corrupt); "
                               "re-export the model")
        try:
            d = json.loads(raw.decode("utf-8"))
            df = d["df"]
            if not isinstance(df, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in df.values()):
                raise ValueError("'df' must map terms to integer counts")
            tokenizer = TokenizerConfig.from_dict(d["tokenizer"])
            weight = section["weight"]
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ValueError(f"'lexical.weight' must be a finite number, got {weight!r}")
            return cls(df=df, documents=int(d["documents"]), avgdl=float(d["avgdl"]), weight=float(weight),
                       k1=float(section.get("k1", 1.2)), b=float(section.get("b", 0.75)), tokenizer=tokenizer)
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else str(e)
            raise LexicalError(f"{path}: not a usable lexical table ({what})") from None
