"""``python -m data_prep mine``: BM25 hard-negative mining, sharded, resumable and deterministic.

For each query of a :class:`~data_prep.readers.Source`, retrieve the top ``depth`` passages of the
corpus with BM25 (:mod:`data_prep.bm25`), and pick ``negatives`` of them from the rank window
``START:END`` (a Python slice over the ranked hits: ``3:100`` skips the three best hits and keeps
ranks 4 to 100), either the best ones (``top``) or at random (``random``). A hit is never a
negative when it is one of the query's positives (same id or same text) or contains a gold answer
string (SQuAD normalisation, :func:`data_prep.text.contains_answer`): both are likely false
negatives and are counted. An optional dense filter drops a candidate whose similarity to the
query (a local sentence-embedding model) is within ``dense_margin`` of the best positive's. A share
``easy_ratio`` of the negatives are random corpus passages outside the retrieved list.

Why the default window 3:100: on the bundled NQ-open sample, BM25 hits other than the gold passage
contain a gold answer 13%, 7% and 4% of the time at ranks 1, 2 and 3, against 2.8% at ranks 4-5 and
under 2% from rank 6 (docs/benchmarks.md, "Mining"). The answer filter drops those wherever they
are; skipping ranks 1-3 also avoids the ranks where relevant passages that word the answer
differently are most likely (sentence-transformers #2639, FlagEmbedding #826).

Determinism: the random choices of a query come from ``random.Random(f"{seed}:{query_id}:...")``,
so a query's negatives do not depend on sharding, batch size or thread count.

Scale: queries are spooled once to ``DIR/work/queries.jsonl`` (removed after the merge) and
split into ``num_shards`` contiguous shards, processed in batches with a progress bar. The bm25s
backend (numpy, or numba for large runs) is fixed per run. A finished shard is written
atomically to ``DIR/shards/``; a rerun (after a kill, or on another machine with ``--shard i/N``)
skips finished shards, and refuses to continue when the parameters, the corpus or the queries
changed, unless ``--overwrite``. One process writes a folder at a time (``DIR.lock``,
:mod:`data_prep.locking`): a second run on it is refused while the first runs; a ``--shard i/N``
run locks its shard only (``DIR.shard-0000i-of-0000N.lock``), so shards run at once on several
machines, and the last to finish merges (or run them all in one ``--ray`` run). When every
shard exists they are merged into ``DIR/examples.jsonl`` (:class:`~data_prep.records.QueryExample`
JSONL; each negative's metadata has ``rank`` (1-based BM25 rank, null for easy ones), ``score``
(BM25 score), ``kind`` (``hard``/``easy``) and, with the dense filter, ``dense_sim``) and
``DIR/meta.json`` (parameters, tokenizer, corpus hash and size, counts, timings, package versions).

For the answer-existence task, ``--answer-hits K`` also keeps each query's top ``K`` hits
(positives aside, answer-bearing or not, with ``rank``, ``score`` and ``has_answer``) in the
example's ``metadata["answer_hits"]``: on-topic passages with and without the answer, which the
negatives cannot give since they exclude answer-bearing hits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import random
import shutil
import time
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from .bm25 import BACKENDS, ENGINES, BM25Index, BM25Params, open_index, resolve_backend
from .cluster import add_ray_args, ray_options
from .io import Rejects, atomic_write, require_records, write_json
from .locking import locks_output
from .records import Passage, QueryExample
from .text import contains_answer
from .tokenization import LANGUAGES, TokenizerConfig

logger = logging.getLogger(__name__)

SAMPLING = ("top", "random")
#: --bm25-backend: our engine's backends, or an existing Lucene index searched through Anserini
MINING_BACKENDS = BACKENDS + ("lucene",)
LUCENE_TEXTS = ("index", "corpus")
FIRST_IDS = 5  # query ids kept per reported condition (meta.json "examples")
DEFAULT_WINDOW = (3, 100)


def parse_window(spec: str) -> tuple[int, int | None]:
    """``"3:100"`` -> ``(3, 100)``; ``"3:"`` -> ``(3, None)`` (to the depth)."""
    try:
        a, b = spec.split(":")
        start = int(a) if a.strip() else 0
        end = int(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"--window must look like START:END (e.g. 3:100), got {spec!r}") from None
    return start, end


def parse_shard(spec: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)`` (shard 2 of 8, counting from 0)."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/N (e.g. 0/8), got {spec!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {spec}: need 0 <= i < N")
    return i, n


@dataclass
class MiningConfig:
    """What to mine and how. Every field except the run-only ones is part of the run fingerprint."""

    depth: int = 100  # BM25 hits retrieved per query
    window: tuple[int, int | None] = DEFAULT_WINDOW  # slice of the ranked hits to draw hard negatives from
    negatives: int = 7  # negatives per query (hard + easy); 7 + 1 positive = a group of 8
    sampling: str = "top"  # "top": best-ranked valid hits of the window; "random": uniform over it
    easy_ratio: float = 0.0  # share of the negatives drawn at random from the whole corpus
    seed: int = 13
    exclude_answers: bool = True  # drop hits that contain a gold answer string (likely false negatives)
    answer_hits: int = 0  # keep the top K hits (positives aside) in metadata["answer_hits"] for the answer task
    dense_model: str | None = None  # local sentence-embedding folder for the margin filter ("default": MiniLM)
    dense_margin: float = 0.05  # drop a candidate whose dense similarity >= best positive's - margin
    engine: str = "bm25s"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    bm25: BM25Params = field(default_factory=BM25Params)
    num_shards: int = 1
    bm25_backend: str = "auto"  # bm25s retrieval: pruned, numpy, numba, or auto (pruned); in run.json as resolved
    exhaustive: bool = False  # score every posting (the old path, for comparison): auto -> numpy or numba
    lucene_index: str | None = None  # --bm25-backend lucene: the Lucene index folder to search
    lucene_texts: str = "index"  # lucene: passages from the index's stored raw documents, or from the source's corpus
    lucene_pretokenized: bool = False  # lucene: the index holds our tokens (-pretokenized); tokenise queries alike
    # run-only settings: they change speed, never the output
    batch_size: int = 256
    n_threads: int = 0  # retrieval threads (0: all cores)
    dense_batch_size: int = 64
    show_progress: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")
        if self.depth < 1:
            raise ValueError(f"--depth must be >= 1, got {self.depth}")
        start, end = self.window
        end = self.depth if end is None else end
        if not 0 <= start < end <= self.depth:
            raise ValueError(f"--window {start}:{end} must satisfy 0 <= START < END <= depth ({self.depth})")
        self.window = (start, end)
        if self.negatives < 1:
            raise ValueError(f"--negatives must be >= 1, got {self.negatives}")
        if self.sampling not in SAMPLING:
            raise ValueError(f"--sampling must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")
        if not 0.0 <= self.easy_ratio <= 1.0:
            raise ValueError(f"--easy-ratio must be in [0, 1], got {self.easy_ratio}")
        if self.dense_margin < 0:
            raise ValueError(f"--dense-margin must be >= 0, got {self.dense_margin}")
        if self.num_shards < 1:
            raise ValueError(f"--num-shards must be >= 1, got {self.num_shards}")
        if self.bm25_backend not in MINING_BACKENDS:
            raise ValueError(f"--bm25-backend must be one of {', '.join(MINING_BACKENDS)}, got {self.bm25_backend!r}")
        if self.bm25_backend == "lucene":
            if not self.lucene_index:
                raise ValueError("--bm25-backend lucene needs --lucene-index DIR (an Anserini/Pyserini index folder)")
            if self.lucene_texts not in LUCENE_TEXTS:
                raise ValueError(f"--lucene-texts must be one of {', '.join(LUCENE_TEXTS)}, got {self.lucene_texts!r}")
            if self.exhaustive:
                raise ValueError("--exhaustive is a path of our engine; it does not apply to --bm25-backend lucene")
            if self.n_easy and self.lucene_texts != "corpus":
                raise ValueError("--easy-ratio draws random corpus passages: with --bm25-backend lucene use "
                                 "--lucene-texts corpus (the index's stored documents are read only for hits)")
        elif self.lucene_index:
            raise ValueError("--lucene-index is for --bm25-backend lucene")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.answer_hits < 0 or self.answer_hits > self.depth:
            raise ValueError(f"--answer-hits must be in 0..depth ({self.depth}), got {self.answer_hits}")

    @property
    def n_easy(self) -> int:
        return int(round(self.negatives * self.easy_ratio))

    @property
    def n_hard(self) -> int:
        return self.negatives - self.n_easy

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide the output (compared on resume)."""
        d = asdict(self)
        for k in ("batch_size", "n_threads", "dense_batch_size", "show_progress", "bm25_backend", "exhaustive", "lucene_index"):
            d.pop(k)  # (a Lucene index is in run.json by its fingerprint, not by its path)
        if self.bm25_backend != "lucene":
            for k in ("lucene_texts", "lucene_pretokenized"):
                d.pop(k)
        d["window"] = list(self.window)
        if self.dense_model is None:
            d.pop("dense_margin")
        return d


# --------------------------------------------------------------------------------------------
# Selection of one query's negatives
# --------------------------------------------------------------------------------------------


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
    from .dense import margin_scores

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


# --------------------------------------------------------------------------------------------
# Run: spool, shards, resume, merge
# --------------------------------------------------------------------------------------------


def _spool_queries(queries: Iterator[QueryExample], work: Path, show_progress: bool) -> tuple[str, int]:
    """Write the queries once to ``work/queries.jsonl`` (+ offsets); returns (sha256, count)."""
    h = hashlib.sha256()
    offsets = [0]
    with atomic_write(work / "queries.jsonl", "wb") as f:
        for q in tqdm(queries, desc="Read queries", unit=" queries", disable=not show_progress):
            line = (json.dumps(q.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
            f.write(line)
            h.update(line)
            offsets.append(offsets[-1] + len(line))
    with atomic_write(work / "queries.offsets.npy", "wb") as f:
        np.save(f, np.asarray(offsets, dtype=np.int64))
    return h.hexdigest(), len(offsets) - 1


def _read_spool(work: Path, lo: int, hi: int) -> Iterator[QueryExample]:
    offsets = np.load(work / "queries.offsets.npy", mmap_mode="r")
    with open(work / "queries.jsonl", "rb") as f:
        f.seek(int(offsets[lo]))
        for _ in range(lo, hi):
            yield QueryExample.from_dict(json.loads(f.readline()))


def shard_bounds(n: int, num_shards: int, i: int) -> tuple[int, int]:
    """Queries ``[lo, hi)`` of shard ``i`` (contiguous, sizes differ by at most one)."""
    return (n * i) // num_shards, (n * (i + 1)) // num_shards


def shard_paths(out: Path, i: int, num_shards: int) -> tuple[Path, Path]:
    stem = out / "shards" / f"shard-{i:05d}-of-{num_shards:05d}"
    return stem.with_suffix(".jsonl"), stem.with_suffix(".stats.json")


def _shard_done(out: Path, i: int, num_shards: int) -> bool:
    data, stats = shard_paths(out, i, num_shards)
    return data.exists() and stats.exists()


def _package_versions(dense: bool) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = ["crag-evaluators", "bm25s", "rank-bm25", "numpy", "numba", "jieba", "PyStemmer"]
    if dense:
        names += ["torch", "transformers", "faiss-cpu"]
    out = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    return out


def _check_run(out: Path, run: dict[str, Any], overwrite: bool) -> None:
    path = out / "run.json"
    if path.exists() and not overwrite:
        old = json.loads(path.read_text())
        if old != run:
            diffs = [k for k in sorted(set(old) | set(run)) if old.get(k) != run.get(k)]
            if "params" in diffs:
                diffs.remove("params")
                keys = sorted(set(old["params"]) | set(run["params"]))
                diffs += [f"params.{k}" for k in keys if old["params"].get(k) != run["params"].get(k)]
            raise ValueError(
                f"{out} holds a mining run with other settings or inputs ({', '.join(diffs)} differ); "
                "rerun with --overwrite to discard it, or choose another --output"
            )
    if overwrite:
        for name in ("shards", "examples.jsonl", "meta.json"):
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    write_json(path, run)


def lock_target(out: str | os.PathLike, shard: tuple[int, int] | None) -> Path:
    """What a mining run locks: its folder, or with ``--shard i/N`` that shard alone
    (``DIR.shard-0000i-of-0000N.lock``), so that the shards of one folder run at once on several
    machines while each shard, and a whole run, has one writer."""
    out = Path(out)
    return out if shard is None else out.parent / f"{out.name}.shard-{shard[0]:05d}-of-{shard[1]:05d}"


@locks_output(lambda a: lock_target(a["out_dir"], a["shard"]), "mining output")  # (data_prep.locking)
def run_mining(
    source,
    out_dir: str | os.PathLike,
    cfg: MiningConfig,
    index_dir: str | os.PathLike | None = None,
    shard: tuple[int, int] | None = None,
    overwrite: bool = False,
    rebuild_index: bool = False,
    rejects: Rejects | None = None,
    on_shard_done: Callable[[int], None] | None = None,
    ray=None,
) -> dict[str, Any] | None:
    """Mine ``source`` into ``out_dir``; returns meta.json's content once every shard is done.

    ``shard=(i, N)`` runs shard ``i`` of ``N`` only (``N`` must equal ``cfg.num_shards``).
    ``on_shard_done(i)`` is called after shard ``i`` is written (tests use it to simulate a kill).
    ``ray`` (:class:`~data_prep.cluster.RayOptions`): the shards run as Ray tasks
    (:mod:`data_prep.mining_ray`); the output is the same.
    """
    t_start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if shard is not None and shard[1] != cfg.num_shards:
        raise ValueError(f"--shard {shard[0]}/{shard[1]} does not match --num-shards {cfg.num_shards}")
    if ray is not None and (cfg.bm25_backend == "lucene" or cfg.engine != "bm25s"):
        raise ValueError("--ray mines with the bm25s engine and our backends (not --bm25-backend lucene or --engine "
                         "rank-bm25): Lucene runs its own threads on one machine")
    index_dir = Path(index_dir) if index_dir is not None else out / "index"
    if rebuild_index and index_dir.exists():
        shutil.rmtree(index_dir)

    where = ", ".join(source.files) or source.name

    def corpus() -> Iterator[Passage]:  # nothing to index: say why (all rejected, or none) naming the input
        return require_records(source.corpus(), where, rejects, "passages to index")

    if cfg.bm25_backend == "lucene":
        index = _open_lucene(cfg, out, index_dir, corpus)
    else:
        index = open_index(index_dir, corpus, cfg.tokenizer, cfg.engine, cfg.bm25, cfg.show_progress)
    work = out / "work"
    t0 = time.perf_counter()
    queries = require_records(source.queries(), where, rejects, "queries to mine")
    q_sha, n_queries = _spool_queries(queries, work, cfg.show_progress)  # atomic: no spool is left on error
    spool_s = time.perf_counter() - t0
    params = cfg.fingerprint()
    if cfg.bm25_backend == "lucene":
        params["bm25_backend"] = "lucene"
        logger.info("Lucene backend: %s (passages from the %s)", cfg.lucene_index, cfg.lucene_texts)
    elif cfg.engine == "bm25s":
        # numpy and numba may break exact score ties differently: one backend per run, recorded
        params["bm25_backend"] = resolve_backend(cfg.bm25_backend, n_queries, len(index), cfg.exhaustive)
        index.engine.set_backend(params["bm25_backend"])
        logger.info("bm25s backend: %s (%d queries x %d passages)", params["bm25_backend"], n_queries, len(index))
    run = {
        "params": params,
        "corpus_sha256": index.corpus_sha256,
        "corpus_size": len(index),
        "queries_sha256": q_sha,
        "n_queries": n_queries,
    }
    _check_run(out, run, overwrite)

    todo = [shard[0]] if shard is not None else list(range(cfg.num_shards))
    todo = [i for i in todo if not _shard_done(out, i, cfg.num_shards)]
    skipped = (1 if shard is not None else cfg.num_shards) - len(todo)
    if skipped:
        logger.info("%d shard(s) already finished in %s: skipped", skipped, out / "shards")
    if todo and ray is not None:
        from .mining_ray import run_shards

        run_shards(out, work, index, cfg, todo, n_queries, params.get("bm25_backend"), ray, on_shard_done)
        todo = []
    encoder = None
    if todo and cfg.dense_model is not None:
        from .dense import DenseEncoder

        encoder = DenseEncoder(None if cfg.dense_model == "default" else cfg.dense_model, batch_size=cfg.dense_batch_size)
    for i in todo:
        _run_shard(out, work, index, cfg, i, n_queries, encoder)
        if on_shard_done is not None:
            on_shard_done(i)

    if not all(_shard_done(out, i, cfg.num_shards) for i in range(cfg.num_shards)):
        left = [i for i in range(cfg.num_shards) if not _shard_done(out, i, cfg.num_shards)]
        logger.info("shards still to run: %s; merge happens when all exist", left)
        return None
    return _merge(out, cfg, index, run, rejects, spool_s, t_start, source)


def _open_lucene(cfg: MiningConfig, out: Path, store_dir: Path, corpus: Callable[[], Iterator[Passage]]):
    """The :class:`~data_prep.lucene.LuceneIndex` of a run: Java, the jar and the index checked
    first (each with what to install or give); with ``--lucene-texts corpus``, the source's corpus
    as a store in ``store_dir`` (built once, reused while its sha256 matches)."""
    from .lucene import Anserini, IdRows, LuceneIndex, check_index
    from .tokenization import Tokenizer

    index_dir = check_index(cfg.lucene_index)
    anserini = Anserini.find()
    tokenizer = Tokenizer(cfg.tokenizer) if cfg.lucene_pretokenized else None
    store, id_rows, sha = None, None, None
    if cfg.lucene_texts == "corpus":
        store, id_rows, sha = _corpus_store(Path(store_dir), corpus, cfg.show_progress)
    return LuceneIndex(index_dir, anserini, out / "work" / "lucene", cfg.bm25.k1, cfg.bm25.b, tokenizer=tokenizer,
                       store=store, id_rows=id_rows, corpus_sha256=sha)


def _corpus_store(directory: Path, corpus: Callable[[], Iterator[Passage]], show_progress: bool):
    """A corpus store with an id lookup (no BM25 arrays): built in a temporary folder and renamed
    into place, or reused when its recorded sha256 matches the corpus streamed again."""
    from .bm25 import CorpusStore, CorpusWriter, corpus_sha256, new_build_dir
    from .lucene import IdRows

    info_path = directory / "store.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        sha, n = corpus_sha256(tqdm(corpus(), desc="Verify corpus hash", unit=" passages", disable=not show_progress))
        if (sha, n) != (info["corpus_sha256"], info["n_docs"]):
            raise ValueError(f"{directory} holds the store of another corpus ({info['n_docs']} passages, sha256 "
                             f"{info['corpus_sha256'][:12]}...); use another --index-dir or delete that one")
        return CorpusStore(directory), IdRows.load(directory / "ids.npy"), sha
    tmp = new_build_dir(directory)
    try:
        writer = CorpusWriter(tmp)
        hashes = array("Q")  # 8 bytes a passage id, not the ids
        try:
            for p in tqdm(corpus(), desc="Store corpus", unit=" passages", disable=not show_progress, mininterval=1.0):
                writer.add(p)
                hashes.append(IdRows.hash_one(p.id))
        finally:
            writer.close()
        IdRows.from_hashes(np.frombuffer(hashes, dtype=np.uint64)).save(tmp / "ids.npy")
        del hashes
        write_json(tmp / "store.json", {"corpus_sha256": writer.hasher.hexdigest(), "n_docs": writer.hasher.count})
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info = json.loads(info_path.read_text())
    return CorpusStore(directory), IdRows.load(directory / "ids.npy"), info["corpus_sha256"]


def _run_shard(out: Path, work: Path, index: BM25Index, cfg: MiningConfig, i: int, n_queries: int, encoder) -> None:
    lo, hi = shard_bounds(n_queries, cfg.num_shards, i)
    data_path, stats_path = shard_paths(out, i, cfg.num_shards)
    t0 = time.perf_counter()
    timings: Counter = Counter()
    if cfg.bm25_backend == "lucene":  # one Anserini batch search for the shard; mining reads its hits
        index.prefetch([q.query for q in _read_spool(work, lo, hi)], cfg.depth, cfg.n_threads or (os.cpu_count() or 1))
        timings["lucene_s"] += time.perf_counter() - t0
    bar = tqdm(total=hi - lo, desc=f"Mine shard {i + 1}/{cfg.num_shards}", unit=" queries", disable=not cfg.show_progress)
    with atomic_write(data_path) as f:
        stats = mine_shard(f, _read_spool(work, lo, hi), index, cfg, encoder, timings, bar.update)
    bar.close()
    stats["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
    write_json(stats_path, {"shard": i, "queries": [lo, hi], **stats})


def mine_shard(f, queries: Iterable[QueryExample], index, cfg: MiningConfig, encoder, timings: Counter | None = None,
               progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Mine ``queries`` in batches of ``cfg.batch_size`` into the text file ``f`` (one example a
    line); returns the shard's counts, timings and first ids (one process and Ray workers alike)."""
    counts: Counter = Counter()
    timings = Counter() if timings is None else timings
    first_ids: dict[str, list[str]] = {}
    batch: list[QueryExample] = []
    for q in queries:
        batch.append(q)
        if len(batch) >= cfg.batch_size:
            _write_batch(f, mine_batch(batch, index, cfg, counts, encoder, timings, first_ids))
            if progress is not None:
                progress(len(batch))
            batch = []
    if batch:
        _write_batch(f, mine_batch(batch, index, cfg, counts, encoder, timings, first_ids))
        if progress is not None:
            progress(len(batch))
    return {"counts": dict(counts), "timings": {k: round(v, 3) for k, v in timings.items()}, "first_ids": first_ids}


def _write_batch(f, examples: list[QueryExample]) -> None:
    for ex in examples:
        f.write(json.dumps(ex.to_dict(), ensure_ascii=False) + "\n")


def _merge(
    out: Path, cfg: MiningConfig, index: BM25Index, run: dict, rejects: Rejects | None, spool_s: float, t_start: float, source
) -> dict[str, Any]:
    t0 = time.perf_counter()
    counts: Counter = Counter()
    shard_timings: Counter = Counter()
    first_ids: dict[str, list[str]] = {"no_positives": [], "no_passages": []}
    with atomic_write(out / "examples.jsonl") as f:
        for i in range(cfg.num_shards):
            data_path, stats_path = shard_paths(out, i, cfg.num_shards)
            st = json.loads(stats_path.read_text())
            counts.update(st["counts"])
            shard_timings.update(st["timings"])
            for key, ids in st.get("first_ids", {}).items():  # absent in shards of older versions
                first_ids[key] = (first_ids.get(key, []) + ids)[:FIRST_IDS]
            with open(data_path, encoding="utf-8") as src:
                shutil.copyfileobj(src, f, 1 << 20)
    n_q = counts["queries"]
    meta = {
        "command": "mine",
        "source": json.loads(json.dumps({"format": source.name, "files": list(source.files), "info": source.info}, default=str)),
        "engine": cfg.engine,
        "params": run["params"],
        "tokenizer": cfg.tokenizer.to_dict(),
        "bm25": cfg.bm25.to_dict(),
        "index_dir": str(index.dir),
        "corpus_sha256": index.corpus_sha256,
        "corpus_size": len(index),
        "queries_sha256": run["queries_sha256"],
        "counts": {
            "queries": n_q,
            "negatives": counts["negatives_hard"] + counts["negatives_easy"],
            "negatives_hard": counts["negatives_hard"],
            "negatives_easy": counts["negatives_easy"],
            "dropped_false_negative": {
                "answer_match": counts["dropped_answer_match"],
                "positive": counts["dropped_positive"],
                "dense_margin": counts["dropped_dense_margin"],
            },
            "queries_too_few_negatives": counts["queries_too_few_negatives"],
            "queries_no_hits": counts["queries_no_hits"],
            "dense_skipped_no_positive": counts["dense_skipped_no_positive"],
            "input_negatives_replaced": counts["input_negatives_replaced"],
            "answer_hits": counts["answer_hits"],
            "answer_hits_with_answer": counts["answer_hits_with_answer"],
            "queries_no_positives": counts["queries_no_positives"],
            "queries_no_passages": counts["queries_no_passages"],
        },
        "examples": {"first_no_positives": first_ids["no_positives"], "first_no_passages": first_ids["no_passages"]},
        "rejects": rejects.summary() if rejects is not None else {"total": 0, "by_reason": {}},
        "timings": {
            "index": index.info.get("timings", {}),
            "spool_queries_s": round(spool_s, 3),
            "shards": {k: round(v, 3) for k, v in shard_timings.items()},
            "merge_s": round(time.perf_counter() - t0, 3),
            "this_run_s": round(time.perf_counter() - t_start, 3),
            "queries_per_s": round(n_q / shard_timings["total_s"], 2) if shard_timings["total_s"] else None,
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": _package_versions(cfg.dense_model is not None),
    }
    write_json(out / "meta.json", meta)
    shutil.rmtree(out / "work", ignore_errors=True)  # the query spool; every run writes it afresh
    if counts["queries_no_positives"]:
        logger.warning("%d of %d queries have no positive passage (e.g. %s): build gives them no evaluator pairs",
                       counts["queries_no_positives"], n_q, ", ".join(first_ids["no_positives"]))
    if counts["queries_no_passages"]:
        logger.warning("%d queries have no positive and no mined negative (e.g. %s): build skips them "
                       "(skipped.input.no-passages)", counts["queries_no_passages"], ", ".join(first_ids["no_passages"]))
    logger.info(
        "mined %d queries: %d negatives (%d hard, %d easy); dropped %d answer matches, %d positives, %d by dense margin -> %s",
        n_q, meta["counts"]["negatives"], counts["negatives_hard"], counts["negatives_easy"],
        counts["dropped_answer_match"], counts["dropped_positive"], counts["dropped_dense_margin"], out / "examples.jsonl",
    )
    return meta


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """Shows a default only where there is one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in h:
            h += " (default: %(default)s)"
        return h


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mine",
        help="mine BM25 hard negatives (sharded, resumable)",
        description=__doc__.split("\n\n")[0],
        formatter_class=_Formatter,
    )
    g = p.add_argument_group("input / output")
    g.add_argument("--format", required=True, help="input format (see data_prep.readers.FORMATS)")
    g.add_argument("--input", help="input file or folder")
    g.add_argument("--corpus", help="corpus file, when the format keeps it apart")
    g.add_argument("--queries", help="queries file, when the format keeps them apart")
    g.add_argument("--qrels", help="qrels file, when the format has one")
    g.add_argument("--split", help="split name (formats with splits)")
    g.add_argument("--output", required=True, help="output folder (examples.jsonl, meta.json, shards/)")
    g.add_argument("--index-dir", help="BM25 index folder to build or reuse (default: OUTPUT/index)")
    g.add_argument("--rebuild-index", action="store_true", help="delete --index-dir and build it again")
    g.add_argument("--overwrite", action="store_true", help="discard finished shards of a run with other settings")
    g.add_argument("--skip-bad", action="store_true", help="skip malformed rows (written unchanged to OUTPUT/rejects)")

    g = p.add_argument_group("BM25")
    g.add_argument("--engine", choices=ENGINES, default="bm25s", help="bm25s (fast) or rank-bm25 (reference)")
    g.add_argument("--language", choices=LANGUAGES, default="en", help="tokenizer language (zh: jieba)")
    g.add_argument("--stem", action="store_true", help="Snowball stemming (PyStemmer)")
    g.add_argument("--no-stopwords", action="store_true", help="keep English stopwords")
    g.add_argument("--no-code-tokens", action="store_true", help="do not index codes like E-204 whole")
    g.add_argument("--no-lowercase", action="store_true", help="keep case")
    g.add_argument("--jieba-mode", choices=("search", "accurate"), default="search", help="zh: cut_for_search or lcut")
    g.add_argument("--bm25-backend", choices=MINING_BACKENDS, default="auto",
                   help="retrieval backend; pruned: exact top k that skips most postings (numba); numpy, numba: "
                   "bm25s's exhaustive scoring; auto: pruned (with --exhaustive: numba when queries x passages >= 5e9, "
                   "else numpy)")
    g.add_argument("--exhaustive", action="store_true",
                   help="score every posting of every query term (the path before pruning, for comparison)")
    g.add_argument("--lucene-index", help="with --bm25-backend lucene: an Anserini/Pyserini Lucene index folder, "
                   "searched with Anserini's batch search (Java 21+ and its fat jar: pip install 'crag-evaluators[bench]')")
    g.add_argument("--lucene-texts", choices=LUCENE_TEXTS, default="index",
                   help="lucene: read the hits' passages from the index (built with -storeRaw) or from the source's "
                   "corpus (its ids must be the index's docids; needed for --easy-ratio)")
    g.add_argument("--lucene-pretokenized", action="store_true",
                   help="lucene: the index holds our tokenizer's tokens (built with -pretokenized); queries are "
                   "tokenised the same way (else Lucene analyses the raw query text as it analysed the documents)")
    g.add_argument("--k1", type=float, default=1.5, help="BM25 term-frequency saturation")
    g.add_argument("--b", type=float, default=0.75, help="BM25 length normalisation")

    g = p.add_argument_group("negatives")
    g.add_argument("--depth", type=int, default=100, help="hits retrieved per query")
    g.add_argument("--window", default="3:100",
                   help="rank window START:END to draw hard negatives from, a Python slice of the ranked hits "
                   "(3:100 = ranks 4-100)")
    g.add_argument("--negatives", type=int, default=7, help="negatives per query")
    g.add_argument("--sampling", choices=SAMPLING, default="top", help="best valid hits of the window, or random ones")
    g.add_argument("--easy-ratio", type=float, default=0.0, help="share of random corpus passages among the negatives")
    g.add_argument("--keep-answer-hits", action="store_true", help="do not drop hits that contain a gold answer")
    g.add_argument("--answer-hits", type=int, default=0,
                   help="keep the top K hits (positives aside, answer-bearing or not) in metadata['answer_hits'] for "
                   "the answer-existence task; the evaluator's negatives still exclude answer-bearing hits")
    g.add_argument("--dense-model",
                   help="local sentence-embedding folder for the margin filter ('default': bundled all-MiniLM-L6-v2)")
    g.add_argument("--dense-margin", type=float, default=0.05,
                   help="drop candidates whose similarity is within this of the best positive's")
    g.add_argument("--seed", type=int, default=13)

    g = p.add_argument_group("scale")
    g.add_argument("--batch-size", type=int, default=256, help="queries per retrieval batch")
    g.add_argument("--threads", type=int, default=0, help="retrieval threads (0: all cores)")
    g.add_argument("--num-shards", type=int, default=None,
                   help="split the queries into N shards run in sequence (default 1; with --ray: the resumed run's, "
                   "else 4 per worker)")
    g.add_argument("--shard", help="run only shard i/N (for parallel machines)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("Ray cluster (data_prep.cluster)")
    add_ray_args(g, ship_index=True)
    p.set_defaults(func=main)


def config_from_args(args: argparse.Namespace) -> MiningConfig:
    tok = TokenizerConfig(
        language=args.language, lowercase=not args.no_lowercase, stopwords=not args.no_stopwords,
        stem=args.stem, code_tokens=not args.no_code_tokens, jieba_mode=args.jieba_mode,
    )
    num_shards = args.num_shards
    ray = ray_options(args)
    if ray is not None and args.shard:
        raise ValueError("--shard runs one shard here; with --ray the cluster runs them all: give one or the other")
    if num_shards is None:
        from .mining_ray import default_num_shards

        num_shards = default_num_shards(Path(args.output), ray) if ray is not None else 1
    if args.shard:
        _, n = parse_shard(args.shard)
        if num_shards not in (1, n):
            raise ValueError(f"--shard {args.shard} does not match --num-shards {num_shards}")
        num_shards = n
    return MiningConfig(
        depth=args.depth, window=parse_window(args.window), negatives=args.negatives, sampling=args.sampling,
        easy_ratio=args.easy_ratio, seed=args.seed, exclude_answers=not args.keep_answer_hits, answer_hits=args.answer_hits,
        dense_model=args.dense_model, dense_margin=args.dense_margin, engine=args.engine, tokenizer=tok,
        bm25=BM25Params(k1=args.k1, b=args.b), num_shards=num_shards, bm25_backend=args.bm25_backend, exhaustive=args.exhaustive,
        lucene_index=args.lucene_index, lucene_texts=args.lucene_texts, lucene_pretokenized=args.lucene_pretokenized,
        batch_size=args.batch_size,
        n_threads=args.threads, show_progress=not args.no_progress,
    )


@locks_output(lambda a: lock_target(a["args"].output, parse_shard(a["args"].shard) if a["args"].shard else None),
              "mining output")  # before the rejects are cleared
def main(args: argparse.Namespace) -> int:
    from .readers import open_source

    cfg = config_from_args(args)
    out = Path(args.output)
    rejects = None
    if args.skip_bad:
        shutil.rmtree(out / "rejects", ignore_errors=True)  # rewritten by every run
        rejects = Rejects(skip_bad=True, out_dir=out / "rejects")
    kwargs = {k: getattr(args, k) for k in ("input", "corpus", "queries", "qrels", "split") if getattr(args, k)}
    source = open_source(args.format, rejects=rejects, **kwargs)
    try:
        meta = run_mining(
            source, out, cfg, index_dir=args.index_dir, shard=parse_shard(args.shard) if args.shard else None,
            overwrite=args.overwrite, rebuild_index=args.rebuild_index, rejects=rejects, ray=ray_options(args),
        )
    finally:
        if rejects is not None:
            rejects.close()
    if meta is None:
        logger.warning("shard done; run the other shards (or rerun without --shard) to merge into %s", out / "examples.jsonl")
    return 0
