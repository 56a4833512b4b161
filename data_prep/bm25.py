"""BM25 indexes over a :class:`~data_prep.readers.Source` corpus, with two engines on the same tokens.

* ``bm25s`` (default, the fast path): a bm25s index (CSC matrix of precomputed per-term scores)
  built from pre-tokenised documents by a vectorised numpy builder, saved to disk and loaded back
  with ``mmap=True``. Large runs answer queries in batches with bm25s's numba backend
  (``bm25s.BM25.retrieve(..., n_threads=...)``); small ones, where numba's ~25 s compile does not
  pay off, score with bm25s's numpy code (``get_scores_from_ids``) and select the top k themselves
  (bm25s's numpy top-k is ~10x slower on mostly-zero scores). See :func:`resolve_backend`.
* ``rank-bm25`` (the reference): ``rank_bm25.BM25Okapi`` in memory.

Scoring. BM25Okapi scores ``sum_t idf(t) * tf (k1+1) / (tf + k1 (1 - b + b dl/avgdl))`` with
``idf = log((N - df + 0.5) / (df + 0.5))`` and negative idfs (terms in more than half the documents)
replaced by ``epsilon * mean(idf)``. In bm25s the term-frequency part of ``method="atire"`` is that
same expression, but none of its idf functions is Okapi's: ``robertson`` has the same formula but
clips negative values to 0 (no epsilon floor), ``lucene`` adds 1 inside the log, ``atire`` is
``log(N/df)``. bm25s stores ``idf * tf-part`` per (term, document), so we build the ``atire``
term-frequency part and multiply each term's column by Okapi's idf *with* the epsilon floor. The
stored scores then equal BM25Okapi's; what remains is float32 storage and summation (bm25s) against
float64 (rank-bm25), which can swap documents whose scores differ by ~1e-7 relative, and the
order among exactly tied scores. See ``tests/test_bm25.py`` and ``docs/benchmarks.md``.

Corpus store. The index directory keeps the corpus beside the index (a
:class:`~data_prep.corpus_store.CorpusStore`: ``corpus.jsonl`` plus ``offsets.npy``) for random
access by row, so mining never holds all texts in memory, and records a streaming sha256 of the
corpus (ids, titles, texts) in ``index.json``. :func:`open_index` reuses a directory built before
and refuses one whose corpus hash, tokenizer or BM25 parameters differ.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import time
from array import array
from collections import defaultdict
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from .corpus_store import (  # noqa: F401  (CorpusHasher: re-exported, see __all__)
    CorpusHasher,
    CorpusStore,
    CorpusWriter,
    corpus_sha256,
    new_build_dir,
    remove_stale_temps,
)
from .io import write_json
from .records import Passage
from .tokenization import Tokenizer, TokenizerConfig

logger = logging.getLogger(__name__)

ENGINES = ("bm25s", "rank-bm25")
INDEX_FORMAT = 1
INDEX_INFO = "index.json"
BM25S_DIR = "bm25s"


@dataclass(frozen=True)
class BM25Params:
    """BM25Okapi parameters (rank-bm25's defaults)."""

    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25  # floor for negative idf: epsilon * mean idf

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0 or self.epsilon < 0:
            raise ValueError(f"invalid BM25 parameters: k1={self.k1} (>= 0), b={self.b} (0..1), epsilon={self.epsilon} (>= 0)")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Scoring helpers
# --------------------------------------------------------------------------------------------


def okapi_idf(df: np.ndarray, n_docs: int, epsilon: float) -> np.ndarray:
    """rank-bm25's BM25Okapi idf for document frequencies ``df`` (float64).

    ``log(N - df + 0.5) - log(df + 0.5)``; negative values become ``epsilon * mean(idf)``, the mean
    taken over every term of the vocabulary (negatives included), as BM25Okapi does.
    """
    df = np.asarray(df, dtype=np.float64)
    idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    if idf.size:
        idf = np.where(idf < 0, epsilon * idf.mean(), idf)
    return idf


def build_csc(
    flat_ids: np.ndarray,
    doc_lens: np.ndarray,
    n_vocab: int,
    params: BM25Params,
    chunk_docs: int = 200_000,
    show_progress: bool = False,
) -> dict[str, Any]:
    """The bm25s score matrix for documents given as concatenated token ids.

    Returns ``{"data", "indices", "indptr", "num_docs"}`` in bm25s's layout: column ``t`` of the
    (documents x vocabulary) CSC matrix holds ``okapi_idf(t) * tf (k1+1) / (tf + k1 (1-b+b dl/avgdl))``
    for the documents containing ``t``. Works in chunks of ``chunk_docs`` documents so the
    (document, term) pairs never need more than a few bytes per token.
    """
    n_docs = len(doc_lens)
    doc_lens = np.asarray(doc_lens, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(doc_lens)])
    avgdl = float(doc_lens.mean()) if n_docs else 0.0
    docs_parts, toks_parts, tfs_parts = [], [], []
    chunks = range(0, n_docs, chunk_docs)
    for c0 in tqdm(chunks, desc="BM25 term counts", disable=not show_progress, leave=False):
        c1 = min(c0 + chunk_docs, n_docs)
        ids = np.asarray(flat_ids[starts[c0] : starts[c1]], dtype=np.int64)
        doc = np.repeat(np.arange(c0, c1, dtype=np.int64), doc_lens[c0:c1])
        keys, tf = np.unique(doc * n_vocab + ids, return_counts=True)  # sorted by (doc, term)
        docs_parts.append((keys // n_vocab).astype(np.int32))
        toks_parts.append((keys % n_vocab).astype(np.int32))
        tfs_parts.append(tf.astype(np.float32))
    docs = np.concatenate(docs_parts) if docs_parts else np.zeros(0, np.int32)
    toks = np.concatenate(toks_parts) if toks_parts else np.zeros(0, np.int32)
    tf = np.concatenate(tfs_parts) if tfs_parts else np.zeros(0, np.float32)
    del docs_parts, toks_parts, tfs_parts

    df = np.bincount(toks, minlength=n_vocab)
    idf = okapi_idf(df, n_docs, params.epsilon)
    norm = params.k1 * (1.0 - params.b + params.b * doc_lens / avgdl) if n_docs else np.zeros(0)
    scores = (idf[toks] * (tf * (params.k1 + 1.0)) / (tf + norm[docs])).astype(np.float32)
    del tf
    order = np.argsort(toks, kind="stable")  # by term, documents ascending within a term
    data = scores[order]
    del scores
    indices = docs[order]
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}


#: retrieval backends over the bm25s index: ``pruned`` (exact top k with dynamic pruning,
#: :mod:`data_prep.postings`), and the exhaustive paths of bm25s itself, ``numpy`` and ``numba``
#: (every posting of every query term scored). ``auto``: pruned when numba is installed.
BACKENDS = ("auto", "pruned", "numpy", "numba")
#: queries x passages from which the exhaustive "auto" picks numba. Measured on 2 cores: the numpy
#: path answers ~2,700 q/s at 50k passages and ~600 at 300k (1.4-1.8e8 query-passages/s), numba
#: ~5,500 and ~1,300 after compiling for ~20-25 s, so numba pays off from ~5e9.
NUMBA_MIN_WORK = 5e9


def resolve_backend(requested: str, n_queries: int, n_docs: int, exhaustive: bool = False) -> str:
    """The backend for a run. ``auto``: ``pruned`` when numba is installed (its kernels are cached
    on disk after the first compile), else ``numpy``. With ``exhaustive`` (the old path, kept for
    comparison) ``auto`` is numba when ``n_queries * n_docs >= NUMBA_MIN_WORK``, else numpy, and
    ``pruned`` is refused."""
    if requested not in BACKENDS:
        raise ValueError(f"bm25s backend must be one of {', '.join(BACKENDS)}, got {requested!r}")
    if exhaustive:
        if requested == "pruned":
            raise ValueError("--exhaustive scores every posting: it cannot use the pruned backend")
        if requested != "auto":
            return requested
        return "numba" if _numba_available() and n_queries * n_docs >= NUMBA_MIN_WORK else "numpy"
    if requested != "auto":
        return requested
    return "pruned" if _numba_available() else "numpy"


def _numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Engines
# --------------------------------------------------------------------------------------------

Hits = list[tuple[np.ndarray, np.ndarray]]  # per query: (rows, scores), best first, scores > 0


class Bm25sEngine:
    """A bm25s index on disk (``<index>/bm25s``), memory-mapped, answering batches of queries.

    The ``pruned`` backend reads the same arrays plus their block maxima (``blocks.*.npy`` in the
    same folder, written with the index; computed and saved on first use for an index built before
    them)."""

    name = "bm25s"

    def __init__(self, retriever: Any, directory: Path | None = None):
        self.retriever = retriever
        self.dir = directory
        self.vocab: dict[str, int] = retriever.vocab_dict
        self.n_docs = int(retriever.scores["num_docs"])
        self._blocks: dict[str, np.ndarray] | None = None

    @staticmethod
    def save(directory: Path, csc: dict[str, Any], vocab: dict[str, int], params: BM25Params) -> None:
        import bm25s

        # method="atire": its term-frequency part is BM25Okapi's; the idf is Okapi's (see module doc)
        r = bm25s.BM25(k1=params.k1, b=params.b, method="atire", idf_method="robertson")
        r.scores = csc
        r.vocab_dict = vocab
        r.nonoccurrence_array = None
        r.save(directory, show_progress=False)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True, backend: str = "numpy") -> "Bm25sEngine":
        import bm25s

        retriever = bm25s.BM25.load(directory, mmap=mmap, show_progress=False, backend="numpy")
        engine = cls(retriever, Path(directory))
        engine.set_backend(backend)
        return engine

    def set_backend(self, backend: str) -> None:
        """``pruned`` (exact top k skipping most postings; numba kernels, compiled once and cached),
        ``numpy`` (exhaustive, no start-up cost) or ``numba`` (bm25s's exhaustive kernels)."""
        if backend not in BACKENDS[1:]:
            raise ValueError(f"bm25s backend must be one of {', '.join(BACKENDS[1:])}, got {backend!r}")
        if backend in ("numba", "pruned") and not _numba_available():
            raise ValueError(f"the {backend} backend needs numba (pip install numba)")
        self.retriever.backend = "numba" if backend == "numba" else "numpy"
        self.backend = backend

    @property
    def blocks(self) -> dict[str, np.ndarray]:
        """The block maxima of the pruned search (memory-mapped; built and saved when missing)."""
        if self._blocks is None:
            self._blocks = load_blocks(self.dir, self.retriever.scores) if self.dir else None
            if self._blocks is None:
                from .postings import block_meta

                sc = self.retriever.scores
                self._blocks = block_meta(sc["indptr"], sc["indices"], sc["data"])
                if self.dir is not None:
                    with contextlib.suppress(OSError):
                        save_blocks(self.dir, self._blocks)
        return self._blocks

    def search(self, queries: Sequence[Sequence[str]], k: int, n_threads: int = 0) -> Hits:
        ids = [[self.vocab[t] for t in q if t in self.vocab] for q in queries]
        out: Hits = [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in queries]
        live = [i for i, q in enumerate(ids) if q]
        k = min(k, self.n_docs)
        if not live or k <= 0:
            return out
        if self.backend == "pruned":
            from . import postings

            res = postings.search([ids[i] for i in live], k, self.retriever.scores, self.blocks, n_threads=n_threads)
            for j, i in enumerate(live):
                out[i] = res[j]
        elif self.backend == "numba":
            docs, scores = self.retriever.retrieve(
                [ids[i] for i in live], k=k, sorted=True, show_progress=False, n_threads=n_threads
            )
            for j, i in enumerate(live):
                out[i] = _canonical(np.asarray(docs[j], dtype=np.int64), np.asarray(scores[j], dtype=np.float32))
        else:
            # bm25s scores; our own top-k: bm25s's numpy top-k (argpartition(scores, -k)) takes
            # ~2 ms on 50k mostly-zero scores, selecting from the negated scores ~0.2 ms; threads
            # only contend for the GIL here, so queries run one after the other
            for i in live:
                sc = self.retriever.get_scores_from_ids(ids[i])
                top = np.argpartition(-sc, k - 1)[:k] if k < len(sc) else np.arange(len(sc))
                out[i] = _canonical(top.astype(np.int64), sc[top].astype(np.float32))
        return out


BLOCKS_PREFIX = "blocks."
_BLOCK_ARRAYS = ("bptr", "blast", "bmax", "tmax")


def save_blocks(directory: Path, blocks: dict[str, np.ndarray]) -> None:
    """Write the block maxima beside the bm25s arrays (each file atomically)."""
    from .postings import BLOCK

    for name in _BLOCK_ARRAYS:
        tmp = directory / f".{BLOCKS_PREFIX}{name}.npy.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            np.save(f, blocks[name])
        os.replace(tmp, directory / f"{BLOCKS_PREFIX}{name}.npy")
    write_json(directory / f"{BLOCKS_PREFIX}json", {"block": BLOCK, "nnz": int(blocks["bptr"][-1])})


def load_blocks(directory: Path, scores: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The saved block maxima, memory-mapped, or None when absent or not of this index/block size."""
    from .postings import BLOCK

    info_path = directory / f"{BLOCKS_PREFIX}json"
    if not info_path.exists():
        return None
    info = json.loads(info_path.read_text())
    try:
        blocks = {n: np.load(directory / f"{BLOCKS_PREFIX}{n}.npy", mmap_mode="r") for n in _BLOCK_ARRAYS}
    except (OSError, ValueError):
        return None
    if info.get("block") != BLOCK or len(blocks["bptr"]) != len(scores["indptr"]):
        return None
    return blocks


def _canonical(rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hits with a positive score, by score descending then row (ties broken the same way always)."""
    keep = scores > 0
    rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


class RankBM25Engine:
    """``rank_bm25.BM25Okapi`` in memory: the reference implementation."""

    name = "rank-bm25"

    def __init__(self, corpus_tokens: list[list[str]], params: BM25Params):
        from rank_bm25 import BM25Okapi

        self.bm25 = BM25Okapi(corpus_tokens, k1=params.k1, b=params.b, epsilon=params.epsilon)
        self.n_docs = self.bm25.corpus_size

    def scores(self, query: Sequence[str]) -> np.ndarray:
        return self.bm25.get_scores(list(query))

    def search(self, queries: Sequence[Sequence[str]], k: int, n_threads: int = 0) -> Hits:
        out: Hits = []
        for q in queries:
            s = self.scores(q) if q else np.zeros(self.n_docs)
            top = np.argsort(-s, kind="stable")[: min(k, self.n_docs)]
            top = top[s[top] > 0]
            out.append((top.astype(np.int64), s[top].astype(np.float32)))
        return out


# --------------------------------------------------------------------------------------------
# Index directory
# --------------------------------------------------------------------------------------------


class IndexMismatchError(ValueError):
    """An existing index directory was built from another corpus or with other settings."""


class BM25Index:
    """An index directory: the stored corpus, its tokenizer, and one loaded engine."""

    def __init__(self, directory: Path, info: dict[str, Any], engine: Bm25sEngine | RankBM25Engine):
        self.dir = Path(directory)
        self.info = info
        self.engine = engine
        self.store = CorpusStore(self.dir)
        self.tokenizer = Tokenizer(TokenizerConfig.from_dict(info["tokenizer"]))

    @property
    def corpus_sha256(self) -> str:
        return self.info["corpus_sha256"]

    def __len__(self) -> int:
        return len(self.store)

    def search(self, queries: Sequence[str], k: int, n_threads: int = 0) -> Hits:
        """Top ``k`` rows and scores for each query text (documents with score 0 left out)."""
        return self.engine.search([self.tokenizer(q) for q in queries], k, n_threads=n_threads)


def _new_vocab() -> defaultdict:
    """token -> id, a new token getting the next id (``vocab[token]`` inserts; C-speed with map)."""
    vocab: defaultdict = defaultdict()
    vocab.default_factory = vocab.__len__
    return vocab


#: passages per tokenisation job, and the corpus size from which a build tokenises in worker
#: processes (below it, the pool's start-up costs more than it saves)
TOKENIZE_CHUNK = 4096
PARALLEL_MIN_DOCS = 100_000


_WORKER: dict[str, Any] = {}


def _tokenize_init(config: TokenizerConfig) -> None:
    """Worker start: its tokenizer and its own vocabulary, kept for the whole build."""
    _WORKER["tokenizer"] = Tokenizer(config)
    _WORKER["vocab"] = _new_vocab()


def _tokenize_chunk(texts: list[str]) -> tuple[int, bytes, bytes, list[str]]:
    """Worker: a chunk of texts as ids into this worker's vocabulary, the per-text token counts,
    and the tokens this chunk added to that vocabulary (in first-appearance order)."""
    tok, vocab = _WORKER["tokenizer"], _WORKER["vocab"]
    before = len(vocab)
    ids, lens = array("i"), array("q")
    get = vocab.__getitem__
    for t in texts:
        toks = tok(t)
        ids.extend(map(get, toks))
        lens.append(len(toks))
    new = list(islice(vocab, before, None)) if len(vocab) > before else []
    return os.getpid(), ids.tobytes(), lens.tobytes(), new


class _TokenSink:
    """Token ids of the whole corpus, flat, with one global vocabulary.

    Texts are tokenised in this process until :data:`PARALLEL_MIN_DOCS` have been seen, then in
    ``workers`` processes, a chunk at a time, merged here in order. Each worker keeps a vocabulary
    of its own and sends, with a chunk's ids, the tokens the chunk added to it; this process maps
    them onto the global vocabulary as it merges. A token new to the global vocabulary is new to the
    worker too (the worker has seen a subset of the merged chunks), so global ids are still handed
    out in first-appearance order: the vocabulary and the index are the same however many
    processes tokenised.
    """

    def __init__(self, tokenizer: Tokenizer, workers: int, keep_tokens: bool = False):
        self.tokenizer = tokenizer
        self.vocab = _new_vocab()
        self.flat, self.lens = array("i"), array("q")
        self.kept: list[list[str]] | None = [] if keep_tokens else None
        self.workers = 0 if keep_tokens else max(0, workers)
        self._pending: list[str] = []
        self._pool = None
        self._queue: Any = None
        self.n = 0

    def add(self, text: str) -> None:
        self.n += 1
        if self._pool is None and (self.workers < 1 or self.n <= PARALLEL_MIN_DOCS):
            toks = self.tokenizer(text)
            self.flat.extend(map(self.vocab.__getitem__, toks))
            self.lens.append(len(toks))
            if self.kept is not None:
                self.kept.append(toks)
            return
        self._pending.append(text)
        if len(self._pending) >= TOKENIZE_CHUNK:
            self._submit()

    def _submit(self) -> None:
        import multiprocessing as mp
        from collections import deque

        if self._pool is None:
            # fork where there is one: spawn would re-import the caller's __main__ (a script without
            # an ``if __name__ == "__main__"`` guard would fail). The workers only run the tokenizer:
            # no numba, torch or logging, so threads the parent holds do not matter to them.
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            self._pool = mp.get_context(method).Pool(self.workers, _tokenize_init, (self.tokenizer.config,))
            self._queue = deque()
            self._remap: dict[int, array] = {}
        self._queue.append(self._pool.apply_async(_tokenize_chunk, (self._pending,)))
        self._pending = []
        while len(self._queue) > 2 * self.workers:  # bounded: at most a few chunks in flight
            self._merge(self._queue.popleft().get())
        while self._queue and self._queue[0].ready():
            self._merge(self._queue.popleft().get())

    def _merge(self, result: tuple[int, bytes, bytes, list[str]]) -> None:
        pid, ids, lens, new = result
        remap = self._remap.setdefault(pid, array("i"))  # the worker's id -> global id
        remap.extend(map(self.vocab.__getitem__, new))
        if ids:
            table = np.frombuffer(remap, dtype=np.int32)
            self.flat.frombytes(table[np.frombuffer(ids, dtype=np.int32)].tobytes())
        self.lens.frombytes(lens)

    def finish(self) -> tuple[array, array, dict[str, int], list[list[str]] | None]:
        try:
            if self._pool is not None:
                if self._pending:
                    self._submit()
                while self._queue:
                    self._merge(self._queue.popleft().get())
        finally:
            self.close()
        return self.flat, self.lens, dict(self.vocab), self.kept

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _build_workers() -> int:
    """Tokenising processes for a large build: one per core (this process only reads, stores and
    merges, which keeps it idle part of the time); none on one core."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return n if n > 1 else 0


def _build_from_stream(
    tmp: Path,
    passages: Iterable[Passage],
    tokenizer: Tokenizer,
    keep_tokens: bool,
    show_progress: bool,
) -> tuple[dict[str, Any], array, array, dict[str, int], list[list[str]] | None]:
    """One pass: store each passage, hash it, tokenise it into flat token ids."""
    writer = CorpusWriter(tmp)
    sink = _TokenSink(tokenizer, _build_workers(), keep_tokens)
    try:
        for p in tqdm(passages, desc="Index corpus", unit=" passages", disable=not show_progress, mininterval=1.0):
            writer.add(p)
            sink.add(p.full_text(" "))
        flat, lens, vocab, kept = sink.finish()
    finally:
        sink.close()
        writer.close()
    stats = {"corpus_sha256": writer.hasher.hexdigest(), "n_docs": writer.hasher.count}
    return stats, flat, lens, vocab, kept


def _tokenize_store(store: CorpusStore, tokenizer: Tokenizer, show_progress: bool) -> tuple[array, array, dict[str, int]]:
    sink = _TokenSink(tokenizer, _build_workers())
    try:
        for p in tqdm(store, total=len(store), desc="Tokenise stored corpus", disable=not show_progress, mininterval=1.0):
            sink.add(p.full_text(" "))
        flat, lens, vocab, _ = sink.finish()
    finally:
        sink.close()
    return flat, lens, vocab


def _save_bm25s(
    directory: Path, flat: array, lens: array, vocab: dict[str, int], params: BM25Params, show_progress: bool
) -> float:
    """Build the bm25s arrays and save them to ``directory/bm25s`` (via a temporary folder)."""
    t0 = time.perf_counter()
    ids, lengths = np.frombuffer(flat, dtype=np.int32), np.frombuffer(lens, dtype=np.int64)
    blocks = None
    if _numba_available():  # counting sort and block maxima, compiled (same arrays as build_csc)
        from .postings import block_meta, build_csc_compiled

        csc = build_csc_compiled(ids, lengths, len(vocab), params)
        blocks = block_meta(csc["indptr"], csc["indices"], csc["data"])
    else:
        csc = build_csc(ids, lengths, len(vocab), params, show_progress=show_progress)
    remove_stale_temps(directory, BM25S_DIR)
    tmp = directory / f".{BM25S_DIR}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        Bm25sEngine.save(tmp, csc, vocab, params)
        if blocks is not None:
            save_blocks(tmp, blocks)
        shutil.rmtree(directory / BM25S_DIR, ignore_errors=True)  # an unfinished one, if any
        os.replace(tmp, directory / BM25S_DIR)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return time.perf_counter() - t0


def _check_reuse(directory: Path, info: dict[str, Any], tok: TokenizerConfig, params: BM25Params) -> None:
    if info.get("format") != INDEX_FORMAT:
        raise IndexMismatchError(f"index {directory}: unknown index format {info.get('format')!r} (expected {INDEX_FORMAT})")
    if info["tokenizer"] != tok.to_dict():
        raise IndexMismatchError(
            f"index {directory} was built with tokenizer {json.dumps(info['tokenizer'], sort_keys=True)}, "
            f"but this run asks for {json.dumps(tok.to_dict(), sort_keys=True)}; use another --index-dir "
            "or delete that one"
        )
    if info["bm25"] != params.to_dict():
        raise IndexMismatchError(
            f"index {directory} was built with BM25 parameters {info['bm25']}, but this run asks for "
            f"{params.to_dict()}; use another --index-dir or delete that one"
        )


def open_index(
    index_dir: str | os.PathLike,
    corpus: Callable[[], Iterator[Passage]],
    tokenizer_config: TokenizerConfig | None = None,
    engine: str = "bm25s",
    params: BM25Params | None = None,
    show_progress: bool = True,
) -> BM25Index:
    """Build the index in ``index_dir`` from ``corpus()``, or reuse the one there.

    Reuse streams the corpus once more to check its sha256 and refuses
    (:class:`IndexMismatchError`) a directory built from another corpus or with another tokenizer
    or BM25 parameters. A new index is built in a temporary folder and renamed into place, so a
    killed build never leaves a directory that looks complete. ``info["timings"]`` says what this
    call spent (build or verification).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown BM25 engine {engine!r}; choose from {', '.join(ENGINES)}")
    tok = tokenizer_config or TokenizerConfig()
    params = params or BM25Params()
    tokenizer = Tokenizer(tok)
    index_dir = Path(index_dir)
    t0 = time.perf_counter()
    if (index_dir / INDEX_INFO).exists():
        info = json.loads((index_dir / INDEX_INFO).read_text())
        _check_reuse(index_dir, info, tok, params)
        sha, n = corpus_sha256(tqdm(corpus(), desc="Verify corpus hash", unit=" passages", disable=not show_progress))
        if sha != info["corpus_sha256"] or n != info["n_docs"]:
            raise IndexMismatchError(
                f"index {index_dir} was built from another corpus (sha256 {info['corpus_sha256'][:12]}..., "
                f"{info['n_docs']} passages) than this input (sha256 {sha[:12]}..., {n} passages); "
                "use another --index-dir or delete that one"
            )
        timings = {"verify_s": round(time.perf_counter() - t0, 3)}
        kept = None
        if engine == "bm25s" and not (index_dir / BM25S_DIR / "params.index.json").exists():
            store = CorpusStore(index_dir)
            flat, lens, vocab = _tokenize_store(store, tokenizer, show_progress)
            store.close()
            timings["bm25s_build_s"] = round(_save_bm25s(index_dir, flat, lens, vocab, params, show_progress), 3)
            del flat, lens, vocab
        logger.info("reusing index %s (%d passages, sha256 %s)", index_dir, info["n_docs"], info["corpus_sha256"][:12])
    else:
        info, kept, timings = _build_index_dir(index_dir, corpus, tok, tokenizer, engine, params, show_progress)
    if engine == "bm25s":
        eng: Bm25sEngine | RankBM25Engine = Bm25sEngine.load(index_dir / BM25S_DIR, mmap=True)
    else:
        if kept is None:
            store = CorpusStore(index_dir)
            bar = tqdm(store, total=len(store), desc="Tokenise stored corpus", disable=not show_progress)
            kept = [tokenizer(p.full_text(" ")) for p in bar]
            store.close()
        t1 = time.perf_counter()
        eng = RankBM25Engine(kept, params)
        timings["rank_bm25_build_s"] = round(time.perf_counter() - t1, 3)
    info = dict(info, timings=timings)
    return BM25Index(index_dir, info, eng)


def load_index(index_dir: str | os.PathLike, backend: str = "auto") -> BM25Index:
    """Open an index directory built before, without reading its corpus again (no hash check:
    use :func:`open_index` to check that it belongs to a given corpus). bm25s engine only."""
    index_dir = Path(index_dir)
    if not (index_dir / INDEX_INFO).exists():
        raise FileNotFoundError(f"{index_dir} is not a BM25 index folder (no {INDEX_INFO}); build one with open_index")
    info = json.loads((index_dir / INDEX_INFO).read_text())
    if info.get("format") != INDEX_FORMAT:
        raise IndexMismatchError(f"index {index_dir}: unknown index format {info.get('format')!r} (expected {INDEX_FORMAT})")
    if not (index_dir / BM25S_DIR / "params.index.json").exists():
        raise IndexMismatchError(f"index {index_dir} has no bm25s arrays; open it with open_index to build them")
    eng = Bm25sEngine.load(index_dir / BM25S_DIR, mmap=True, backend=resolve_backend(backend, 0, info["n_docs"]))
    return BM25Index(index_dir, dict(info, timings={}), eng)


def _build_index_dir(index_dir, corpus, tok, tokenizer, engine, params, show_progress):
    t0 = time.perf_counter()
    tmp = new_build_dir(index_dir)
    try:
        stats, flat, lens, vocab, kept = _build_from_stream(tmp, corpus(), tokenizer, engine == "rank-bm25", show_progress)
        if stats["n_docs"] == 0:
            raise ValueError("the corpus is empty: nothing to index")
        timings = {"store_tokenize_s": round(time.perf_counter() - t0, 3)}
        if engine == "bm25s":
            timings["bm25s_build_s"] = round(_save_bm25s(tmp, flat, lens, vocab, params, show_progress), 3)
        del flat, lens, vocab
        info = {
            "format": INDEX_FORMAT,
            "corpus_sha256": stats["corpus_sha256"],
            "n_docs": stats["n_docs"],
            "tokenizer": tok.to_dict(),
            "bm25": params.to_dict(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json(tmp / INDEX_INFO, info)
        try:
            os.rename(tmp, index_dir)
        except OSError:
            # another process finished the same index first: use theirs if it matches
            other = json.loads((index_dir / INDEX_INFO).read_text())
            _check_reuse(index_dir, other, tok, params)
            if other["corpus_sha256"] != info["corpus_sha256"]:
                raise IndexMismatchError(f"index {index_dir} appeared while building, from another corpus") from None
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno == errno.ENOSPC:
            raise OSError(e.errno, f"the disk filled while building the index {index_dir} ({e}); the unfinished "
                          "build was removed and no index was left; free space (the index takes about the corpus "
                          "file's size again, plus 8 bytes a token) and rerun") from e
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    timings["total_build_s"] = round(time.perf_counter() - t0, 3)
    logger.info("built index %s: %d passages in %.1f s", index_dir, info["n_docs"], timings["total_build_s"])
    return info, kept, timings


def topk_agreement(
    a: Sequence[int], b: Sequence[int], b_scores: np.ndarray | None = None, k: int | None = None, rel_tol: float = 1e-5
) -> float:
    """Share of ``a``'s top-k found in ``b``'s top-k; with ``b_scores`` (the full score vector of
    ``b``'s engine), a document of ``a`` that is missing from ``b`` but ties ``b``'s k-th score
    (within ``rel_tol``) also counts: the two lists differ only in how ties were broken."""
    k = k or max(len(a), 1)
    a, b = list(a)[:k], list(b)[:k]
    if not a and not b:
        return 1.0
    sb = set(b)
    hit = 0
    for d in a:
        if d in sb:
            hit += 1
        elif b_scores is not None and b:
            kth = float(b_scores[b[-1]])
            if float(b_scores[d]) >= kth - rel_tol * max(abs(kth), 1e-12):
                hit += 1
    return hit / max(len(a), len(b))


def topk_equal(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], rel_tol: float = 0.0) -> bool:
    """Two top-k lists ``(rows, scores)`` are the same up to the order of tied scores: the same
    scores position by position (within ``rel_tol``), and the same rows wherever the score is above
    the last one (documents tied at the cut may differ: which of them make the cut is a tie rule)."""
    (ra, sa), (rb, sb) = a, b
    if len(ra) != len(rb):
        return False
    if not len(ra):
        return True
    sa, sb = np.asarray(sa, np.float64), np.asarray(sb, np.float64)
    if not np.allclose(sa, sb, rtol=rel_tol, atol=0.0):
        return False
    cut = min(sa[-1], sb[-1]) * (1 + rel_tol)
    above_a = sorted(zip(np.asarray(ra)[sa > cut].tolist(), sa[sa > cut].tolist()))
    above_b = sorted(zip(np.asarray(rb)[sb > cut].tolist(), sb[sb > cut].tolist()))
    if [r for r, _ in above_a] != [r for r, _ in above_b]:
        return False
    return bool(np.allclose([s for _, s in above_a], [s for _, s in above_b], rtol=rel_tol, atol=0.0))


__all__ = [
    "ENGINES",
    "BM25Params",
    "BM25Index",
    "Bm25sEngine",
    "RankBM25Engine",
    "CorpusStore",
    "CorpusHasher",
    "IndexMismatchError",
    "build_csc",
    "corpus_sha256",
    "okapi_idf",
    "load_index",
    "new_build_dir",
    "open_index",
    "remove_stale_temps",
    "resolve_backend",
    "topk_agreement",
    "topk_equal",
]
