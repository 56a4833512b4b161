"""A whole mining run (:func:`run_mining`): the index, the query spool, shards, resume, the merge.

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
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import time
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from tqdm.auto import tqdm

from ..bm25 import BM25Index, open_index, resolve_backend
from ..io import Rejects, atomic_write, require_records, write_json
from ..locking import locks_output
from ..records import Passage, QueryExample
from .config import MiningConfig
from .select import FIRST_IDS, mine_batch

logger = logging.getLogger(__name__)


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
    (:mod:`data_prep.mining.ray`); the output is the same.
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
        from .ray import run_shards

        run_shards(out, work, index, cfg, todo, n_queries, params.get("bm25_backend"), ray, on_shard_done)
        todo = []
    encoder = None
    if todo and cfg.dense_model is not None:
        from ..dense import DenseEncoder

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
    from ..lucene import Anserini, LuceneIndex, check_index
    from ..tokenization import Tokenizer

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
    from ..corpus_store import CorpusStore, CorpusWriter, corpus_sha256, new_build_dir
    from ..lucene import IdRows

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
