"""The on-disk hybrid index of chunks: BM25, dense embeddings and a metadata code map.

Layout of an index folder (``python -m pipeline index`` or :func:`build_index`)::

    <index>/
      index.json          format, version, counts, chunking, tokenizer, dense model, build time
      bm25/               a data_prep BM25 index of the chunks (data_prep.bm25.open_index):
        corpus.jsonl        the chunks as Passages (Chunk.to_passage), one per line: row = line
        offsets.npy         byte offset of each row
        bm25s/              the bm25s score matrix and vocabulary
        index.json          its corpus sha256, tokenizer and BM25 parameters
      dense.npy           float32 (rows x dim) unit vectors of "title\\ntext" (absent when built
                          with dense_model="none")
      metadata_map.json   {code: [rows]}: the codes (find_codes, lower-cased) in each chunk's
                          metadata values and title

A row is a chunk's position in ``bm25/corpus.jsonl``; every part is indexed by it.

The folder is built under a temporary name beside ``out_dir`` and renamed into place at the end,
so a killed build never leaves a folder that looks complete; ``index.json`` is written last.
:meth:`HybridIndex.load` refuses a folder that is missing, empty, not a pipeline index, or
incomplete, naming what is missing. The dense encoder is loaded lazily, once per model folder and
process (:func:`load_encoder`), on the first :meth:`HybridIndex.dense_search`; the faiss
``IndexFlatIP`` over ``dense.npy`` is built then too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from data_prep.bm25 import BM25Index, Bm25sEngine, open_index
from data_prep.io import write_json
from data_prep.tokenization import TokenizerConfig

from .chunking import check_chunking
from .recall import DEFAULT_CODE_PATTERNS, find_codes
from .types import Chunk

if TYPE_CHECKING:
    from data_prep.dense import DenseEncoder
    from data_prep.io import Rejects

logger = logging.getLogger(__name__)

INDEX_FORMAT = "crag-pipeline-index"
INDEX_VERSION = 1
INDEX_INFO = "index.json"
BM25_DIR = "bm25"
DENSE_FILE = "dense.npy"
#: optional: the vectors of every chunk's refinement strips, and their (row, start, end)
STRIPS_FILE = "strips.npy"
STRIP_SPANS_FILE = "strip_spans.npy"
METADATA_FILE = "metadata_map.json"
#: what the dense route embeds for a chunk (Passage.full_text("\n"); the text alone when untitled)
DENSE_TEXT = "title\ntext"
#: the files a complete BM25 part has (relative to the index folder)
BM25_FILES = (
    f"{BM25_DIR}/index.json",
    f"{BM25_DIR}/corpus.jsonl",
    f"{BM25_DIR}/offsets.npy",
    f"{BM25_DIR}/bm25s/params.index.json",
    f"{BM25_DIR}/bm25s/vocab.index.json",
    f"{BM25_DIR}/bm25s/data.csc.index.npy",
    f"{BM25_DIR}/bm25s/indices.csc.index.npy",
    f"{BM25_DIR}/bm25s/indptr.csc.index.npy",
)
_HOW_TO_BUILD = "build it with `python -m pipeline index`"


# --------------------------------------------------------------------------------------------
# Dense encoder
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def load_encoder(path: str, device: str | None = None) -> "DenseEncoder":
    """A :class:`data_prep.dense.DenseEncoder` for the model folder ``path``, loaded once per
    process (indexes over the same model share it). A bi-encoder evaluator export is read at its
    manifest's ``max_length``, so its grading can reuse the index's vectors."""
    from data_prep.dense import DenseEncoder

    length = _bi_encoder_length(Path(path))
    return DenseEncoder(path, device=device, **({"max_length": length} if length else {}))


@lru_cache(maxsize=8)
def _fingerprint_of(model) -> str:
    from inference.modeling import weights_fingerprint

    return weights_fingerprint(model)


def encoder_fingerprint(encoder: "DenseEncoder") -> str:
    """:func:`inference.modeling.weights_fingerprint` of a dense encoder's weights (once per
    loaded model): recorded in ``index.json`` and checked when the index loads its encoder."""
    model = getattr(encoder, "model", None)
    return _fingerprint_of(model) if model is not None else ""


def _bi_encoder_length(folder: Path) -> int | None:
    """``max_length`` of a bi-encoder evaluator export's manifest (None for any other folder)."""
    if not (folder / "evaluator.json").is_file():
        return None
    from inference.loading import read_export

    m = read_export(folder).manifest
    return m.spec.max_length if m.spec.head == "bi-encoder" else None


def _dense_spec(dense_model: str | os.PathLike | None) -> dict[str, Any] | None:
    """``None`` -> the offline MiniLM; ``"none"`` -> no dense part; else a local model folder."""
    if dense_model is not None and str(dense_model).lower() == "none":
        return None
    if dense_model is None:
        from data_prep.dense import default_minilm_path

        return {"model": "sentence-transformers/all-MiniLM-L6-v2", "path": str(default_minilm_path()), "default": True}
    path = Path(dense_model)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"dense model folder {path} not found or has no config.json (or pass dense_model='none')")
    return {"model": path.name, "path": str(path.resolve()), "default": False}


# --------------------------------------------------------------------------------------------
# Metadata code map
# --------------------------------------------------------------------------------------------


def metadata_values(chunk: Chunk, fields: Sequence[str] | None = None) -> list[str]:
    """The strings the code map reads from a chunk: its title and its metadata's string and
    number values (lists of them too), all fields or only ``fields``."""
    out = [chunk.title] if chunk.title else []
    for key, v in chunk.metadata.items():
        if fields is not None and key not in fields:
            continue
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str):
                out.append(x)
            elif isinstance(x, (int, float)) and not isinstance(x, bool):
                out.append(str(x))
    return out


def chunk_codes(chunk: Chunk, fields: Sequence[str] | None = None, patterns: Sequence[str] = DEFAULT_CODE_PATTERNS) -> set[str]:
    """The lower-cased codes (:func:`~pipeline.recall.find_codes`) in a chunk's title and metadata."""
    return {c.lower() for v in metadata_values(chunk, fields) for c in find_codes(v, patterns)}


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


def build_index(
    chunks: Iterable[Chunk],
    out_dir: str | os.PathLike,
    tokenizer: TokenizerConfig | None = None,
    dense_model: str | os.PathLike | None = None,
    metadata_fields: Sequence[str] | None = None,
    show_progress: bool = False,
    *,
    chunking: dict[str, Any] | None = None,
    code_patterns: Sequence[str] = DEFAULT_CODE_PATTERNS,
    overwrite: bool = False,
    encoder: "DenseEncoder | None" = None,
    batch_size: int = 256,
    strip_words: int | None = None,
    ray=None,
    rejects: "Rejects | None" = None,
) -> "HybridIndex":
    """Index ``chunks`` into ``out_dir`` and return the loaded index.

    ``tokenizer``: the BM25 tokenizer (English by default; ``TokenizerConfig(language="zh")`` for
    Chinese). ``dense_model``: ``None`` for the offline all-MiniLM-L6-v2, a local model folder, or
    ``"none"`` for a BM25-only index (``encoder``: a :class:`~data_prep.dense.DenseEncoder` already
    loaded, used instead of loading ``dense_model``; ignored with ``"none"``).
    ``metadata_fields``: the metadata keys the code map reads (all by default; the title always).
    ``chunking``: the chunking settings, recorded in ``index.json``. ``overwrite`` replaces an
    existing pipeline index at ``out_dir`` (only once the new one is complete); without it an
    existing non-empty folder is an error. ``strip_words``: also embed each chunk's refinement strips
    (its sentences, cut into windows of this many words, as :func:`pipeline.refine.sentence_strips`
    does; 50 is refinement's default), so that a bi-encoder evaluator of the same weights refines
    without a model pass (about three times the embedding work; needs a dense model).
    ``ray`` (:class:`data_prep.cluster.RayOptions`): the embedding batches run on a Ray actor pool
    (:func:`embed_on_ray`, each actor loading the model once); the batches and so the vectors are
    the one-process run's. ``rejects``: the :class:`~data_prep.io.Rejects` of the reader that made
    ``chunks`` (``--skip-bad``); its counts, once the chunks are read, go into ``index.json``
    (``"rejects": {"total", "by_reason", "dir"}``).
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    tok = tokenizer or TokenizerConfig()
    if chunking is not None:
        check_chunking(chunking.get("max_chars", 256), chunking.get("overlap", 32), chunking.get("unit", "chars"))
    fields = list(metadata_fields) if metadata_fields is not None else None
    patterns = tuple(code_patterns)
    _check_target(out, overwrite)
    dense = _dense_spec(dense_model)
    if strip_words is not None and (dense is None or isinstance(strip_words, bool) or not isinstance(strip_words, int)
                                    or strip_words < 4):
        raise ValueError("strip_words needs a dense model and a window of at least 4 words"
                         if dense is None else f"strip_words must be an integer >= 4, got {strip_words!r}")
    if dense is not None and encoder is not None:  # a loaded encoder stands for the model it was loaded from
        dense = {"model": Path(encoder.path).name, "path": str(Path(encoder.path).resolve()), "default": False}
    elif dense is not None:
        encoder = load_encoder(dense["path"])
    else:
        encoder = None

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        stats: dict[str, Any] = {}
        t1 = time.perf_counter()
        bm25 = open_index(tmp / BM25_DIR, _once(_passages(chunks, stats)), tokenizer_config=tok, engine="bm25s",
                          show_progress=show_progress)
        n = len(bm25)
        t_bm25 = time.perf_counter() - t1

        code_map: dict[str, list[int]] = defaultdict(list)
        emb = None
        if dense is not None:
            assert encoder is not None
            emb = np.lib.format.open_memmap(tmp / DENSE_FILE, mode="w+", dtype=np.float32, shape=(n, encoder.dim))
        batch: list[str] = []
        row0 = 0
        strip_vecs: list[np.ndarray] = []
        strip_spans: list[tuple[int, int, int]] = []
        strip_batch: list[str] = []
        jobs: list[tuple[int | None, list[str]]] = []  # (first row, or None for strips; texts) to embed on Ray

        def embed(texts: list[str], row: int | None) -> None:
            if ray is not None:
                jobs.append((row, texts))
            elif row is None:
                strip_vecs.append(encoder.encode(texts))
            else:
                emb[row : row + len(texts)] = encoder.encode(texts)

        if strip_words is not None:
            from .refine import sentence_strips
        desc = ("Read chunks" if ray is not None else "Embed chunks") if emb is not None else "Map codes"
        bar = tqdm(bm25.store, total=n, desc=desc, disable=not show_progress)
        for row, p in enumerate(bar):
            for code in sorted(chunk_codes(Chunk.from_passage(p), fields, patterns)):
                code_map[code].append(row)
            if emb is not None:
                batch.append(p.full_text("\n"))
                if len(batch) >= batch_size:
                    embed(batch, row0)
                    row0 += len(batch)
                    batch = []
            if strip_words is not None:
                for a, b in sentence_strips(p.text, strip_words):
                    strip_spans.append((row, a, b))
                    strip_batch.append(type(p)(p.id, p.text[a:b], p.title).full_text("\n"))
                if len(strip_batch) >= batch_size:
                    embed(strip_batch, None)
                    strip_batch = []
        if emb is not None:
            if batch:
                embed(batch, row0)
            if strip_words is not None and strip_batch:
                embed(strip_batch, None)
            if ray is not None:
                for (row, texts), vecs in zip(jobs, embed_on_ray(ray, encoder.path, jobs, show_progress)):
                    if row is None:
                        strip_vecs.append(vecs)
                    else:
                        emb[row : row + len(texts)] = vecs
            if strip_words is not None:
                np.save(tmp / STRIPS_FILE, np.concatenate(strip_vecs) if strip_vecs else
                        np.zeros((0, encoder.dim), dtype=np.float32))
                np.save(tmp / STRIP_SPANS_FILE, np.asarray(strip_spans, dtype=np.int64).reshape(-1, 3))
                dense["strips"] = {"file": STRIPS_FILE, "spans": STRIP_SPANS_FILE, "window_words": strip_words,
                                   "n": len(strip_spans)}
            emb.flush()
            del emb
            dense.update({"dim": int(encoder.dim), "file": DENSE_FILE, "text": DENSE_TEXT, "normalized": True,
                          "max_length": int(getattr(encoder, "max_length", 0)) or None,
                          "fingerprint": encoder_fingerprint(encoder)})
        # (no bm25.store.close(): CorpusStore.__del__ closes the descriptor again, which by then may
        # belong to the store of the loaded index)
        bm25_info = {"dir": BM25_DIR, "engine": "bm25s", "params": bm25.info["bm25"], "corpus_sha256": bm25.corpus_sha256}
        del bm25
        write_json(tmp / METADATA_FILE, {c: code_map[c] for c in sorted(code_map)})

        n_codes = len(code_map)
        info = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "n_chunks": n,
            "n_docs": stats["n_docs"],
            "chunking": chunking,
            "tokenizer": tok.to_dict(),
            "bm25": bm25_info,
            "dense": dense,
            "metadata": {"file": METADATA_FILE, "fields": fields, "code_patterns": list(patterns), "n_codes": n_codes},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build_s": {"bm25": round(t_bm25, 3), "total": round(time.perf_counter() - t0, 3)},
        }
        if rejects is not None:
            info["rejects"] = {**rejects.summary(), "dir": str(rejects.out_dir) if rejects.total else None}
        write_json(tmp / INDEX_INFO, info)
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("built pipeline index %s: %d chunks of %d documents, %s, %d codes in %.1f s", out, n,
                stats["n_docs"], f"dense {dense['model']}" if dense else "BM25 only", n_codes,
                info["build_s"]["total"])
    return HybridIndex.load(out, encoder=encoder)


class BlockEmbedder:
    """The Ray Data actor of :func:`embed_on_ray`: the dense model loaded once; a block of whole
    embedding batches in (``text``, ``job``), their vectors out (one row: the bytes, float32)."""

    def __init__(self, path: str):
        self.encoder = load_encoder(path)

    def __call__(self, block):
        import pyarrow as pa

        texts, jobs = block.column("text").to_pylist(), block.column("job").to_pylist()
        out, start = [], 0
        for end in range(1, len(jobs) + 1):  # each job is one batch of the one-process run, encoded alone
            if end == len(jobs) or jobs[end] != jobs[start]:
                out.append(np.asarray(self.encoder.encode(texts[start:end]), dtype=np.float32))
                start = end
        return pa.table({"vectors": [np.concatenate(out).tobytes()], "dim": [int(out[0].shape[1])]})


def embed_on_ray(opts, model_path: str, jobs: list[tuple[Any, list[str]]], show_progress: bool = False) -> list[np.ndarray]:
    """The vectors of each job's texts (a job: one batch, encoded as one ``encode`` call, as the
    one-process build does), on a Ray actor pool of ``opts`` (``--ray-workers``, GPUs per worker)."""
    import pyarrow as pa

    from data_prep.cluster import connect, map_batches_ordered, n_workers

    ray = connect(opts)
    workers = n_workers(ray, opts)
    total = sum(len(t) for _, t in jobs)
    per_block = max(1, total // (8 * workers))
    blocks, sizes, cur, cur_sizes = [], [], [], []
    for j, (_, texts) in enumerate(jobs):
        cur.append((j, texts))
        if sum(len(t) for _, t in cur) >= per_block or j == len(jobs) - 1:
            blocks.append(ray.put(pa.table({"text": [x for _, t in cur for x in t],
                                            "job": [k for k, t in cur for _ in t]})))
            sizes.append([len(t) for _, t in cur])
            cur = []
    result: list[np.ndarray] = []
    if not blocks:
        return result
    bar = tqdm(total=total, desc=f"Embed chunks on Ray ({workers} workers)", disable=not show_progress)
    for lens, out in zip(sizes, map_batches_ordered(ray, blocks, BlockEmbedder, workers, opts,
                                                     fn_constructor_args=(str(model_path),))):
        vecs = np.frombuffer(out.column("vectors")[0].as_py(), dtype=np.float32).reshape(-1, out.column("dim")[0].as_py())
        if len(vecs) != sum(lens):
            raise RuntimeError(f"Ray Data returned {len(vecs)} vectors for a block of {sum(lens)} texts")
        at = 0
        for n in lens:
            result.append(vecs[at : at + n])
            at += n
        bar.update(sum(lens))
    bar.close()
    return result


def _check_target(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    if not (out / INDEX_INFO).exists():
        raise FileExistsError(f"{out} exists, is not empty and is not a pipeline index: refusing to replace it")
    if not overwrite:
        raise FileExistsError(f"{out} already holds an index (pass overwrite=True, or --overwrite, to rebuild it)")


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``; an old index there is removed only afterwards."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _passages(chunks: Iterable[Chunk], stats: dict[str, Any]):
    """Chunks as Passages for the BM25 store, refusing a non-chunk or a repeated id."""
    seen: set[str] = set()
    docs: set[str] = set()
    for c in chunks:
        if not isinstance(c, Chunk):
            raise TypeError(f"build_index needs Chunk records, got {type(c).__name__}")
        if c.id in seen:
            raise ValueError(f"chunk id {c.id!r} appears twice: chunk ids must be unique in an index")
        seen.add(c.id)
        docs.add(c.doc_id)
        yield c.to_passage()
    stats["n_docs"] = len(docs)


def _once(it: Iterator):
    """A corpus callable that may be called once (chunks may be a one-shot stream)."""
    used = []

    def corpus():
        if used:
            raise RuntimeError("the chunk stream was already consumed")
        used.append(True)
        return it

    return corpus


# --------------------------------------------------------------------------------------------
# Load and search
# --------------------------------------------------------------------------------------------


class HybridIndex:
    """A loaded index folder: chunks by row, BM25 search, dense search, the metadata code map."""

    def __init__(self, directory: Path, info: dict[str, Any], bm25: BM25Index, dense: np.ndarray | None,
                 code_map: dict[str, list[int]], encoder: "DenseEncoder | None" = None):
        self.dir = Path(directory)
        self.info = info
        self.bm25 = bm25
        self.dense = dense
        self.code_map = code_map
        self._encoder = encoder
        self._faiss = None
        self._lock = threading.Lock()
        self._query_vectors: dict[str, np.ndarray] = {}
        self._nearest: dict[str, np.ndarray] = {}  # query -> the cosines its last dense search found, best first
        self._strips: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def load(cls, out_dir: str | os.PathLike, encoder: "DenseEncoder | None" = None) -> "HybridIndex":
        """Open an index folder; ``encoder`` replaces the recorded dense model (same dimension)."""
        d = Path(out_dir)
        if not d.exists():
            raise FileNotFoundError(f"index folder {d} does not exist ({_HOW_TO_BUILD})")
        if not d.is_dir():
            raise ValueError(f"{d} is not a folder: not a pipeline index ({_HOW_TO_BUILD})")
        if not (d / INDEX_INFO).exists():
            what = "is empty" if not any(d.iterdir()) else "has files"
            raise ValueError(f"index folder {d} {what} but no index.json: not a pipeline index ({_HOW_TO_BUILD})")
        try:
            info = json.loads((d / INDEX_INFO).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{d / INDEX_INFO} is not valid JSON ({e}): a damaged index, rebuild it") from None
        if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
            hint = " (it looks like a data_prep BM25 index)" if isinstance(info, dict) and "corpus_sha256" in info else ""
            raise ValueError(f"{d / INDEX_INFO} is not a pipeline index{hint} ({_HOW_TO_BUILD})")
        if info.get("version") != INDEX_VERSION:
            raise ValueError(f"index {d} has version {info.get('version')!r}; this code reads version {INDEX_VERSION} (rebuild it)")
        dense_info = info.get("dense")
        needed = [*BM25_FILES, METADATA_FILE] + ([dense_info.get("file", DENSE_FILE)] if dense_info else [])
        missing = [f for f in needed if not (d / f).exists()]
        if missing:
            raise ValueError(f"incomplete pipeline index {d}: missing {', '.join(missing)} (rebuild it with `python -m pipeline index`)")

        bm25_dir = d / BM25_DIR
        bm25_info = json.loads((bm25_dir / "index.json").read_text(encoding="utf-8"))
        bm25 = BM25Index(bm25_dir, bm25_info, Bm25sEngine.load(bm25_dir / "bm25s", mmap=True, backend="numpy"))
        n = len(bm25)
        if n != info["n_chunks"] or bm25_info.get("corpus_sha256") != info["bm25"]["corpus_sha256"]:
            raise ValueError(f"damaged pipeline index {d}: bm25/ holds {n} chunks (sha256 "
                             f"{str(bm25_info.get('corpus_sha256'))[:12]}), index.json says {info['n_chunks']} (rebuild it)")
        dense = None
        if dense_info:
            dense = np.load(d / dense_info.get("file", DENSE_FILE), mmap_mode="r")
            if dense.ndim != 2 or dense.shape != (n, dense_info["dim"]):
                raise ValueError(f"damaged pipeline index {d}: dense.npy has shape {dense.shape}, expected ({n}, {dense_info['dim']})")
            if encoder is not None and encoder.dim != dense_info["dim"]:
                raise ValueError(f"encoder {encoder.path} gives {encoder.dim}-dim vectors; index {d} holds {dense_info['dim']}-dim ones")
        code_map = json.loads((d / METADATA_FILE).read_text(encoding="utf-8"))
        index = cls(d, info, bm25, dense, code_map, encoder)
        strips = (dense_info or {}).get("strips")
        if strips:
            try:
                vecs = np.load(d / strips["file"], mmap_mode="r")
                spans = np.load(d / strips["spans"], mmap_mode="r")
            except (OSError, ValueError) as e:
                raise ValueError(f"incomplete pipeline index {d}: cannot read its strip vectors ({e}); rebuild it") from None
            if vecs.shape != (strips["n"], dense_info["dim"]) or spans.shape != (strips["n"], 3):
                raise ValueError(f"damaged pipeline index {d}: strip files hold {vecs.shape} vectors and {spans.shape} "
                                 f"spans, index.json says {strips['n']} (rebuild it)")
            index._strips = (vecs, spans, np.searchsorted(spans[:, 0], np.arange(n + 1)))
        return index

    # -- chunks ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.bm25)

    def chunk(self, row: int) -> Chunk:
        """The chunk at ``row``."""
        row = int(row)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} out of range: the index holds {len(self)} chunks")
        return Chunk.from_passage(self.bm25.store[row])

    def iter_chunks(self) -> Iterator[Chunk]:
        """Every chunk, in row order (streamed from disk)."""
        for p in self.bm25.store:
            yield Chunk.from_passage(p)

    @property
    def has_dense(self) -> bool:
        return self.dense is not None

    @property
    def tokenizer_config(self) -> TokenizerConfig:
        return TokenizerConfig.from_dict(self.info["tokenizer"])

    # -- BM25 --------------------------------------------------------------------------------
    def bm25_search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` ``(row, score)`` by BM25, best first (chunks scoring 0 left out)."""
        rows, scores = self.bm25.search([query], k)[0]
        return [(int(r), float(s)) for r, s in zip(rows, scores)]

    def bm25_scores(self, query: str, rows: Sequence[int]) -> np.ndarray:
        """BM25 scores of ``query`` for the given rows (float32, in their order; 0 for no match)."""
        engine = self.bm25.engine
        ids = [engine.vocab[t] for t in self.bm25.tokenizer(query) if t in engine.vocab]
        rows = np.asarray(rows, dtype=np.int64)
        if not ids or rows.size == 0:
            return np.zeros(rows.size, dtype=np.float32)
        return np.asarray(engine.retriever.get_scores_from_ids(ids), dtype=np.float32)[rows]

    # -- dense -------------------------------------------------------------------------------
    @property
    def encoder(self) -> "DenseEncoder":
        """The dense encoder (loaded on first use: the recorded model, or the one given to load)."""
        if self._encoder is None:
            if not self.has_dense:
                raise ValueError(f"index {self.dir} was built without dense embeddings (BM25 only)")
            spec = self.info["dense"]
            if spec.get("default"):
                from data_prep.dense import default_minilm_path

                path = str(default_minilm_path())
            else:
                path = spec["path"]
                if not Path(path).exists():
                    raise FileNotFoundError(f"dense model folder {path} recorded in {self.dir / INDEX_INFO} not found "
                                            "(pass encoder= to HybridIndex.load)")
            enc = load_encoder(path)
            if enc.dim != spec["dim"]:
                raise ValueError(f"dense model {path} gives {enc.dim}-dim vectors; index {self.dir} holds {spec['dim']}-dim ones")
            if spec.get("fingerprint") and encoder_fingerprint(enc) != spec["fingerprint"]:
                raise ValueError(f"dense model {path} is not the one that embedded index {self.dir} (its weights changed "
                                 f"since, e.g. an export trained again into the same folder): rebuild the index, or "
                                 "pass the original model as encoder= to HybridIndex.load")
            self._encoder = enc
        return self._encoder

    def encode_query(self, query: str) -> np.ndarray:
        """``(1, dim)`` unit vector of ``query`` (the last few are kept: grading may reuse them)."""
        vec = self._query_vectors.get(query)
        if vec is None:
            vec = self.encoder.encode([query])
            self._query_vectors[query] = vec
            while len(self._query_vectors) > 16:
                self._query_vectors.pop(next(iter(self._query_vectors)))
        return vec

    def known_query_vector(self, query: str) -> np.ndarray | None:
        """The vector :meth:`encode_query` gave ``query`` lately (``None`` if none)."""
        return self._query_vectors.get(query)

    @property
    def strip_words(self) -> int | None:
        """The strip window of the stored strip vectors (None: the index has none)."""
        return (self.info.get("dense") or {}).get("strips", {}).get("window_words") if self._strips else None

    def strip_vectors(self, row: int) -> tuple[list[tuple[int, int]], np.ndarray]:
        """The refinement strips of chunk ``row`` (character spans in its text) and their vectors."""
        if self._strips is None:
            raise ValueError(f"index {self.dir} has no strip vectors (build it with strip_words / --strip-vectors)")
        vecs, spans, starts = self._strips
        a, b = int(starts[row]), int(starts[row + 1])
        return [(int(x), int(y)) for _, x, y in spans[a:b]], np.asarray(vecs[a:b], dtype=np.float32)

    def forget_queries(self) -> None:
        """Drop the kept query vectors (benchmarks: each path encodes its question itself)."""
        self._query_vectors.clear()
        self._nearest.clear()

    def nearest_scores(self, query: str) -> np.ndarray | None:
        """The cosines (best first) that the last :meth:`dense_search` of ``query`` found, as deep as
        it searched, for the vector :meth:`known_query_vector` holds (``None`` if none kept)."""
        return self._nearest.get(query)

    def chunk_vectors(self, rows: Sequence[int]) -> np.ndarray:
        """The stored unit vectors of ``rows`` (``[len(rows), dim]`` float32)."""
        if not self.has_dense:
            raise ValueError(f"index {self.dir} was built without dense embeddings (BM25 only)")
        return np.asarray(self.dense[np.asarray(rows, dtype=np.int64)], dtype=np.float32)

    def dense_search(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top ``k`` ``(row, cosine similarity)`` by the dense embeddings, best first."""
        if not self.has_dense:
            raise ValueError(f"index {self.dir} was built without dense embeddings (BM25 only)")
        rows, scores = self.dense_search_vectors(self.encode_query(query), k)
        self._nearest[query] = scores[0][rows[0] >= 0]
        while len(self._nearest) > 16:
            self._nearest.pop(next(iter(self._nearest)))
        return [(int(r), float(s)) for r, s in zip(rows[0], scores[0]) if r >= 0]

    def dense_search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` rows and cosines of each query unit vector (``[m, dim]``): ``(rows, scores)``,
        each ``[m, min(k, len(self))]``, best first (row -1: nothing there)."""
        if not self.has_dense:
            raise ValueError(f"index {self.dir} was built without dense embeddings (BM25 only)")
        q = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        scores, rows = self._faiss_index().search(q, min(int(k), len(self)))
        return rows, scores

    def _faiss_index(self):
        with self._lock:
            if self._faiss is None:
                import faiss

                index = faiss.IndexFlatIP(self.dense.shape[1])
                index.add(np.ascontiguousarray(self.dense, dtype=np.float32))
                self._faiss = index
            return self._faiss

    # -- metadata ----------------------------------------------------------------------------
    def metadata_rows(self, codes: Iterable[str]) -> list[int]:
        """Rows whose title or metadata holds any of ``codes`` (case-insensitive), ascending."""
        rows: set[int] = set()
        for c in codes:
            rows.update(self.code_map.get(str(c).lower(), ()))
        return sorted(rows)

    def __repr__(self) -> str:
        dense = self.info["dense"]["model"] if self.has_dense else "none"
        return f"HybridIndex({str(self.dir)!r}, chunks={len(self)}, dense={dense!r})"


__all__ = ["INDEX_FORMAT", "INDEX_VERSION", "HybridIndex", "build_index", "chunk_codes", "load_encoder", "metadata_values"]
