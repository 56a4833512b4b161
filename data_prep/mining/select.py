"""The negatives of one query, a batch of queries at a time (:func:`mine_batch`).

A query's BM25 hits are walked in the rank window, best first (``top``) or shuffled (``random``).
A hit is dropped when it is one of the query's positives (same id or same text) or holds a gold
answer string, and with the dense filter when its similarity to the query is within
``dense_margin`` of the best positive's. Easy negatives are random corpus passages outside the
hits. Each negative's metadata has ``rank``, ``score``, ``kind`` and, with the dense filter,
``dense_sim``.

Determinism: the random choices of a query come from ``random.Random(f"{seed}:{query_id}:...")``,
so a query's negatives do not depend on sharding, batch size or thread count.

For the answer-existence task, ``--answer-hits K`` also keeps each query's top ``K`` hits
(positives aside, answer-bearing or not, with ``rank``, ``score`` and ``has_answer``) in the
example's ``metadata["answer_hits"]``: on-topic passages with and without the answer, which the
negatives cannot give since they exclude answer-bearing hits.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Any, Sequence

import numpy as np

from ..bm25 import BM25Index
from ..records import Passage, QueryExample
from ..text import contains_answer
from .config import MiningConfig

FIRST_IDS = 5  # query ids kept per reported condition (meta.json "examples")


def _text_key(text: str) -> str:
    return " ".join(text.split()).lower()


class _QueryState:
    """One query's candidates, walked in sampling order, with the filters applied lazily."""

    def __init__(
        self, q: QueryExample, rows: np.ndarray, scores: np.ndarray, cfg: MiningConfig, index: BM25Index, counts: Counter
    ):
        self.q = q
        self.cfg = cfg
        self.index = index
        self.counts = counts
        self.hit_rows = set(rows.tolist())
        start, end = cfg.window
        order = list(range(start, min(end, len(rows))))  # 0-based ranks in the window
        if cfg.sampling == "random":
            random.Random(f"{cfg.seed}:{q.id}:hard").shuffle(order)
        self.order = order
        self.rows, self.scores = rows, scores
        self.pos = 0
        self.pos_ids = {p.id for p in q.positives}
        self.pos_texts = {_text_key(p.text) for p in q.positives}
        self.accepted: list[Passage] = []
        self.need = cfg.n_hard
        self.exhausted = False

    def _is_positive(self, p: Passage) -> bool:
        return p.id in self.pos_ids or _text_key(p.text) in self.pos_texts

    def _has_answer(self, p: Passage) -> bool:
        return self.cfg.exclude_answers and bool(self.q.answers) and contains_answer(p.full_text(" "), self.q.answers)

    def next_valid(self, n: int) -> list[Passage]:
        """The next ``n`` candidates that pass the positive and answer filters (fewer at the end)."""
        out: list[Passage] = []
        while len(out) < n and self.pos < len(self.order):
            r = self.order[self.pos]
            self.pos += 1
            p = self.index.store[int(self.rows[r])]
            if self._dropped(p):
                continue
            meta = dict(p.metadata, rank=r + 1, score=round(float(self.scores[r]), 4), kind="hard")
            out.append(Passage(id=p.id, text=p.text, title=p.title, metadata=meta))
        return out

    def answer_hits(self, k: int) -> list[dict]:
        """The top ``k`` hits that are not positives, answer-bearing or not, for the answer task:
        each with its ``rank``, ``score`` and ``has_answer`` (a gold answer string in it)."""
        out = []
        for r in range(min(k, len(self.rows))):
            p = self.index.store[int(self.rows[r])]
            if self._is_positive(p):
                continue
            has = bool(self.q.answers) and contains_answer(p.full_text(" "), self.q.answers)
            self.counts["answer_hits"] += 1
            self.counts["answer_hits_with_answer"] += has
            meta = dict(p.metadata, rank=r + 1, score=round(float(self.scores[r]), 4), has_answer=has)
            out.append(Passage(id=p.id, text=p.text, title=p.title, metadata=meta).to_dict())
        return out

    def _dropped(self, p: Passage) -> bool:
        """A positive or a passage holding a gold answer is no negative; count why it was dropped."""
        if self._is_positive(p):
            self.counts["dropped_positive"] += 1
            return True
        if self._has_answer(p):
            self.counts["dropped_answer_match"] += 1
            return True
        return False

    def easy(self, k: int) -> list[Passage]:
        """``k`` random corpus passages outside the retrieved hits, positives and answer holders."""
        rng = random.Random(f"{self.cfg.seed}:{self.q.id}:easy")
        n_docs = len(self.index.store)
        taken = set(self.hit_rows)
        out: list[Passage] = []
        for _ in range(20 * k + 20):
            if len(out) >= k or len(taken) >= n_docs:
                break
            row = rng.randrange(n_docs)
            if row in taken:
                continue
            taken.add(row)
            p = self.index.store[row]
            if self._dropped(p):
                continue
            meta = dict(p.metadata, rank=None, score=None, kind="easy")
            out.append(Passage(id=p.id, text=p.text, title=p.title, metadata=meta))
        return out


def _dense_round(states: list[_QueryState], encoder, cfg: MiningConfig, cache: dict[str, np.ndarray]) -> None:
    """One round of the dense margin filter over the queries that still need negatives.

    Each query pulls its next lexically valid candidates (twice what it still needs); texts not
    embedded yet in this batch are embedded together; a candidate is dropped when its similarity to
    the query is within ``dense_margin`` of the best positive's.
    """
    from ..dense import margin_scores

    chunks = [s.next_valid(max(2 * (s.need - len(s.accepted)), 4)) for s in states]
    texts: list[str] = []
    for s, ch in zip(states, chunks):
        texts += [s.q.query] + [p.full_text(" ") for p in s.q.positives] + [p.full_text(" ") for p in ch]
    todo = list(dict.fromkeys(t for t in texts if t not in cache))
    if todo:
        cache.update(zip(todo, encoder.encode(todo)))
    keys = list(dict.fromkeys(texts))
    row = {t: i for i, t in enumerate(keys)}
    emb = np.stack([cache[t] for t in keys])
    q_emb = np.stack([cache[s.q.query] for s in states])
    wanted = [[row[p.full_text(" ")] for p in s.q.positives + ch] for s, ch in zip(states, chunks)]
    sims = margin_scores(q_emb, emb, wanted)
    for s, ch, sim in zip(states, chunks, sims):
        n_pos = len(s.q.positives)
        ref = float(sim[:n_pos].max()) if n_pos else None
        for p, v in zip(ch, sim[n_pos:]):
            if len(s.accepted) >= s.need:
                break
            if ref is not None and v >= ref - cfg.dense_margin:
                s.counts["dropped_dense_margin"] += 1
                continue
            p.metadata["dense_sim"] = round(float(v), 4)
            s.accepted.append(p)
        s.exhausted = s.pos >= len(s.order)


def mine_batch(
    queries: Sequence[QueryExample],
    index: BM25Index,
    cfg: MiningConfig,
    counts: Counter,
    encoder: Any = None,
    timings: Counter | None = None,
    first_ids: dict[str, list[str]] | None = None,
) -> list[QueryExample]:
    """Mine negatives for a batch of queries (the unit of retrieval and dense encoding).

    ``first_ids`` collects the first ids of queries without a positive (``no_positives``) and of
    mined examples with no positive and no negative at all (``no_passages``).
    """
    timings = timings if timings is not None else Counter()
    first_ids = first_ids if first_ids is not None else {}
    t0 = time.perf_counter()
    hits = index.search([q.query for q in queries], cfg.depth, n_threads=cfg.n_threads or (os.cpu_count() or 1))
    t1 = time.perf_counter()
    timings["retrieve_s"] += t1 - t0
    states = [_QueryState(q, rows, scores, cfg, index, counts) for q, (rows, scores) in zip(queries, hits)]
    if encoder is None:
        for s in states:
            s.accepted = s.next_valid(s.need)
    else:
        cache: dict[str, np.ndarray] = {}
        for s in states:
            if not s.q.positives:
                counts["dense_skipped_no_positive"] += 1
        pending = [s for s in states if s.need > 0]
        while pending:
            _dense_round(pending, encoder, cfg, cache)
            pending = [s for s in pending if len(s.accepted) < s.need and not s.exhausted]
        timings["dense_s"] += time.perf_counter() - t1
        t1 = time.perf_counter()
    out = []
    for s, (rows, _) in zip(states, hits):
        easy = s.easy(cfg.n_easy) if cfg.n_easy else []
        negs = sorted(s.accepted, key=lambda p: p.metadata["rank"]) + easy
        counts["queries"] += 1
        counts["negatives_hard"] += len(s.accepted)
        counts["negatives_easy"] += len(easy)
        if len(rows) == 0:
            counts["queries_no_hits"] += 1
        if len(negs) < cfg.negatives:
            counts["queries_too_few_negatives"] += 1
        if s.q.negatives:
            counts["input_negatives_replaced"] += len(s.q.negatives)
        for key, hit in (("no_positives", not s.q.positives), ("no_passages", not s.q.positives and not negs)):
            if hit:
                counts[f"queries_{key}"] += 1
                ids = first_ids.setdefault(key, [])
                if len(ids) < FIRST_IDS:
                    ids.append(s.q.id)
        metadata = s.q.metadata
        if cfg.answer_hits:
            metadata = {**metadata, "answer_hits": s.answer_hits(cfg.answer_hits)}
        out.append(
            QueryExample(
                id=s.q.id, query=s.q.query, positives=s.q.positives, negatives=negs,
                answers=s.q.answers, source=s.q.source, metadata=metadata,
            )
        )
    timings["select_s"] += time.perf_counter() - t1
    return out
